"""``behavior1k-fast train-compare``: PPO learning curves on the reference reach-and-touch task, per profile.

Trains every profile (``--profiles``: :data:`~.layouts.PROFILES`) for ``--seeds`` seeds (``--runs-from``
adds the runs of an earlier comparison, such as another lead's), compares the curves (:func:`compare`: a
measure agrees when the profiles' means differ by no more than one profile's spread over seeds), evaluates
the seed-0 policies trained under K = 2 and K = 1 under both profiles (the same policy, so the difference is
the task's), and writes ``ppo_reach_<machine>.json`` and ``.png`` to ``./behavior1k_fast_results``
(``--out-dir``; ``--record``: the checkout's committed ``benchmarks/results/``; ``cpu2`` on a 2-core
machine). The output folder is checked before any training; the JSON is rewritten after each run
(``"complete": false`` until the end), every file atomically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..argtypes import file_name, lead_steps, path, positive_int
from ..measure.files import write_json, write_with
from .layouts import PROFILES



def _weighted(run: dict[str, Any], key: str, first: int) -> float:
    """Episode-weighted mean of ``run[key]`` over iterations ``first`` to the end."""
    values, counts = run[key][first:], run["episodes"][first:]
    pairs = [(v, c) for v, c in zip(values, counts) if v is not None]
    return sum(v * c for v, c in pairs) / sum(c for _, c in pairs)


#: Measures of a learning curve compared across profiles: name -> (curve key, first iteration as a fraction).
MEASURES = {
    "final_success": ("success_rate", 0.75),  # the last quarter of the run: what was learned
    "final_return": ("mean_return", 0.75),
    "success_over_run": ("success_rate", 0.0),  # the whole run: how fast it was learned
}


def label(run: dict[str, Any]) -> str:
    """A run's curve name: its profile, with the lead for ``lookahead`` (``lookahead_d1``)."""
    config = run["config"]
    return f"lookahead_d{config['lookahead_steps']}" if config["profile"] == "lookahead" else config["profile"]


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each measure per curve (:func:`label`; per seed, mean, spread = max - min over seeds) and the verdict: two
    curves agree on a measure when their means differ by no more than the largest spread of one curve over
    seeds (run-to-run noise); ``against_k1_skip``: each curve against K = 1 alone (mean difference, the larger
    spread of the two as noise). At equal samples: every run is cut after its last iteration within the
    fewest env steps any run reached (``equal_samples``; a lookahead run has fewer per iteration: sat-out
    chunks). ``k1_skip_equals_stock``: the curves of the same seed are identical."""
    cap = min(run["env_steps"][-1] for run in runs)
    cut = []
    for run in runs:  # the curves (lists, one entry per iteration) up to the cap; config and profile as they are
        n = max(1, sum(steps <= cap for steps in run["env_steps"]))
        cut.append({k: v[:n] if isinstance(v, list) else v for k, v in run.items()})
    iterations = {f"{label(run)} seed {run['config']['seed']}": len(run["env_steps"]) for run in cut}
    out: dict[str, Any] = {"equal_samples": {"env_steps": cap, "iterations": iterations}}
    for measure, (key, start) in MEASURES.items():
        by_profile: dict[str, list[float]] = {}
        for run in cut:
            first = int(len(run[key]) * start)
            by_profile.setdefault(label(run), []).append(_weighted(run, key, first))
        means = {name: float(np.mean(v)) for name, v in by_profile.items()}
        noise = max(float(np.ptp(v)) for v in by_profile.values())
        out[measure] = {
            "per_seed": by_profile,
            "mean": means,
            "spread": {name: float(np.ptp(v)) for name, v in by_profile.items()},
            "run_to_run_noise": noise,
            "largest_difference_of_means": float(np.ptp(list(means.values()))),
            "agree_within_noise": bool(np.ptp(list(means.values())) <= noise),
        }
        if "k1_skip" in means:
            pairs = {}
            for name in means.keys() - {"k1_skip"}:
                pair_noise = max(float(np.ptp(by_profile[name])), float(np.ptp(by_profile["k1_skip"])))
                difference = means[name] - means["k1_skip"]
                pairs[name] = {"difference": difference, "noise": pair_noise,
                               "agree_within_noise": bool(abs(difference) <= pair_noise)}
            out[measure]["against_k1_skip"] = pairs
    out["k1_skip_equals_stock"] = {
        str(a["config"]["seed"]): all(a[k] == b[k] for k in ("env_steps", "success_rate", "mean_return", "value_loss"))
        for a in runs if a["config"]["profile"] == "k1_skip"
        for b in runs if b["config"]["profile"] == "stock" and b["config"]["seed"] == a["config"]["seed"]
    }
    return out


def smoothed(run: dict[str, Any], key: str, window: int = 5) -> np.ndarray:
    """Episode-weighted moving average of ``run[key]`` over ``window`` iterations, or the run's length if shorter
    (NaN where no episode ended); one value per iteration."""
    values = np.array([np.nan if v is None else v for v in run[key]], dtype=float)
    counts = np.where(np.isnan(values), 0, np.array(run["episodes"], dtype=float))
    kernel = np.ones(max(1, min(window, len(values))))  # a window longer than the run: the run's own length
    total = np.convolve(np.nan_to_num(values) * counts, kernel, mode="same")
    weight = np.convolve(counts, kernel, mode="same")
    return np.divide(total, weight, out=np.full_like(total, np.nan), where=weight > 0)


def plot(result: dict[str, Any], path: Path) -> None:
    """Success rate and return vs env steps, one line per run (5-iteration moving average), and the verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({label(run) for run in result["runs"]})
    palette = iter(["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive"])
    colors = {"k2_skip": "tab:blue", "k1_skip": "tab:orange", "stock": "black"}
    colors.update({name: next(palette) for name in names if name not in colors})
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    for run in result["runs"]:
        name, seed = label(run), run["config"]["seed"]
        steps = np.array(run["env_steps"]) / 1e3
        for ax, key in zip(axes, ("success_rate", "mean_return")):
            ax.plot(steps, smoothed(run, key), ":" if name == "stock" else "-", color=colors[name], linewidth=1.4,
                    label=name if seed == 0 else None)
    axes[0].set_ylabel("success rate (episodes ended per iteration)")
    axes[1].set_ylabel("episode return")
    for ax in axes:
        ax.set_xlabel("env steps (thousands of own actions)")
        ax.grid(alpha=0.3)
    seeds = len({run["config"]["seed"] for run in result["runs"]})
    axes[0].legend(title=f"{seeds} seeds each", fontsize=8)
    lines = verdict_lines(result["comparison"])
    fig.suptitle("PPO on the reference reach-and-touch task: " + ", ".join(names))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.04 + 0.02 * len(lines), 1, 1))
    try:
        write_with(path, lambda temp: fig.savefig(temp, dpi=110, format="png"))
    finally:
        plt.close(fig)


