"""BEHAVIOR-like costs of the reference simulator: contact solver work per step, settled resets.

Measures (wall-clock ms on this machine, proprio only, E envs in one process driven by the scripted expert):

1. ``contact_iterations`` sweep: physics ms per env-step (the profiler's physics span of
   ``step(get_obs=False, render=False)``) for each value, with the envs of all values built side by side and
   stepped in turn, so drift of a shared machine hits every value alike. The extra over 0, divided by the
   physics at 0, is the ratio ``ReferenceConfig.behavior_like`` aims at (1.2: a published OmniGibson
   profile's contact bookkeeping against its physics + render, see ``ReferenceConfig``'s module docs).
2. reset: ms per env ``reset`` without and with ``reset_settle_steps`` (the ``behavior_like`` value), next
   to one env-step.

Writes ``behavior_costs_<tag>.json`` and ``.png`` to ``./behavior1k_fast_results`` (``--out-dir``;
``--record``: the checkout's ``benchmarks/results/``). Run (about a minute on 2 cores):
``python3 benchmarks/behavior_costs.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from behavior1k_fast.reference import ReferenceConfig, ReferenceVectorEnv, expert_actions
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.core.tracing import PHYSICS, get_profiler
from behavior1k_fast.tools.argtypes import Parser, env_count, file_name, nonnegative_int, parse_checked, positive_int
from behavior1k_fast.tools.measure.files import write_json
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir

PROPRIO_ONLY = RolloutProfile(obs_modalities=("proprio",))
#: Published ratio of contact bookkeeping to physics + render per OmniGibson step (99.3 ms / 82.2 ms).
TARGET_RATIO = 99.3 / 82.2


#: The BEHAVIOR-like costs of the reference scene (``ReferenceConfig.behavior_like``).
BEHAVIOR_LIKE = ReferenceConfig.behavior_like()

def contact_sweep(values: list[int], envs: int, steps: int) -> list[dict]:
    """Physics ms per env-step for each ``contact_iterations`` value (envs stepped in turn)."""
    built = {k: ReferenceVectorEnv(envs, seed=1, profile=PROPRIO_ONLY,
                                   config=ReferenceConfig(resolution=(16, 16), contact_iterations=k))
             for k in values}
    physics_ms = dict.fromkeys(values, 0.0)
    prof = get_profiler()
    prof.enabled = True
    try:
        for _ in range(steps):
            for k, env in built.items():
                actions = expert_actions(env)
                prof.clear()
                env.step(actions, get_obs=False, render=False)
                physics_ms[k] += sum(d for stage, _, d, *_ in prof.spans if stage == PHYSICS) / 1e6
    finally:
        prof.enabled = False
        prof.clear()
        for env in built.values():
            env.close()
    base = physics_ms[values[0]]
    return [{"contact_iterations": k, "physics_ms_per_env_step": physics_ms[k] / (steps * envs),
             "extra_over_base": (physics_ms[k] - base) / base} for k in values]


def reset_costs(envs: int, repeats: int) -> list[dict]:
    """ms per env reset without and with settling, and ms per env-step of the same env."""
    rows = []
    for settle in (0, BEHAVIOR_LIKE.reset_settle_steps):
        env = ReferenceVectorEnv(envs, seed=1, profile=PROPRIO_ONLY,
                                 config=ReferenceConfig(resolution=(16, 16), reset_settle_steps=settle))
        start = time.perf_counter()
        for _ in range(repeats):
            env.reset(get_obs=False)
        reset_ms = (time.perf_counter() - start) * 1e3 / (repeats * envs)
        start = time.perf_counter()
        for _ in range(repeats):
            env.step(expert_actions(env), get_obs=False, render=False)
        step_ms = (time.perf_counter() - start) * 1e3 / (repeats * envs)
        env.close()
        rows.append({"reset_settle_steps": settle, "reset_ms_per_env": reset_ms, "step_ms_per_env": step_ms,
                     "reset_over_step": reset_ms / step_ms})
    return rows


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    sweep = result["contact_sweep"]
    ax = axes[0]
    ax.plot([r["contact_iterations"] for r in sweep], [1 + r["extra_over_base"] for r in sweep], "o-")
    ax.axhline(1 + TARGET_RATIO, color="gray", ls="--", label=f"target: 1 + {TARGET_RATIO:.2f} (99.3 / 82.2 ms)")
    ax.axvline(BEHAVIOR_LIKE.contact_iterations, color="C1", ls=":", label="behavior_like")
    ax.set(xlabel="contact_iterations", ylabel="physics per env-step / physics at 0",
           title=f"Contact solver work (E={result['envs']})")
    ax.legend(fontsize=8)
    ax = axes[1]
    resets = result["reset"]
    labels = [f"settle {r['reset_settle_steps']}" for r in resets]
    ax.bar(range(len(resets)), [r["reset_ms_per_env"] for r in resets], label="reset")
    ax.bar(range(len(resets)), [r["step_ms_per_env"] for r in resets], width=0.4, label="one step")
    ax.set_xticks(range(len(resets)), labels)
    ax.set(ylabel="ms per env", title="Reset vs step")
    ax.legend(fontsize=8)
    fig.suptitle(f"Reference simulator, BEHAVIOR-like costs, {result['machine']['cpus']} CPU cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=env_count, default=4, help="envs per process (default: 4)")
    parser.add_argument("--steps", type=positive_int, default=60,
                        help="steps per contact_iterations value (default: 60)")
    parser.add_argument("--values", type=nonnegative_int, nargs="+", default=[0, 5, 10, 20, 40],
                        help="contact_iterations values; the first is the base (default: 0 5 10 20 40)")
    parser.add_argument("--tag", type=file_name, default="cpu", help="results file suffix (default: cpu)")
    add_output_arguments(parser)
    args = parse_checked(parser, argv, lambda args: setattr(args, "out_dir", checked_output_dir(args)))
    args.values = list(dict.fromkeys(args.values))  # each value once, the base first
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = {
        "envs": args.envs,
        "target_ratio": TARGET_RATIO,
        "behavior_like": {"contact_iterations": BEHAVIOR_LIKE.contact_iterations,
                          "reset_settle_steps": BEHAVIOR_LIKE.reset_settle_steps},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "contact_sweep": contact_sweep(args.values, args.envs, args.steps),
        "reset": reset_costs(args.envs, repeats=10),
    }
    for row in result["contact_sweep"] + result["reset"]:
        print(row, flush=True)
    out = write_json(result, Path(args.out_dir) / f"behavior_costs_{args.tag}.json")
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
