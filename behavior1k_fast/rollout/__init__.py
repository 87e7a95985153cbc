"""Rollout engine: chunk stepping, partition plan, env workers (processes, Ray), pipeline driver.

Depends only on the backend contract (``behavior1k_fast.core.contract``), never on a concrete backend.
"""

from .chunk import ChunkResult, check_chunk_actions, step_chunk
from .engine import RolloutEngine, RolloutStats
from .plan import PartitionPlan, StageSlice
from .policy import PolicyProcess, call_policy
from .worker import SharedBuffers, WorkerDiedError, WorkerError

__all__ = [
    "ChunkResult",
    "check_chunk_actions",
    "step_chunk",
    "RolloutEngine",
    "RolloutStats",
    "PartitionPlan",
    "StageSlice",
    "PolicyProcess",
    "call_policy",
    "SharedBuffers",
    "WorkerError",
    "WorkerDiedError",
]
