"""Rollout layer: chunk stepping, partition plan, env workers (processes, Ray actors, inline), the engine.

Depends on the backend contract (``behavior1k_fast.core.contract``), never on a concrete backend. For
trainers: ``trajectory.TrajectoryRecorder`` (batches with the policy's extras), ``collector.Collector`` (those
batches collected while the trainer trains) and ``gym_vector.EngineVectorEnv`` (the engine as a
``gymnasium.vector.VectorEnv``). A new schedule is a module in ``schedules/`` built on
the engine's public surface; a new transport (how the driver talks to a kind of worker) is a
``transport.Transport`` in ``executors.py`` (or a module of its own, like ``ray_executor.py``) and a branch
of ``executors.make_executor``; where workers run is ``placement``; what a worker does is
``worker.EnvWorker``; the wire format is ``protocol`` (``docs/ARCHITECTURE.md`` lists every module).
"""

from .chunk import ChunkResult, check_chunk_actions, step_chunk
from .accounting import RolloutStats
from .engine import EngineState, RolloutEngine
from .errors import (
    ChunkInFlightError,
    ClosedError,
    EngineBusyError,
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
from .collector import WEIGHTS_VERSION_KEY, Collector, CollectorState, CollectorTimes

__all__ = [
    "ChunkResult",
    "check_chunk_actions",
    "step_chunk",
    "RolloutEngine",
    "EngineState",
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
    "Collector",
    "CollectorState",
    "CollectorTimes",
    "WEIGHTS_VERSION_KEY",
    "EngineVectorEnv",
    "WorkerError",
    "WorkerDiedError",
    "WorkerHungError",
    "RestartPolicy",
    "RestartRecord",
    "ClosedError",
    "EngineBusyError",
    "ChunkInFlightError",
    "NoChunkInFlightError",
    "NotResetError",
]
