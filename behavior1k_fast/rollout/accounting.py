"""What one rollout measured: the engine's per-env and per-worker counters (:class:`Accounting`) and the
:class:`RolloutStats` it returns. Every schedule fills the same accounting through the engine's driver
(:meth:`~.driver.EngineDriver.forward`, :meth:`~.driver.EngineDriver.send`,
:meth:`~.driver.EngineDriver.collect`), so the stats mean the same whatever the schedule.

Slice wait: the wall seconds an env spends at the driver between two chunks: from the moment its boundary
observation reached the driver (its result received, or the rollout's start) to the moment its next chunk
was sent (the policy queue and the forward). Each send adds it per env and traces it as one
:data:`~behavior1k_fast.core.tracing.SLICE_WAIT` span per slice.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..core.tracing import SLICE_WAIT, get_profiler
from .chunk import ChunkResult
from .plan import PartitionPlan, StageSlice
from .supervision import RestartRecord


@dataclass
class RolloutStats:
    """What one :meth:`~.engine.RolloutEngine.rollout` measured. Wall times in seconds, sim times in
    simulated seconds."""

    rounds: int
    #: K, the pipeline stages of the engine's plan.
    pipeline_stages: int
    chunk_size: int
    #: Global env ids 0..num_envs-1 index every per-env array.
    num_envs: int
    wall_seconds: float
    #: Driver time inside the policy forward.
    model_seconds: float
    #: Driver time blocked on workers.
    wait_seconds: float
    #: int [num_envs]: actions each env applied itself (masked actions excluded).
    own_actions: np.ndarray
    #: int [num_envs]: episodes that ended during the run.
    episodes: np.ndarray
    #: float [num_envs]: summed rewards of applied steps.
    total_reward: np.ndarray
    #: float [num_envs]: simulated seconds the env's backend advanced, per own action of the env.
    sim_seconds_per_own_action: np.ndarray
    #: float [num_envs]: global steps of the env's backend without an own action of the env, per round
    #: (other stages' steps, and masked steps after an episode ended inside a chunk).
    hold_steps_per_round: np.ndarray
    #: float [num_processes]: wall seconds each env worker spent stepping its chunks (measured in the
    #: worker around the chunk stepping, see :attr:`~.chunk.ChunkResult.env_wall_seconds`).
    env_wall_seconds_per_worker: np.ndarray
    #: int [num_processes]: chunks each env worker stepped (a hybrid worker steps one slice per stage).
    chunks_per_worker: np.ndarray
    #: Profiler summary per stage name (empty when the profiler is off).
    stage_timings: dict = field(default_factory=dict)
    #: Workers respawned during the run (``restart_workers``), oldest first.
    restarts: list[RestartRecord] = field(default_factory=list)
    #: int [num_envs]: own actions lost with the chunks that were pending on a respawned worker.
    lost_actions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: The schedule that ran (:mod:`.schedules`).
    schedule: str = "barrier"
    #: float [num_envs]: wall seconds each env spent at the driver between its chunks (module docs),
    #: summed over the run.
    slice_wait_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: float [num_processes]: wall seconds each env worker waited for its next chunk, from its previous
    #: reply (:attr:`~.chunk.ChunkResult.stall_seconds`; the policy was late), summed over the run.
    stall_seconds_per_worker: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: int [num_envs]: chunks the env sat out (``lookahead``: its episode ended after a lead, so the chunk
    #: chosen at that lead was not applied; :mod:`.chunk`).
    sat_out_chunks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: ``lookahead``: the lead d of most chunks sent with one (the last chunk of a rollout has none);
    #: ``None`` for the other schedules.
    lookahead_steps: int | None = None

    @property
    def envs_never_stepped(self) -> np.ndarray:
        """Global ids of the envs that took no own action in the run (e.g. their worker died every chunk)."""
        return np.flatnonzero(self.own_actions == 0)

    @property
    def env_steps_per_second(self) -> float:
        """Own env actions per wall-clock second, over all envs."""
        return float(self.own_actions.sum()) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def env_wall_seconds_per_chunk(self) -> np.ndarray:
        """float [num_processes]: each env worker's mean wall seconds per chunk it stepped (T_env)."""
        return self.env_wall_seconds_per_worker / np.maximum(self.chunks_per_worker, 1)

    def to_dict(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}
        out["env_steps_per_second"] = self.env_steps_per_second
        out["env_wall_seconds_per_chunk"] = self.env_wall_seconds_per_chunk.tolist()
        out["restarts"] = [dataclasses.asdict(r) for r in self.restarts]
        out["envs_never_stepped"] = self.envs_never_stepped.tolist()
        return out


