"""The rollout engine: the driver side of the hybrid-partition pipeline.

``RolloutEngine(factory, profile)`` starts P env workers (processes or Ray actors) of E envs each, groups
their envs into K stages (:class:`~.plan.PartitionPlan`), and drives them chunk by chunk. Each worker's
backend is built with ``profile.pipeline_stages`` = the number of stages sharing its physics (K in hybrid
partition, 1 in process partition), so it can rescale physics (``behavior1k_fast.core.frequencies``).

:meth:`RolloutEngine.rollout` runs the pipeline: stage k's chunk is sent to its workers asynchronously and
the driver runs the policy for the next stage while they step, so with K >= 2 the forward pass of one stage
overlaps env stepping of the others. In hybrid partition the other slices of a process hold their last
action while a stage steps (the backend contract); :class:`RolloutStats` reports, per env, the simulated
seconds per own action (from the backends' clocks) and the hold steps per round.
"""

from __future__ import annotations

import contextlib
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..core.checks import check_bool, check_int, check_positive_int, check_seconds
from ..core.contract import BackendFactory, check_env_indices
from ..core.profile import RolloutProfile
from ..core.tracing import MODEL_FORWARD, get_profiler
from .chunk import ChunkResult, check_chunk_actions, concat_results
from .errors import ChunkInFlightError, ClosedError, NoChunkInFlightError, NotResetError, WorkerDiedError, WorkerError
from .executors import Executor, InlineExecutor, ProcessExecutor
from .plan import PartitionPlan
from .policy import Policy, call_policy, split_policy_output
from .protocol import Chunk, Reset
from .worker import WorkerSpec


@dataclass
class RolloutStats:
    """What one :meth:`RolloutEngine.rollout` measured. Wall times in seconds, sim times in simulated s."""

    rounds: int
    stages: int
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
    #: worker around the chunk stepping, see :attr:`~.chunk.ChunkResult.env_seconds`).
    env_seconds_per_worker: np.ndarray
    #: int [num_processes]: chunks each env worker stepped (a hybrid worker steps one slice per stage).
    chunks_per_worker: np.ndarray
    #: Profiler summary per stage name (empty when the profiler is off).
    stage_timings: dict = field(default_factory=dict)

    @property
    def env_steps_per_second(self) -> float:
        """Own env actions per wall-clock second, over all envs."""
        return float(self.own_actions.sum()) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def env_seconds_per_chunk(self) -> np.ndarray:
        """float [num_processes]: each env worker's mean wall seconds per chunk it stepped (T_env)."""
        return self.env_seconds_per_worker / np.maximum(self.chunks_per_worker, 1)

    def to_dict(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}
        out["env_steps_per_second"] = self.env_steps_per_second
        out["env_seconds_per_chunk"] = self.env_seconds_per_chunk.tolist()
        return out