def verdict_lines(comparison: dict[str, Any]) -> list[str]:
    """The comparison in words: each measure's means, noise and verdict, each curve against ``k1_skip``."""
    lines = []
    for measure in MEASURES:
        c = comparison[measure]
        means = ", ".join(f"{name} {value:.2f}" for name, value in c["mean"].items())
        lines.append(f"{measure}: {means} (noise {c['run_to_run_noise']:.2f}; "
                     f"{'agree' if c['agree_within_noise'] else 'differ'})")
        if c.get("against_k1_skip"):
            lines.append("    against k1_skip: " + ", ".join(
                f"{name} {p['difference']:+.2f} (noise {p['noise']:.2f}; "
                f"{'agree' if p['agree_within_noise'] else 'differ'})" for name, p in sorted(c["against_k1_skip"].items())))
    if comparison["k1_skip_equals_stock"]:
        lines.append(f"k1_skip == stock, curve for curve: {all(comparison['k1_skip_equals_stock'].values())}")
    return lines


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train-compare`` sub-command."""
    p = subparsers.add_parser("train-compare", help="PPO learning curves per profile, seeds and their spread",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--profiles", type=profile_list, default=list(PROFILES),
                   help="comma-separated profiles, or empty with --runs-from (default: all)")
    p.add_argument("--seeds", type=positive_int, default=2, help="seeds per profile, 0, 1, ... (default: %(default)s)")
    p.add_argument("--iterations", type=positive_int, default=100,
                   help="PPO iterations per training run (default: %(default)s)")
    p.add_argument("--lookahead-steps", type=lead_steps, default=0, metavar="D",
                   help="lead d of the lookahead profile: an int below the chunk size or auto (default: %(default)s; "
                        "the recorded comparison ran 7 and 1)")
    p.add_argument("--overlap", action="store_true",
                   help="collect the next batch while PPO updates on this one (Collector max_lag=1)")
    p.add_argument("--runs-from", type=path, action="append", default=[], metavar="JSON",
                   help="add the runs (and cross evaluations) of an earlier comparison's JSON")
    p.add_argument("--out-dir", type=path, default=None,
                   help="where the JSON and PNG go (not given: ./behavior1k_fast_results)")
    p.add_argument("--record", action="store_true", help="write into the checkout's benchmarks/results/")
    p.add_argument("--tag", type=file_name, default=None, help="machine tag in the file names (not given: this "
                                                          "machine's, e.g. cpu2)")
    p.set_defaults(func=run)
    return p


def profile_list(text: str) -> list[str]:
    """``--profiles``: comma-separated names of :data:`PROFILES` (none: only ``--runs-from``'s runs)."""
    names = [n for n in text.split(",") if n]
    for name in names:
        if name not in PROFILES:
            raise argparse.ArgumentTypeError(f"{name!r} is not one of {','.join(PROFILES)}")
    return names


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    """The output folder (``args.out``, writable: checked before any training), the earlier runs
    (``args.earlier``) and the lead; raises ``ValueError`` (the command line's one-line usage error)."""
    from ...core.checks import check_writable_dir
    from ...core.profile import RolloutProfile
    from ..measure.config import DEFAULT_OUT_DIR, record_dir

    if args.record and args.out_dir is not None:
        raise ValueError(f"--record writes benchmarks/results/; it cannot go with --out-dir {args.out_dir}")
    if args.lookahead_steps != 0 and "lookahead" not in args.profiles:
        raise ValueError(f"--lookahead-steps {args.lookahead_steps} sets the lead of the lookahead profile, which "
                         f"--profiles {','.join(args.profiles)} leaves out")
    try:  # the learner's layout (2 processes x 8 envs, chunks of 8)
        RolloutProfile(num_env_processes=2, total_num_envs=16, chunk_size=8, schedule="lookahead",
                       lookahead_steps=args.lookahead_steps)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--lookahead-steps {args.lookahead_steps}: {exc}") from None
    args.earlier = []
    for name in args.runs_from:
        try:
            args.earlier.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--runs-from {name}: not a train-compare JSON ({exc})") from None
    args.out = check_writable_dir("--out-dir", record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR))
    return args


