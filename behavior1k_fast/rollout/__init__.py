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

from .accounting import RolloutStats
from .chunk import ChunkResult, step_chunk
from .collector import WEIGHTS_VERSION_KEY, Collector, CollectorState, CollectorTimes
from .engine import EngineState, RolloutEngine
from .errors import (
    ChunkInFlightError,
    ClosedError,
    EngineBusyError,
    NoChunkInFlightError,
    NotResetError,
    StopRollout,
    WorkerDiedError,
    WorkerError,
    WorkerHungError,
)
from .gym_vector import EngineVectorEnv
from .plan import PartitionPlan
from .policy import COMMITTED_KEY, CommittedActions, PolicyProcess, committed_width
from .shard import EngineShard, engine_shard, merge_stats
from .supervision import RestartPolicy, RestartRecord
from .trajectory import Episodes, Trajectory, TrajectoryBatch, TrajectoryRecorder

#: What a user imports: the engine and its state, its stats, the trainer's doors (recorder, collector, gymnasium
#: vector env), a lookahead policy's input, shards for several engines, the restart policy and the errors.
#: The driver face (``driver``), the schedules, transports, supervisor, wire format and shared memory are
#: the engine's own: import them from their modules.
__all__ = [
    "RolloutEngine",
    "EngineState",
    "RolloutStats",
    "ChunkResult",
    "PartitionPlan",
    "step_chunk",
    "TrajectoryBatch",
    "TrajectoryRecorder",
    "Trajectory",
    "Episodes",
    "Collector",
    "CollectorState",
    "CollectorTimes",
    "WEIGHTS_VERSION_KEY",
    "EngineVectorEnv",
    "PolicyProcess",
    "COMMITTED_KEY",
    "CommittedActions",
    "committed_width",
    "EngineShard",
    "engine_shard",
    "merge_stats",
    "RestartPolicy",
    "RestartRecord",
    "WorkerError",
    "WorkerDiedError",
    "WorkerHungError",
    "ClosedError",
    "EngineBusyError",
    "ChunkInFlightError",
    "NoChunkInFlightError",
    "NotResetError",
    "StopRollout",
]
