"""What every schedule is built on: the engine's public surface (:class:`EngineSurface`) and the
:class:`Schedule` base class.

A schedule decides when which slice's chunk is computed and sent; the engine does the rest (validation,
supervision, accounting, attaching each chunk's inputs to its result, the engine's state). A schedule uses
only :class:`EngineSurface` (no engine private: ``tests/unit/test_private_access.py``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping, Protocol, Sequence

import numpy as np

from ..chunk import ChunkLead, ChunkResult
from ..plan import PartitionPlan, StageSlice
from ..policy import Policy


class EngineSurface(Protocol):
    """The calls of :class:`~behavior1k_fast.rollout.engine.RolloutEngine` a schedule may use (see their
    docs there)."""

    plan: PartitionPlan
    profile: Any
    chunk_size: int
    action_dim: int
    auto_reset: bool
    observation_space: Any

    def forward(self, policy: Policy, obs: Mapping[str, np.ndarray], argname: str = ...) -> tuple[
        np.ndarray, dict[str, np.ndarray]]: ...

    def send(self, pieces: Sequence[StageSlice], actions: np.ndarray, policy_obs: Mapping[str, np.ndarray],
             extras: Mapping[str, np.ndarray] | None = None, lead_steps: int | None = None) -> None: ...

    def ready(self, workers: Sequence[int], timeout_s: float | None = None) -> list[int]: ...

    def receive_lead(self, pieces: Sequence[StageSlice], out: dict[str, np.ndarray] | None = None) -> tuple[
        ChunkLead, dict[str, np.ndarray]]: ...

    def receive(self, pieces: Sequence[StageSlice], out: dict[str, np.ndarray] | None = None) -> ChunkResult: ...

    def collect(self, stage: int) -> ChunkResult: ...

    def stage_obs(self, stage: int) -> dict[str, np.ndarray]: ...

    def set_stage_obs(self, stage: int, batch: Mapping[str, np.ndarray]) -> None: ...

    def new_batch(self, rows: int | None = None) -> dict[str, np.ndarray]: ...

    def take_respawned(self) -> dict[int, dict[str, np.ndarray]]: ...


class Schedule:
    """One rollout of ``num_rounds`` chunks per slice under one schedule. Built before the engine resets
    (so bad options raise before anything is sent); :meth:`run` drives it. ``on_chunk(stage, result)``
    receives every result as it comes back."""

    #: The ``schedule`` name (profile key, ``rollout(schedule=...)``).
    name: ClassVar[str]
    #: It has a serial baseline (``overlap=False``, nothing steps during a forward).
    serial_baseline: ClassVar[bool] = False

    def __init__(
        self,
        engine: EngineSurface,
        policy: Policy,
        num_rounds: int,
        on_chunk: Callable[[int, ChunkResult], None] | None,
        *,
        overlap: bool = True,
    ):
        self.engine, self.policy, self.num_rounds, self.on_chunk = engine, policy, num_rounds, on_chunk
        self.overlap = overlap
        if not overlap and not self.serial_baseline:
            raise ValueError(f"overlap=False is the barrier schedule's serial baseline; schedule={self.name!r} overlaps")

    def run(self) -> None:
        raise NotImplementedError

    def deliver(self, stage: int, result: ChunkResult) -> None:
        """Hand one received result to ``on_chunk``."""
        if self.on_chunk is not None:
            self.on_chunk(stage, result)
