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
import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..core import gpus
from ..core.checks import check_bool, check_choice, check_int, check_local_layout, check_picklable, check_positive_int
from ..core.contract import BackendFactory, check_backend_build, check_env_indices
from ..core.profile import SCHEDULES, RolloutProfile
from ..core.tracing import MODEL_FORWARD, SLICE_WAIT, get_profiler
from .chunk import ChunkResult, check_chunk_actions, concat_results
from .errors import ChunkInFlightError, ClosedError, NoChunkInFlightError, NotResetError, WorkerDiedError, WorkerError
from .executors import Executor, InlineExecutor, ProcessExecutor
from .placement import Setting, check_placement
from .plan import PartitionPlan
from .policy import Policy, call_policy, split_policy_output
from .protocol import Chunk, Reset
from .schedule import AsyncRun
from .supervision import RestartPolicy, RestartRecord, Supervision, logger
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
    #: Workers respawned during the run (``restart_workers``), oldest first.
    restarts: list[RestartRecord] = field(default_factory=list)
    #: int [num_envs]: own actions lost with the chunks that were pending on a respawned worker.
    lost_actions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: ``barrier`` or ``async`` (:mod:`.schedule`).
    schedule: str = "barrier"
    #: float [num_envs]: wall seconds each env spent at the driver between its chunks (its boundary
    #: observation there, its next chunk not yet sent: the policy queue and forward), summed over the run.
    slice_wait_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def envs_never_stepped(self) -> np.ndarray:
        """Global ids of the envs that took no own action in the run (e.g. their worker died every chunk)."""
        return np.flatnonzero(self.own_actions == 0)

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
        out["restarts"] = [dataclasses.asdict(r) for r in self.restarts]
        out["envs_never_stepped"] = self.envs_never_stepped.tolist()
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
        self.slice_wait = np.zeros(plan.num_envs)

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

    def stats(self, rounds: int, chunk_size: int, wall: float, model: float, wait: float,
              restarts: Sequence[RestartRecord], schedule: str) -> RolloutStats:
        worker = np.arange(self.plan.num_envs) // self.plan.envs_per_process
        lost = np.zeros(self.plan.num_envs, dtype=np.int64)
        for record in restarts:
            for env, actions in record.lost_actions.items():
                lost[env] += actions
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
            restarts=list(restarts),
            lost_actions=lost,
            schedule=schedule,
            slice_wait_seconds=self.slice_wait,
        )


#: Where the env workers run: spawned local processes, Ray actors, or this process.
EXECUTORS = ("process", "ray", "inline")


def make_executor(
    kind: str,
    specs: Sequence[WorkerSpec],
    supervision: Supervision,
    ray_actor_options: dict | None = None,
    placement: Setting = None,
) -> Executor:
    """The executor named ``kind`` (one of :data:`EXECUTORS`) for ``specs``; nothing is started yet.
    ``placement``: as returned by :func:`~.placement.check_placement` (Ray only)."""
    if kind == "process":
        return ProcessExecutor(specs, supervision)
    if kind == "inline":
        return InlineExecutor(specs, supervision)
    if kind == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(specs, supervision, ray_actor_options, placement)
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")


