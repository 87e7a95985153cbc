"""Time to a trained policy: wall clock until PPO reaches a target success rate, per rollout layout.

The question a user asks is "how long until my policy is trained", not env-steps per second: the hybrid
partition buys env-steps by making an env act on an observation one stage chunk old while it holds its
last action, which can cost samples. This measures both factors and their product:

    wall to target = samples to target x seconds per sample (rollout and PPO update)

- **Task and learner**: PPO on the reference reach-and-touch task, ``examples/train_ppo_reference.py``
  used as a library (its :func:`train`, GAE and clipped update), with a VLA-cost policy: a frozen
  transformer over the rgb camera (:class:`~behavior1k_fast.tools.measure.policy.ChunkPolicy`, calibrated
  like the bench policy by :func:`~behavior1k_fast.tools.measure.calibration.calibrate`: one forward at
  the stage batch takes the env's ms per chunk) whose output, flattened, joins proprioception and the task
  offset as the input of the trained actor-critic head (:class:`VLAActorCritic`). The frozen model runs
  in every acting forward and again over the batch in each PPO update.
- **Layouts** (same envs, chunk size, policy): ``stock`` (every optimisation off), ``k1_skip`` (K = 1,
  on-demand observation), ``hybrid_k2`` and ``process_k2`` (pipeline K = 2 in each partition),
  ``lookahead`` (when the profile has that schedule; otherwise recorded as not available) and
  ``double_buffer_peer`` (two gymnasium ``AsyncVectorEnv`` s alternated, ``tools/bench/peers.py``).
- **Samples to target** depend only on what each env sees and does, its semantics: ``fresh`` (an env acts
  on its own observation at its chunk's start: stock, K = 1, process partition, the double buffer; the
  example checks stock and K = 1 curve for curve), ``hybrid`` (hybrid partition: the other stage's slice
  holds its last action while this one steps) and ``lookahead`` (the chunk is chosen from an observation
  d steps before the previous chunk ends). Per semantics and seed, PPO trains under one layout of that
  semantics (``k1_skip``, ``hybrid_k2``, ``lookahead``) until the episode-weighted success rate of the last
  ``--window`` iterations reaches ``--target``; samples to target = env steps (own actions) then, or none
  within ``--iterations``.
- **Seconds per sample** per layout: a few PPO iterations under that layout (the first one not counted),
  rollout plus update seconds over the own actions; the double-buffer peer's rollout seconds from
  ``run_peer`` with the same policy acting (no trajectory recording), plus the update seconds per sample of
  ``k1_skip`` (the same batch).
- Per layout and seed the product, with the median and min-max over seeds; the training runs of the
  semantics' own layouts are direct measurements of the same quantity (``direct_wall_to_target_s``).

Writes ``time_to_train_<tag>.json`` and ``.png`` to ``./behavior1k_fast_results`` (``--out-dir``;
``--record``: the checkout's ``benchmarks/results/``). ``--quick`` is a small run for 2 cores (a minute or
two): tiny model, 16-pixel camera, few iterations, one seed, a low target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from behavior1k_fast.core.profile import SCHEDULES, RolloutProfile
from behavior1k_fast.tools.argtypes import lead_steps
from behavior1k_fast.tools.bench import report
from behavior1k_fast.tools.measure.config import DEFAULT_OUT_DIR, RunConfig, record_dir, resolve_device
from behavior1k_fast.tools.measure.machine import busy_warning, sample_load

#: The folder of ``train_ppo_reference.py``, the PPO this benchmark uses as a library.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Layout -> the semantics whose samples to target it shares.
SEMANTICS = {"stock": "fresh", "k1_skip": "fresh", "hybrid_k2": "hybrid", "process_k2": "fresh",
             "lookahead": "lookahead", "double_buffer_peer": "fresh"}
#: Semantics -> the layout PPO trains under to count its samples to target.
TRAINED_UNDER = {"fresh": "k1_skip", "hybrid": "hybrid_k2", "lookahead": "lookahead"}
#: Modalities the VLA-cost policy reads.
MODALITIES = ("rgb", "proprio")


def load_ppo() -> Any:
    """``examples/train_ppo_reference.py`` as a module (its folder joins ``sys.path``)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import train_ppo_reference

    return train_ppo_reference


