"""Hold steps: simulator time per own action, hybrid partition K = 2 against K = 1, in one process.

Two ``ReferenceVectorEnv`` of E envs each (fast path: rgb + proprio, on-demand observation) step rounds of
chunks in-process with :func:`~behavior1k_fast.rollout.chunk.run_chunk`, driven by the scripted expert
(its action at the chunk start, held over the chunk): K = 1 steps all E envs in one chunk per round; K = 2
(hybrid, ``divide_physics``) steps two stage chunks of E / 2 envs per round while the other slice holds
its last action. Both do the same physics substeps per own action, so extra time per own action at K = 2
is per-step overhead, or solver work of the coarser physics dt (physics ms per substep shows it). The two
envs are built side by side and their rounds alternate, so drift of a shared machine hits both alike;
each repeat is a new pair with another seed, and medians over the repeats are recorded.

Per K: wall and CPU ms per step (one own action of every env; CPU time of this process, which other load
on a shared machine disturbs less than wall time) around the chunk stepping, the profiler's stage
spans per step (action apply, physics, reward, termination, render, observation read), the rest of the
wall time (chunk loop, argument checks, infos), physics ms per substep, and the non-physics ms per
``step`` call; and the CPU ms of the least disturbed round (the minimum over the rounds). Writes (merging
with what is there) ``hold_steps_<tag>.json`` under ``"<label>, E=<envs>"`` and a bar chart ``.png`` of every
entry, in ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the checkout's ``benchmarks/results/``).
Run (about a minute on 2 cores):
``python3 benchmarks/hold_steps.py --label after``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from behavior1k_fast.reference import ReferenceConfig, ReferenceVectorEnv, expert_actions
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.core.tracing import get_profiler
from behavior1k_fast.rollout.chunk import run_chunk
from behavior1k_fast.tools.argtypes import Parser, chunk_steps, env_count, file_name, parse_checked, positive_int
from behavior1k_fast.tools.backend_args import check_image_memory
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir

#: Simulator stages of a step, in the order of the chart's stacks.
SIM_STAGES = ("action_apply", "physics", "reward", "termination", "render", "obs_read")


def chunk_actions(env: ReferenceVectorEnv, envs: np.ndarray, chunk: int) -> np.ndarray:
    """The scripted expert's next action for ``envs``, held over the chunk (arms move, grasp, carry)."""
    return np.repeat(expert_actions(env, envs)[:, None], chunk, axis=1)


def build(stages: int, config: ReferenceConfig, envs: int, seed: int) -> ReferenceVectorEnv:
    """The env of one K: fast path (rgb + proprio), hybrid partition, ``divide_physics``."""
    profile = RolloutProfile(pipeline_stages=stages, partition="hybrid", physics_rescale="divide_physics",
                             obs_modalities=("rgb", "proprio"))
    return ReferenceVectorEnv(envs, seed=seed, profile=profile, config=config)


def new_totals() -> dict:
    """What :func:`step_round` adds up, all zero."""
    return {"wall_s": 0.0, "cpu_s": 0.0, "round_cpu_s": [], "substeps": 0, "span_ms": {}, "calls": {}}


def step_round(env: ReferenceVectorEnv, chunk: int, totals: dict) -> None:
    """One round (a chunk per stage slice, the other slice holding) into ``totals``: wall and CPU s of this
    process around the chunk stepping, physics substeps, stage spans (ms)."""
    prof = get_profiler()
    prof.clear()
    round_cpu = 0.0
    for s in np.array_split(np.arange(env.num_envs), env.timing.stages_sharing_physics):
        actions = chunk_actions(env, s, chunk)
        before = env.data.time
        start, start_cpu = time.perf_counter(), time.process_time()
        run_chunk(env, actions, s)
        totals["wall_s"] += time.perf_counter() - start
        round_cpu += time.process_time() - start_cpu
        totals["substeps"] += round((env.data.time - before) / env.model.opt.timestep)
    totals["cpu_s"] += round_cpu
    totals["round_cpu_s"].append(round_cpu)
    for stage, row in prof.summary().items():
        totals["span_ms"][stage] = totals["span_ms"].get(stage, 0.0) + row["total_ms"]
        totals["calls"][stage] = totals["calls"].get(stage, 0) + row["count"]