class Accounting:
    """Per-env and per-worker counters of one rollout, and the driver's model and wait seconds."""

    def __init__(self, plan: PartitionPlan):
        self.plan = plan
        self.own = np.zeros(plan.num_envs, dtype=np.int64)
        self.episodes = np.zeros(plan.num_envs, dtype=np.int64)
        self.reward = np.zeros(plan.num_envs)
        self.worker_steps = np.zeros(plan.num_env_processes, dtype=np.int64)
        self.worker_sim = np.zeros(plan.num_env_processes)
        self.worker_env = np.zeros(plan.num_env_processes)
        self.worker_chunks = np.zeros(plan.num_env_processes, dtype=np.int64)
        self.worker_stall = np.zeros(plan.num_env_processes)
        self.sat_out = np.zeros(plan.num_envs, dtype=np.int64)
        #: Lead d -> chunks (slices) sent with it.
        self.leads: Counter[int] = Counter()
        self.slice_wait = np.zeros(plan.num_envs)
        #: ``time.perf_counter_ns()`` when each env's latest boundary observation reached the driver.
        self.arrived_ns = np.full(plan.num_envs, time.perf_counter_ns(), dtype=np.int64)
        self.model_seconds = 0.0
        self.wait_seconds = 0.0

    def received(self, result: ChunkResult, arrived: bool = True) -> None:
        """Count one received chunk result (``arrived``: its envs' boundary observations arrived with it;
        a chunk with a lead brought them at its lead, :meth:`lead_received`)."""
        ids = result.env_ids
        if arrived:
            self.arrived_ns[ids] = time.perf_counter_ns()
        self.sat_out[ids] += result.sat_out
        self.own[ids] += result.applied.sum(axis=1)
        self.episodes[ids] += result.episode_ended
        self.reward[ids] += np.where(result.applied, result.rewards, 0.0).sum(axis=1)
        workers, first = np.unique(ids // self.plan.envs_per_process, return_index=True)
        self.worker_steps[workers] += result.global_steps[first]
        self.worker_sim[workers] += result.sim_seconds[first]
        self.worker_env[workers] += result.env_wall_seconds[first]
        self.worker_stall[workers] += result.stall_seconds[first]
        self.worker_chunks[workers] += 1

    def lead_received(self, env_ids: np.ndarray) -> None:
        """The lead observations of ``env_ids`` arrived now."""
        self.arrived_ns[env_ids] = time.perf_counter_ns()

    def sent(self, stage_slice: StageSlice, lead_steps: int | None = None) -> None:
        """Count the slice wait of ``stage_slice``, whose next chunk was sent now (with lead ``lead_steps``)."""
        if lead_steps is not None:
            self.leads[lead_steps] += 1
        now = time.perf_counter_ns()
        ids = np.asarray(stage_slice.global_envs)
        arrived = int(self.arrived_ns[ids].min())
        self.slice_wait[ids] += (now - self.arrived_ns[ids]) / 1e9
        get_profiler().add(SLICE_WAIT, arrived, now - arrived, {"worker": stage_slice.worker, "stage": stage_slice.stage})

    def stats(self, rounds: int, chunk_size: int, wall: float, restarts: Sequence[RestartRecord],
              schedule: str) -> RolloutStats:
        worker = np.arange(self.plan.num_envs) // self.plan.envs_per_process
        lost = np.zeros(self.plan.num_envs, dtype=np.int64)
        for record in restarts:
            for env, actions in record.lost_actions.items():
                lost[env] += actions
        per_action = np.where(self.own > 0, self.worker_sim[worker] / np.maximum(self.own, 1), np.nan)
        profiler = get_profiler()
        return RolloutStats(
            rounds=rounds,
            pipeline_stages=self.plan.pipeline_stages,
            chunk_size=chunk_size,
            num_envs=self.plan.num_envs,
            wall_seconds=wall,
            model_seconds=self.model_seconds,
            wait_seconds=self.wait_seconds,
            own_actions=self.own,
            episodes=self.episodes,
            total_reward=self.reward,
            sim_seconds_per_own_action=per_action,
            hold_steps_per_round=(self.worker_steps[worker] - self.own) / rounds,
            env_wall_seconds_per_worker=self.worker_env,
            chunks_per_worker=self.worker_chunks,
            stage_timings=profiler.summary() if profiler.enabled else {},
            restarts=list(restarts),
            lost_actions=lost,
            schedule=schedule,
            slice_wait_seconds=self.slice_wait,
            stall_seconds_per_worker=self.worker_stall,
            sat_out_chunks=self.sat_out,
            lookahead_steps=self.leads.most_common(1)[0][0] if self.leads else None,
        )
