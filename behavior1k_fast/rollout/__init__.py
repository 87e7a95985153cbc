"""Rollout layer: chunk stepping, partition plan, env workers (processes, Ray actors, inline), the engine.

Depends on the backend contract (``behavior1k_fast.core.contract``), never on a concrete backend. For
trainers: ``trajectory.TrajectoryRecorder`` (batches with the policy's extras) and ``gym_vector.EngineVectorEnv``
(the engine as a ``gymnasium.vector.VectorEnv``). A new
executor (where workers run) goes into ``executors.py`` (or a module of its own, like ``ray_executor.py``)
and ``make_executor``; what a worker does is ``worker.EnvWorker``; the wire format is ``protocol``.
"""

from .chunk import ChunkResult, check_chunk_actions, step_chunk
from .engine import RolloutEngine, RolloutStats
from .errors import (
    ChunkInFlightError,
    ClosedError,
    NoChunkInFlightError,
    NotResetError,
    WorkerDiedError,
    WorkerError,
    WorkerHungError,
)
from .gym_vector import EngineVectorEnv
from .plan import PartitionPlan, StageSlice
from .policy import PolicyProcess, call_policy
from .shard import EngineShard, engine_shard, merge_stats
from .shm import SharedBuffers
from .supervision import RestartPolicy, RestartRecord
from .trajectory import Episodes, Trajectory, TrajectoryRecorder

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
    "EngineShard",
    "engine_shard",
    "merge_stats",
    "SharedBuffers",
    "TrajectoryRecorder",
    "Trajectory",
    "Episodes",
    "EngineVectorEnv",
    "WorkerError",
    "WorkerDiedError",
    "WorkerHungError",
    "RestartPolicy",
    "RestartRecord",
    "ClosedError",
    "ChunkInFlightError",
    "NoChunkInFlightError",
    "NotResetError",
]
