"""The :class:`Schedule` base class: what every schedule is built on.

A schedule decides when which slice's chunk is computed and sent; the engine's driver face
(:class:`~behavior1k_fast.rollout.driver.EngineDriver`) does the rest (validation, supervision, accounting,
attaching each chunk's inputs to its result, the boundary observations, the engine's state). A schedule
module imports nothing of the rollout layer but :mod:`~behavior1k_fast.rollout.driver` and its sibling
schedules (``tests/unit/test_private_access.py``), and reads no private of the driver.
"""

from __future__ import annotations

from typing import Callable, ClassVar

from ..driver import ChunkResult, EngineDriver, Policy


class Schedule:
    """One rollout of ``num_rounds`` chunks per slice under one schedule, over an engine's ``driver``. Built
    before the engine resets (so bad options raise before anything is sent, the engine usable), with all
    its per-run state; :meth:`run` drives it, once. ``on_chunk(stage, result)`` receives every result as it
    comes back."""

    #: The ``schedule`` name (profile key, ``rollout(schedule=...)``).
    name: ClassVar[str]
    #: It has a serial baseline (``overlap=False``, nothing steps during a forward).
    serial_baseline: ClassVar[bool] = False

    def __init__(
        self,
        driver: EngineDriver,
        policy: Policy,
        num_rounds: int,
        on_chunk: Callable[[int, ChunkResult], None] | None,
        *,
        overlap: bool = True,
    ):
        self.driver, self.policy, self.num_rounds, self.on_chunk = driver, policy, num_rounds, on_chunk
        self.overlap = overlap
        if not overlap and not self.serial_baseline:
            raise ValueError(f"overlap=False is the barrier schedule's serial baseline; schedule={self.name!r} overlaps")

    def run(self) -> None:
        raise NotImplementedError

    def deliver(self, stage: int, result: ChunkResult) -> None:
        """Hand one received result to ``on_chunk``."""
        if self.on_chunk is not None:
            self.on_chunk(stage, result)
