"""``behavior1k-fast bench``: the ablation benchmark (stock -> + slim -> + skip obs -> + pipeline).

Runs every row on the same layout (P env processes x E envs, chunks of N actions) with the same torch
policy, then the gymnasium ``AsyncVectorEnv`` peer baseline, and prints a table (end-to-end and
simulator-only ms per step, speedups, CPU seconds per env-step, peak RSS per env process, GPU memory per
env, pipeline efficiency) and the goals. Writes ``bench_<machine>.json`` and ``bench_<machine>.png`` to
``benchmarks/results/``. A step is one own action of every env. The runs, the policy and its calibration
are the measurement kit's (:mod:`..measure`), shared with ``tune``. Importing this module is light; the
heavy parts live in the sub-modules and are imported when the command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..argtypes import env_count, path, positive_int, process_count, process_list
from ..measure.config import add_run_arguments


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` sub-command."""
    p = subparsers.add_parser("bench", help="ablation benchmark: stock -> slim -> skip obs -> pipeline",
                              description=__doc__.split("\n\n")[0])
    add_run_arguments(p, quick_help="small layout, low resolution, few chunks: under a minute on 2 cores",
                      quick_rounds=1, reference="the all-optimisations row",
                      out_dir="benchmarks/results")
    p.add_argument("--processes", type=process_count, default=None, help="env processes P (default: min(cores, 8))")
    p.add_argument("--envs-per-process", type=env_count, default=None, help="envs per process E (default: 2)")
    p.add_argument("--pipeline-stages", "--stages", dest="pipeline_stages", type=positive_int, default=2,
                   help="pipeline stages K of the pipeline rows (default: 2; --stages is its older name)")
    p.add_argument("--scaling", type=process_list, default=None, metavar="P1,P2,...",
                   help="also sweep the number of env processes with every optimisation on, e.g. 1,2,4,8,14")
    p.add_argument("--no-baseline", action="store_true", help="skip the AsyncVectorEnv peer baseline")
    p.add_argument("--tuned", type=path, metavar="PATH", default=None,
                   help="a profile YAML written by `behavior1k-fast tune` for the same number of envs: its layout "
                        "is one more row, with every optimisation on")
    p.add_argument("--executor", choices=("process", "ray"), default="process", help="engine executor")
    p.add_argument("--trace", action="store_true", help="also export a Chrome trace of the last row")
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
    installed, the device exists, ``--out-dir`` can be written (:func:`~..measure.config.check_run`), the
    images fit the memory, and every run's backend can be built (what the engine would check in its workers: seed, modalities, stage count,
    backend config keys)."""
    from ...core.contract import check_backend_build
    from ...rollout.plan import PartitionPlan
    from ..argtypes import usage_errors
    from ..backend_args import check_image_memory
    from ..measure.config import check_run
    from .ablation import BenchConfig, plan_runs

    with usage_errors():
        config = BenchConfig.from_args(args)
        check_run(config)
        check_image_memory(args, max((config.processes, *config.scaling)) * config.envs_per_process)
        factory, rows, sweep = plan_runs(config)
        for row in [*rows, *(r for _, r in sweep)]:
            plan = PartitionPlan.from_profile(row.profile)
            check_backend_build(factory, plan.envs_per_process, config.seed, plan.worker_profile(row.profile))
    return config