def run(args: argparse.Namespace) -> int:
    """Train, evaluate, compare; print the verdict; write the JSON (after each run) and the PNG."""
    from ..argtypes import usage_errors
    from ..measure.machine import describe_machine, machine_tag, sample_load
    from .judge import command_line, write_result
    from .learner import PPOConfig, train

    with usage_errors():
        check_args(args)
    machine = describe_machine("cpu")
    stem = f"ppo_reach_{args.tag or machine_tag(machine)}"
    out = Path(args.out)
    loads = [sample_load()]
    earlier = args.earlier
    result: dict[str, Any] = {
        "command": command_line(), "machine": machine, "complete": False, "notes": [],
        # the runs of --runs-from: what ran them (deterministic runs: the same command gives the same curves)
        "runs_from": [{"command": e["command"], "load": e.get("load"), "notes": e.get("notes", [])} for e in earlier],
        "runs": [run for e in earlier for run in e["runs"]]}
    if args.iterations < PPOConfig.iterations:
        result["notes"].append(f"{args.iterations} iterations per run instead of {PPOConfig.iterations}")
    policies = {}
    for seed in range(args.seeds):
        for name in args.profiles:
            config = PPOConfig(profile=name, seed=seed, iterations=args.iterations,
                               lookahead_steps=args.lookahead_steps, max_lag=int(args.overlap))
            print(f"{name} seed {seed}: training {args.iterations} iterations "
                  f"({'overlap on: collect while PPO updates' if args.overlap else 'serial'})", flush=True)
            run, policies[name, seed] = train(config, progress(config))
            result["runs"].append(run.to_dict())
            write_json(result, out / f"{stem}.json")  # a run cut short keeps the runs before
    cross = cross_evaluations(args, earlier, policies)
    loads.append(sample_load())
    runs = result.pop("runs")
    result.update(complete=True, load={"before": loads[0].to_dict(), "after": loads[1].to_dict()},
                  profiles=sorted({label(r) for r in runs}), runs=runs, comparison=compare(runs),
                  cross_evaluation=cross)
    print("\n".join(verdict_lines(result["comparison"])))
    for c in cross:
        print(f"trained under {c['trained_under']}, run under {c['profile']}: success {c['success_rate']:.2f} "
              f"over {c['episodes']} episodes, return {c['mean_return']:.1f}")
    return write_result(result, lambda drawn: plot(result, drawn), out / stem, loads)


def cross_evaluations(args: argparse.Namespace, earlier: list[dict], policies: dict) -> list[dict[str, Any]]:
    """The seed-0 policies trained under K = 2 and K = 1 evaluated under both profiles (the same policy, so the
    difference is the task's; a lookahead policy reads committed actions, which only the lookahead profile
    gives: evaluated under it alone), after the earlier comparisons' own (each at the lead of its runs)."""
    from .learner import PPOConfig, evaluate_policy

    barrier = [n for n in ("k2_skip", "k1_skip") if n in args.profiles]
    pairs = [(trained, profile) for trained in barrier for profile in barrier]
    pairs += [("lookahead", "lookahead")] if "lookahead" in args.profiles else []
    cross = [{**c, "lookahead_steps": e["runs"][0]["config"]["lookahead_steps"]} if c["profile"] == "lookahead"
             else c for e in earlier for c in e["cross_evaluation"]]
    for trained, profile in pairs:
        print(f"evaluating the seed-0 policy trained under {trained} under {profile} (60 rounds)", flush=True)
        lead = {"lookahead_steps": args.lookahead_steps} if profile == "lookahead" else {}
        cross.append({"trained_under": trained, **lead, **evaluate_policy(
            policies[trained, 0], PPOConfig(profile=profile, lookahead_steps=args.lookahead_steps))})
    return cross


def progress(config: Any) -> Any:
    """A training run's ``on_iteration``: one line per iteration."""
    def show(it: int, batch: Any, entry: dict) -> None:
        rate = "-" if entry.success_rate is None else f"{entry.success_rate:.2f}"
        ret = "-" if entry.mean_return is None else f"{entry.mean_return:.1f}"
        print(f"{config.profile} seed {config.seed} iter {it + 1:3d}  env steps {entry.env_steps:7d}  "
              f"success {rate:>4}  return {ret:>6}  ({entry.wall_s:.0f} s)", flush=True)
    return show


