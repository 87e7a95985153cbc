""":class:`RowMeasure`: what one measured run of a layout gives, the one record ``bench`` and ``tune`` use.

Times are wall ms unless named otherwise; a step is one own action of every env, so
``ms_per_step = wall / (rounds * N)``. Measured fields are stored; everything derived from them (ms per
step, env-steps per second, the pipeline model's bound and the efficiency against it) is a property, so a
record cannot disagree with itself. :meth:`RowMeasure.to_dict` is the JSON form (stored and derived).

A row run several times (``--repeats``) is its median run (:func:`median_run`: the run whose ms per step is
the median, the lower middle one for an even count), carrying every run's ms per step for the spread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from .pipeline import RoundModel, pipeline_round


@dataclass(frozen=True)
class RowMeasure:
    """One run of one layout: what was measured, and what follows from it.

    Args:
        name: row key (``stock``, ``hybrid_overlap``, ``P2xE2 K2 hybrid async``...).
        label: the row as the table prints it.
        processes: env processes P (a peer: its worker processes).
        envs_per_process: envs per process E.
        pipeline_stages: stages K (forwards per round).
        stages_sharing_physics: stages sharing one worker's physics, the chunks it steps per round (K in
            hybrid partition, 1 in process partition and for a peer).
        chunk_size: actions per chunk N.
        rounds: timed rounds (one chunk per env each).
        own_actions: actions the envs took over the timed rounds.
        wall_s: wall seconds of the timed rounds.
        model_s: seconds of the policy's forwards over the timed rounds.
        t_model_ms: one forward for one stage.
        t_env_ms: simulator time per chunk of the busiest env worker (``t_env_source`` says how it was
            measured), or ``None`` where nothing measured it.
        t_env_source: how ``t_env_ms`` was measured.
        cpu_seconds: user + system CPU seconds of the driver and every worker over the timed rounds.
        peak_rss_mib_per_env_process: mean over env workers of each one's peak RSS (the driver's without
            workers).
        driver_peak_rss_mib: the driver's peak RSS.
        gpu_mib_per_env: env workers' GPU memory (NVML) over the envs, or ``None`` without a GPU.
        gpu_mib_per_process: mean GPU memory (NVML) of one env worker, or ``None`` without a GPU.
        policy_gpu_mib: the driver's GPU memory, or ``None``.
        worker_pids: the env worker processes.
        t_env_worker_ms: the busiest env worker's wall time per chunk around its whole chunk stepping
            (also what the simulator spans leave out: the chunk loop's bookkeeping, boundary resets), or
            ``None``.
        partition: ``hybrid``, ``process``, or what a peer runs instead.
        overlap: whether the policy forward overlaps env stepping.
        prev: the row ``speedup_vs_prev`` compares with, or ``None``.
        profile: the run's profile as a dict (``RolloutProfile.to_dict``), or ``None``.
        speedup_vs_stock: stock row's ms/step over this one's (filled by ``bench``).
        speedup_vs_prev: ``prev`` row's ms/step over this one's.
        repeat_ms_per_step: ms per step of every run of this row, in run order (one run: just this one).
        lookahead_steps: the lookahead schedule's lead d of most chunks (``RolloutStats.lookahead_steps``; 0
            elsewhere): the next chunk's forward starts d steps before the current chunk ends.
        critical_path: a one-stage ``lookahead`` run's rounds broken down (:func:`.critical_path.summarize` of
            :func:`.critical_path.lookahead_rounds`), ``None`` for other runs.
    """

    name: str
    label: str
    processes: int
    envs_per_process: int
    pipeline_stages: int
    stages_sharing_physics: int
    chunk_size: int
    rounds: int
    own_actions: int
    wall_s: float
    model_s: float
    t_model_ms: float
    t_env_ms: float | None
    t_env_source: str
    cpu_seconds: float
    peak_rss_mib_per_env_process: float
    driver_peak_rss_mib: float
    gpu_mib_per_env: float | None = None
    gpu_mib_per_process: float | None = None
    policy_gpu_mib: float | None = None
    worker_pids: tuple[int, ...] = ()
    t_env_worker_ms: float | None = None
    partition: str = "hybrid"
    overlap: bool = False
    prev: str | None = None
    profile: dict | None = None
    speedup_vs_stock: float | None = None
    speedup_vs_prev: float | None = None
    repeat_ms_per_step: tuple[float, ...] = ()
    lookahead_steps: int = 0
    critical_path: dict | None = None

    @property
    def total_envs(self) -> int:
        return self.processes * self.envs_per_process

    @property
    def steps(self) -> int:
        """Steps of the timed rounds: rounds x N."""
        return self.rounds * self.chunk_size

    @property
    def ms_per_step(self) -> float:
        return self.wall_s * 1e3 / self.steps

    @property
    def ms_per_step_min(self) -> float:
        """Fastest run's ms per step."""
        return min(self.repeat_ms_per_step or (self.ms_per_step,))

    @property
    def ms_per_step_max(self) -> float:
        """Slowest run's ms per step."""
        return max(self.repeat_ms_per_step or (self.ms_per_step,))

    @property
    def env_steps_per_s(self) -> float:
        return self.own_actions / self.wall_s

    @property
    def cpu_s_per_env_step(self) -> float:
        return self.cpu_seconds / self.own_actions

    @property
    def round_model(self) -> RoundModel | None:
        """The pipeline model's round from this run's T_env and T_model (``None`` without T_env)."""
        if self.t_env_ms is None:
            return None
        lead_ms = self.lookahead_steps * self.t_env_ms / self.chunk_size
        return pipeline_round(self.t_env_ms, self.t_model_ms, self.pipeline_stages, self.stages_sharing_physics,
                              lead_ms=lead_ms)

    @property
    def sim_ms_per_step(self) -> float | None:
        """The busiest worker's simulator time per step."""
        return None if self.t_env_ms is None else self.stages_sharing_physics * self.t_env_ms / self.chunk_size

    @property
    def bound_ms_per_step(self) -> float | None:
        """Perfect overlap of this run's measured costs (the model's round / N)."""
        model = self.round_model
        return None if model is None else model.ms_per_step(self.chunk_size)

    @property
    def serial_bound_ms_per_step(self) -> float | None:
        """The same costs with nothing overlapped: K x (T_env + T_model) / N."""
        if self.t_env_ms is None:
            return None
        return self.pipeline_stages * (self.t_env_ms + self.t_model_ms) / self.chunk_size

    @property
    def pipeline_efficiency(self) -> float | None:
        """Bound over measured ms per step (1.0: the run is as fast as its costs allow)."""
        bound = self.bound_ms_per_step
        return None if bound is None else bound / self.ms_per_step

    @property
    def bound_env_steps_per_s(self) -> float | None:
        bound = self.bound_ms_per_step
        return None if bound is None else self.total_envs * 1e3 / bound

    def replace(self, **changes: Any) -> "RowMeasure":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Stored and derived fields, for the JSON."""
        data = dataclasses.asdict(self)
        data["worker_pids"] = list(self.worker_pids)
        data["repeat_ms_per_step"] = list(self.repeat_ms_per_step or (self.ms_per_step,))
        for name in DERIVED:
            data[name] = getattr(self, name)
        return data


#: The properties :meth:`RowMeasure.to_dict` writes next to the stored fields.
DERIVED = ("total_envs", "steps", "ms_per_step", "ms_per_step_min", "ms_per_step_max", "env_steps_per_s", "cpu_s_per_env_step", "sim_ms_per_step",
           "bound_ms_per_step", "serial_bound_ms_per_step", "pipeline_efficiency", "bound_env_steps_per_s")


def median_run(runs: Sequence[RowMeasure]) -> RowMeasure:
    """The median run of one row's ``runs`` by ms per step (the lower middle one for an even count), with
    ``repeat_ms_per_step`` of them all."""
    if not runs:
        raise ValueError("median_run needs at least one run")
    ordered = sorted(runs, key=lambda m: m.ms_per_step)
    return ordered[(len(ordered) - 1) // 2].replace(repeat_ms_per_step=tuple(m.ms_per_step for m in runs))


def with_speedups(rows: list[RowMeasure]) -> list[RowMeasure]:
    """``rows`` with ``speedup_vs_stock`` (the first row is stock) and ``speedup_vs_prev`` (by each row's
    ``prev`` name) filled from ms per step."""
    by_name = {row.name: row for row in rows}
    stock = rows[0].ms_per_step
    out = []
    for row in rows:
        prev = by_name.get(row.prev) if row.prev else None
        out.append(row.replace(speedup_vs_stock=stock / row.ms_per_step,
                               speedup_vs_prev=prev.ms_per_step / row.ms_per_step if prev else None))
    return out