def measure(config: ReferenceConfig, envs: int, chunk: int, rounds: int, seed: int) -> dict[int, dict]:
    """K = 1 and K = 2 envs built side by side, their rounds alternating (machine drift hits both alike):
    wall, span and physics figures per step for each K."""
    built = {k: build(k, config, envs, seed) for k in (1, 2)}
    totals = {k: new_totals() for k in built}
    prof = get_profiler()
    try:
        for env in built.values():
            env.reset()
            step_round(env, chunk, new_totals())  # warm-up
        prof.enabled = True
        for _ in range(rounds):
            for k, env in built.items():
                step_round(env, chunk, totals[k])
    finally:
        prof.enabled = False
        prof.clear()
        for env in built.values():
            env.close()
    out = {}
    steps = rounds * chunk
    for k, tot in totals.items():
        span_ms = {stage: tot["span_ms"][stage] / steps for stage in SIM_STAGES if stage in tot["span_ms"]}
        wall_ms = tot["wall_s"] * 1e3 / steps
        out[k] = {
            "stages": k,
            "wall_ms_per_step": wall_ms,
            "cpu_ms_per_step": tot["cpu_s"] * 1e3 / steps,
            "least_round_cpu_ms_per_step": min(tot["round_cpu_s"]) * 1e3 / chunk,
            "span_ms_per_step": span_ms,
            "spans_ms_per_step": sum(span_ms.values()),
            "outside_spans_ms_per_step": wall_ms - sum(span_ms.values()),
            "physics_substeps_per_step": tot["substeps"] / steps,
            "physics_ms_per_substep": tot["span_ms"]["physics"] / tot["substeps"],
            "step_calls_per_step": tot["calls"]["physics"] / steps,
            "non_physics_ms_per_step_call": (wall_ms - span_ms["physics"]) * steps / tot["calls"]["physics"],
        }
    return out


def median_of(runs: list[dict]) -> dict:
    """Per key, the median over the runs (nested span dicts too)."""
    out = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: float(np.median([r[key][k] for r in runs])) for k in value}
        else:
            out[key] = float(np.median([r[key] for r in runs]))
    return out


