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
from typing import Any

from ...backends import BACKENDS
from ..argtypes import (chunk_steps, device, env_count, file_name, nonnegative_int, path, positive_int,
                        positive_number, process_count, process_list, seed)
from ..backend_args import add_backend_arguments, check_image_memory


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` sub-command."""
    p = subparsers.add_parser("bench", help="ablation benchmark: stock -> slim -> skip obs -> pipeline",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=BACKENDS, default="reference", help="simulator (default: reference)")
    p.add_argument("--quick", action="store_true",
                   help="small layout, low resolution, few chunks: under a minute on 2 cores")
    p.add_argument("--processes", type=process_count, default=None, help="env processes P (default: min(cores, 8))")
    p.add_argument("--envs-per-process", type=env_count, default=None, help="envs per process E (default: 2)")
    p.add_argument("--stages", type=positive_int, default=2, help="pipeline stages K of the pipeline rows (default: 2)")
    p.add_argument("--chunk-size", type=chunk_steps, default=32, help="N actions per chunk (default: 32)")
    p.add_argument("--rounds", type=positive_int, default=None, help="timed chunks per env per row (default: 6, quick: 1)")
    p.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed rounds per row before timing (default: 1)")
    p.add_argument("--model-ms", type=positive_number, default=None,
                   help="target ms of one policy forward at the stage batch (default: the optimised env ms per "
                        "stage chunk, measured at start); the model's width and depth are calibrated to it")
    p.add_argument("--model-width", type=positive_int, default=None,
                   help="fix the policy transformer's width (a multiple of 64); its depth is calibrated unless "
                        "--model-depth is given too")
    p.add_argument("--model-depth", type=positive_int, default=None,
                   help="fix the policy transformer's depth in blocks (needs --model-width; nothing calibrated)")
    p.add_argument("--behavior-like", action="store_true",
                   help="reference backend: BEHAVIOR's reset and contact costs on (ReferenceConfig.behavior_like)")
    p.add_argument("--device", type=device, default="auto", help="policy device: cpu, cuda or auto (default: auto)")
    p.add_argument("--scaling", type=process_list, default=None, metavar="P1,P2,...",
                   help="also sweep the number of env processes with every optimisation on, e.g. 1,2,4,8,14")
    p.add_argument("--no-baseline", action="store_true", help="skip the AsyncVectorEnv peer baseline")
    p.add_argument("--tuned", type=path, metavar="PATH", default=None,
                   help="a profile YAML written by `behavior1k-fast tune` for the same number of envs: its layout "
                        "is one more row, with every optimisation on")
    p.add_argument("--executor", choices=("process", "ray"), default="process", help="engine executor")
    p.add_argument("--out-dir", type=path, default="benchmarks/results", help="where JSON and PNG go")
    p.add_argument("--tag", type=file_name, default=None, help="machine tag in the file names (default: derived, e.g. cpu2)")
    p.add_argument("--trace", action="store_true", help="also export a Chrome trace of the last row")
    p.add_argument("--seed", type=seed, default=0, help="seed of worker 0 (worker w: seed + w)")
    add_backend_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ablation; print table and goals; write JSON and PNG. 0 on success (goals are not asserted).
    Bad input raises :class:`~..argtypes.UsageError` before anything runs (:func:`check_runs`)."""
    from .ablation import run_bench

    result = run_bench(check_runs(args))
    return 0 if result["rows"] else 1


def check_runs(args: argparse.Namespace) -> Any:
    """The ``BenchConfig`` of ``args``, after every check that can fail before a run: the backend is
    installed, the device exists, ``--out-dir`` can be written (nothing is created before every check
    passed), and every run's backend can be built (what
    the engine would check in its workers: seed, modalities, stage count, backend config keys)."""
    from ...backends import check_installed
    from ...core.checks import check_creatable_dir
    from ...core.contract import check_backend_build
    from ...rollout.plan import PartitionPlan
    from ..argtypes import check_device, usage_errors
    from .ablation import BenchConfig, plan_runs

    with usage_errors():
        check_installed(args.backend)
        config = BenchConfig.from_args(args)
        check_device(config.device)
        check_creatable_dir("--out-dir", config.out_dir)
        check_image_memory(args, max((config.processes, *config.scaling)) * config.envs_per_process)
        factory, rows, sweep = plan_runs(config)
        for row in [*rows, *(r for _, r in sweep)]:
            plan = PartitionPlan.from_profile(row.profile)
            check_backend_build(factory, plan.envs_per_process, config.seed, plan.worker_profile(row.profile))
    return config
