"""Partition plan: P worker processes x E envs each x K pipeline stages.

Global env ids run process by process: env ``g`` lives in worker ``g // E`` at local index ``g % E``.

- ``hybrid`` (RLinf ``pipeline_stage_num``): every process holds K slices of E / K envs; stage k is slice k
  of every process. The K stages of one process share its physics: ``stages_sharing_physics`` = K.
- ``process``: stage k is the k-th block of P / K whole processes; nothing is shared between stages:
  ``stages_sharing_physics`` = 1 (per-env trajectories equal the unpipelined run).

Every worker's backend is built with the engine's profile, whose ``stages_sharing_physics`` is this count
(``pipeline_stages`` is K, the driver's stages, everywhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.checks import check_choice, check_int, check_positive_int
from ..core.profile import PARTITION_MODES, RolloutProfile


@dataclass(frozen=True)
class StageSlice:
    """The envs one worker steps for one stage: local indices in that worker, their global ids, and their
    rows in the stage's batch (its observations and actions)."""

    stage: int
    worker: int
    local_envs: tuple[int, ...]
    global_envs: tuple[int, ...]
    batch_rows: slice


@dataclass(frozen=True)
class PartitionPlan:
    """Which envs of which worker form each pipeline stage."""

    num_env_processes: int
    envs_per_process: int
    #: K, the number of pipeline stages.
    pipeline_stages: int
    partition: str = "hybrid"

    def __post_init__(self) -> None:
        p = check_positive_int("num_env_processes", self.num_env_processes)
        e = check_positive_int("envs_per_process", self.envs_per_process)
        k = check_positive_int("pipeline_stages", self.pipeline_stages)
        check_choice("partition", self.partition, PARTITION_MODES)
        if self.partition == "hybrid" and e % k:
            raise ValueError(
                f"hybrid partition needs pipeline_stages={k} to divide envs_per_process={e} "
                f"(total_num_envs={p * e} over num_env_processes={p}); each process holds one slice per stage"
            )
        if self.partition == "process" and p % k:
            raise ValueError(
                f"process partition needs pipeline_stages={k} to divide num_env_processes={p}; "
                f"each stage is a set of whole processes"
            )

    @classmethod
    def from_profile(cls, profile: RolloutProfile) -> "PartitionPlan":
        return cls(profile.num_env_processes, profile.envs_per_process, profile.pipeline_stages, profile.partition)

    @property
    def num_envs(self) -> int:
        return self.num_env_processes * self.envs_per_process

    @property
    def stage_size(self) -> int:
        """Envs per stage: the policy's batch size."""
        return self.num_envs // self.pipeline_stages

    @property
    def stages_sharing_physics(self) -> int:
        """Stages that share one process's physics (``RolloutProfile.stages_sharing_physics``): K in hybrid
        partition, 1 in process partition."""
        return self.pipeline_stages if self.partition == "hybrid" else 1

    def check_stage(self, stage: Any) -> None:
        """TypeError unless ``stage`` is an int, ValueError unless it is in ``[0, pipeline_stages)``."""
        check_int("stage", stage, 0, self.pipeline_stages - 1)

    def stage_slices(self, stage: int) -> tuple[StageSlice, ...]:
        """The per-worker slices of ``stage``, in global env order."""
        self.check_stage(stage)
        e = self.envs_per_process
        if self.partition == "hybrid":
            width = e // self.pipeline_stages
            workers = range(self.num_env_processes)
            local = tuple(range(stage * width, (stage + 1) * width))
        else:
            per_stage = self.num_env_processes // self.pipeline_stages
            workers = range(stage * per_stage, (stage + 1) * per_stage)
            local = tuple(range(e))
        n = len(local)
        return tuple(
            StageSlice(stage, w, local, tuple(w * e + i for i in local), slice(j * n, (j + 1) * n))
            for j, w in enumerate(workers)
        )

    def stage_envs(self, stage: int) -> np.ndarray:
        """Global env ids of ``stage`` in batch order."""
        return np.array([g for s in self.stage_slices(stage) for g in s.global_envs], dtype=np.int64)
