"""The rollout engine: the user's face of the hybrid-partition pipeline.

``RolloutEngine(factory, profile)`` starts P env workers (processes, Ray actors or inline) of E envs each,
groups their envs into K stages (:class:`~.plan.PartitionPlan`), and drives them chunk by chunk. Each
worker's backend is built with ``profile.stages_sharing_physics`` = the number of stages sharing its physics
(K in hybrid partition, 1 in process partition), so it can rescale physics (``behavior1k_fast.core.frequencies``).

:meth:`RolloutEngine.rollout` runs a schedule (:mod:`.schedules`: ``barrier``, ``async``, and
``lookahead``, a pipeline in time: one stage or stages of whole processes, each chunk chosen while the
last one ends): stage k's chunk is sent to its workers asynchronously and the driver runs the policy for
the next stage while they step, so with K >= 2 the forward pass of one stage overlaps env stepping of the
others. In hybrid partition the other slices of a process hold their last action while a stage steps (the
backend contract); :class:`~.accounting.RolloutStats` reports, per env, the simulated seconds per own action
(from the backends' clocks) and the hold steps per round.

The engine's public names are the user's: ``rollout``; ``reset``, ``submit`` / ``collect`` / ``step`` by
stage; ``stage_obs``; ``close``; ``state``; the layout (``profile``, ``plan``, ``num_envs``,
``pipeline_stages``, ``chunk_size``, ``auto_reset``), the spaces (``observation_space``, ``action_space``,
``action_dim``, ``action_dtype``) and the workers (``worker_pids``, ``worker_nodes``, ``restarts``). What a
schedule drives (forward, send, ready, receive, the stage batches, the accounting) and the one
:class:`~.driver.EngineState` machine are the engine's :class:`~.driver.EngineDriver` (:mod:`.driver`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..core.checks import check_bool, check_choice, check_int, check_local_layout, check_picklable, check_positive_int
from ..core.contract import BackendFactory, check_backend_build, patch_set_of
from ..core.profile import SCHEDULES, RolloutProfile
from ..core.tracing import get_profiler
from .accounting import RolloutStats
from .chunk import ChunkResult
from .driver import ChunkInputs, EngineDriver, EngineState, InFlight
from .errors import EngineBusyError, StopRollout
from .placement import bind_gpus, check_placement
from .plan import PartitionPlan
from .policy import Policy
from .schedules import schedule_class
from .supervision import (CHUNK_TIMEOUT_S, RESET_TIMEOUT_S, STARTUP_TIMEOUT_S, RestartPolicy, Supervision,
                          check_inline_deadlines, logger)
from .transports import EXECUTORS, make_executor
from .worker import WorkerSpec


def _one_driver(call: str) -> Callable:
    """Run the method as the engine's driving thread (:meth:`RolloutEngine._driving`); ``call`` names it."""

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def driven(self: "RolloutEngine", *args: Any, **kwargs: Any) -> Any:
            with self._driving(call):
                return method(self, *args, **kwargs)

        return driven

    return decorate


