"""``behavior1k-fast bench``: the ablation benchmark (stock -> + slim -> + skip obs -> + pipeline).

Runs every row on the same layout (P env processes x E envs, chunks of N actions) with the same torch
policy, then the gymnasium ``AsyncVectorEnv`` peer baseline, and prints a table (end-to-end and
simulator-only ms per step, speedups, CPU seconds per env-step, peak RSS per env process, GPU memory per
env, pipeline efficiency) and the goals. Writes ``bench_<machine>.json`` and ``bench_<machine>.png`` to
``benchmarks/results/``. A step is one own action of every env. Importing this module is light; the
heavy parts live in the sub-modules and are imported when the command runs.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from ...backends import BACKENDS
from ..backend_args import add_backend_arguments


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints >= 1, got {text!r}")
    return values


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` sub-command."""
    p = subparsers.add_parser("bench", help="ablation benchmark: stock -> slim -> skip obs -> pipeline",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=BACKENDS, default="reference", help="simulator (default: reference)")
    p.add_argument("--quick", action="store_true",
                   help="small layout, low resolution, few chunks: under a minute on 2 cores")
    p.add_argument("--processes", type=int, default=None, help="env processes P (default: min(cores, 8))")
    p.add_argument("--envs-per-process", type=int, default=None, help="envs per process E (default: 2)")
    p.add_argument("--stages", type=int, default=2, help="pipeline stages K of the pipeline rows (default: 2)")
    p.add_argument("--chunk-size", type=int, default=32, help="N actions per chunk (default: 32)")
    p.add_argument("--rounds", type=int, default=None, help="timed chunks per env per row (default: 6, quick: 1)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per row before timing (default: 1)")
    p.add_argument("--model-ms", type=float, default=None,
                   help="target ms of one policy forward at the stage batch (default: the optimised env ms per "
                        "stage chunk, measured at start); the model's width and depth are calibrated to it")
    p.add_argument("--model-width", type=int, default=None,
                   help="fix the policy transformer's width (a multiple of 64); its depth is calibrated unless "
                        "--model-depth is given too")
    p.add_argument("--model-depth", type=int, default=None,
                   help="fix the policy transformer's depth in blocks (needs --model-width; nothing calibrated)")
    p.add_argument("--behavior-like", action="store_true",
                   help="reference backend: BEHAVIOR's reset and contact costs on (ReferenceConfig.behavior_like)")
    p.add_argument("--device", default="auto", help="policy device: cpu, cuda or auto (default: auto)")
    p.add_argument("--scaling", type=_int_list, default=None, metavar="P1,P2,...",
                   help="also sweep the number of env processes with every optimisation on, e.g. 1,2,4,8,14")
    p.add_argument("--no-baseline", action="store_true", help="skip the AsyncVectorEnv peer baseline")
    p.add_argument("--executor", choices=("process", "ray"), default="process", help="engine executor")
    p.add_argument("--out-dir", default="benchmarks/results", help="where JSON and PNG go")
    p.add_argument("--tag", default=None, help="machine tag in the file names (default: derived, e.g. cpu2)")
    p.add_argument("--trace", action="store_true", help="also export a Chrome trace of the last row")
    p.add_argument("--seed", type=int, default=0)
    add_backend_arguments(p)
    p.set_defaults(func=functools.partial(run, parser=p))
    return p


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the ablation; print table and goals; write JSON and PNG. 0 on success (goals are not asserted).

    A bad option value is a usage error of ``parser`` (one line, exit code 2) before anything runs."""
    from .ablation import BenchConfig, run_bench

    try:
        config = BenchConfig.from_args(args)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    result = run_bench(config)
    return 0 if result["rows"] else 1