class _Accounting:
    """Per-env and per-worker counters of one rollout."""

    def __init__(self, plan: PartitionPlan):
        self.plan = plan
        self.own = np.zeros(plan.num_envs, dtype=np.int64)
        self.episodes = np.zeros(plan.num_envs, dtype=np.int64)
        self.reward = np.zeros(plan.num_envs)
        self.worker_steps = np.zeros(plan.num_processes, dtype=np.int64)
        self.worker_sim = np.zeros(plan.num_processes)
        self.worker_env = np.zeros(plan.num_processes)
        self.worker_chunks = np.zeros(plan.num_processes, dtype=np.int64)

    def add(self, result: ChunkResult) -> None:
        ids = result.env_ids
        self.own[ids] += result.applied.sum(axis=1)
        self.episodes[ids] += result.episode_ended
        self.reward[ids] += np.where(result.applied, result.rewards, 0.0).sum(axis=1)
        workers, first = np.unique(ids // self.plan.envs_per_process, return_index=True)
        self.worker_steps[workers] += result.global_steps[first]
        self.worker_sim[workers] += result.sim_seconds[first]
        self.worker_env[workers] += result.env_seconds[first]
        self.worker_chunks[workers] += 1

    def stats(self, rounds: int, chunk_size: int, wall: float, model: float, wait: float) -> RolloutStats:
        worker = np.arange(self.plan.num_envs) // self.plan.envs_per_process
        per_action = np.where(self.own > 0, self.worker_sim[worker] / np.maximum(self.own, 1), np.nan)
        profiler = get_profiler()
        return RolloutStats(
            rounds=rounds,
            stages=self.plan.stages,
            chunk_size=chunk_size,
            num_envs=self.plan.num_envs,
            wall_seconds=wall,
            model_seconds=model,
            wait_seconds=wait,
            own_actions=self.own,
            episodes=self.episodes,
            total_reward=self.reward,
            sim_seconds_per_own_action=per_action,
            hold_steps_per_round=(self.worker_steps[worker] - self.own) / rounds,
            env_seconds_per_worker=self.worker_env,
            chunks_per_worker=self.worker_chunks,
            stage_timings=profiler.summary() if profiler.enabled else {},
        )


#: Where the env workers run: spawned local processes, Ray actors, or this process.
EXECUTORS = ("process", "ray", "inline")


def make_executor(
    kind: str,
    specs: Sequence[WorkerSpec],
    timeout_s: float | None,
    restart_workers: bool,
    ray_actor_options: dict | None = None,
) -> Executor:
    """The executor named ``kind`` (one of :data:`EXECUTORS`) for ``specs``; nothing is started yet."""
    if kind == "process":
        return ProcessExecutor(specs, timeout_s, restart_workers)
    if kind == "inline":
        return InlineExecutor(specs, timeout_s, restart_workers)
    if kind == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(specs, timeout_s, restart_workers, ray_actor_options)
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")


class RolloutEngine:
    """P env workers x E envs x K stages, driven chunk by chunk (see module docs).

    ``profile``: a :class:`RolloutProfile`, a mapping (RLinf names ``pipeline_stage_num``,
    ``num_env_subprocess``, ``skip_intermediate_obs_in_chunk``, ``total_num_envs``, ``num_action_chunks``
    accepted) or ``None`` (defaults). ``executor``: ``"process"`` (spawned local processes), ``"ray"`` (Ray
    actors, across machines) or ``"inline"`` (this process, nothing overlaps: for pdb and fast tests). ``auto_reset``: an episode
    that ends inside a chunk is reset once at the chunk boundary. ``restart_workers``: respawn a dead worker
    and reset its envs instead of raising :class:`WorkerDiedError`. ``timeout_s``: longest wait on one reply
    in seconds (``None``: no limit).
    ``seed``: worker w builds its backend with ``seed + w`` (the backend seeds its envs from it).

    A worker error, a dead worker (without restart) or a timeout closes the engine and re-raises; bad
    arguments raise before anything is sent and leave the engine usable. A call that does not fit the
    engine's state raises a typed error (:mod:`.errors`: closed, chunk in flight, none in flight, not reset).
    """

    def __init__(
        self,
        factory: BackendFactory,
        profile: RolloutProfile | Mapping[str, Any] | None = None,
        *,
        executor: str = "process",
        auto_reset: bool = True,
        restart_workers: bool = False,
        seed: int = 0,
        timeout_s: float | None = 300.0,
        ray_actor_options: dict | None = None,
    ):
        if not callable(factory):
            raise TypeError(f"factory must be a callable factory(num_envs, seed, profile), got {factory!r}")
        try:
            factory_blob = pickle.dumps(factory)
        except Exception as exc:
            raise TypeError(f"factory must be picklable to reach the workers, got {factory!r}: {exc}") from None
        check_bool("auto_reset", auto_reset)
        check_bool("restart_workers", restart_workers)
        seed = check_int("seed", seed)
        timeout_s = check_seconds("timeout_s", timeout_s)
        self.profile = RolloutProfile.coerce(profile)
        self.plan = PartitionPlan.from_profile(self.profile)
        self.chunk_size = self.profile.chunk_size
        worker_profile = self.profile.replace(pipeline_stages=self.plan.stages_per_process).to_dict()
        specs = [
            WorkerSpec(w, factory_blob, self.plan.envs_per_process, seed + w, worker_profile, auto_reset,
                       tracing=get_profiler().enabled)
            for w in range(self.plan.num_processes)
        ]
        self.auto_reset = auto_reset
        self._closed = True
        self._executor = make_executor(executor, specs, timeout_s, restart_workers, ray_actor_options)
        self.observation_space, self.action_space = self._executor.start()
        self._closed = False
        self.action_dim = int(np.prod(self.action_space.shape))
        self._stage_obs: list[dict[str, np.ndarray] | None] = [None] * self.plan.stages
        self._in_flight = [False] * self.plan.stages
        #: Per stage in flight: (observations acted on, actions, extras), attached to its result in collect().
        self._chunk_inputs: list[tuple | None] = [None] * self.plan.stages
        self._model_s = self._wait_s = 0.0

    # --- properties ---------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.plan.num_envs

    @property
    def num_stages(self) -> int:
        return self.plan.stages

    @property
    def worker_pids(self) -> list[int]:
        """OS pids of the worker processes (process executor; empty for Ray and inline)."""
        return self._executor.pids

    @property
    def restarts(self) -> int:
        """Workers respawned so far (``restart_workers=True``)."""
        return self._executor.restarts

    def stage_envs(self, stage: int) -> np.ndarray:
        """Global env ids of ``stage`` in batch order (the rows of its observations and actions)."""
        return self.plan.stage_envs(stage)

    def stage_obs(self, stage: int) -> dict[str, np.ndarray]:
        """The latest boundary observations of ``stage``: key -> [stage_size, ...]."""
        self.plan.check_stage(stage)
        if self._stage_obs[stage] is None:
            raise NotResetError("call reset() before reading observations")
        return self._stage_obs[stage]

    # --- stepping -----------------------------------------------------------------------------
    def reset(self, env_ids: Sequence[int] | None = None) -> list[dict[str, np.ndarray]]:
        """Reset every env, or only the global ``env_ids``; returns the observations of each stage.

        Nothing may be in flight. Resetting a subset needs a full reset first."""
        self._check_open()
        if any(self._in_flight):
            raise ChunkInFlightError(
                f"cannot reset with chunks in flight for stages {np.flatnonzero(self._in_flight).tolist()}"
            )
        e = self.plan.envs_per_process
        if env_ids is None:
            ids = np.arange(self.num_envs)
            self._stage_obs = [self._new_batch() for _ in range(self.plan.stages)]
        else:
            ids = np.sort(check_env_indices(env_ids, self.num_envs))
            if any(o is None for o in self._stage_obs):
                raise NotResetError("reset() every env once before resetting a subset with env_ids")
            self._copy_batches(range(self.plan.stages))
        rows = {int(w): (ids[ids // e == w] % e).tolist() for w in np.unique(ids // e)}
        with self._guard():
            for w, local in rows.items():
                self._executor.submit(w, Reset(tuple(local)))
            for w, local in rows.items():
                obs = self._executor.collect(w)[1]
                self._store_worker_obs(w, local, obs, range(self.plan.stages))
            self._executor.take_respawned()
        return list(self._stage_obs)

    def submit(self, stage: int, actions: np.ndarray) -> None:
        """Send stage ``stage`` its chunk ``actions [stage_size, chunk_size, action_dim]``; returns at once.

        The chunk is validated here, once: the workers trust what the engine sends."""
        self._check_open()
        self.plan.check_stage(stage)
        self._check_idle(stage)
        self._submit(stage, check_chunk_actions(actions, self.plan.stage_size, self.action_dim, self.chunk_size))

    def _check_idle(self, stage: int) -> None:
        if self._in_flight[stage]:
            raise ChunkInFlightError(f"stage {stage} already has a chunk in flight; collect({stage}) it first")

    def _submit(self, stage: int, actions: np.ndarray, extras: dict[str, np.ndarray] | None = None) -> None:
        """Send a validated chunk (and keep the policy's validated ``extras`` for it) to the workers of ``stage``."""
        offset = 0
        with self._guard():
            for s in self.plan.stage_slices(stage):
                part = actions[offset : offset + len(s.local_envs)]
                offset += len(s.local_envs)
                self._executor.submit(s.worker, Chunk(s.local_envs, part, self.chunk_size))
        self._in_flight[stage] = True
        self._chunk_inputs[stage] = (self._stage_obs[stage], actions, extras or {})

    def collect(self, stage: int) -> ChunkResult:
        """Wait for the chunk of ``stage``; rows in :meth:`stage_envs` order, ``env_ids`` global."""
        self._check_open()
        self.plan.check_stage(stage)
        if not self._in_flight[stage]:
            raise NoChunkInFlightError(f"stage {stage} has no chunk in flight; submit() one first")
        start = time.perf_counter()
        batch = self._new_batch()
        with self._guard():
            parts, offset = [], 0
            for s in self.plan.stage_slices(stage):
                rows = slice(offset, offset + len(s.local_envs))
                offset = rows.stop
                result, _ = self._executor.collect(s.worker, {k: v[rows] for k, v in batch.items()})
                parts.append(result)
            self._in_flight[stage] = False
            self._refresh_restarted()
        self._wait_s += time.perf_counter() - start
        result = concat_results(parts)
        result.policy_obs, result.actions, result.extras = self._chunk_inputs[stage]
        result.obs = batch
        self._stage_obs[stage] = batch
        return result

    def step(self, stage: int, actions: np.ndarray) -> ChunkResult:
        """:meth:`submit` then :meth:`collect` (no overlap)."""
        self.submit(stage, actions)
        return self.collect(stage)

    def rollout(
        self,
        policy: Policy,
        num_rounds: int,
        *,
        reset: bool = True,
        overlap: bool = True,
        on_chunk: Callable[[int, ChunkResult], None] | None = None,
    ) -> RolloutStats:
        """Run ``num_rounds`` rounds (one chunk per stage each) through ``policy``; see module docs.

        ``policy``: a torch module (called on a dict of tensors under ``torch.inference_mode``), any
        callable on the stage's observation dict of numpy arrays, or a :class:`~.policy.PolicyProcess`;
        returns ``[stage_size, chunk_size, action_dim]`` actions (tensor or array), or ``(actions, extras)``
        with ``extras`` a dict of ``[stage_size, ...]`` arrays or tensors (kept in ``result.extras``).
        ``on_chunk(stage, result)`` receives every collected chunk (the trajectory data, with the
        observations the policy saw and its actions and extras), while the other stages step;
        :class:`~.trajectory.TrajectoryRecorder` gathers them into batches.
        ``overlap=False`` is the serial baseline: the driver waits for each stage's chunk before it runs the
        next forward, so nothing steps during a forward; the chunks and their order on every worker, hence
        the trajectories, are those of ``overlap=True``, only the timing differs. Any failure closes the
        engine before it is raised. With ``auto_reset=False`` nothing resets an ended episode here: drive
        the engine with :meth:`submit` / :meth:`collect` and :meth:`reset` (``env_ids``) instead.
        """
        if not callable(policy):
            raise TypeError(f"policy must be callable, got {policy!r}")
        num_rounds = check_positive_int("num_rounds", num_rounds)
        check_bool("reset", reset)
        check_bool("overlap", overlap)
        self._check_open()
        if any(self._in_flight):
            raise ChunkInFlightError("rollout() needs every stage collected first")
        stages = self.plan.stages
        try:
            if reset or any(o is None for o in self._stage_obs):
                self.reset()
            accounting = _Accounting(self.plan)
            self._model_s = self._wait_s = 0.0
            start = time.perf_counter()
            total = num_rounds * stages
            if overlap:  # stage k's next chunk goes out right after its last one is collected
                for k in range(stages):
                    self._submit(k, *self._forward(policy, k))
            for i in range(total):
                k = i % stages
                if not overlap:
                    self._submit(k, *self._forward(policy, k))
                result = self.collect(k)
                accounting.add(result)
                if on_chunk is not None:
                    on_chunk(k, result)
                if overlap and i + stages < total:
                    self._submit(k, *self._forward(policy, k))
            wall = time.perf_counter() - start
        except BaseException:
            self.close()
            raise
        return accounting.stats(num_rounds, self.chunk_size, wall, self._model_s, self._wait_s)

    def _forward(self, policy: Policy, stage: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The policy's validated chunk and extras for ``stage`` (the one check of both on their way in)."""
        start = time.perf_counter()
        with get_profiler().section(MODEL_FORWARD, pipeline_stage=stage):
            out = call_policy(policy, self._stage_obs[stage])
        self._model_s += time.perf_counter() - start
        argname = f"policy output for stage {stage}"
        actions, extras = split_policy_output(out, self.plan.stage_size, argname)
        return check_chunk_actions(actions, self.plan.stage_size, self.action_dim, self.chunk_size, argname), extras

    # --- lifecycle ----------------------------------------------------------------------------
    def _new_batch(self) -> dict[str, np.ndarray]:
        """An empty observation batch of one stage: key -> [stage_size, ...]."""
        n = self.plan.stage_size
        return {k: np.empty((n, *b.shape), b.dtype) for k, b in self.observation_space.spaces.items()}

    def _copy_batches(self, stages: Any) -> None:
        """Replace the batches of ``stages`` by copies before writing into them, so that observations
        already handed out (results, :meth:`reset` returns) never change."""
        for k in stages:
            self._stage_obs[k] = {key: arr.copy() for key, arr in self._stage_obs[k].items()}

    def _refresh_restarted(self) -> None:
        """Envs of a respawned worker were reset: update the observations of stages not in flight."""
        fresh = self._executor.take_respawned()
        if not fresh:
            return
        idle = [k for k in range(self.plan.stages) if not self._in_flight[k] and self._stage_obs[k] is not None]
        self._copy_batches(idle)
        for worker, obs in fresh.items():
            self._store_worker_obs(worker, range(self.plan.envs_per_process), obs, idle)

    def _store_worker_obs(self, worker: int, local: Sequence[int], obs: dict[str, np.ndarray], stages: Any) -> None:
        """Write the observations of ``worker``'s envs ``local`` (rows of ``obs``) into the batches of ``stages``."""
        ids = worker * self.plan.envs_per_process + np.asarray(local)
        for k in stages:
            batch_rows, obs_rows = np.nonzero(self.plan.stage_envs(k)[:, None] == ids)
            for key, arr in self._stage_obs[k].items():
                arr[batch_rows] = obs[key][obs_rows]

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Close the engine when a worker fails, dies or times out (state of its envs unknown)."""
        try:
            yield
        except (WorkerError, WorkerDiedError, TimeoutError):
            self.close()
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the rollout engine is closed")

    def close(self) -> None:
        """Stop every worker and free the shared memory. Idempotent."""
        if not self._closed:
            self._closed = True
            self._executor.close()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.plan
        return (f"RolloutEngine({p.num_processes} workers x {p.envs_per_process} envs x {p.stages} stages, "
                f"partition={p.mode!r}, chunk_size={self.chunk_size}, closed={self._closed})")
