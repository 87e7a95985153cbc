"""Rollout layer: chunk stepping, partition plan, env workers (processes, Ray actors, inline), the engine.

Depends on the backend contract (``behavior1k_fast.core.contract``), never on a concrete backend, nor on a
simulator's patch set. For trainers: ``engine.RolloutEngine`` (the user's face), ``trajectory.TrajectoryRecorder``
(batches with the policy's extras), ``collector.Collector`` (those batches collected while the trainer
trains) and ``gym_vector.EngineVectorEnv`` (the engine as a ``gymnasium.vector.VectorEnv``); a lookahead
policy's input is described by ``policy.CommittedActions``. A new schedule is a module in ``schedules/``
built on the driver face (``driver.EngineDriver``); a new transport (how the driver talks to a kind of
worker) is a module in ``transports/`` and a branch of ``transports.make_executor``, supervised by
``supervision.Supervisor``; where workers run is ``placement``; what a worker does is ``worker.EnvWorker``;
the wire format is ``protocol`` (``docs/ARCHITECTURE.md`` lists every module).
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
from .policy import COMMITTED_KEY, CommittedActions, PolicyProcess, call_policy, committed_width
from .shard import EngineShard, engine_shard, merge_stats
from .shm import SharedBuffers
from .supervision import RestartPolicy, RestartRecord
from .trajectory import Episodes, Trajectory, TrajectoryBatch, TrajectoryRecorder
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
    "COMMITTED_KEY",
    "CommittedActions",
    "committed_width",
    "EngineShard",
    "engine_shard",
    "merge_stats",
    "SharedBuffers",
    "TrajectoryBatch",
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
