"""The rollout engine: the driver side of the hybrid-partition pipeline.

``RolloutEngine(factory, profile)`` starts P env workers (processes, Ray actors or inline) of E envs each,
groups their envs into K stages (:class:`~.plan.PartitionPlan`), and drives them chunk by chunk. Each
worker's backend is built with ``profile.pipeline_stages`` = the number of stages sharing its physics (K in
hybrid partition, 1 in process partition), so it can rescale physics (``behavior1k_fast.core.frequencies``).

:meth:`RolloutEngine.rollout` runs a schedule (:mod:`.schedules`: ``barrier``, ``async``, and
``lookahead``, a pipeline in time: one stage or stages of whole processes, each chunk chosen while the
last one ends): stage k's chunk
is sent to its workers asynchronously and the driver runs the policy for the next stage while they step, so
with K >= 2 the forward pass of one stage overlaps env stepping of the others. In hybrid partition the other
slices of a process hold their last action while a stage steps (the backend contract);
:class:`~.accounting.RolloutStats` reports, per env, the simulated seconds per own action (from the
backends' clocks) and the hold steps per round.

The surface a schedule is built on (EnvPool's send / recv habit), and nothing else of the engine:

- :meth:`~RolloutEngine.forward`: the policy on a batch of observations, its output validated once;
- :meth:`~RolloutEngine.send`: a chunk to the envs of some stage slices (:class:`~.plan.StageSlice`), with
  the observations the policy saw and its extras, attached to the result when it comes back;
- :meth:`~RolloutEngine.ready`: which busy workers have a result, waiting on any of them up to a deadline;
- :meth:`~RolloutEngine.receive`: the result of slices sent together, their observations into a batch;
  :meth:`~RolloutEngine.receive_lead`: for a chunk sent with a lead (``lead_steps``), its lead report and
  observations first (the ``lookahead`` schedule);
- :meth:`~RolloutEngine.stage_obs` / :meth:`~RolloutEngine.set_stage_obs` / :meth:`~RolloutEngine.new_batch`:
  the stage batches; :meth:`~RolloutEngine.take_respawned`: reset observations of respawned workers;
- :attr:`~RolloutEngine.accounting`: the one :class:`~.accounting.Accounting` of the running rollout.

The engine is in one :class:`EngineState` at a time, checked in one place (:meth:`RolloutEngine._require`):
a call that does not fit raises a typed error (:mod:`.errors`) and leaves the engine usable; ``send`` and
``receive`` move it between ``IDLE`` and ``STEPPING``, a schedule never sets a state itself.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..core.checks import check_bool, check_choice, check_int, check_local_layout, check_picklable, check_positive_int
from ..core.contract import BackendFactory, check_backend_build, check_env_indices, patch_set_of
from ..core.profile import SCHEDULES, RolloutProfile
from ..core.tracing import MODEL_FORWARD, WAIT, get_profiler
from .accounting import Accounting, RolloutStats
from .chunk import ChunkLead, ChunkResult, action_dtype, check_chunk_actions, concat_leads, concat_results
from .errors import (ChunkInFlightError, ClosedError, EngineBusyError, NoChunkInFlightError, NotResetError,
                     WorkerDiedError, WorkerError)
from .transports import EXECUTORS, make_executor
from .placement import bind_gpus, check_placement
from .plan import PartitionPlan, StageSlice
from .policy import Policy, call_policy, split_policy_output
from .protocol import Chunk, Reset
from .schedules import schedule_class
from .supervision import (CHUNK_TIMEOUT_S, RESET_TIMEOUT_S, STARTUP_TIMEOUT_S, RestartPolicy, Supervision,
                          check_inline_deadlines, logger)
from .worker import WorkerSpec


class EngineState(enum.Enum):
    """Where the engine is (gymnasium's ``AsyncState`` habit); see :meth:`RolloutEngine._require`."""

    #: Workers started, no observation yet: :meth:`~RolloutEngine.reset` first.
    NOT_RESET = "not reset"
    #: Every env has a boundary observation, no chunk is in flight.
    IDLE = "idle"
    #: Chunks are in flight (:meth:`~RolloutEngine.send` without its :meth:`~RolloutEngine.receive`).
    STEPPING = "stepping"
    #: Closed (by :meth:`~RolloutEngine.close` or a worker failure): every call raises ClosedError.
    CLOSED = "closed"


@dataclass(frozen=True)
class ChunkInputs:
    """What a chunk was made from: the observations the policy saw (key -> ``[n, ...]``), the actions sent
    ``[n, N, action_dim]`` and the policy's extras (key -> ``[n, ...]``), rows in the order they were sent."""

    #: ``None`` for a chunk submitted before any reset (no observation was seen).
    policy_obs: Mapping[str, np.ndarray] | None
    actions: np.ndarray
    extras: Mapping[str, np.ndarray]

    def rows(self, rows: slice) -> "ChunkInputs":
        """The inputs of ``rows`` (views, no copy)."""
        obs = None if self.policy_obs is None else {k: v[rows] for k, v in self.policy_obs.items()}
        return ChunkInputs(obs, self.actions[rows], {k: v[rows] for k, v in self.extras.items()})

    def attach(self, result: ChunkResult) -> ChunkResult:
        """``result`` with these inputs in its ``policy_obs``, ``actions`` and ``extras``: the one place a
        result gets the inputs of its chunk."""
        result.policy_obs = None if self.policy_obs is None else dict(self.policy_obs)
        result.actions, result.extras = self.actions, dict(self.extras)
        return result


@dataclass(eq=False)
class InFlight:
    """One slice's chunk in flight: the slice, the inputs of the send it was part of and its rows there."""

    piece: StageSlice
    inputs: ChunkInputs
    rows: slice
    #: d of a chunk sent with a lead (two replies: LEAD, END); ``None``: one reply.
    lead_steps: int | None = None
    #: Once its LEAD came: the batch :meth:`RolloutEngine.receive_lead` wrote the lead observations into and
    #: this slice's rows there.
    lead_batch: dict[str, np.ndarray] | None = None
    lead_rows: slice | None = None


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
        placement = check_placement(placement, self.plan.num_processes, executor, ray_actor_options)
        if executor != "ray":  # Ray places workers across a cluster, not only on this machine
            check_local_layout(self.plan.num_processes, self.plan.num_envs, self.profile.chunk_size,
                               processes=executor == "process")
        self.chunk_size = self.profile.chunk_size
        worker_profile = self.plan.worker_profile(self.profile)
        envs = bind_gpus(self.profile.gpu_ids, self.plan.num_processes, executor)
        if envs is None:
            envs = [{} for _ in range(self.plan.num_processes)]
        else:
            worker_profile = worker_profile.replace(gpu_ids=(0,))  # each worker sees its one GPU as CUDA 0
        for w in range(self.plan.num_processes):
            check_backend_build(factory, self.plan.envs_per_process, seed + w, worker_profile)
        specs = [
            WorkerSpec(w, factory_blob, self.plan.envs_per_process, seed + w, worker_profile.to_dict(), auto_reset,
                       tracing=get_profiler().enabled, env=envs[w], patch_set=patch_set_of(factory))
            for w in range(self.plan.num_processes)
        ]
        self.auto_reset = auto_reset
        self._state = EngineState.CLOSED
        self._executor = make_executor(executor, specs, supervision, ray_actor_options, placement)
        self.observation_space, self.action_space = self._executor.start()
        self._state = EngineState.NOT_RESET
        self.action_dim = int(np.prod(self.action_space.shape))
        #: The dtype the backends get chunk actions in; every chunk is cast to it (a copy) and checked there.
        self.action_dtype = action_dtype(self.action_space)
        self._stage_obs: list[dict[str, np.ndarray] | None] = [None] * self.plan.pipeline_stages
        #: Worker -> its slices' chunks in flight, in the order they were sent (its replies' order).
        self._in_flight: dict[int, deque[InFlight]] = {w: deque() for w in range(self.plan.num_processes)}
        #: The counters of the running (or last) rollout; every forward, send and receive adds to them.
        self.accounting = Accounting(self.plan)
        #: (thread id, what it does) of the thread driving the engine now; ``None`` when none is.
        self._driver: tuple[int, str] | None = None
        self._driver_lock = threading.Lock()

    # --- state --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _driving(self, doing: str) -> Iterator[None]:
        """One thread drives the engine at a time: inside, this thread does; a call from another thread
        meanwhile raises :class:`~.errors.EngineBusyError` at once (the same thread may nest calls)."""
        me = threading.get_ident()
        with self._driver_lock:
            if self._driver is not None and self._driver[0] != me:
                thread = next((t.name for t in threading.enumerate() if t.ident == self._driver[0]), "?")
                raise EngineBusyError(f"cannot {doing}: thread {thread!r} is running {self._driver[1]} on this "
                                      "engine, and one thread drives an engine at a time")
            outer = self._driver is None
            if outer:
                self._driver = (me, doing)
        try:
            yield
        finally:
            if outer:
                self._driver = None

    @property
    def state(self) -> EngineState:
        return self._state

    def _require(self, *states: EngineState, doing: str = "do this") -> None:
        """The one check of the engine's state: raise the typed error of the state it is in unless that is
        one of ``states`` (``doing`` names the call in the message)."""
        if self._state in states:
            return
        if self._state is EngineState.CLOSED:
            raise ClosedError("the rollout engine is closed")
        if self._state is EngineState.NOT_RESET:
            raise NotResetError(f"call reset() before you {doing}")
        if self._state is EngineState.STEPPING:
            busy = sorted({f.piece.stage for q in self._in_flight.values() for f in q})
            raise ChunkInFlightError(f"cannot {doing} with chunks in flight for stages {busy}")
        raise NoChunkInFlightError(f"cannot {doing}: no chunk is in flight; send one first")

    def _settle(self) -> None:
        """After a receive, once nothing is in flight: ``IDLE``, or ``NOT_RESET`` while a stage has no
        observations yet (chunks stepped without a reset)."""
        if self._state is EngineState.STEPPING and not any(self._in_flight.values()):
            ready = all(batch is not None for batch in self._stage_obs)
            self._state = EngineState.IDLE if ready else EngineState.NOT_RESET

    # --- properties ---------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.plan.num_envs

    @property
    def pipeline_stages(self) -> int:
        """K, the pipeline stages of the plan."""
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

    def stage_envs(self, stage: int) -> np.ndarray:
        """Global env ids of ``stage`` in batch order (the rows of its observations and actions)."""
        return self.plan.stage_envs(stage)

    def stage_obs(self, stage: int) -> dict[str, np.ndarray]:
        """The latest boundary observations of ``stage``: key -> [stage_size, ...]."""
        self.plan.check_stage(stage)
        if self._stage_obs[stage] is None:
            raise NotResetError("call reset() before reading observations")
        return self._stage_obs[stage]

    def stage_busy(self, stage: int) -> bool:
        """Whether a slice of ``stage`` has a chunk in flight."""
        return any(f.piece.stage == stage for q in self._in_flight.values() for f in q)

    # --- the surface of the schedules -----------------------------------------------------------
    def new_batch(self, rows: int | None = None) -> dict[str, np.ndarray]:
        """An empty observation batch of ``rows`` envs (default: one stage's): key -> [rows, ...]."""
        n = self.plan.stage_size if rows is None else rows
        return {k: np.empty((n, *b.shape), b.dtype) for k, b in self.observation_space.spaces.items()}

    def set_stage_obs(self, stage: int, batch: Mapping[str, np.ndarray]) -> None:
        """Make ``batch`` (key -> [stage_size, ...], rows in :meth:`stage_envs` order) the boundary
        observations of ``stage`` (a schedule that received slice by slice hands them back here)."""
        self.plan.check_stage(stage)
        self._require(EngineState.IDLE, doing="set stage observations")
        shapes = {k: (self.plan.stage_size, *b.shape) for k, b in self.observation_space.spaces.items()}
        if set(batch) != set(shapes) or any(batch[k].shape != shape for k, shape in shapes.items()):
            raise ValueError(f"batch for stage {stage} must hold {shapes}, "
                             f"got {({k: getattr(v, 'shape', None) for k, v in batch.items()})}")
        self._stage_obs[stage] = dict(batch)

    def forward(self, policy: Policy, obs: Mapping[str, np.ndarray], argname: str = "policy output") -> tuple[
            np.ndarray, dict[str, np.ndarray]]:
        """The policy's chunk and extras for the envs of ``obs`` (key -> [n, ...]): the one check of the
        policy's output on its way in (``argname`` names it in errors); its time counts as model seconds.
        Both are copies (the chunk in :attr:`action_dtype`), so a policy may reuse its output buffers."""
        self._require(EngineState.IDLE, EngineState.STEPPING, doing="run the policy")
        batch = len(next(iter(obs.values())))
        start = time.perf_counter()
        with get_profiler().section(MODEL_FORWARD, batch=batch):
            out = call_policy(policy, obs)
        self.accounting.model_seconds += time.perf_counter() - start
        actions, extras = split_policy_output(out, batch, argname)
        return check_chunk_actions(actions, batch, self.action_dim, self.chunk_size, argname, self.action_dtype), extras

    def send(
        self,
        pieces: Sequence[StageSlice],
        actions: np.ndarray,
        policy_obs: Mapping[str, np.ndarray] | None,
        extras: Mapping[str, np.ndarray] | None = None,
        lead_steps: int | None = None,
    ) -> None:
        """Send each slice of ``pieces`` its rows of the validated chunk ``actions`` (rows: the slices' envs
        in order, as :meth:`forward` returned them); returns at once. ``policy_obs`` and ``extras`` (same
        rows) are what the chunk was made from: :meth:`receive` attaches them to the result. A slice's next
        chunk may be sent before its last one was received (its worker serves them in order).
        ``lead_steps`` d (``0 <= d < chunk_size``): the workers read the lead observations after step
        ``N - d`` and report them at once (:meth:`receive_lead`) before the chunk's result (:mod:`.chunk`)."""
        self._require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        envs = sum(len(p.local_envs) for p in pieces)
        if len(actions) != envs:
            raise ValueError(f"actions have {len(actions)} rows, the slices to send hold {envs} envs")
        if lead_steps is not None:
            lead_steps = check_int("lead_steps", lead_steps, 0, self.chunk_size - 1)
        inputs = ChunkInputs(policy_obs, actions, dict(extras or {}))
        offset = 0
        with self._guard():
            for piece in pieces:
                rows = slice(offset, offset + len(piece.local_envs))
                offset = rows.stop
                self._executor.submit(piece.worker, Chunk(piece.local_envs, actions[rows], self.chunk_size, lead_steps))
                self._in_flight[piece.worker].append(InFlight(piece, inputs, rows, lead_steps))
                self._state = EngineState.STEPPING
                self.accounting.sent(piece, lead_steps)

    def ready(self, workers: Sequence[int], timeout_s: float | None = None) -> list[int]:
        """Of ``workers`` (each with a chunk in flight), those whose oldest result :meth:`receive` can take
        without waiting (or which died or hung: ``receive`` then raises, or gets the placeholder of a
        respawn). Waits on all of them at once, up to ``timeout_s`` seconds for the first (``None``: until
        one is ready); ``[]`` on timeout. Counts as wait seconds."""
        self._require(EngineState.STEPPING, doing="wait for results")
        start = time.perf_counter()
        with self._guard(), get_profiler().section(WAIT, command="ready"):
            ready = self._executor.ready(list(workers), timeout_s)
        self.accounting.wait_seconds += time.perf_counter() - start
        return ready

    def _oldest_sent_together(self, pieces: Sequence[StageSlice], lead: bool) -> list[InFlight]:
        """The in-flight entries of ``pieces``: each the oldest on its worker (``lead``: its LEAD not yet
        received; else its result), all from one :meth:`send`, in its order."""
        entries = []
        for piece in pieces:
            queue = self._in_flight[piece.worker]
            if not queue or queue[0].piece != piece:
                raise NoChunkInFlightError(f"the slice of stage {piece.stage} on worker {piece.worker} is not the "
                                           "oldest chunk in flight on its worker")
            entry = queue[0]
            if lead and (entry.lead_steps is None or entry.lead_batch is not None):
                raise NoChunkInFlightError(f"the chunk of worker {piece.worker} has no lead report to receive "
                                           f"({'sent without a lead' if entry.lead_steps is None else 'received'})")
            if not lead and entry.lead_steps is not None and entry.lead_batch is None:
                raise NoChunkInFlightError(f"the chunk of worker {piece.worker} was sent with a lead: "
                                           "receive_lead() it first")
            entries.append(entry)
        first = entries[0]
        if any(e.inputs is not first.inputs for e in entries) or any(
                a.rows.stop != b.rows.start for a, b in zip(entries, entries[1:])):
            raise ValueError("receive() takes slices sent together by one send(), in their order")
        return entries

    def _collect(self, entries: Sequence[InFlight], out: dict[str, np.ndarray] | None) -> list[Any]:
        """The payloads of ``entries``' oldest replies, their observations into the rows of ``out``."""
        start = time.perf_counter()
        offset, parts = 0, []
        with self._guard():
            for entry in entries:
                n = len(entry.piece.local_envs)
                rows = slice(offset, offset + n)
                offset += n
                part = None if out is None else {k: v[rows] for k, v in out.items()}
                parts.append(self._executor.collect(entry.piece.worker, part)[0])
        self.accounting.wait_seconds += time.perf_counter() - start
        return parts

    def receive_lead(self, pieces: Sequence[StageSlice], out: dict[str, np.ndarray] | None = None) -> tuple[
            ChunkLead, dict[str, np.ndarray]]:
        """The lead report (:class:`~.chunk.ChunkLead`: which rows' episodes ended before the lead, which
        sit the chunk out, whose committed actions run) and the lead observations (into ``out`` when given)
        of the chunk of ``pieces``, sent together with a lead and each the oldest on its worker. The result
        of that chunk follows with :meth:`receive`, whose ``obs`` are these lead observations."""
        self._require(EngineState.STEPPING, doing="receive")
        entries = self._oldest_sent_together(pieces, lead=True)
        out = self.new_batch(sum(len(p.local_envs) for p in pieces)) if out is None else out
        lead = concat_leads(self._collect(entries, out))
        offset = 0
        for entry in entries:
            n = len(entry.piece.local_envs)
            entry.lead_batch, entry.lead_rows = out, slice(offset, offset + n)
            offset += n
        self.accounting.lead_received(lead.env_ids)
        return lead, out

    def receive(self, pieces: Sequence[StageSlice], out: dict[str, np.ndarray] | None = None) -> ChunkResult:
        """The result of the chunk of ``pieces`` (slices sent together by one :meth:`send`, each the oldest
        in flight on its worker), rows in order, ``env_ids`` global, the chunk's inputs attached, its
        boundary observations in ``result.obs`` (written into ``out``, key -> [rows, ...], when given; for a
        chunk with a lead: its lead observations, :meth:`receive_lead` first). Counts as wait seconds; the
        result is added to :attr:`accounting`."""
        self._require(EngineState.STEPPING, doing="receive")
        entries = self._oldest_sent_together(pieces, lead=False)
        first, last = entries[0], entries[-1]
        led = first.lead_steps is not None
        if not led and out is None:
            out = self.new_batch(sum(len(p.local_envs) for p in pieces))
        parts = self._collect(entries, None if led else out)
        for entry in entries:
            self._in_flight[entry.piece.worker].popleft()
        self._settle()
        result = first.inputs.rows(slice(first.rows.start, last.rows.stop)).attach(concat_results(parts))
        if not led:
            result.obs = out
        elif all(e.lead_batch is first.lead_batch for e in entries) and all(
                a.lead_rows.stop == b.lead_rows.start for a, b in zip(entries, entries[1:])):
            span = slice(first.lead_rows.start, last.lead_rows.stop)
            result.obs = {k: v[span] for k, v in first.lead_batch.items()}
        else:
            result.obs = {k: np.concatenate([e.lead_batch[k][e.lead_rows] for e in entries]) for k in first.lead_batch}
        self.accounting.received(result, arrived=not led)
        return result

    def take_respawned(self) -> dict[int, dict[str, np.ndarray]]:
        """Workers respawned since the last call -> reset observations of all their envs (key -> [E, ...])."""
        return self._executor.take_respawned()

    # --- stepping by stage ----------------------------------------------------------------------
    @_one_driver("reset()")
    def reset(self, env_ids: Sequence[int] | None = None) -> list[dict[str, np.ndarray]]:
        """Reset every env, or only the global ``env_ids``; returns the observations of each stage.

        Nothing may be in flight. Resetting a subset needs a full reset first."""
        if env_ids is None:
            self._require(EngineState.NOT_RESET, EngineState.IDLE, doing="reset")
            ids = np.arange(self.num_envs)
            batches = [self.new_batch() for _ in range(self.plan.pipeline_stages)]
        else:
            self._require(EngineState.IDLE, EngineState.NOT_RESET, doing="reset")
            if any(batch is None for batch in self._stage_obs):
                raise NotResetError("reset() every env once before resetting a subset with env_ids")
            ids = np.sort(check_env_indices(env_ids, self.num_envs))
            batches = self._copies(range(self.plan.pipeline_stages))
        e = self.plan.envs_per_process
        rows = {int(w): (ids[ids // e == w] % e).tolist() for w in np.unique(ids // e)}
        with self._guard():
            for w, local in rows.items():
                self._executor.submit(w, Reset(tuple(local)))
            for w, local in rows.items():
                obs = self._executor.collect(w)[1]
                self._store_worker_obs(batches, w, local, obs)
            self._executor.take_respawned()
        self._stage_obs = batches
        self._state = EngineState.IDLE
        return list(self._stage_obs)

    @_one_driver("submit()")
    def submit(self, stage: int, actions: np.ndarray) -> None:
        """Send stage ``stage`` its chunk ``actions [stage_size, chunk_size, action_dim]``; returns at once.

        The chunk is validated here, once, as a copy in :attr:`action_dtype` (the values the backends get:
        an error here leaves the engine usable): the workers trust what the engine sends."""
        self._require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        self.plan.check_stage(stage)
        if self.stage_busy(stage):
            raise ChunkInFlightError(f"stage {stage} already has a chunk in flight; collect({stage}) it first")
        actions = check_chunk_actions(actions, self.plan.stage_size, self.action_dim, self.chunk_size,
                                      dtype=self.action_dtype)
        self.send(self.plan.stage_slices(stage), actions, self._stage_obs[stage])

    @_one_driver("collect()")
    def collect(self, stage: int) -> ChunkResult:
        """Wait for the chunk of ``stage``; rows in :meth:`stage_envs` order, ``env_ids`` global. Its
        observations become the stage's boundary observations."""
        self._require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        self.plan.check_stage(stage)
        if not self.stage_busy(stage):
            raise NoChunkInFlightError(f"stage {stage} has no chunk in flight; submit() one first")
        result = self.receive(self.plan.stage_slices(stage))
        self._stage_obs[stage] = result.obs
        self._refresh_respawned()
        return result

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
        failure closes the engine before it is raised. With ``auto_reset=False`` nothing resets an ended
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
        run = schedule_class(schedule)(self, policy, num_rounds, on_chunk, overlap=overlap)
        self._require(EngineState.NOT_RESET, EngineState.IDLE, doing="start a rollout")
        try:
            if reset or self._state is EngineState.NOT_RESET:
                self.reset()
            self.accounting = Accounting(self.plan)
            restarts_before = self._executor.restarts
            start = time.perf_counter()
            run.run()
            wall = time.perf_counter() - start
        except BaseException:
            self.close()
            raise
        restarts = self._executor.restart_records[restarts_before:]
        stats = self.accounting.stats(num_rounds, self.chunk_size, wall, restarts, schedule)
        if stats.envs_never_stepped.size:
            logger.warning("envs %s took no own action in this rollout of %d rounds (%d worker restarts)",
                           stats.envs_never_stepped.tolist(), num_rounds, len(restarts))
        return stats

    # --- stage batches ---------------------------------------------------------------------------
    def _copies(self, stages: Any) -> list[dict[str, np.ndarray] | None]:
        """The stage batches, those of ``stages`` replaced by copies before anything writes into them, so
        that observations already handed out (results, :meth:`reset` returns) never change."""
        batches = list(self._stage_obs)
        for k in stages:
            batches[k] = {key: arr.copy() for key, arr in batches[k].items()}
        return batches

    def _refresh_respawned(self) -> None:
        """Envs of a respawned worker were reset: update the observations of stages not in flight."""
        fresh = self._executor.take_respawned()
        if not fresh:
            return
        idle = [k for k in range(self.plan.pipeline_stages) if not self.stage_busy(k)]
        batches = self._copies(idle)
        for worker, obs in fresh.items():
            self._store_worker_obs([batches[k] if k in idle else None for k in range(len(batches))],
                                   worker, range(self.plan.envs_per_process), obs)
        self._stage_obs = batches

    def _store_worker_obs(self, batches: Sequence[dict[str, np.ndarray] | None], worker: int, local: Sequence[int],
                          obs: dict[str, np.ndarray]) -> None:
        """Write the observations of ``worker``'s envs ``local`` (rows of ``obs``) into ``batches`` (one per
        stage; ``None``: leave that stage alone)."""
        ids = worker * self.plan.envs_per_process + np.asarray(local)
        for k, batch in enumerate(batches):
            if batch is None:
                continue
            batch_rows, obs_rows = np.nonzero(self.plan.stage_envs(k)[:, None] == ids)
            for key, arr in batch.items():
                arr[batch_rows] = obs[key][obs_rows]

    # --- lifecycle ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Close the engine when a worker fails, dies or times out (state of its envs unknown)."""
        try:
            yield
        except (WorkerError, WorkerDiedError, TimeoutError):
            self.close()
            raise

    def close(self) -> None:
        """Stop every worker and free the shared memory. Idempotent, and retryable after an interrupt."""
        self._state = EngineState.CLOSED
        self._executor.close()

    def __enter__(self) -> "RolloutEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.plan
        return (f"RolloutEngine({p.num_processes} workers x {p.envs_per_process} envs x {p.pipeline_stages} "
                f"stages, partition={p.mode!r}, chunk_size={self.chunk_size}, state={self._state.value!r})")
