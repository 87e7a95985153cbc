"""The ablation: rows of profiles applied cumulatively, each run through the rollout engine and measured.

Rows (same layout P x E, chunk N, same policy): ``stock`` -> ``+ slim`` -> ``+ skip intermediate obs`` ->
``+ pipeline`` with K stages, in hybrid and in process partition, each without and with overlap of the
policy forward and env stepping. ``hybrid_overlap`` is the all-optimisations row.

Measures per row (ms are wall ms; a step is one own action of every env, so ms/step = wall / (rounds * N)):

- ``ms_per_step``: end to end (policy + env + IPC).
- ``t_env_ms``: simulator time per chunk of the busiest env worker: its action-apply, physics, reward,
  termination, render and observation-read spans (profiler) over the timed rounds / its chunks.
  ``sim_ms_per_step``: that worker's simulator time per step. (Peer baseline: driver time blocked in
  ``AsyncVectorEnv.step``, median per chunk.) ``t_env_worker_ms``: the busiest env worker's wall time per
  chunk around its whole chunk stepping (``RolloutStats.env_seconds_per_worker``), which also counts
  what the spans leave out: the chunk loop's bookkeeping, boundary resets, the backend's unspanned code.
- ``t_model_ms``: one batched forward for one stage (mean over the engine's forwards; peer: median).
- ``bound_ms_per_step = max(C * T_env, K * T_model, T_env + T_model) / N`` with C the chunks a worker
  steps per round (K in hybrid partition, 1 in process partition): perfect overlap of the driver's K
  forwards, the busiest worker's stepping and each stage's own env -> forward cycle. That is
  ``(T_env + T_model) / N`` unpipelined (K = 1) and ``K * max(T_env, T_model) / N`` in hybrid partition;
  ``pipeline_efficiency = bound_ms_per_step / ms_per_step``.
- ``cpu_s_per_env_step`` (psutil, driver + workers), ``peak_rss_mib_per_env_process`` (mean over env
  workers of each one's peak RSS), ``gpu_mib_per_env`` (NVML, env workers' GPU memory / envs; None
  without a GPU).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...backends import make_factory
from ...core.checks import MachineLimits, check_int, check_local_layout, check_number, check_positive_int, check_seed
from ...core.profile import PARTITION_MODES, RolloutProfile
from ...core.tracing import ACTION_APPLY, OBS_READ, PHYSICS, REWARD, RENDER, TERMINATION
from ...rollout.plan import PartitionPlan
from . import report
from .policy import MAX_MODEL_MS, WIDTHS, check_width, model_bytes

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
#: Pixels of the reference cameras in ``--quick`` runs.
QUICK_RESOLUTION = 64


@dataclass(frozen=True)
class Row:
    """One ablation row: a profile and whether the policy forward overlaps env stepping."""

    name: str
    label: str
    profile: RolloutProfile
    overlap: bool = False
    #: Row this one is compared with in ``speedup_vs_prev``.
    prev: str | None = None


#: Layout knobs a tuned profile (``behavior1k-fast tune``'s YAML) brings to the ``tuned`` row.
TUNED_FIELDS = ("pipeline_stages", "num_env_processes", "total_num_envs", "partition", "schedule",
                "async_min_batch", "async_max_wait_s")


def ablation_rows(
    processes: int, envs_per_process: int, stages: int, chunk_size: int, tuned: RolloutProfile | None = None
) -> list[Row]:
    """The rows, in table order, for P = ``processes`` x E = ``envs_per_process`` envs and K = ``stages``;
    with ``tuned`` (a profile written by ``behavior1k-fast tune`` for the same number of envs) also a row
    with every optimisation on in that layout."""
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
        piped = skip.replace(pipeline_stages=stages, partition=partition)
        tag = f"+ pipeline K={stages} {partition}"
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
class BenchConfig:
    """Everything one ``bench`` run needs (``from_args`` fills the defaults)."""

    backend: str = "reference"
    backend_options: dict = field(default_factory=dict)
    quick: bool = False
    processes: int = 2
    envs_per_process: int = 2
    stages: int = 2
    chunk_size: int = 32
    rounds: int = 6
    warmup: int = 1
    model_ms: float | None = None
    model_width: int | None = None
    model_depth: int | None = None
    device: str = "cpu"
    scaling: tuple[int, ...] = ()
    baseline: bool = True
    executor: str = "process"
    out_dir: str = "benchmarks/results"
    tag: str | None = None
    trace: bool = False
    seed: int = 0
    #: A profile from ``behavior1k-fast tune`` (its layout becomes the ``tuned`` row), or ``None``.
    tuned: RolloutProfile | None = None

    def __post_init__(self) -> None:
        for name in ("chunk_size", "rounds"):
            check_positive_int(name, getattr(self, name))
        check_int("warmup", self.warmup, 0)
        for partition in PARTITION_MODES:  # every pipeline row's layout must be a valid plan
            PartitionPlan(self.processes, self.envs_per_process, self.stages, partition)
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {self.device!r}")
        if self.model_ms is not None:
            check_number("model_ms", self.model_ms, 0.0, MAX_MODEL_MS, low_open=True, unit="of ms")
        if self.model_width is not None:
            check_width("model_width", self.model_width)
        if self.model_depth is not None:
            check_positive_int("model_depth", self.model_depth)
            if self.model_width is None:
                raise ValueError(f"model_depth={self.model_depth} needs model_width too (a width alone has its "
                                 f"depth calibrated)")
            if self.model_ms is not None:
                raise ValueError(f"model_ms={self.model_ms} is a calibration target, and with model_width and "
                                 f"model_depth both given nothing is calibrated")
        for p in self.scaling:
            check_positive_int("scaling process count", p)
        check_seed("seed", self.seed)
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
        batch = max(1, self.processes * e // self.stages)
        limits.check_memory(f"the policy with model_width={width}, model_depth={depth}, chunk_size={n} at a "
                            f"stage batch of {batch}", model_bytes(width, depth, n, batch))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "BenchConfig":
        from ..backend_args import backend_options

        cores = os.cpu_count() or 1
        stages = args.stages
        options = backend_options(args)
        if args.behavior_like:
            options = behavior_like_options(args.backend) | options
        if args.quick and args.backend == "reference":
            options.setdefault("resolution", QUICK_RESOLUTION)
        default_p = max(stages, min(cores, 8) // stages * stages)
        device = args.device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        rounds = args.rounds if args.rounds is not None else (1 if args.quick else 6)
        return cls(
            backend=args.backend,
            backend_options=options,
            quick=args.quick,
            processes=args.processes if args.processes is not None else (stages if args.quick else default_p),
            envs_per_process=args.envs_per_process if args.envs_per_process is not None else stages,
            stages=stages,
            chunk_size=args.chunk_size,
            rounds=rounds,
            warmup=args.warmup,
            model_ms=args.model_ms,
            model_width=args.model_width,
            model_depth=args.model_depth,
            device=device,
            scaling=tuple(args.scaling or ()),
            baseline=not args.no_baseline,
            executor=args.executor,
            out_dir=args.out_dir,
            tag=args.tag,
            trace=args.trace,
            seed=args.seed,
            tuned=RolloutProfile.from_yaml(args.tuned) if args.tuned is not None else None,
        )


def behavior_like_options(backend: str) -> dict[str, Any]:
    """The ``ReferenceConfig`` fields that ``ReferenceConfig.behavior_like()`` turns on (BEHAVIOR's costs)."""
    if backend != "reference":
        raise ValueError(f"--behavior-like applies to the reference simulator, got --backend {backend}")
    from dataclasses import fields

    from ...backends.reference import ReferenceConfig

    preset, plain = ReferenceConfig.behavior_like(), ReferenceConfig()
    changed = (f.name for f in fields(preset))
    return {name: getattr(preset, name) for name in changed if getattr(preset, name) != getattr(plain, name)}


# --- measuring one row ---------------------------------------------------------------------------

#: Profiler stages that are the simulator's own work inside an env worker.
ENV_STAGES = (ACTION_APPLY, PHYSICS, RENDER, OBS_READ, REWARD, TERMINATION)


def busiest_worker_env_ms(spans: list, pids: list[int]) -> float:
    """The largest total of simulator-stage span time (ms) over the worker processes ``pids``."""
    totals = dict.fromkeys(pids, 0.0)
    for stage, _, duration, pid, *_ in spans:
        if stage in ENV_STAGES and pid in totals:
            totals[pid] += duration / 1e6
    return max(totals.values())


def run_engine_row(
    factory: Any, row: Row, policy: Callable, config: BenchConfig, trace_path: str | None = None
) -> dict[str, Any]:
    """Run one row through :class:`~behavior1k_fast.rollout.RolloutEngine`; its measures (module docs).

    ``rollout(overlap=row.overlap)``: warm-up rounds, then the timed rounds. The profiler is on (workers
    ship their stage spans with every reply); the spans of the timed rounds give T_env and, with
    ``trace_path``, a Chrome trace.
    """
    from ...core.tracing import get_profiler
    from ...rollout import RolloutEngine
    from .resources import ResourceMonitor

    profiler = get_profiler()
    was_enabled = profiler.enabled
    profiler.enabled = True
    profiler.clear()
    stages = row.profile.pipeline_stages
    try:
        engine = RolloutEngine(factory, row.profile, executor=config.executor, seed=config.seed)
        try:
            monitor = ResourceMonitor()
            if config.warmup:
                engine.rollout(policy, config.warmup, overlap=row.overlap)
            profiler.clear()
            monitor.start()
            stats = engine.rollout(policy, config.rounds, reset=config.warmup == 0, overlap=row.overlap)
            usage = monitor.stop()
            pids = engine.worker_pids
            spans = profiler.spans
        finally:
            engine.close()
        if trace_path is not None:
            profiler.export_chrome_trace(trace_path)
    finally:
        profiler.enabled = was_enabled
        profiler.clear()
    # A hybrid worker steps one slice per stage every round; a process-partition worker one chunk.
    chunks_per_round = stages if row.profile.partition == "hybrid" else 1
    worker_chunks = config.rounds * chunks_per_round
    t_env_ms = busiest_worker_env_ms(spans, pids) / worker_chunks if pids else None
    forwards = config.rounds * stages
    model = [stats.model_seconds / forwards] * forwards
    return _measures(row.name, row.label, stages, chunks_per_round, row.profile.total_num_envs, config,
                     stats.wall_seconds, model, t_env_ms, int(stats.own_actions.sum()), usage, pids) | {
        "prev": row.prev, "overlap": row.overlap, "partition": row.profile.partition,
        "profile": row.profile.to_dict(), "processes": row.profile.num_env_processes,
        "envs_per_process": row.profile.envs_per_process, "t_env_source": "busiest env worker's stage spans",
        "t_env_worker_ms": float(stats.env_seconds_per_worker.max()) * 1e3 / worker_chunks,
    }


def _measures(name: str, label: str, stages: int, chunks_per_round: int, total_envs: int, config: BenchConfig,
              wall: float, model: list[float], t_env_ms: float | None, taken: int, usage: Any,
              pids: list[int]) -> dict[str, Any]:
    """Row measures from wall seconds, model seconds per forward and T_env (ms per worker chunk).

    Per round (every env takes N own actions) the driver runs ``stages`` forwards, the busiest worker steps
    ``chunks_per_round`` chunks, and each stage waits for its own forward between its chunks; perfect
    overlap takes the longest of the three.
    """
    n = config.chunk_size
    steps = config.rounds * n
    rss = [usage.worker_peak_rss_mib[p] for p in pids if p in usage.worker_peak_rss_mib]
    gpu = [usage.gpu_mib_by_pid[p] for p in pids if p in usage.gpu_mib_by_pid]
    t_model_ms = float(np.median(model)) * 1e3
    out = {
        "name": name,
        "label": label,
        "stages": stages,
        "worker_chunks_per_round": chunks_per_round,
        "total_envs": total_envs,
        "chunk_size": n,
        "rounds": config.rounds,
        "steps": steps,
        "own_actions": taken,
        "wall_s": wall,
        "ms_per_step": wall * 1e3 / steps,
        "env_steps_per_s": taken / wall,
        "model_s": float(np.sum(model)),
        "t_model_ms": t_model_ms,
        "t_env_ms": t_env_ms,
        "sim_ms_per_step": None,
        "bound_ms_per_step": None,
        "serial_bound_ms_per_step": None,
        "pipeline_efficiency": None,
        "bound_env_steps_per_s": None,
        "cpu_s_per_env_step": usage.cpu_seconds / taken,
        "peak_rss_mib_per_env_process": float(np.mean(rss)) if rss else usage.driver_peak_rss_mib,
        "driver_peak_rss_mib": usage.driver_peak_rss_mib,
        "gpu_mib_per_env": sum(gpu) / total_envs if gpu else None,
        "policy_gpu_mib": usage.gpu_mib_by_pid.get(os.getpid()),
        "worker_pids": list(pids),
    }
    if t_env_ms is not None:
        env_round, model_round = chunks_per_round * t_env_ms, stages * t_model_ms
        out["sim_ms_per_step"] = env_round / n
        out["bound_ms_per_step"] = max(env_round, model_round, t_env_ms + t_model_ms) / n
        out["serial_bound_ms_per_step"] = stages * (t_env_ms + t_model_ms) / n
        out["pipeline_efficiency"] = out["bound_ms_per_step"] / out["ms_per_step"]
        out["bound_env_steps_per_s"] = total_envs * 1e3 / out["bound_ms_per_step"]
    return out


# --- calibration ---------------------------------------------------------------------------------


def backend_spaces(profile: RolloutProfile, factory: Any, seed: int) -> tuple[list, Any, Any]:
    """Reset observations, observation space and action space of one worker's backend of ``profile``."""
    backend = factory(profile.envs_per_process, seed, profile)
    try:
        obs, _ = backend.reset()
        return obs, backend.observation_space, backend.action_space
    finally:
        backend.close()


def calibrate(factory: Any, rows: list[Row], config: BenchConfig) -> tuple[Any, dict[str, Any]]:
    """Build the policy, sized so one forward at the stage batch takes ``config.model_ms`` or the optimised
    env ms per chunk; measure its T_model(batch) for batch 1..all envs.

    The env ms per chunk is T_env of a short run of the all-optimisations row through the engine (the
    narrowest one-block policy, one warm-up and two timed rounds), so it is what the pipeline sees with every
    worker busy. ``model_width`` / ``model_depth`` fix the size instead (a width alone: its depth is
    calibrated). The spaces come from one backend built here, or in a spawned process with the profile
    applied where the backend needs that.
    """
    import torch

    from ...backends import isolate_sides
    from ...rollout.bootstrap import call_with_profile
    from .policy import WIDTHS, ChunkPolicy, batch_of, calibrate_model_size, model_cost_curve, time_forward_ms

    all_row = next(r for r in rows if r.name == ALL_ROW)
    profile = all_row.profile
    if config.device == "cpu":
        # One intra-op thread per core the env workers leave free: oversubscribed OpenMP barriers stall.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - config.processes))
    obs, obs_space, act_space = call_with_profile(isolate_sides(config.backend), backend_spaces, profile, factory,
                                                  config.seed)
    stage_batch = profile.total_num_envs // profile.pipeline_stages
    batch = batch_of(obs, stage_batch)

    def build(width: int, depth: int) -> ChunkPolicy:
        return ChunkPolicy(obs_space, act_space, chunk_size=config.chunk_size, width=width, depth=depth,
                           device=config.device, seed=config.seed)

    env_ms = target = None
    width, depth = config.model_width, config.model_depth
    if depth is None:
        if config.model_ms is None:
            narrowest = build(WIDTHS[0], 1)
            probe = run_engine_row(factory, all_row, narrowest, replace(config, rounds=2, warmup=1))
            env_ms = probe["t_env_ms"]
            if env_ms is None:
                raise ValueError(f"calibration reads env worker spans, which executor={config.executor!r} does "
                                 f"not give: pass --model-ms, or --model-width and --model-depth")
        target = config.model_ms if config.model_ms is not None else env_ms
        width, depth = calibrate_model_size(build, batch, target, widths=WIDTHS if width is None else (width,))
    policy = build(width, depth)
    info = {
        "env_ms_per_stage_chunk": env_ms,
        "target_model_ms": target,
        "model_width": width,
        "model_depth": depth,
        "model_parameters": policy.num_parameters,
        "model_tokens_per_sample": policy.tokens,
        "model_dtype": str(policy.dtype).removeprefix("torch."),
        "forward_ms_at_stage_batch": time_forward_ms(policy, batch),
        "stage_batch": stage_batch,
        "policy_device": config.device,
        "policy_threads": torch.get_num_threads(),
        "t_model_by_batch": model_cost_curve(policy, obs, profile.total_num_envs),
    }
    return policy, info


# --- the whole benchmark -------------------------------------------------------------------------


def _baseline_row(factory: Any, policy: Callable, config: BenchConfig, total_envs: int) -> dict[str, Any]:
    from .baseline import run_async_vector_env
    from .resources import ResourceMonitor

    profile = RolloutProfile.stock(chunk_size=config.chunk_size)
    raw = run_async_vector_env(factory, profile, policy, total_envs, config.rounds, config.chunk_size,
                               seed=config.seed, monitor=ResourceMonitor(), warmup=config.warmup)
    row = _measures("async_vector_env", "gymnasium AsyncVectorEnv (peer)", 1, 1, total_envs, config,
                    raw["wall_s"], raw["model_s"], float(np.median(raw["env_s"])) * 1e3, total_envs * raw["steps"],
                    raw["usage"], raw["worker_pids"])
    return row | {"prev": None, "overlap": False, "partition": "one env per process", "profile": profile.to_dict(),
                  "processes": total_envs, "envs_per_process": 1,
                  "t_env_source": "driver time blocked in AsyncVectorEnv.step per chunk"}


def plan_runs(config: BenchConfig) -> tuple[Any, list[Row], list[tuple[int, Row]]]:
    """The backend factory, the ablation rows and the scaling sweep ``(P, row)`` a run will measure."""
    factory = make_factory(config.backend, **config.backend_options)
    rows = ablation_rows(config.processes, config.envs_per_process, config.stages, config.chunk_size, config.tuned)
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
    policy, result["calibration"] = calibrate(factory, rows, config)
    bar.write(report.format_model_cost(result["calibration"]))
    bar.update()
    for row in rows:
        bar.set_description(row.name)
        trace = str(out_dir / f"bench_{tag}.trace.json") if config.trace and row.name == ALL_ROW else None
        result["rows"].append(run_engine_row(factory, row, policy, config, trace_path=trace))
        report.write_json(result, json_path)
        bar.update()
    measured = result["rows"]
    report.add_speedups(measured)
    if config.baseline:
        bar.set_description("async_vector_env")
        baseline = _baseline_row(factory, policy, config, all_row.profile.total_num_envs)
        baseline["speedup_vs_stock"] = measured[0]["ms_per_step"] / baseline["ms_per_step"]
        baseline["speedup_vs_prev"] = None
        result["baseline"] = baseline
        report.write_json(result, json_path)
        bar.update()
    for p, row in sweep:
        bar.set_description(f"scaling P={p}")
        piped = run_engine_row(factory, row, policy, config)
        bar.update()
        result["scaling"].append(piped | {"label": f"{row.label}, E={config.envs_per_process}"})
        report.write_json(result, json_path)
    bar.close()

    baseline = result["baseline"]
    by_name = {r["name"]: r for r in measured}
    barrier = min((by_name[f"{p}_overlap"] for p in PARTITION_MODES), key=lambda r: r["ms_per_step"])
    asynchronous = min((by_name[f"{p}_async"] for p in PARTITION_MODES), key=lambda r: r["ms_per_step"])
    best = min([barrier, asynchronous, *([by_name["tuned"]] if "tuned" in by_name else [])],
               key=lambda r: r["ms_per_step"])
    result["best_row"] = best["name"]
    result["goals"] = report.check_goals({
        "speedup_stock_to_all": best["speedup_vs_stock"],
        "speedup_skip_obs_to_all": by_name["skip_obs"]["ms_per_step"] / best["ms_per_step"],
        "pipeline_efficiency": best["pipeline_efficiency"],
        "speedup_async_over_barrier": barrier["ms_per_step"] / asynchronous["ms_per_step"],
        "speedup_over_async_vector_env": baseline["ms_per_step"] / best["ms_per_step"] if baseline else None,
    })
    result["complete"] = True
    print(report.format_table(measured + ([baseline] if baseline else [])))
    if result["scaling"]:
        print(report.format_scaling(result["scaling"]))
    print(report.format_goals(result["goals"]))
    report.write_json(result, json_path)
    png_path = report.write_plot(result, out_dir / f"bench_{tag}.png")
    print(f"wrote {json_path} and {png_path}")
    return result