class RolloutEngine:
    """P env workers x E envs x K stages, driven chunk by chunk (see module docs).

    ``profile``: a :class:`RolloutProfile`, a mapping (RLinf names ``pipeline_stage_num``,
    ``num_env_subprocess``, ``skip_intermediate_obs_in_chunk``, ``total_num_envs``, ``num_action_chunks``
    accepted) or ``None`` (defaults). ``executor``: ``"process"`` (spawned local processes), ``"ray"`` (Ray
    actors, across machines) or ``"inline"`` (this process, nothing overlaps: for pdb and fast tests). ``auto_reset``: an episode
    that ends inside a chunk is reset once at the chunk boundary. ``seed``: worker w builds its backend with
    ``seed + w`` (the backend seeds its envs from it). ``placement`` (Ray only): on which nodes the workers
    start, ``"spread"`` (default), ``"pack"`` or one node id / resource label per worker (:mod:`.placement`);
    ``ray_actor_options``: each worker actor's options (``num_cpus``, a ``num_gpus`` share, custom
    ``resources``), which size its placement bundle.

    Supervision (:mod:`.supervision`; seconds, ``None``: no limit): ``timeout_s`` is the longest wait for
    one chunk reply, ``reset_timeout_s`` for one reset reply, ``startup_timeout_s`` for a worker to build
    its backend; ``stall_timeout_s`` is the longest a process worker may go without finishing a step of a
    chunk (``"auto"``: from measured step times). ``restart_workers``: respawn a dead or hung worker and
    reset its envs instead of raising, ``True`` with the default :class:`~.supervision.RestartPolicy`
    (at most 3 restarts per worker in 10 minutes, with back-off) or a policy of your own.

    GPU binding: the profile's ``gpu_ids`` place worker w on one GPU (:mod:`behavior1k_fast.core.gpus`),
    set in its environment before it imports anything (process executor only: Ray places actors on GPUs
    itself, ``ray_actor_options={"num_gpus": ...}``).

    Before any worker starts, the arguments are checked (with the process and inline executors, the
    layout against this machine's cores and memory: ``core.checks.MachineLimits``), and so is what the
    factory can check in the driver (``factory.check(num_envs, seed, profile)`` where it has one: seeds,
    modalities, stage counts).
    A worker error, a dead or hung worker (without restart, or past the restart budget) closes the engine
    and re-raises; bad arguments raise before anything is sent and leave the engine usable. A call that
    does not fit the engine's state raises a typed error (:mod:`.errors`: closed, chunk in flight, none in
    flight, not reset).
    """

    def __init__(
        self,
        factory: BackendFactory,
        profile: RolloutProfile | Mapping[str, Any] | None = None,
        *,
        executor: str = "process",
        auto_reset: bool = True,
        restart_workers: bool | RestartPolicy | Mapping[str, Any] = False,
        seed: int = 0,
        timeout_s: float | None = 300.0,
        ray_actor_options: dict | None = None,
        placement: str | Sequence[str] | None = None,
        reset_timeout_s: float | None = 300.0,
        startup_timeout_s: float | None = 1200.0,
        stall_timeout_s: float | str | None = "auto",
    ):
        if not callable(factory):
            raise TypeError(f"factory must be a callable factory(num_envs, seed, profile), got {factory!r}")
        factory_blob = check_picklable("factory", factory, "the workers")
        check_choice("executor", executor, EXECUTORS)
        check_bool("auto_reset", auto_reset)
        seed = check_int("seed", seed)
        supervision = Supervision(startup_timeout_s, reset_timeout_s, timeout_s, stall_timeout_s,
                                  RestartPolicy.coerce(restart_workers))
        self.profile = RolloutProfile.coerce(profile)
        self.plan = PartitionPlan.from_profile(self.profile)
        placement = check_placement(placement, self.plan.num_processes, executor, ray_actor_options)
        if executor != "ray":  # Ray places workers across a cluster, not only on this machine
            check_local_layout(self.plan.num_processes, self.plan.num_envs, self.profile.chunk_size,
                               processes=executor == "process")
        self.chunk_size = self.profile.chunk_size
        worker_profile = self.plan.worker_profile(self.profile)
        envs = [{} for _ in range(self.plan.num_processes)]
        if self.profile.gpu_ids is not None:
            if executor != "process":
                raise ValueError(f"gpu_ids bind worker processes: executor={executor!r} does not start any "
                                 "(Ray: ray_actor_options={'num_gpus': ...}; inline: bind this process yourself)")
            physical = gpus.worker_gpus(self.profile.gpu_ids, self.plan.num_processes, os.environ)
            gpus.check_gpus_present(physical, *gpus.nvidia_smi_gpus())
            envs = [gpus.binding_env(p) for p in physical]
            worker_profile = worker_profile.replace(gpu_ids=(0,))  # each worker sees its one GPU as CUDA 0
        for w in range(self.plan.num_processes):
            check_backend_build(factory, self.plan.envs_per_process, seed + w, worker_profile)
        specs = [
            WorkerSpec(w, factory_blob, self.plan.envs_per_process, seed + w, worker_profile.to_dict(), auto_reset,
                       tracing=get_profiler().enabled, env=envs[w])
            for w in range(self.plan.num_processes)
        ]
        self.auto_reset = auto_reset
        self._closed = True
        self._executor = make_executor(executor, specs, supervision, ray_actor_options, placement)
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
    def worker_nodes(self) -> list[str | None]:
        """Ray node id each worker runs on, as the worker's actor reported it (Ray executor; else empty)."""
        return self._executor.worker_nodes

    @property
    def restarts(self) -> int:
        """Workers respawned so far (``restart_workers``)."""
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
        with self._guard():
            for s in self.plan.stage_slices(stage):
                self._executor.submit(s.worker, Chunk(s.local_envs, actions[s.batch_rows], self.chunk_size))
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
            parts = [
                self._executor.collect(s.worker, {k: v[s.batch_rows] for k, v in batch.items()})[0]
                for s in self.plan.stage_slices(stage)
            ]
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
        schedule: str | None = None,
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
        ``schedule``: ``"barrier"`` (stage by stage, as above) or ``"async"`` (slice by slice, no barrier
        across processes: :mod:`.schedule`); ``None``: the profile's.
        """
        if not callable(policy):
            raise TypeError(f"policy must be callable, got {policy!r}")
        num_rounds = check_positive_int("num_rounds", num_rounds)
        check_bool("reset", reset)
        check_bool("overlap", overlap)
        schedule = check_choice("schedule", self.profile.schedule if schedule is None else schedule, SCHEDULES)
        if schedule == "async" and not overlap:
            raise ValueError("overlap=False is the barrier schedule's serial baseline; schedule='async' overlaps")
        self._check_open()
        if any(self._in_flight):
            raise ChunkInFlightError("rollout() needs every stage collected first")
        try:
            if reset or any(o is None for o in self._stage_obs):
                self.reset()
            accounting = _Accounting(self.plan)
            restarts_before = self._executor.restarts
            self._model_s = self._wait_s = 0.0
            start = time.perf_counter()
            if schedule == "async":
                AsyncRun(self, policy, num_rounds, on_chunk, accounting, accounting.slice_wait).run()
            else:
                self._run_barrier(policy, num_rounds, overlap, on_chunk, accounting)
            wall = time.perf_counter() - start
        except BaseException:
            self.close()
            raise
        restarts = self._executor.restart_records[restarts_before:]
        stats = accounting.stats(num_rounds, self.chunk_size, wall, self._model_s, self._wait_s, restarts, schedule)
        if stats.envs_never_stepped.size:
            logger.warning("envs %s took no own action in this rollout of %d rounds (%d worker restarts)",
                           stats.envs_never_stepped.tolist(), num_rounds, len(restarts))
        return stats

    def _run_barrier(
        self, policy: Policy, num_rounds: int, overlap: bool, on_chunk: Callable[[int, ChunkResult], None] | None,
        accounting: "_Accounting",
    ) -> None:
        """The barrier schedule: stage by stage; with ``overlap`` stage k's next chunk goes out right after
        its last one is collected, while the other stages step."""
        stages = self.plan.stages
        total = num_rounds * stages
        arrived_ns = [time.perf_counter_ns()] * stages  # when each stage's observations reached the driver

        def submit(k: int) -> None:
            self._submit(k, *self._forward_stage(policy, k))
            waited_ns = time.perf_counter_ns() - arrived_ns[k]
            accounting.slice_wait[self.plan.stage_envs(k)] += waited_ns / 1e9
            get_profiler().add(SLICE_WAIT, arrived_ns[k], waited_ns, {"stage": k})

        if overlap:
            for k in range(stages):
                submit(k)
        for i in range(total):
            k = i % stages
            if not overlap:
                submit(k)
            result = self.collect(k)
            arrived_ns[k] = time.perf_counter_ns()
            accounting.add(result)
            if on_chunk is not None:
                on_chunk(k, result)
            if overlap and i + stages < total:
                submit(k)

    def _forward(
        self, policy: Policy, obs: dict[str, np.ndarray], batch: int, argname: str
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The policy's validated chunk and extras for the ``batch`` envs of ``obs`` (the one check of both on
        their way in; ``argname`` names the output in its errors)."""
        start = time.perf_counter()
        with get_profiler().section(MODEL_FORWARD, batch=batch):
            out = call_policy(policy, obs)
        self._model_s += time.perf_counter() - start
        actions, extras = split_policy_output(out, batch, argname)
        return check_chunk_actions(actions, batch, self.action_dim, self.chunk_size, argname), extras

    def _forward_stage(self, policy: Policy, stage: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self._forward(policy, self._stage_obs[stage], self.plan.stage_size, f"policy output for stage {stage}")

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
        """Stop every worker and free the shared memory. Idempotent, and retryable after an interrupt."""
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