def layout_profiles(processes: int, envs: int, chunk_size: int, lookahead_steps: int | str = "auto") -> tuple[
        dict[str, RolloutProfile], dict[str, str]]:
    """The engine layouts' profiles (``lookahead`` at lead ``lookahead_steps``), and the layouts this profile
    cannot run (name -> why)."""
    layout = dict(num_env_processes=processes, total_num_envs=envs, chunk_size=chunk_size)
    fast = RolloutProfile(obs_modalities=MODALITIES, **layout)
    profiles = {
        "stock": RolloutProfile.stock(**layout),
        "k1_skip": fast,
        "hybrid_k2": fast.replace(pipeline_stages=2, partition="hybrid", physics_rescale="preserve_sim_time"),
        "process_k2": fast.replace(pipeline_stages=2, partition="process"),
    }
    from behavior1k_fast.rollout.schedules import SCHEDULE_CLASSES

    missing = {}
    if "lookahead" in SCHEDULES and "lookahead" in SCHEDULE_CLASSES:
        try:
            profiles["lookahead"] = fast.replace(schedule="lookahead", lookahead_steps=lookahead_steps)
        except (TypeError, ValueError) as exc:
            missing["lookahead"] = f"the profile refuses it: {exc}"
    else:
        missing["lookahead"] = (f"not in this version: profile schedules {SCHEDULES}, engine drivers "
                                f"{sorted(SCHEDULE_CLASSES)}")
    return profiles, missing


def make_vla_actor_critic(ppo: Any, vla: Any) -> type:
    """The example's ``ActorCritic`` over the frozen ``vla``'s features (module docs)."""
    import torch

    feature_dim = vla.chunk_size * vla.action_dim

    class VLAActorCritic(ppo.ActorCritic):
        """Trained actor-critic head over [frozen VLA output, proprioception, task offset]."""

        def __init__(self, obs_dim: int, action_dim: int, chunk_size: int) -> None:
            super().__init__(obs_dim + feature_dim, action_dim, chunk_size)
            self.vla = vla  # not a module attribute of the head: its weights stay out of the optimiser

        def features(self, obs: dict) -> torch.Tensor:
            own = ppo.ActorCritic.features(obs)
            frozen = torch.as_tensor(self.vla({k: np.asarray(v) for k, v in obs.items()}), dtype=torch.float32)
            return torch.cat([frozen.reshape(len(own), -1), own], dim=-1)

    return VLAActorCritic


def reached(entries: list[dict], target: float, window: int) -> bool:
    """The episode-weighted success rate of the last ``window`` iterations is at least ``target``."""
    recent = [e for e in entries[-window:] if e["success_rate"] is not None]
    episodes = sum(e["episodes"] for e in recent)
    return len(entries) >= window and episodes > 0 and (
        sum(e["success_rate"] * e["episodes"] for e in recent) / episodes >= target)


def samples_to_target(ppo: Any, config: Any, profile: RolloutProfile, factory: Any, policy_class: type,
                      target: float, window: int) -> dict[str, Any]:
    """Train under ``profile`` until :func:`reached` (or ``config.iterations``); env steps and wall then."""
    entries: list[dict] = []

    def stop(entry: dict) -> bool:
        entries.append(entry)
        return reached(entries, target, window)

    run, _ = ppo.train(config, profile=profile, factory=factory, make_policy=policy_class, stop=stop)
    hit = reached(entries, target, window)
    return {"seed": config.seed, "reached": hit, "samples": run["env_steps"][-1] if hit else None,
            "direct_wall_s": run["wall_s"][-1] if hit else None, "iterations": len(run["env_steps"]),
            "success_rate": run["success_rate"], "env_steps": run["env_steps"], "wall_s": run["wall_s"]}


def seconds_per_sample(ppo: Any, config: Any, profile: RolloutProfile, factory: Any, policy_class: type,
                       iterations: int) -> dict[str, float]:
    """Rollout and update seconds per own action under ``profile``: medians over ``iterations`` PPO iterations
    after a first, uncounted one."""
    run, _ = ppo.train(replace(config, iterations=iterations + 1), profile=profile, factory=factory,
                       make_policy=policy_class)
    samples = np.diff([0, *run["env_steps"]])[1:]
    rollout = statistics.median(np.array(run["rollout_s"][1:]) / samples)
    update = statistics.median(np.array(run["update_s"][1:]) / samples)
    return {"rollout_s_per_sample": float(rollout), "update_s_per_sample": float(update),
            "s_per_sample": float(rollout + update)}


