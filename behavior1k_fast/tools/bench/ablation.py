"""The ablation: rows of profiles applied cumulatively, each run through the rollout engine and measured.

Rows (same layout P x E, chunk N, same policy): ``stock`` -> ``+ slim`` -> ``+ skip intermediate obs`` ->
``+ pipeline`` with K stages, in hybrid and in process partition, each without and with overlap of the
policy forward and env stepping. ``hybrid_overlap`` is the all-optimisations row.

Each row is one :func:`~..measure.runs.run_engine_row`, measured into a :class:`~..measure.record.RowMeasure`
(its docs say what every field is): end-to-end ms per step, T_env (the busiest env worker's simulator
spans per chunk; the peer baseline: driver time blocked in ``AsyncVectorEnv.step``, median per chunk),
T_model (one batched forward for one stage), the pipeline model's bound
(:func:`~..measure.pipeline.pipeline_round`: ``max(C * T_env, K * T_model, T_env + T_model) / N`` with C
the chunks a worker steps per round, K in hybrid partition and 1 in process partition) and the pipeline
efficiency against it, CPU seconds per env-step, peak RSS per env process and GPU memory per env.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...backends import make_factory
from ...core.checks import MachineLimits, check_local_layout, check_positive_int
from ...core.profile import PARTITION_MODES, RolloutProfile
from ...rollout.plan import PartitionPlan
from ..measure.calibration import calibrate
from ..measure.config import RunConfig, run_options
from ..measure.policy import WIDTHS, model_bytes
from ..measure.record import RowMeasure, with_speedups
from ..measure.runs import Row, run_engine_row, usage_fields
from . import report

#: Profile knobs that make up "slim" (their fast-path values come from ``RolloutProfile()``).
SLIM_FIELDS = (
    "remove_headless_viewports",
    "obs_modalities",
    "carb_tasking_threads",
    "tbb_max_threads",
    "physx_worker_threads",
    "intra_op_threads",
    "numba_cache",
    "gc_enable",
    "texture_streaming_budget",
)
#: The row with every optimisation on.
ALL_ROW = "hybrid_overlap"

#: Layout knobs a tuned profile (``behavior1k-fast tune``'s YAML) brings to the ``tuned`` row.
TUNED_FIELDS = ("pipeline_stages", "num_env_processes", "total_num_envs", "partition", "schedule",
                "async_min_batch", "async_max_wait_s")


def ablation_rows(
    processes: int, envs_per_process: int, pipeline_stages: int, chunk_size: int,
    tuned: RolloutProfile | None = None,
) -> list[Row]:
    """The rows, in table order, for P = ``processes`` x E = ``envs_per_process`` envs and K =
    ``pipeline_stages``; with ``tuned`` (a profile written by ``behavior1k-fast tune`` for the same number
    of envs) also a row with every optimisation on in that layout."""
    stock = RolloutProfile.stock(
        num_env_processes=processes, total_num_envs=processes * envs_per_process, chunk_size=chunk_size
    )
    fast = RolloutProfile()
    slim = stock.replace(**{name: getattr(fast, name) for name in SLIM_FIELDS})
    skip = slim.replace(skip_intermediate_obs=True)
    rows = [
        Row("stock", "stock", stock),
        Row("slim", "+ slim", slim, prev="stock"),
        Row("skip_obs", "+ skip intermediate obs", skip, prev="slim"),
    ]
    for partition in PARTITION_MODES:
        piped = skip.replace(pipeline_stages=pipeline_stages, partition=partition)
        tag = f"+ pipeline K={pipeline_stages} {partition}"
        rows.append(Row(f"{partition}_serial", f"{tag}, no overlap", piped, prev="skip_obs"))
        rows.append(Row(f"{partition}_overlap", f"{tag}, overlap", piped, overlap=True, prev="skip_obs"))
        rows.append(Row(f"{partition}_async", f"{tag}, async", piped.replace(schedule="async"), overlap=True,
                        prev="skip_obs"))
    if tuned is not None:
        layout = skip.replace(**{name: getattr(tuned, name) for name in TUNED_FIELDS})
        label = (f"tuned: P={layout.num_env_processes} x E={layout.envs_per_process}, K={layout.pipeline_stages} "
                 f"{layout.partition}, {layout.schedule}")
        rows.append(Row("tuned", label, layout, overlap=True, prev="skip_obs"))
    return rows


@dataclass(frozen=True)
class BenchConfig(RunConfig):
    """One ``bench`` run: the shared :class:`~..measure.config.RunConfig` plus the bench's layout and rows
    (``from_args`` fills the defaults)."""

    out_dir: str = "benchmarks/results"
    processes: int = 2
    envs_per_process: int = 2
    pipeline_stages: int = 2
    scaling: tuple[int, ...] = ()
    baseline: bool = True
    trace: bool = False
    #: A profile from ``behavior1k-fast tune`` (its layout becomes the ``tuned`` row), or ``None``.
    tuned: RolloutProfile | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for partition in PARTITION_MODES:  # every pipeline row's layout must be a valid plan
            PartitionPlan(self.processes, self.envs_per_process, self.pipeline_stages, partition)
        for p in self.scaling:
            check_positive_int("scaling process count", p)
        self._check_machine()
        if self.tuned is not None:
            total = self.processes * self.envs_per_process
            if self.tuned.total_num_envs != total or self.tuned.chunk_size != self.chunk_size:
                raise ValueError(
                    f"--tuned layout has total_num_envs={self.tuned.total_num_envs}, num_action_chunks="
                    f"{self.tuned.chunk_size}; the bench runs {total} envs, chunk_size={self.chunk_size} (every row "
                    f"must have the same envs and chunks: tune with --envs {total})"
                )

    def _check_machine(self) -> None:
        """Every run fits this machine (``core.checks.MachineLimits``): the engine's workers, envs and chunks
        (with the process executor: Ray places them on a cluster), the peer baseline's processes (one per
        env) and the policy."""
        limits = MachineLimits.here()
        e, n = self.envs_per_process, self.chunk_size
        for p in (self.processes, *self.scaling) if self.executor == "process" else ():
            check_local_layout(p, p * e, n)
        if self.baseline:
            limits.check_processes("processes x envs_per_process (the AsyncVectorEnv baseline starts one process "
                                   "per env)", self.processes * e)
        width, depth = self.model_width or WIDTHS[0], self.model_depth or 1
        batch = max(1, self.processes * e // self.pipeline_stages)
        limits.check_memory(f"the policy with model_width={width}, model_depth={depth}, chunk_size={n} at a "
                            f"stage batch of {batch}", model_bytes(width, depth, n, batch))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "BenchConfig":
        cores = os.cpu_count() or 1
        stages = args.pipeline_stages
        default_p = max(stages, min(cores, 8) // stages * stages)
        return cls(
            **run_options(args),
            processes=args.processes if args.processes is not None else (stages if args.quick else default_p),
            envs_per_process=args.envs_per_process if args.envs_per_process is not None else stages,
            pipeline_stages=stages,
            scaling=tuple(args.scaling or ()),
            baseline=not args.no_baseline,
            executor=args.executor,
            trace=args.trace,
            tuned=RolloutProfile.from_yaml(args.tuned) if args.tuned is not None else None,
        )


# --- the whole benchmark -------------------------------------------------------------------------


def _baseline_row(factory: Any, policy: Callable, config: BenchConfig, total_envs: int) -> RowMeasure:
    from ..measure.resources import ResourceMonitor
    from .baseline import run_async_vector_env

    profile = RolloutProfile.stock(chunk_size=config.chunk_size)
    raw = run_async_vector_env(factory, profile, policy, total_envs, config.rounds, config.chunk_size,
                               seed=config.seed, monitor=ResourceMonitor(), warmup=config.warmup)
    return RowMeasure(
        name="async_vector_env", label="gymnasium AsyncVectorEnv (peer)", processes=total_envs, envs_per_process=1,
        pipeline_stages=1, chunks_per_round=1, chunk_size=config.chunk_size, rounds=config.rounds,
        own_actions=total_envs * raw["steps"], wall_s=raw["wall_s"], model_s=float(np.sum(raw["model_s"])),
        t_model_ms=float(np.median(raw["model_s"])) * 1e3, t_env_ms=float(np.median(raw["env_s"])) * 1e3,
        t_env_source="driver time blocked in AsyncVectorEnv.step per chunk", partition="one env per process",
        profile=profile.to_dict(), **usage_fields(raw["usage"], raw["worker_pids"], total_envs),
    )


def plan_runs(config: BenchConfig) -> tuple[Any, list[Row], list[tuple[int, Row]]]:
    """The backend factory, the ablation rows and the scaling sweep ``(P, row)`` a run will measure."""
    factory = make_factory(config.backend, **config.backend_options)
    rows = ablation_rows(config.processes, config.envs_per_process, config.pipeline_stages, config.chunk_size,
                         config.tuned)
    all_row = next(r for r in rows if r.name == ALL_ROW)
    sweep = [
        (p, replace(all_row, profile=all_row.profile.replace(num_env_processes=p,
                                                             total_num_envs=p * config.envs_per_process)))
        for p in config.scaling
    ]
    return factory, rows, sweep


def run_bench(config: BenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the ablation (+ peer baseline, + scaling sweep); print, write JSON and PNG; return the result.

    The JSON is rewritten after every run with ``"complete": false`` so an interrupted run keeps what it
    measured.
    """
    from tqdm import tqdm

    factory, rows, sweep = plan_runs(config)
    all_row = next(r for r in rows if r.name == ALL_ROW)
    machine = report.describe_machine(config.device)
    tag = config.tag or report.machine_tag(machine)
    out_dir = Path(config.out_dir)
    json_path = out_dir / f"bench_{tag}.json"
    result: dict[str, Any] = {
        "complete": False,
        "machine": machine,
        "config": dict(config.__dict__) | {"tag": tag, "all_row": ALL_ROW,
                                           "tuned": config.tuned.to_dict() if config.tuned else None},
        "calibration": None,
        "rows": [],
        "baseline": None,
        "scaling": [],
        "goals": [],
    }
    bar = tqdm(total=1 + len(rows) + int(config.baseline) + len(sweep), desc="calibrate", unit="run",
               disable=not progress)
    policy, calibration = calibrate(factory, all_row.profile, config, max_processes=config.processes)
    result["calibration"] = calibration.to_dict()
    bar.write(report.format_model_cost(result["calibration"]))
    bar.update()
    measured: list[RowMeasure] = []
    for row in rows:
        bar.set_description(row.name)
        trace = str(out_dir / f"bench_{tag}.trace.json") if config.trace and row.name == ALL_ROW else None
        measured.append(run_engine_row(factory, row, policy, config, trace_path=trace))
        result["rows"] = [m.to_dict() for m in measured]
        report.write_json(result, json_path)
        bar.update()
    measured = with_speedups(measured)
    result["rows"] = [m.to_dict() for m in measured]
    baseline = None
    if config.baseline:
        bar.set_description("async_vector_env")
        baseline = _baseline_row(factory, policy, config, all_row.profile.total_num_envs)
        baseline = baseline.replace(speedup_vs_stock=measured[0].ms_per_step / baseline.ms_per_step)
        result["baseline"] = baseline.to_dict()
        report.write_json(result, json_path)
        bar.update()
    for p, row in sweep:
        bar.set_description(f"scaling P={p}")
        piped = run_engine_row(factory, row, policy, config)
        bar.update()
        result["scaling"].append(piped.replace(label=f"{row.label}, E={config.envs_per_process}").to_dict())
        report.write_json(result, json_path)
    bar.close()

    by_name = {m.name: m for m in measured}
    barrier = min((by_name[f"{p}_overlap"] for p in PARTITION_MODES), key=lambda m: m.ms_per_step)
    asynchronous = min((by_name[f"{p}_async"] for p in PARTITION_MODES), key=lambda m: m.ms_per_step)
    best = min([barrier, asynchronous, *([by_name["tuned"]] if "tuned" in by_name else [])],
               key=lambda m: m.ms_per_step)
    result["best_row"] = best.name
    result["goals"] = report.check_goals({
        "speedup_stock_to_all": best.speedup_vs_stock,
        "speedup_skip_obs_to_all": by_name["skip_obs"].ms_per_step / best.ms_per_step,
        "pipeline_efficiency": best.pipeline_efficiency,
        "speedup_async_over_barrier": barrier.ms_per_step / asynchronous.ms_per_step,
        "speedup_over_async_vector_env": baseline.ms_per_step / best.ms_per_step if baseline else None,
    })
    result["complete"] = True
    print(report.format_table(result["rows"] + ([result["baseline"]] if baseline else [])))
    if result["scaling"]:
        print(report.format_scaling(result["scaling"]))
    print(report.format_goals(result["goals"]))
    report.write_json(result, json_path)
    png_path = report.write_plot(result, out_dir / f"bench_{tag}.png")
    print(f"wrote {json_path} and {png_path}")
    return result