class RolloutEngine:
    """P env workers x E envs x K stages, driven chunk by chunk (see module docs).

    Args:
        factory: ``factory(num_envs, seed, profile)`` builds one worker's backend; picklable.
        profile: a :class:`RolloutProfile`, a mapping (RLinf names ``pipeline_stage_num``,
            ``num_env_subprocess``, ``skip_intermediate_obs_in_chunk``, ``total_num_envs``,
            ``num_action_chunks`` accepted) or ``None`` (defaults).
        executor: ``"process"`` (spawned local processes), ``"ray"`` (Ray actors, across machines) or
            ``"inline"`` (this process, nothing overlaps: for pdb and fast tests; no deadlines and no hang
            detection, so a deadline chosen for it is refused: :func:`~.supervision.check_inline_deadlines`).
        auto_reset: an episode that ends inside a chunk is reset once at the chunk boundary.
        restart_workers: respawn a dead or hung worker and reset its envs instead of raising, ``True``
            with the default :class:`~.supervision.RestartPolicy` (at most 3 restarts per worker in 10
            minutes, with back-off) or a policy of your own (or a mapping of its fields).
        seed: worker w builds its backend with ``seed + w`` (the backend seeds its envs from it).
        timeout_s: seconds, the longest wait for one chunk reply (``None``: no limit).
        ray_actor_options: (Ray) each worker actor's options (``num_cpus``, a ``num_gpus`` share, custom
            ``resources``), which size its placement bundle.
        placement: (Ray) on which nodes the workers start, ``"spread"`` (default), ``"pack"`` or one node
            id / resource label per worker (:mod:`.placement`).
        reset_timeout_s: seconds, the longest wait for one reset reply.
        startup_timeout_s: seconds, the longest wait for a worker to build its backend.
        stall_timeout_s: seconds a process worker may go without finishing a step of a chunk (``"auto"``:
            from measured step times; ``None``: no limit). See :mod:`.supervision`.

    GPU binding: the profile's ``gpu_ids`` place worker w on one GPU (:func:`~.placement.bind_gpus`; process
    executor only: Ray places actors on GPUs itself, ``ray_actor_options={"num_gpus": ...}``).

    Before any worker starts, the arguments are checked (with the process and inline executors, the
    layout against this machine's cores and memory: ``core.checks.MachineLimits``), and so is what the
    factory can check in the driver (``factory.check(num_envs, seed, profile)`` where it has one: seeds,
    modalities, stage counts).
    A worker error, a dead or hung worker (without restart, or past the restart budget) closes the engine
    and re-raises; bad arguments raise before anything is sent and leave the engine usable. A call that
    does not fit the engine's state raises a typed error (:mod:`.errors`: closed, chunk in flight, none in
    flight, not reset), and so does a call from a second thread while one drives the engine (``rollout``,
    ``reset``, ``submit``, ``collect``: :class:`~.errors.EngineBusyError`, at once).
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
        timeout_s: float | None = CHUNK_TIMEOUT_S,
        ray_actor_options: dict | None = None,
        placement: str | Sequence[str] | None = None,
        reset_timeout_s: float | None = RESET_TIMEOUT_S,
        startup_timeout_s: float | None = STARTUP_TIMEOUT_S,
        stall_timeout_s: float | str | None = "auto",
    ):
        if not callable(factory):
            raise TypeError(f"factory must be a callable factory(num_envs, seed, profile), got {factory!r}")
        factory_blob = check_picklable("factory", factory, "the workers")
        check_choice("executor", executor, EXECUTORS)
        check_bool("auto_reset", auto_reset)
        seed = check_int("seed", seed)
        if executor == "inline":
            check_inline_deadlines(timeout_s=timeout_s, reset_timeout_s=reset_timeout_s,
                                   startup_timeout_s=startup_timeout_s, stall_timeout_s=stall_timeout_s)
        supervision = Supervision(startup_timeout_s, reset_timeout_s, timeout_s, stall_timeout_s,
                                  RestartPolicy.coerce(restart_workers))
        self.profile = RolloutProfile.coerce(profile)
        schedule_class(self.profile.schedule)  # a schedule without a driver fails before any work
        self.plan = PartitionPlan.from_profile(self.profile)
        placement = check_placement(placement, self.plan.num_env_processes, executor, ray_actor_options)
        if executor != "ray":  # Ray places workers across a cluster, not only on this machine
            check_local_layout(self.plan.num_env_processes, self.plan.num_envs, self.profile.chunk_size,
                               processes=executor == "process")
        self.chunk_size = self.profile.chunk_size
        worker_profile = self.profile  # its stages_sharing_physics is what a backend rescales for
        envs = bind_gpus(self.profile.gpu_ids, self.plan.num_env_processes, executor)
        if envs is None:
            envs = [{} for _ in range(self.plan.num_env_processes)]
        else:
            worker_profile = worker_profile.replace(gpu_ids=(0,))  # each worker sees its one GPU as CUDA 0
        for w in range(self.plan.num_env_processes):
            check_backend_build(factory, self.plan.envs_per_process, seed + w, worker_profile)
        specs = [
            WorkerSpec(w, factory_blob, self.plan.envs_per_process, seed + w, worker_profile.to_dict(), auto_reset,
                       tracing=get_profiler().enabled, env=envs[w], patch_set=patch_set_of(factory))
            for w in range(self.plan.num_env_processes)
        ]
        self.auto_reset = auto_reset
        self._executor = make_executor(executor, specs, supervision, ray_actor_options, placement)
        self.observation_space, self.action_space = self._executor.start()
        #: The driver face: what a schedule drives, and the engine's one state machine (:mod:`.driver`).
        self._driver = EngineDriver(self._executor, self.plan, self.profile, self.observation_space,
                                    self.action_space, auto_reset)
        self.action_dim = self._driver.action_dim
        #: The dtype the backends get chunk actions in; every chunk is cast to it (a copy) and checked there.
        self.action_dtype = self._driver.action_dtype
        #: (thread id, what it does) of the thread driving the engine now; ``None`` when none is.
        self._driving_thread: tuple[int, str] | None = None
        self._driving_lock = threading.Lock()

    # --- state --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _driving(self, doing: str) -> Iterator[None]:
        """One thread drives the engine at a time: inside, this thread does; a call from another thread
        meanwhile raises :class:`~.errors.EngineBusyError` at once (the same thread may nest calls)."""
        me = threading.get_ident()
        with self._driving_lock:
            if self._driving_thread is not None and self._driving_thread[0] != me:
                thread = next((t.name for t in threading.enumerate() if t.ident == self._driving_thread[0]), "?")
                raise EngineBusyError(f"cannot {doing}: thread {thread!r} is running {self._driving_thread[1]} on "
                                      "this engine, and one thread drives an engine at a time")
            outer = self._driving_thread is None
            if outer:
                self._driving_thread = (me, doing)
        try:
            yield
        finally:
            if outer:
                self._driving_thread = None

    @property
    def state(self) -> EngineState:
        """Where the engine is (:class:`~.driver.EngineState`)."""
        return self._driver.state

    # --- layout and workers ---------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.plan.num_envs

    @property
    def pipeline_stages(self) -> int:
        """K, the pipeline stages of the plan (the driver's stages)."""
        return self.plan.pipeline_stages

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

    def stage_obs(self, stage: int) -> dict[str, np.ndarray]:
        """The latest boundary observations of ``stage``: key -> [stage_size, ...], rows in
        ``plan.stage_envs(stage)`` order (a trainer's bootstrap input). They never change once handed out."""
        return self._driver.stage_obs(stage)

    # --- stepping by stage ----------------------------------------------------------------------
    @_one_driver("reset()")
    def reset(self, env_ids: Sequence[int] | None = None) -> list[dict[str, np.ndarray]]:
        """Reset every env, or only the global ``env_ids``; returns the observations of each stage.

        Nothing may be in flight. Resetting a subset needs a full reset first."""
        return self._driver.reset(env_ids)

    @_one_driver("submit()")
    def submit(self, stage: int, actions: np.ndarray) -> None:
        """Send stage ``stage`` its chunk ``actions [stage_size, chunk_size, action_dim]``; returns at once.

        The chunk is validated here, once, as a copy in :attr:`action_dtype` (the values the backends get:
        an error here leaves the engine usable): the workers trust what the engine sends."""
        self._driver.submit(stage, actions)

    @_one_driver("collect()")
    def collect(self, stage: int) -> ChunkResult:
        """Wait for the chunk of ``stage``; rows in ``plan.stage_envs(stage)`` order, ``env_ids`` global. Its
        observations become the stage's boundary observations."""
        return self._driver.collect_stage(stage)

    def step(self, stage: int, actions: np.ndarray) -> ChunkResult:
        """:meth:`submit` then :meth:`collect` (no overlap)."""
        self.submit(stage, actions)
        return self.collect(stage)

    @_one_driver("rollout()")
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
        ``overlap=False`` is the barrier schedule's serial baseline: the driver waits for each stage's chunk
        before it runs the next forward, so nothing steps during a forward; the chunks and their order on
        every worker, hence the trajectories, are those of ``overlap=True``, only the timing differs. Any
        failure closes the engine before it is raised, but for :class:`~.errors.StopRollout` raised by the
        policy: the rollout then ends at that chunk boundary, the chunks in flight are received and dropped,
        and the engine stays idle with its envs mid-episode (under ``lookahead``, an env whose chunk ran
        past its lead is reset) before it is re-raised. With ``auto_reset=False`` nothing resets an ended
        episode here: drive the engine with :meth:`submit` / :meth:`collect` and :meth:`reset`
        (``env_ids``) instead. ``schedule``: one of :mod:`.schedules` (``"barrier"``: stage by stage, as
        above; ``"async"``: slice by slice, no barrier across processes; ``"lookahead"``: the next chunk
        chosen from lead observations, the policy input holding the committed actions under
        :data:`~.policy.COMMITTED_KEY`); ``None``: the profile's.
        """
        if not callable(policy):
            raise TypeError(f"policy must be callable, got {policy!r}")
        num_rounds = check_positive_int("num_rounds", num_rounds)
        check_bool("reset", reset)
        check_bool("overlap", overlap)
        schedule = check_choice("schedule", self.profile.schedule if schedule is None else schedule, SCHEDULES)
        driver = self._driver
        run = schedule_class(schedule)(driver, policy, num_rounds, on_chunk, overlap=overlap)
        driver.require(EngineState.NOT_RESET, EngineState.IDLE, doing="start a rollout")
        try:
            if reset or driver.state is EngineState.NOT_RESET:
                driver.reset()
            driver.new_rollout()
            restarts_before = self._executor.restarts
            start = time.perf_counter()
            run.run()
            wall = time.perf_counter() - start
        except StopRollout:
            self._stop_early()
            raise
        except BaseException as exc:
            driver.close_after(exc, "inside rollout()")
            raise
        restarts = self._executor.restart_records[restarts_before:]
        stats = driver.accounting.stats(num_rounds, self.chunk_size, wall, restarts, schedule)
        if stats.envs_never_stepped.size:
            logger.warning("envs %s took no own action in this rollout of %d rounds (%d worker restarts)",
                           stats.envs_never_stepped.tolist(), num_rounds, len(restarts))
        return stats

    def _stop_early(self) -> None:
        """A policy raised :class:`~.errors.StopRollout`: receive the chunks in flight and drop them, so the
        engine is idle with its envs mid-episode; an env whose chunk ran past its lead (the ``lookahead``
        schedule) has no boundary observation of its own state, and is reset. A failure meanwhile closes
        the engine."""
        driver = self._driver
        try:
            behind = driver.drain()
            if behind:
                driver.reset(behind)
        except BaseException as exc:
            driver.close_after(exc, "while stopping a rollout early")
            raise

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every worker and free the shared memory. Idempotent, and retryable after an interrupt."""
        self._driver.close()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.plan
        return (f"RolloutEngine({p.num_env_processes} workers x {p.envs_per_process} envs x {p.pipeline_stages} "
                f"stages, partition={p.partition!r}, chunk_size={self.chunk_size}, state={self.state.value!r})")


__all__ = ["ChunkInputs", "EngineState", "InFlight", "RolloutEngine"]