def peer_seconds_per_sample(policy: Any, spaces: tuple, profile: RolloutProfile, factory: Any, config: Any,
                            update_s_per_sample: float, repeats: int) -> dict[str, float]:
    """The double-buffer peer's rollout seconds per own action with ``policy`` acting (median of ``repeats``
    runs of ``config.rounds`` rounds; ``spaces``: one env's observation and action spaces), plus
    ``update_s_per_sample`` (the same PPO update)."""
    import torch

    from behavior1k_fast.tools.bench.peers import run_peer

    def act(obs: dict) -> np.ndarray:
        with torch.no_grad():
            return policy(obs)[0].numpy().astype(np.float64)

    rates = []
    for _ in range(repeats):
        raw = run_peer(factory, profile, act, spaces, profile.num_env_processes, profile.envs_per_process, 2,
                       config.rounds, warmup=1, seed=config.seed)
        rates.append(raw["wall_s"] / raw["own_actions"])
    rollout = statistics.median(rates)
    return {"rollout_s_per_sample": float(rollout), "update_s_per_sample": update_s_per_sample,
            "s_per_sample": float(rollout + update_s_per_sample)}


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median and min-max of the values that exist (``None`` where no seed reached the target)."""
    have = [v for v in values if v is not None]
    if not have:
        return {"median": None, "min": None, "max": None, "seeds_reached": 0}
    return {"median": float(statistics.median(have)), "min": float(min(have)), "max": float(max(have)),
            "seeds_reached": len(have)}


def measure(args: argparse.Namespace, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every layout's samples to target, seconds per sample and their product (module docs)."""
    import torch

    from behavior1k_fast.reference import ReachFactory
    from behavior1k_fast.tools.measure.calibration import calibrate
    from behavior1k_fast.tools.measure.config import usable_cores

    ppo = load_ppo()
    base = ppo.PPOConfig(iterations=args.iterations, processes=args.processes, envs=args.envs,
                         chunk_size=args.chunk_size, rounds=args.rounds, executor="process")
    factory = ReachFactory(replace(ppo.make_factory(base).config, resolution=(args.resolution, args.resolution)))
    profiles, missing = layout_profiles(args.processes, args.envs, args.chunk_size, args.lookahead_steps)
    device = resolve_device(args.device)
    sizing = {"model_width": args.model_width, "model_depth": args.model_depth} if args.model_width else {}
    run_config = RunConfig(chunk_size=args.chunk_size, rounds=2, warmup=1, device=device, seed=0, **sizing)
    # train() runs torch on one thread: calibrate at one thread too (the whole machine's cores for envs)
    vla, calibration = calibrate(factory, profiles["k1_skip"], run_config, max_processes=usable_cores())
    policy_class = make_vla_actor_critic(ppo, vla)
    progress(report.format_model_cost(calibration.to_dict()))

    trained: dict[str, list[dict]] = {}
    for semantics, layout in TRAINED_UNDER.items():
        if layout not in profiles:
            continue
        trained[semantics] = []
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            run = samples_to_target(ppo, replace(base, seed=seed), profiles[layout], factory, policy_class,
                                    args.target, args.window)
            progress(f"{semantics} ({layout}) seed {seed}: samples to target {run['samples']} "
                     f"({run['iterations']} iterations)")
            trained[semantics].append(run)

    cost: dict[str, dict[str, float]] = {}
    for name, profile in profiles.items():
        cost[name] = seconds_per_sample(ppo, base, profile, factory, policy_class, args.cost_iterations)
        progress(f"{name}: {cost[name]['s_per_sample'] * 1e3:.2f} ms per sample")
    if args.processes % 2 == 0:
        spaces = (vla.observation_space, vla.action_space)
        obs_dim = sum(int(np.prod(vla.observation_space[k].shape)) for k in ppo.OBS_KEYS)
        policy = policy_class(obs_dim, int(np.prod(vla.action_space.shape)), args.chunk_size)
        cost["double_buffer_peer"] = peer_seconds_per_sample(policy, spaces, profiles["k1_skip"], factory, base,
                                                             cost["k1_skip"]["update_s_per_sample"],
                                                             args.cost_iterations)
        progress(f"double_buffer_peer: {cost['double_buffer_peer']['s_per_sample'] * 1e3:.2f} ms per sample")
    else:
        missing["double_buffer_peer"] = f"a double buffer needs an even process count, got {args.processes}"

    layouts = {}
    for name, c in cost.items():
        runs = trained.get(SEMANTICS[name], [])
        per_seed = [None if r["samples"] is None else r["samples"] * c["s_per_sample"] for r in runs]
        layouts[name] = {
            "semantics": SEMANTICS[name], "trained_under": TRAINED_UNDER[SEMANTICS[name]], **c,
            "samples_to_target": spread([r["samples"] for r in runs]),
            "wall_to_target_s_per_seed": per_seed, "wall_to_target_s": spread(per_seed),
        }
        if name == TRAINED_UNDER[SEMANTICS[name]]:
            layouts[name]["direct_wall_to_target_s"] = spread([r["direct_wall_s"] for r in runs])
    return {"calibration": calibration.to_dict(), "layouts": layouts, "not_run": missing,
            "training_runs": trained, "profiles": {n: p.to_dict() for n, p in profiles.items()}}


