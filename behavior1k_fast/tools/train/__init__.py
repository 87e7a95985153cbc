"""``behavior1k-fast train-judge``: time to a trained policy, per rollout layout and regime; and
``behavior1k-fast train-compare``: PPO learning curves per profile.

The question a user asks is "how long until my policy is trained", not env-steps per second. A layout can buy
env-steps by changing what each env sees (the hybrid partition acts on an observation one stage chunk old;
collect-while-train acts with weights one update old), which can cost samples. ``train-judge`` measures both
factors and their product, wall to target = samples to target x seconds per sample, for the engine's layouts
(each serial and ``+overlap``: collect-while-train), the gymnasium double buffer and TorchRL's collectors
(:mod:`.judge`; the layouts: :mod:`.layouts`; the one clock of every row: :mod:`.timing`; the learner:
:mod:`.learner`; the result: :mod:`.result`; tables and plot: :mod:`.report`; the peers:
:mod:`behavior1k_fast.tools.peers`). Writes ``time_to_train_<tag>.json`` and ``.png`` (``--lead-sweep``:
``time_to_train_lead_sweep_<tag>``; ``--quick``: ``_quick`` before the extension, so a quick run never
replaces a full one) to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the checkout's
``benchmarks/results/``). The JSON is rewritten after each measured piece (``"complete": false``), so a run
cut short keeps what it measured, and ``--plot RESULT.json`` draws it afterwards. ``train-compare`` is
:mod:`.curves`. Importing this package is light: the commands import torch when they run.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..argtypes import (chunk_steps, device, env_count, file_name, lookahead_steps, path, positive_int, positive_number,
                        process_count, seed)
from .layouts import ENGINE_PROFILES, REGIMES, compared_rows

#: ``train-judge --help``'s description.
JUDGE_DESCRIPTION = """Time to a trained policy: wall clock until PPO reaches a target success rate, per rollout layout
and regime. Wall to target = samples to target (PPO on the reference reach-and-touch task with a VLA-cost
policy, per seed) x seconds per sample (the trainer's wait for a batch plus its update), for the engine's
layouts (each serial and +overlap, collect-while-train), the gymnasium double buffer and TorchRL's collectors
(pip install 'behavior1k_fast[peers]'). Writes time_to_train_<tag>.json and .png (--quick: <tag>_quick, never
a full run's name), rewritten after each measured piece so that a run cut short keeps what it measured."""
#: ``--quick``: a small run for 2 cores.
QUICK = {"iterations": 3, "processes": 2, "envs": 4, "chunk_size": 4, "rounds": 4, "resolution": 16, "seeds": 1,
         "target": 0.05, "window": 1, "cost_iterations": 2, "model_width": 64, "model_depth": 2,
         "regime": ["balanced"], "layouts": ["k1_skip", "hybrid_k2"]}
#: Wall clock of ``train-judge --quick --device cpu`` on the project's 2-core machine (2 min 7 s measured with the
#: machine busy: load average 6.7).
QUICK_MINUTES = "2-3"


def _names(text: str, table: Any, option: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(n not in table for n in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated {option} of {','.join(table)}, got {text!r}")
    return list(dict.fromkeys(names))


def layout_list(text: str) -> list[str]:
    """``--layouts``: comma-separated engine profiles of :data:`~.layouts.ENGINE_PROFILES`, or ``none``."""
    return [] if text.strip() == "none" else _names(text, ENGINE_PROFILES, "layouts")


def peer_list(text: str) -> list[str]:
    """``--peers``: comma-separated names of :data:`~.layouts.PEERS`, or ``none``."""
    from .layouts import PEERS

    return [] if text.strip() == "none" else _names(text, PEERS, "peers")


def correction_list(text: str) -> list[str]:
    """``--corrections``: comma-separated names of :data:`~.layouts.CORRECTION_ROWS`."""
    from .layouts import CORRECTION_ROWS

    return _names(text, CORRECTION_ROWS, "corrections")


def regime_list(text: str) -> list[str]:
    """``--regime``: comma-separated names of :data:`~.layouts.REGIMES`."""
    return _names(text, REGIMES, "regimes")


def success_rate(text: str) -> float:
    """``--target``: a success rate in (0, 1]."""
    value = positive_number(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a success rate in (0, 1], got {text!r}")
    return value


def register(subparsers: Any) -> None:
    """Add the ``train-judge`` and ``train-compare`` sub-commands."""
    from . import curves

    p = subparsers.add_parser("train-judge", help="time to a trained policy per rollout layout and regime",
                              description=JUDGE_DESCRIPTION)
    p.add_argument("--quick", action="store_true", help=f"small run for 2 cores (about {QUICK_MINUTES} minutes on "
                   f"2 cores with --device cpu): " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--regime", type=regime_list, default=list(REGIMES),
                   help="comma-separated regimes (" + ", ".join(f"{k}: T_model = {v} T_env" for k, v in
                                                                REGIMES.items()) + "; default: all)")
    p.add_argument("--lead-sweep", action="store_true",
                   help="the delay sweep of the lookahead lead (d = 0, 1, 2, 4, N/2, N-1) in the first --regime")
    p.add_argument("--layouts", type=layout_list, default=list(ENGINE_PROFILES),
                   help="comma-separated engine layouts, each trained serial and +overlap, or none (only the "
                        "peers train; default: all)")
    p.add_argument("--target", type=success_rate, default=0.7, help="success rate to reach (default: %(default)s)")
    p.add_argument("--window", type=positive_int, default=3,
                   help="iterations the success rate is averaged over (default: %(default)s)")
    p.add_argument("--iterations", type=positive_int, default=150,
                   help="most PPO iterations per training run (default: %(default)s)")
    p.add_argument("--seeds", type=positive_int, default=5,
                   help="training runs per compared row, seeds 0, 1, ...; 95 %% intervals need 2, a ratio's "
                        "permutation test goes below p = 0.05 from 4 a side (default: %(default)s)")
    p.add_argument("--first-seed", type=seed, default=0,
                   help="the first seed (a run split over calls: --seeds 2 --first-seed 2 runs seeds 2 and 3; "
                        "--merge joins them) (default: %(default)s)")
    from .layouts import CORRECTION_ROWS, PEERS

    p.add_argument("--peers", type=peer_list, default=list(PEERS),
                   help="comma-separated peers to run, or none (" + ",".join(PEERS) + "; default: all)")
    p.add_argument("--corrections", type=correction_list, default=[],
                   help="compare these PPO lag corrections (" + ",".join(CORRECTION_ROWS) + ") over the "
                        "collect-while-train rows of --layouts (each +overlap) and --peers (double_buffer_thread, "
                        "torchrl_async), each against its serial twin, samples and seconds to target, in the first "
                        "--regime; writes time_to_train_corrections_<tag>.json")
    p.add_argument("--processes", type=process_count, default=2, help="env processes (default: %(default)s)")
    p.add_argument("--envs", type=env_count, default=16,
                   help="envs in all, a multiple of --processes (default: %(default)s)")
    p.add_argument("--chunk-size", type=chunk_steps, default=8, help="N actions per chunk (default: %(default)s)")
    p.add_argument("--rounds", type=positive_int, default=16,
                   help="rounds (chunks per env) per PPO iteration (default: %(default)s)")
    p.add_argument("--resolution", type=positive_int, default=64, help="camera pixels per side (default: %(default)s)")
    p.add_argument("--lookahead-steps", type=lookahead_steps, default="auto",
                   help="the lookahead layout's lead d (an int below --chunk-size) or auto, the smallest d that "
                        "hides the forward (default: %(default)s)")
    p.add_argument("--cost-iterations", type=positive_int, default=3,
                   help="PPO iterations that time each layout's seconds per sample, after one uncounted "
                        "(default: %(default)s)")
    p.add_argument("--model-width", type=positive_int, default=None,
                   help="fix the VLA's width (not given: calibrated)")
    p.add_argument("--model-depth", type=positive_int, default=None,
                   help="fix the VLA's depth (needs --model-width; every regime then gets this size)")
    p.add_argument("--device", type=device, default="auto", help="VLA device: cpu, cuda[:i] or auto (default: auto)")
    p.add_argument("--out-dir", type=path, default=None, help="where the JSON and PNG go (not given: "
                                                              "./behavior1k_fast_results)")
    p.add_argument("--record", action="store_true", help="write into the checkout's benchmarks/results/")
    p.add_argument("--tag", type=file_name, default=None, help="machine tag in the file names (not given: this "
                                                               "machine's, e.g. cpu2)")
    p.add_argument("--merge", type=path, nargs="+", default=None, metavar="JSON",
                   help="only join the recorded results of one judge split over calls (the training runs of each "
                        "row; intervals and goals computed again) into time_to_train_<--tag>.json and .png, and "
                        "exit")
    p.add_argument("--plot", type=path, default=None, metavar="JSON",
                   help="only draw the .png of a recorded result (a run cut short too: what it measured) into the "
                        "output folder and exit")
    p.set_defaults(func=run, quick_defaults={key: p.get_default(key) for key in QUICK})
    curves.register(subparsers)


def read_result(option: str, name: str) -> Any:
    """The recorded result in the file ``name`` (a ``TimeToTrainResult``); ``ValueError`` naming ``option`` and
    the file where it cannot be read or is not one."""
    import json
    from pathlib import Path

    from .result import TimeToTrainResult

    try:
        data = json.loads(Path(name).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"argument {option}: cannot read {name!r}: {exc}") from None
    try:
        return TimeToTrainResult.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"argument {option}: {name!r} {exc}") from None


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--quick``'s values where an option was left at its default, the output folder resolved
    (``args.out``) and, for ``--plot`` / ``--merge``, the recorded results read (``args.result`` /
    ``args.merged``), after every check that can
    fail before any env starts; raises ``ValueError`` (the command line's one-line usage error)."""
    from ...core.checks import check_writable_dir
    from ..argtypes import check_device
    from ..measure.config import DEFAULT_OUT_DIR, record_dir, resolve_device

    if args.quick:
        for key, value in QUICK.items():
            if args.quick_defaults[key] == getattr(args, key):
                setattr(args, key, value)
    if args.corrections and args.lead_sweep:
        raise ValueError("--corrections and --lead-sweep are two runs: give one")
    if args.corrections and not compared_rows(args.layouts, args.peers, args.corrections):
        raise ValueError(f"--corrections {','.join(args.corrections)}: no collect-while-train row to correct among "
                         f"--layouts {','.join(args.layouts) or 'none'} and --peers {','.join(args.peers) or 'none'}")
    if args.record and args.out_dir:
        raise ValueError("--record writes benchmarks/results/; it cannot go with --out-dir")
    if args.lookahead_steps != "auto" and args.lookahead_steps >= args.chunk_size:
        raise ValueError(f"argument --lookahead-steps: must be below --chunk-size {args.chunk_size}, "
                         f"got {args.lookahead_steps}")
    if args.window > args.iterations:
        raise ValueError(f"--window {args.window} is longer than --iterations {args.iterations}: the target could "
                         f"never be reached")
    _check_sizes(args)
    check_device(resolve_device(args.device))
    args.out = record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR)
    if args.plot is not None:
        args.result = read_result("--plot", args.plot)
    if args.merge is not None:
        args.merged = [read_result("--merge", name) for name in args.merge]
        _check_merge(args.merged)
    check_writable_dir("--out-dir", args.out)
    return args


def _check_sizes(args: argparse.Namespace) -> None:
    """The layout, the camera, one PPO batch and the policy fit this machine (``ValueError`` naming the option
    otherwise): sizes that would fail only in the allocator, tens of seconds in."""
    from ...backends.reference import ReferenceConfig
    from ...core.checks import STEP_BYTES, MachineLimits, check_local_layout
    from ..measure.policy import WIDTHS, check_image_size, check_width, model_bytes
    from .layouts import layout_profiles

    if args.model_depth is not None and args.model_width is None:
        raise ValueError(f"--model-depth {args.model_depth} needs --model-width")
    if args.model_width is not None:
        check_width("--model-width", args.model_width)
    if args.envs % args.processes:
        raise ValueError(f"--envs {args.envs} is not a multiple of --processes {args.processes}")
    check_image_size("--resolution", args.resolution)
    ReferenceConfig(resolution=(args.resolution, args.resolution))
    layout_profiles(args.processes, args.envs, args.chunk_size, args.lookahead_steps)
    check_local_layout(args.processes, args.envs, args.chunk_size)
    limits = MachineLimits.here()
    limits.check_memory(f"--envs {args.envs} x --rounds {args.rounds} x --chunk-size {args.chunk_size} (one PPO "
                        f"batch, {args.resolution} px camera)",
                        args.envs * args.rounds * (args.chunk_size * STEP_BYTES + 3 * args.resolution ** 2))
    width, depth = args.model_width or WIDTHS[0], args.model_depth or 1
    limits.check_memory(f"the policy with --model-width {width}, --model-depth {depth}",
                        model_bytes(width, depth, args.chunk_size, args.envs * args.rounds))



def _check_merge(results: list) -> None:
    """The ``--merge`` files trained one model per regime (``ValueError`` naming the sizes otherwise)."""
    for regime in sorted({n for r in results for n in (*r.regimes, *r.in_progress)}):
        sizes = {(c.get("model_width"), c.get("model_depth")) for c in (
            (r.regimes.get(regime) or r.in_progress.get(regime)).calibration for r in results
            if regime in r.regimes or regime in r.in_progress)}
        if len(sizes) > 1:
            raise ValueError(f"argument --merge: the files trained different models in {regime} (width, depth "
                             f"{sorted(sizes)}); give each call the same --model-width and --model-depth")


def run(args: argparse.Namespace) -> int:
    """Run the judge (or draw ``--plot``'s result); print the tables; write JSON and PNG. Bad input raises
    :class:`~..argtypes.UsageError` before anything runs; a result that cannot be written raises
    :class:`~..measure.files.ResultWriteError` after the tables are printed."""
    from ..argtypes import usage_errors

    with usage_errors():
        check_args(args)
    from .judge import run_judge

    return run_judge(args)


__all__ = ["QUICK", "check_args", "register", "run"]