def plot(result: dict, path: Path) -> None:
    """Per entry: K = 2 / K = 1 time per own action (wall, CPU, least disturbed round's CPU) against the 10 %
    goal, and where the extra goes: each stage's K = 2 minus K = 1 span time, in % of K = 1's wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(result["runs"])
    runs = [result["runs"][label] for label in labels]
    xs = np.arange(len(labels))
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 2.2 * len(labels)), 4.8))
    ax = axes[0]
    for i, (key, name) in enumerate((("k2_over_k1_wall", "wall"), ("k2_over_k1_cpu", "CPU"),
                                     ("k2_over_k1_least_round_cpu", "least disturbed round, CPU"))):
        ax.bar(xs + (i - 1) * 0.27, [run[key] for run in runs], width=0.27, label=name)
    ax.axhline(1.10, color="gray", ls="--", label="goal: within 10 %")
    ax.set_ylim(0.9, None)
    ax.set_xticks(xs, labels, fontsize=7, rotation=20, ha="right")
    ax.set_ylabel("K=2 / K=1, time per own action")
    ax.set_title("hybrid K=2 against K=1", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    above, below = np.zeros(len(labels)), np.zeros(len(labels))  # stacks of the positive and negative parts
    for stage in SIM_STAGES + ("outside spans",):
        extra = []
        for run in runs:
            one, two = run["1"], run["2"]
            if stage == "outside spans":
                diff = two["outside_spans_ms_per_step"] - one["outside_spans_ms_per_step"]
            else:
                diff = two["span_ms_per_step"].get(stage, 0.0) - one["span_ms_per_step"].get(stage, 0.0)
            extra.append(100.0 * diff / one["wall_ms_per_step"])
        extra = np.array(extra)
        ax.bar(xs, extra, bottom=np.where(extra >= 0, above, below), label=stage)
        above += np.maximum(extra, 0.0)
        below += np.minimum(extra, 0.0)
    ax.axhline(0.0, color="black", lw=0.5)
    ax.set_xticks(xs, labels, fontsize=7, rotation=20, ha="right")
    ax.set_ylabel("K=2 minus K=1, % of K=1 wall time")
    ax.set_title("where the extra goes (profiler spans, wall)", fontsize=9)
    ax.legend(fontsize=7)
    fig.suptitle(f"Hold steps, reference sim in one process, {result['machine']['cpus']} CPU cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="name of this measurement in the JSON (e.g. before, after)")
    parser.add_argument("--envs", type=env_count, default=4, help="envs E in the process, even (default: 4)")
    parser.add_argument("--resolution", type=positive_int, default=64, help="camera pixels per side (default: 64)")
    parser.add_argument("--chunk", type=chunk_steps, default=32, help="actions per chunk N (default: 32)")
    parser.add_argument("--rounds", type=positive_int, default=8, help="timed rounds per repeat (default: 8)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="repeats, each a new pair of envs (default: 5)")
    parser.add_argument("--tag", type=file_name, default="cpu", help="results file suffix (default: cpu)")
    parser.add_argument("--commit", default=None,
                        help="commit of the code measured (default: this checkout's HEAD; set it when PYTHONPATH "
                             "points at another tree)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    """What the options do not check one by one (ValueError); ``out_dir`` resolved and made."""
    if args.envs < 2 or args.envs % 2:
        raise ValueError(f"argument --envs: expected an even int >= 2, got {args.envs}")
    check_image_memory(args, 2 * args.envs)  # the K = 1 and K = 2 envs, side by side
    args.out_dir = checked_output_dir(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = ReferenceConfig(resolution=(args.resolution, args.resolution))
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for rep in range(args.repeats):
        for k, figures in measure(config, args.envs, args.chunk, args.rounds, seed=rep).items():
            runs[k].append(figures)
        print(f"repeat {rep}: K=1 {runs[1][-1]['wall_ms_per_step']:.3f}, K=2 {runs[2][-1]['wall_ms_per_step']:.3f} "
              "ms/step", flush=True)
    entry = {str(k): median_of(v) for k, v in runs.items()}
    entry["k2_over_k1_wall"] = entry["2"]["wall_ms_per_step"] / entry["1"]["wall_ms_per_step"]
    entry["k2_over_k1_cpu"] = entry["2"]["cpu_ms_per_step"] / entry["1"]["cpu_ms_per_step"]
    entry["k2_over_k1_least_round_cpu"] = (entry["2"]["least_round_cpu_ms_per_step"]
                                           / entry["1"]["least_round_cpu_ms_per_step"])
    entry["k2_over_k1_spans"] = entry["2"]["spans_ms_per_step"] / entry["1"]["spans_ms_per_step"]
    entry["commit"] = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                    text=True, cwd=Path(__file__).parent).stdout.strip()
    entry["command"] = "python3 benchmarks/hold_steps.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
        if v is not None and k not in ("out_dir", "record"))
    out = Path(args.out_dir) / f"hold_steps_{args.tag}.json"
    result = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    entry["config"] = {"envs": args.envs, "resolution": args.resolution, "chunk": args.chunk,
                       "rounds": args.rounds, "repeats": args.repeats}
    entry["load_average"] = os.getloadavg()
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                         "mujoco_gl": os.environ.get("MUJOCO_GL")}
    result["runs"][f"{args.label}, E={args.envs}"] = entry
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    print(f"K=2 / K=1 per own action: wall {entry['k2_over_k1_wall']:.3f}, CPU {entry['k2_over_k1_cpu']:.3f}, "
          f"least-disturbed round's CPU {entry['k2_over_k1_least_round_cpu']:.3f}, spans only "
          f"{entry['k2_over_k1_spans']:.3f}")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
