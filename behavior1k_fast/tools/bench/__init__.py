"""``behavior1k-fast bench``: the ablation benchmark (stock -> + slim -> + skip obs -> + pipeline) and its peers.

Runs every row on the same layout (P env processes x E envs, chunks of N actions) with the same torch
policy; the engine's rows again at the widest layout of the process budget (``--max-processes``); and the
peers (gymnasium ``AsyncVectorEnv`` on the same slim, on-demand-observation envs: one env set per process
stepping whole chunks, and two of them alternated; plus the stock-profile peer, labelled). Every run is
repeated ``--repeats`` times (default 3, quick 1), interleaved (the two stock-profile rows once: they are
10-30x off the rest); a row is its median run with the min-max. Prints a table (end-to-end and
simulator-only ms per step, speedups, CPU seconds per env-step, peak RSS per env process, GPU memory per
env, pipeline efficiency: the pipeline model's bound from the run's own T_env and T_model over its measured
time; above 100 % where workers and policy shared too few cores, so each measured time holds waiting the
other overlapped and the bound counts it twice), the headline (engine best against the best fair peer at
the same process budget; "no difference measurable on this machine" where their runs' ranges overlap), the
goals, and a warning when the policy's calibration missed its target or the machine was busy. Writes
``bench_<machine>.json`` and ``bench_<machine>.png`` (a ``--quick`` run: ``bench_<machine>_quick.*``,
never replacing a full run's) to ``./behavior1k_fast_results`` (``--record``: the checkout's committed
``benchmarks/results/``). A step is one own action of every env. The runs, the policy and its calibration
are the measurement kit's (:mod:`..measure`), shared with ``tune``. Importing this module is light; the
heavy parts live in the sub-modules and are imported when the command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..argtypes import env_count, int_list, path, positive_int, process_count, process_list
from ..measure.config import add_run_arguments


#: What ``--help`` says of the table's ``pipe eff`` column.
EFFICIENCY_HELP = """\
pipe eff: the pipeline model's bound from a run's own T_env and T_model (less a lookahead row's lead) over
its measured time. Not capped at 100 %: where workers and policy share too few cores, each measured time
holds waiting for the other, and the bound can pass the measured time (a core-bound row, named under the
table)."""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bench`` sub-command."""
    p = subparsers.add_parser("bench", help="ablation benchmark: stock -> slim -> skip obs -> pipeline",
                              description=f"{__doc__.split(chr(10) * 2)[0]}\n\n{EFFICIENCY_HELP}")
    add_run_arguments(p, quick_help="small layout, low resolution, few chunks: under a minute on 2 cores; writes "
                                    "bench_<tag>_quick.*, never replacing a full run's bench_<tag>.*",
                      quick_rounds=1, reference="the all-optimisations row", repeats=3, quick_repeats=1)
    p.add_argument("--processes", type=process_count, default=None,
                   help="env processes P of the ablation (default: the most, at most 8 (quick: K) and within the "
                        "process budget, that K divides; the budget where it is below K; --tuned: see there)")
    p.add_argument("--envs-per-process", type=env_count, default=None,
                   help="envs per process E (default: K; --tuned: its envs over P)")
    p.add_argument("--pipeline-stages", type=positive_int, default=2,
                   help="pipeline stages K of the pipeline rows (default: 2)")
    p.add_argument("--scaling", type=process_list, default=None, metavar="P1,P2,...",
                   help="also sweep the number of env processes with every optimisation on, e.g. 1,2,4,8,14")
    p.add_argument("--no-peers", action="store_true", help="skip the gymnasium AsyncVectorEnv peers")
    p.add_argument("--tuned", type=path, metavar="PATH", default=None,
                   help="a profile YAML written by `behavior1k-fast tune`: its layout is one more row, with every "
                        "optimisation on, and every row runs its envs (total_num_envs; P the most processes within "
                        "the budget that divide them, unless --processes or --envs-per-process says) and needs its "
                        "chunk size")
    p.add_argument("--executor", choices=("process", "ray"), default="process", help="engine executor")
    p.add_argument("--trace", action="store_true", help="also export Chrome traces of the all-optimisations row and the lookahead rows")
    p.add_argument("--shards", type=int_list, default=None, metavar="1,G2,...",
                   help="instead of the ablation: G engines, one per policy GPU (Ray actors), each running the "
                        "all-optimisations row (or --tuned's layout), for every G listed (bench/shards.py)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ablation; print table and goals; write JSON and PNG. 0 on success (goals are not asserted).
    Bad input raises :class:`~..argtypes.UsageError` before anything runs (:func:`check_runs`)."""
    if args.shards:
        from .shards import check_shards, run_shards

        return 0 if run_shards(check_shards(args))["shards"] else 1
    from .ablation import run_bench

    result = run_bench(check_runs(args))
    return 0 if result.rows else 1


def check_runs(args: argparse.Namespace) -> Any:
    """The ``BenchConfig`` of ``args``, after every check that can fail before a run: the backend is
    installed, the device exists (:func:`~..measure.config.check_run`), every run's backend can be built
    (what the engine would check in its workers: seed, modalities, stage count, backend config keys), the
    images fit the memory, and ``--out-dir`` is writable."""
    from ...core.contract import check_backend_build
    from ...rollout.plan import PartitionPlan
    from ..argtypes import usage_errors
    from ..backend_args import check_image_memory
    from ..measure.config import check_out_dir, check_run
    from .ablation import BenchConfig, plan_runs

    with usage_errors():
        config = BenchConfig.from_args(args)
        check_run(config)
        check_image_memory(args, max((config.processes, config.process_budget, *config.scaling)) * config.envs_per_process)
        runs = plan_runs(config)
        for row in [*runs.engine_rows, *(r for _, r in runs.sweep)]:
            plan = PartitionPlan.from_profile(row.profile)
            check_backend_build(runs.factory, plan.envs_per_process, config.seed, row.profile)
        for peer in runs.peers:
            check_backend_build(runs.factory, peer.envs_per_process, config.seed, peer.profile)
        check_out_dir(config)
    return config


__all__ = ["check_runs", "register", "run"]
