"""One measured run of a layout through the rollout engine: :func:`run_engine_row` -> :class:`~.record.RowMeasure`.

The profiler is on during the run (workers ship their stage spans with every reply); T_env is the busiest
env worker's simulator span time per chunk of the timed rounds, T_model the engine's policy seconds per
forward, and :class:`~.resources.ResourceMonitor` counts CPU, RSS and GPU memory over the timed rounds; a
one-stage ``lookahead`` run's rounds are broken down from the same spans (:mod:`.critical_path`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...core.profile import RolloutProfile
from ...core.tracing import ACTION_APPLY, OBS_READ, PHYSICS, RENDER, REWARD, TERMINATION
from .config import RunConfig
from .record import RowMeasure

#: Profiler stages that are the simulator's own work inside an env worker.
ENV_STAGES = (ACTION_APPLY, PHYSICS, RENDER, OBS_READ, REWARD, TERMINATION)


@dataclass(frozen=True)
class Row:
    """What one run measures: a profile and whether the policy forward overlaps env stepping."""

    name: str
    label: str
    profile: RolloutProfile
    overlap: bool = False
    #: Row this one is compared with in ``speedup_vs_prev``.
    prev: str | None = None


def _busiest_worker_env_ms(spans: list, pids: Sequence[int]) -> float:
    """The largest total of simulator-stage span time (ms) over the worker processes ``pids``."""
    totals = dict.fromkeys(pids, 0.0)
    for stage, _, duration, pid, *_ in spans:
        if stage in ENV_STAGES and pid in totals:
            totals[pid] += duration / 1e6
    return max(totals.values())


def usage_fields(usage: Any, pids: Sequence[int], total_envs: int) -> dict[str, Any]:
    """The :class:`~.record.RowMeasure` fields of a :class:`~.resources.ResourceUsage` over the worker ``pids``."""
    rss = [usage.worker_peak_rss_mib[p] for p in pids if p in usage.worker_peak_rss_mib]
    gpu = [usage.gpu_mib_by_pid[p] for p in pids if p in usage.gpu_mib_by_pid]
    return {
        "cpu_seconds": usage.cpu_seconds,
        "peak_rss_mib_per_env_process": sum(rss) / len(rss) if rss else usage.driver_peak_rss_mib,
        "driver_peak_rss_mib": usage.driver_peak_rss_mib,
        "gpu_mib_per_env": sum(gpu) / total_envs if gpu else None,
        "gpu_mib_per_process": sum(gpu) / len(gpu) if gpu else None,
        "policy_gpu_mib": usage.gpu_mib_by_pid.get(os.getpid()),
        "worker_pids": tuple(pids),
    }


class RowRun:
    """One row's engine, measured in steps: :meth:`warm_up`, then :meth:`timed`, then :meth:`close`.

    :func:`run_engine_row` takes the steps one after the other; engines that run side by side (``bench
    --shards``: one per policy GPU) take each step together, so their timed rounds overlap. The profiler is
    on from construction to :meth:`close` (which restores it); ``config.seed`` is the engine's seed."""

    def __init__(self, factory: Any, row: Row, config: RunConfig):
        from ...core.tracing import get_profiler
        from ...rollout import RolloutEngine

        self.row, self.config = row, config
        self.profiler = get_profiler()
        self._was_enabled = self.profiler.enabled
        self.profiler.enabled = True
        self.profiler.clear()
        try:
            self.engine = RolloutEngine(factory, row.profile, executor=config.executor, seed=config.seed)
        except BaseException:
            self._restore()
            raise

    def _restore(self) -> None:
        self.profiler.enabled = self._was_enabled
        self.profiler.clear()

    def warm_up(self, policy: Callable) -> None:
        """The ``config.warmup`` untimed rounds."""
        if self.config.warmup:
            self.engine.rollout(policy, self.config.warmup, overlap=self.row.overlap)

    def timed(self, policy: Callable) -> tuple[Any, RowMeasure]:
        """The ``config.rounds`` timed rounds: the engine's stats and the row's measure of them."""
        from ...rollout.plan import PartitionPlan
        from .resources import ResourceMonitor

        from .critical_path import lookahead_rounds, summarize

        config, profile = self.config, self.row.profile
        monitor = ResourceMonitor()
        self.profiler.clear()
        monitor.start()
        stats = self.engine.rollout(policy, config.rounds, reset=config.warmup == 0, overlap=self.row.overlap)
        usage = monitor.stop()
        pids = self.engine.worker_pids
        spans = self.profiler.spans
        stages_sharing_physics = PartitionPlan.from_profile(profile).stages_sharing_physics
        worker_chunks = config.rounds * stages_sharing_physics
        forwards = config.rounds * profile.pipeline_stages
        return stats, RowMeasure(
            name=self.row.name, label=self.row.label, processes=profile.num_env_processes,
            envs_per_process=profile.envs_per_process, pipeline_stages=profile.pipeline_stages,
            stages_sharing_physics=stages_sharing_physics, chunk_size=profile.chunk_size, rounds=config.rounds,
            own_actions=int(stats.own_actions.sum()), wall_s=stats.wall_seconds, model_s=stats.model_seconds,
            t_model_ms=stats.model_seconds * 1e3 / forwards,
            t_env_ms=_busiest_worker_env_ms(spans, pids) / worker_chunks if pids else None,
            t_env_source="busiest env worker's stage spans",
            t_env_worker_ms=float(stats.env_wall_seconds_per_worker.max()) * 1e3 / worker_chunks,
            partition=profile.partition, overlap=self.row.overlap, prev=self.row.prev, profile=profile.to_dict(),
            lookahead_steps=stats.lookahead_steps or 0, **usage_fields(usage, pids, profile.total_num_envs),
            critical_path=(summarize(lookahead_rounds(spans))
                           if profile.schedule == "lookahead" and profile.pipeline_stages == 1 else None),
        )

    def close(self, trace_path: str | None = None) -> None:
        """Close the engine; with ``trace_path`` write the timed rounds' spans as a Chrome trace first."""
        try:
            self.engine.close()
            if trace_path is not None:
                self.profiler.export_chrome_trace(trace_path)
        finally:
            self._restore()


def run_engine_row(factory: Any, row: Row, policy: Callable, config: RunConfig,
                   trace_path: str | None = None) -> RowMeasure:
    """Run ``row`` through :class:`~behavior1k_fast.rollout.RolloutEngine` and measure it (module docs).

    ``rollout(overlap=row.overlap)``: ``config.warmup`` untimed rounds, then ``config.rounds`` timed ones;
    with ``trace_path`` the timed rounds' spans are also written as a Chrome trace.
    """
    run = RowRun(factory, row, config)
    try:
        run.warm_up(policy)
        _, measure = run.timed(policy)
    except BaseException:
        run.close()
        raise
    run.close(trace_path)
    return measure


def backend_spaces(profile: RolloutProfile, factory: Any, seed: int) -> tuple[list, Any, Any]:
    """Reset observations, observation space and action space of one worker's backend of ``profile``."""
    backend = factory(profile.envs_per_process, seed, profile)
    try:
        obs, _ = backend.reset()
        return obs, backend.observation_space, backend.action_space
    finally:
        backend.close()
