"""Layouts: P env processes x E envs each, K pipeline stages, a partition and a schedule; the feasible space.

A layout is what differs between the runs ``tune`` compares (and the rows ``bench`` compares at one process
budget); everything else (profile knobs, policy, chunk size) is the same in all of them. Which envs form a
stage, and how many chunks a worker steps per round, is :class:`~behavior1k_fast.rollout.plan.PartitionPlan`'s
to say; a layout asks its plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ...core.profile import PARTITION_MODES, SCHEDULES, RolloutProfile


@dataclass(frozen=True, order=True)
class Layout:
    """P env processes x E envs each, K pipeline stages, a partition and a schedule."""

    processes: int
    envs_per_process: int
    pipeline_stages: int
    partition: str = "hybrid"
    schedule: str = "barrier"

    @classmethod
    def of(cls, profile: RolloutProfile) -> "Layout":
        """The layout of ``profile``."""
        return cls(profile.num_env_processes, profile.envs_per_process, profile.pipeline_stages, profile.partition,
                   profile.schedule)

    @property
    def total_envs(self) -> int:
        return self.processes * self.envs_per_process

    @property
    def name(self) -> str:
        return (f"P{self.processes}xE{self.envs_per_process} K{self.pipeline_stages} "
                f"{self.partition} {self.schedule}")

    @property
    def plan(self) -> Any:
        """The :class:`~behavior1k_fast.rollout.plan.PartitionPlan` (ValueError when the layout has none)."""
        from ...rollout.plan import PartitionPlan

        return PartitionPlan(self.processes, self.envs_per_process, self.pipeline_stages, self.partition)

    @property
    def stages_sharing_physics(self) -> int:
        """Stages sharing one worker's physics: the K of each worker's backend, and the chunks a worker steps
        per round (K in hybrid partition, 1 in process partition)."""
        return self.plan.stages_sharing_physics

    @property
    def cost_key(self) -> tuple[int, int, int]:
        """``(E, stages_sharing_physics, P)``: the measured env costs this layout is predicted from (workers of E
        envs in that many hybrid stages, P of them side by side; :class:`~.pipeline.Costs`)."""
        return self.envs_per_process, self.stages_sharing_physics, self.processes

    @property
    def processes_per_stage(self) -> int:
        """Env processes one stage's chunk waits for: all P in hybrid partition, P / K in process partition."""
        return len(self.plan.stage_slices(0))

    @property
    def stage_batch(self) -> int:
        """Envs per stage: the batch of one policy forward."""
        return self.total_envs // self.pipeline_stages

    def profile(self, base: RolloutProfile) -> RolloutProfile:
        """``base`` with this layout (the ``lookahead`` schedule with its lead derived from measured times,
        ``lookahead_steps="auto"``)."""
        lead = {"lookahead_steps": "auto"} if self.schedule == "lookahead" else {}
        return base.replace(num_env_processes=self.processes, total_num_envs=self.total_envs,
                            pipeline_stages=self.pipeline_stages, partition=self.partition, schedule=self.schedule,
                            **lead)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": self.processes, "envs_per_process": self.envs_per_process,
                "pipeline_stages": self.pipeline_stages, "partition": self.partition, "schedule": self.schedule,
                "total_envs": self.total_envs, "name": self.name}


def enumerate_layouts(total_envs: Iterable[int], max_processes: int, pipeline_stages: Sequence[int] | None = None,
                      max_stage_batch: int | None = None, base: RolloutProfile | None = None) -> list[Layout]:
    """Every distinct feasible layout for each total of envs, in a fixed order.

    P divides the total and is at most ``max_processes``; K is any of ``pipeline_stages`` (default: every K up to
    the total) for which :class:`~behavior1k_fast.rollout.plan.PartitionPlan` accepts the layout; the
    schedule is any of :data:`~behavior1k_fast.core.profile.SCHEDULES` that the engine has a driver for
    (:data:`~behavior1k_fast.rollout.schedules.SCHEDULE_CLASSES`) and ``base`` (default: ``RolloutProfile()``)
    accepts with the layout (``lookahead``: K = 1 or stages of whole processes); a stage batch (total / K) above
    ``max_stage_batch`` is left out. Layouts that run the same way are listed once: K = 1 in hybrid
    partition only (one stage: the partitions do not differ), and ``async`` only with more than one process
    (one process has no barrier to drop).
    """
    from ...rollout.schedules import SCHEDULE_CLASSES

    base = base or RolloutProfile()
    schedules = [s for s in SCHEDULES if s in SCHEDULE_CLASSES]
    out = []
    for n in total_envs:
        for p in range(1, min(n, max_processes) + 1):
            if n % p:
                continue
            for k in (pipeline_stages or range(1, n + 1)):
                if max_stage_batch is not None and n // k > max_stage_batch:
                    continue
                for partition in PARTITION_MODES:
                    if k == 1 and partition != "hybrid":
                        continue
                    try:
                        Layout(p, n // p, k, partition).plan
                    except ValueError:
                        continue
                    for schedule in schedules:
                        if schedule == "async" and p == 1:
                            continue
                        layout = Layout(p, n // p, k, partition, schedule)
                        try:
                            layout.profile(base)
                        except ValueError:
                            continue
                        out.append(layout)
    return out


def default_layout(total_envs: int, max_processes: int) -> Layout:
    """The layout without tuning: the profile's defaults (K = 1, barrier) over the most processes that fit
    ``max_processes`` and divide ``total_envs``."""
    p = max(d for d in range(1, min(total_envs, max_processes) + 1) if total_envs % d == 0)
    defaults = RolloutProfile()
    return Layout(p, total_envs // p, defaults.pipeline_stages, defaults.partition, defaults.schedule)