def plot(result: dict[str, Any], path: Path) -> None:
    """Wall clock to the target per layout (median, min-max over seeds) and seconds per sample."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["layouts"])
    rows = [result["layouts"][n] for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    wall = [r["wall_to_target_s"]["median"] or 0.0 for r in rows]
    low = [w - (r["wall_to_target_s"]["min"] or w) for w, r in zip(wall, rows)]
    high = [(r["wall_to_target_s"]["max"] or w) - w for w, r in zip(wall, rows)]
    axes[0].bar(names, wall, yerr=[low, high], capsize=3)
    axes[0].set_ylabel(f"wall s to success >= {result['config']['target']} (0: not reached)")
    axes[1].bar(names, [r["s_per_sample"] * 1e3 for r in rows])
    axes[1].set_ylabel("ms per sample (rollout + PPO update)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.suptitle(f"time to a trained policy ({result['machine']['cpu_model']}, {result['config']['seeds']} seeds)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(result: dict[str, Any]) -> str:
    lines = ["| layout | semantics | ms/sample | samples to target | wall to target s (min-max) |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name, r in result["layouts"].items():
        s, w = r["samples_to_target"], r["wall_to_target_s"]
        wall = "not reached" if w["median"] is None else f"{w['median']:.1f} ({w['min']:.1f}-{w['max']:.1f})"
        samples = "-" if s["median"] is None else f"{s['median']:.0f}"
        lines.append(f"| {name} | {r['semantics']} | {r['s_per_sample'] * 1e3:.2f} | {samples} | {wall} |")
    return "\n".join(lines)


QUICK = {"iterations": 4, "processes": 2, "envs": 4, "chunk_size": 4, "rounds": 4, "resolution": 16, "seeds": 1,
         "target": 0.05, "window": 1, "cost_iterations": 1, "model_width": 64, "model_depth": 1}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run for 2 cores: " + ", ".join(
        f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--target", type=float, default=0.7, help="success rate to reach (default: 0.7)")
    parser.add_argument("--window", type=int, default=3, help="iterations the success rate is averaged over")
    parser.add_argument("--iterations", type=int, default=150, help="most PPO iterations per training run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=16, help="rounds (chunks per env) per PPO iteration")
    parser.add_argument("--resolution", type=int, default=64, help="camera pixels per side")
    parser.add_argument("--lookahead-steps", type=lead_steps, default="auto",
                        help="the lookahead layout's lead d (an int below --chunk-size) or auto (default: auto, "
                             "the smallest d that hides the forward)")
    parser.add_argument("--cost-iterations", type=int, default=3,
                        help="PPO iterations that time each layout's seconds per sample (after one uncounted)")
    parser.add_argument("--model-width", type=int, default=None, help="fix the VLA's width (default: calibrated)")
    parser.add_argument("--model-depth", type=int, default=None, help="fix the VLA's depth (needs --model-width)")
    parser.add_argument("--device", default="auto", help="VLA device: cpu, cuda or auto")
    parser.add_argument("--out-dir", default=None, help=f"default: ./{DEFAULT_OUT_DIR}")
    parser.add_argument("--record", action="store_true", help="write into the checkout's benchmarks/results/")
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if parser.get_default(key) == getattr(args, key):
                setattr(args, key, value)
    if args.record and args.out_dir:
        parser.error("--record writes benchmarks/results/; it cannot go with --out-dir")
    if args.lookahead_steps != "auto" and args.lookahead_steps >= args.chunk_size:
        parser.error(f"argument --lookahead-steps: must be below --chunk-size {args.chunk_size}, "
                     f"got {args.lookahead_steps}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR))
    out.mkdir(parents=True, exist_ok=True)
    loads = [sample_load()]
    start = time.perf_counter()
    result = measure(args)
    loads.append(sample_load())
    machine = report.describe_machine(resolve_device(args.device))
    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "machine": machine, "config": vars(args), "load": {"before": loads[0].to_dict(),
                                                                  "after": loads[1].to_dict()},
              "wall_s": time.perf_counter() - start, **result}
    stem = f"time_to_train_{args.tag or report.machine_tag(machine)}"
    report.write_json(result, out / f"{stem}.json")
    plot(result, out / f"{stem}.png")
    print(format_table(result))
    if result["not_run"]:
        print("not run: " + "; ".join(f"{k}: {v}" for k, v in result["not_run"].items()))
    warning = busy_warning(loads)
    if warning:
        print(warning)
    print(f"wrote {out / stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
