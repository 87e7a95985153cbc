"""Executors host the env workers: a transport per kind (how to talk to a worker) and one supervisor over it.

- A :class:`~.transport.Transport` moves requests and replies: spawned local processes (:class:`ProcessTransport`,
  ``"process"``), Ray actors (:class:`~.ray_executor.RayTransport`, ``"ray"``) or this process itself
  (:class:`InlineTransport`, ``"inline"``). It starts a worker, sends it a request, tells which workers
  have a reply (or died), reads one reply and stops a worker; nothing else. Boundary observations come back
  through shared memory for processes, in the replies otherwise.
- The :class:`Supervisor` is the executor the engine talks to, the same over every transport: the
  pending-reply queue of each worker (replies in request order; a chunk with a lead owes two, its LEAD and
  its END, :func:`reply_parts`), the deadlines and hang detection (each
  reply waited for in the one loop :func:`~.supervision.wait_for_replies`, watched by a
  :class:`~.supervision.ReplyWatch`), the restart budget and respawn, and the placeholder results.

A dead worker is detected at once (process sentinel / actor error): :class:`~.errors.WorkerDiedError`; a
hung one (past its deadline, or without progress inside a chunk) is stopped and reported as
:class:`~.errors.WorkerHungError` (:mod:`.supervision`). With a restart policy (``restart_workers``) the
worker is replaced instead, within the policy's budget, by a fresh worker whose envs are all reset; every
reply that was pending on it then is a placeholder: the reset observation, zero rewards, ``truncated`` at
the first step, no action applied, ``info["worker_restarted"] = True`` (a pending LEAD: every row's episode
ended before the lead, its lead observation the reset one).

A new transport is a :class:`~.transport.Transport` subclass (in this module, or a module of its own like
:mod:`.ray_executor` when it imports something heavy) and a branch of :func:`make_executor`. Where a
worker runs is :mod:`.placement`'s business; what a worker does is :class:`~.worker.EnvWorker`'s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Sequence

import numpy as np

from ..core.tracing import IPC, WAIT, get_profiler
from ..patching import omnigibson as omnigibson_patches
from .chunk import ChunkLead, ChunkResult
from .errors import WorkerDiedError, WorkerHungError
from .placement import Setting
from .protocol import Attach, Chunk, Command, Failure, Ok, Reply, Request, Reset, unwrap
from .serve import CLOSE_GRACE_S, ProcessChannel, stop_processes
from .shm import ACTIONS_KEY, SharedBuffers, action_buffer_space
from .shutdown import close_on_sigterm, deferred_interrupts, release
from .supervision import ChunkProgress, ReplyWatch, RestartBudget, RestartRecord, StepTimes, Supervision, wait_for_replies
from .transport import RESTART_HINT, Transport
from .worker import EnvWorker, WorkerSpec, env_worker_main

#: Where the env workers run: spawned local processes, Ray actors, or this process.
EXECUTORS = ("process", "ray", "inline")


#: Which reply of its request a pending entry waits for (:mod:`.protocol`): the one reply of most requests,
#: or the LEAD and the END reply of a chunk with a lead.
ONLY, LEAD, END = "only", "lead", "end"


def reply_parts(request: Request) -> tuple[str, ...]:
    """The replies ``request`` is answered with, in order."""
    if isinstance(request, Chunk) and request.lead_steps is not None:
        return (LEAD, END)
    return (ONLY,)


@dataclass(eq=False)
class Pending:
    """One reply a worker owes, oldest first in the worker's queue."""

    request: Request
    #: :data:`ONLY`, :data:`LEAD` or :data:`END`.
    part: str = ONLY
    #: The reply once read (or the placeholder a respawn answered it with).
    reply: Reply | None = None
    #: Watched since the driver first waited for this reply (deadline, stall limit).
    watch: ReplyWatch | None = None
    #: The hang :meth:`Supervisor.ready` found, handled by the next :meth:`Supervisor.collect` of the worker.
    hung: WorkerHungError | None = None


class Supervisor:
    """The executor the engine talks to: one :class:`Transport` supervised (module docs).

    Calls: :meth:`start`, :meth:`submit` ``(worker, request)``, :meth:`ready` (workers whose reply is
    there), :meth:`collect` ``(worker)`` (replies in submit order; a chunk with a lead is collected twice,
    its LEAD then its END), :meth:`take_respawned`, :meth:`close`."""

    def __init__(self, transport: Transport, supervision: Supervision):
        self.transport = transport
        self.specs = transport.specs
        self.supervision = supervision
        self.pending: list[deque[Pending]] = [deque() for _ in self.specs]
        self.budget = None if supervision.restart is None else RestartBudget(supervision.restart)
        self.step_times = StepTimes()
        #: Worker -> reset observations of all its envs, for workers respawned since :meth:`take_respawned`.
        self.respawned: dict[int, dict[str, np.ndarray]] = {}

    @property
    def pids(self) -> list[int]:
        return self.transport.pids

    @property
    def worker_nodes(self) -> list[str | None]:
        return self.transport.worker_nodes

    @property
    def restart_records(self) -> list[RestartRecord]:
        """Every restart so far, oldest first."""
        return [] if self.budget is None else list(self.budget.records)

    @property
    def restarts(self) -> int:
        """Workers respawned so far."""
        return len(self.restart_records)

    # --- start-up -------------------------------------------------------------------------------
    def start(self) -> tuple[Any, Any]:
        """Launch every worker (they build in parallel), wait for all; returns the spaces of worker 0. When
        one fails, the workers still building are stopped at once (they could not take a close request
        before their build ends, so a close grace would only delay the error) and the others closed."""
        spaces = []
        try:
            for w in range(len(self.specs)):
                self._launch(w)
            for w in range(len(self.specs)):
                spaces.append(self._init_or_stop(w))
        except BaseException:
            for w in range(len(spaces), len(self.specs)):
                self.transport.discard(w)
            self.close()
            raise
        return spaces[0]

    def _launch(self, worker: int) -> None:
        self.transport.launch(worker)
        self.transport.started[worker] = time.monotonic()

    def _init_or_stop(self, worker: int) -> tuple[Any, Any]:
        """:meth:`_await_init`; a worker that dies or hangs in it is stopped at once (no close grace)."""
        try:
            return self._await_init(worker)
        except (WorkerDiedError, WorkerHungError):
            self.transport.discard(worker)
            raise

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        """Wait (from its launch) until ``worker`` built its backend, then serve its set-up request."""
        payload = unwrap(self._wait_and_read(worker, Command.INIT, self.transport.started[worker]), worker)
        spaces, first = self.transport.setup(worker, payload)
        if first is not None:
            self._call(worker, first)
        return spaces

    def _watch(self, worker: int, command: Command, since: float | None = None) -> ReplyWatch:
        """The watch of ``worker``'s reply to ``command``: its deadline, and inside a chunk its stall limit."""
        seconds, name = self.supervision.deadline(command)
        stall = self.step_times.stall_limit(self.supervision.stall_timeout_s) if command == Command.CHUNK else None
        progress = None if stall is None else self.transport.progress(worker)
        return ReplyWatch(worker, self.specs[worker].env_ids, command, seconds, name, since=since,
                          progress=progress, stall_s=stall, who=self.transport.who(worker))

    def _wait_and_read(self, worker: int, command: Command, since: float | None = None,
                       watch: ReplyWatch | None = None) -> Reply:
        """Wait for ``worker``'s oldest reply (in the one wait loop) and read it."""
        watch = watch or self._watch(worker, command, since)
        wait_for_replies(self.transport.poll, {worker: watch})
        return self.transport.receive(worker, command)

    def _call(self, worker: int, request: Request) -> Any:
        """Send ``request`` and wait for its payload (start-up and restart, outside the pending queue)."""
        self.transport.send(worker, request)
        return unwrap(self._wait_and_read(worker, request.command), worker)

    # --- requests -------------------------------------------------------------------------------
    def submit(self, worker: int, request: Request) -> None:
        """Queue ``request`` (a :class:`~.protocol.Reset` or :class:`~.protocol.Chunk`) on ``worker``."""
        with get_profiler().section(IPC, worker=worker, command=str(request.command)):
            self.transport.send(worker, request)
        self.pending[worker].extend(Pending(request, part) for part in reply_parts(request))

    def _oldest(self, worker: int) -> Pending:
        """The oldest pending request of ``worker``, its watch started on the first wait for it."""
        if not self.pending[worker]:
            raise RuntimeError(f"worker {worker} has no pending request to collect")
        entry = self.pending[worker][0]
        if entry.watch is None:
            entry.watch = self._watch(worker, entry.request.command)
        return entry

    def ready(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Of ``workers`` (each with a pending request), those whose oldest reply :meth:`collect` can take
        without waiting: it arrived, or the worker died or hung (``collect`` then raises, or respawns it).
        Waits up to ``timeout_s`` seconds for the first one (``None``: until there is one); ``[]`` on timeout.
        Each reply's deadline and stall limit count from the first wait for it, here or in :meth:`collect`."""
        entries = {w: self._oldest(w) for w in workers}
        settled = [w for w, e in entries.items() if e.reply is not None or e.hung is not None]
        if settled:
            return settled
        try:
            return sorted(wait_for_replies(self.transport.poll, {w: e.watch for w, e in entries.items()}, timeout_s))
        except WorkerHungError as exc:
            entries[exc.worker].hung = exc
            return [exc.worker]

    def collect(self, worker: int, out: dict[str, np.ndarray] | None = None) -> tuple[Any, dict[str, np.ndarray] | None]:
        """Payload and observations of the oldest reply ``worker`` owes: a chunk's result and its boundary
        observations, a reset's infos and observations, a lead chunk's :class:`~.chunk.ChunkLead` and its
        lead observations, or its END result and ``None`` (the lead's observations were the chunk's).

        With ``out`` (key -> array with one row per env of the request) the observations are copied
        straight into it (one copy from shared memory) and ``out`` is returned."""
        entry = self._oldest(worker)
        if entry.reply is None:
            try:
                with get_profiler().section(WAIT, worker=worker, command=str(entry.request.command)):
                    if entry.hung is not None:
                        raise entry.hung
                    entry.reply = self._wait_and_read(worker, entry.request.command, watch=entry.watch)
            except (WorkerDiedError, WorkerHungError) as exc:
                self.transport.discard(worker)
                if self.budget is None:
                    raise
                self._recover(worker, exc)
        self.pending[worker].popleft()
        payload = unwrap(entry.reply, worker)
        get_profiler().merge(entry.reply.spans)
        data, obs = (payload, None) if entry.part == END else payload
        if isinstance(data, ChunkResult):
            self.step_times.add(data)
        if entry.part == END:
            return data, None
        if obs is None:
            with get_profiler().section(IPC, worker=worker, command="read_obs"):
                obs = self.transport.read_obs(worker, entry.request.rows, out)
        elif out is not None:
            for key, arr in out.items():
                arr[...] = obs[key]
            obs = out
        return data, obs

    def take_respawned(self) -> dict[int, dict[str, np.ndarray]]:
        """Workers respawned since the last call -> reset observations of all their envs."""
        respawned, self.respawned = self.respawned, {}
        return respawned

    # --- restarts -------------------------------------------------------------------------------
    def _recover(self, worker: int, cause: WorkerDiedError | WorkerHungError) -> None:
        """Respawn the stopped ``worker`` within the restart budget (which raises once it is spent); a
        respawn that dies or hangs itself is charged and retried."""
        while True:
            pending = list({id(e.request): e.request for e in self.pending[worker]}.values())
            backoff = self.budget.charge(worker, self.specs[worker].env_ids, pending, cause)
            time.sleep(backoff)
            try:
                self._respawn(worker)
                return
            except (WorkerDiedError, WorkerHungError) as exc:
                self.transport.discard(worker)
                cause = exc

    def _respawn(self, worker: int) -> None:
        """Start ``worker`` afresh, reset all its envs, answer its pending requests with placeholders."""
        self._launch(worker)
        self._await_init(worker)
        spec = self.specs[worker]
        rows = tuple(range(spec.num_envs))
        infos, obs = self._call(worker, Reset(rows))
        obs = obs if obs is not None else self.transport.read_obs(worker, rows)
        self.respawned[worker] = obs
        for entry in self.pending[worker]:
            sel = list(entry.request.rows)
            entry.reply = Ok(placeholder(entry.request, entry.part, spec, [infos[r] for r in sel],
                                         {k: v[sel] for k, v in obs.items()}))
            entry.hung = None

    def close(self) -> None:
        """Stop every worker and free every resource. Idempotent."""
        self.transport.close()


def placeholder(request: Request, part: str, spec: WorkerSpec, infos: list[dict], obs: dict) -> Any:
    """The payload a respawned worker's pending reply ``part`` of ``request`` is answered with (module
    docs). A lead chunk's LEAD: every row's episode ended before the lead (its lead observation is the
    reset one, no committed action runs); its END: the placeholder result without observations."""
    infos = [{**i, "worker_restarted": True} for i in infos]
    if not isinstance(request, Chunk):
        return (infos, obs)
    n, steps = len(request.rows), request.steps
    env_ids = spec.env_ids[list(request.rows)]
    if part == LEAD:
        return (ChunkLead(env_ids, request.lead_steps, np.ones(n, dtype=bool), np.zeros(n, dtype=bool)), obs)
    truncated = np.zeros((n, steps), dtype=bool)
    truncated[:, 0] = True
    result = ChunkResult(
        env_ids=env_ids,
        obs=None,
        rewards=np.zeros((n, steps)),
        terminated=np.zeros((n, steps), dtype=bool),
        truncated=truncated,
        applied=np.zeros((n, steps), dtype=bool),
        infos=infos,
        global_steps=np.zeros(n, dtype=np.int64),
        sim_seconds=np.zeros(n),
        env_wall_seconds=np.zeros(n),
    )
    return result if part == END else (result, obs)


@dataclass
class ProcessSlot:
    """What one process worker holds on the driver: its channel and its shared-memory segments."""

    channel: ProcessChannel | None = None
    obs_buffers: SharedBuffers | None = None
    action_buffers: SharedBuffers | None = None
    progress: SharedBuffers | None = None

    def segments(self) -> list[SharedBuffers]:
        return [b for b in (self.obs_buffers, self.action_buffers, self.progress) if b is not None]


class ProcessTransport(Transport):
    """Workers as spawned local processes; observations and actions through shared memory, requests over
    pipes, each worker's step progress in a segment of its own (hang detection, :mod:`.supervision`).

    ``close()`` is idempotent and retryable: what an interrupt left undone is done by the next call, or at
    interpreter exit. A Ctrl-C while it waits for busy workers cuts that wait short; the workers are killed
    and the segments unlinked before the ``KeyboardInterrupt`` is raised. While open, a SIGTERM closes it
    (:mod:`.shutdown`)."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        super().__init__(specs)
        #: One slot per worker; shared with the finalizer, which must not hold a reference to self.
        self.slots = [ProcessSlot() for _ in self.specs]
        self._finalizer = weakref.finalize(self, _shutdown_processes, self.slots)
        close_on_sigterm(self)

    @property
    def pids(self) -> list[int]:
        return [s.channel.pid for s in self.slots if s.channel is not None]

    def launch(self, worker: int) -> None:
        spec = self.specs[worker]
        self.slots[worker].channel = ProcessChannel(
            env_worker_main, (spec,), f"behavior1k_fast-env-{worker}", worker, spec.env_ids, RESTART_HINT,
            env=spec.env,
        )

    def setup(self, worker: int, payload: Any) -> tuple[tuple[Any, Any], Request | None]:
        observation_space, action_space = payload
        spec, slot = self.specs[worker], self.slots[worker]
        if slot.obs_buffers is None:  # a respawned worker attaches the segments of the one it replaces
            slot.obs_buffers = SharedBuffers.create(observation_space, spec.num_envs)
            slot.action_buffers = SharedBuffers.create(action_buffer_space(action_space, spec.profile["chunk_size"]),
                                                       spec.num_envs)
            slot.progress = ChunkProgress.create().buffers
        return payload, Attach(slot.obs_buffers.spec, slot.action_buffers.spec, slot.progress.spec)

    def send(self, worker: int, request: Request) -> None:
        slot = self.slots[worker]
        if isinstance(request, Chunk):  # actions through shared memory: the pipe message stays small
            slot.action_buffers.write(request.rows, [{ACTIONS_KEY: a} for a in request.actions])
            request = dataclasses.replace(request, actions=None)
        slot.channel.send(request)

    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Wait on every worker's pipe and sentinel at once."""
        by_object = {}
        for w in workers:
            channel = self.slots[w].channel
            by_object[channel.conn] = by_object[channel.proc.sentinel] = w
        return sorted({by_object[o] for o in wait(list(by_object), timeout=timeout_s)})

    def receive(self, worker: int, command: Command) -> Reply:
        return self.slots[worker].channel.read(command)

    def who(self, worker: int) -> str:
        return f"pid {self.slots[worker].channel.pid}"

    def progress(self, worker: int) -> ChunkProgress | None:
        return ChunkProgress(self.slots[worker].progress)

    def read_obs(self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        return self.slots[worker].obs_buffers.read(rows, out)

    def discard(self, worker: int) -> None:
        stop_processes([self.slots[worker].channel], 0.0)  # dead or hung: no grace
        self.slots[worker].channel = None

    def close(self) -> None:
        with deferred_interrupts() as interrupted:
            _shutdown_processes(self.slots, interrupted)
        self._finalizer.detach()
        release(self)


def _shutdown_processes(slots: Sequence[ProcessSlot], cancel: threading.Event | None = None) -> None:
    """Stop every worker (the grace wait for busy ones ends early once ``cancel`` is set) and unlink every
    segment (close() and interpreter exit). Each entry is cleared only once done, so a call that was
    interrupted can be repeated."""
    try:
        stop_processes([s.channel for s in slots], CLOSE_GRACE_S, cancel)
    finally:
        for slot in slots:
            if slot.channel is not None and not slot.channel.proc.is_alive():
                slot.channel = None
            for name in ("obs_buffers", "action_buffers", "progress"):
                buffers = getattr(slot, name)
                if buffers is not None:
                    buffers.close()
                    buffers.unlink()
                    setattr(slot, name, None)


class InlineTransport(Transport):
    """Every worker in this process, run when its request is sent: the same engine without subprocesses,
    debuggable under pdb (a worker's exception is chained to the :class:`~.errors.WorkerError`), and quick
    to start in unit tests. Nothing overlaps: ``submit`` returns after the chunk stepped.

    The workers apply their profile to this process, as a worker process does to itself; ``close()``
    restores the profile that was applied before (or none)."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        super().__init__(specs)
        self.workers: list[EnvWorker | None] = [None] * len(self.specs)
        self.replies: list[deque[Reply]] = [deque() for _ in self.specs]
        self.previous_profile = omnigibson_patches.active_profile()
        self.closed = False

    def launch(self, worker: int) -> None:
        """Build the worker here and now; its INIT reply is queued (a failure as a worker process reports it)."""
        spec = self.specs[worker]
        try:
            self.workers[worker] = EnvWorker(spec)
        except Exception as exc:
            self.replies[worker] = deque([Failure.from_exception(exc, Command.INIT, spec.env_ids)])
            return
        self.replies[worker] = deque([Ok(self.workers[worker].ready())])

    def send(self, worker: int, request: Request) -> None:
        answer = self.workers[worker].handle(request)  # a lead chunk: both its replies, now
        self.replies[worker].extend((answer,) if isinstance(answer, (Ok, Failure)) else answer)

    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Every reply is there: inline work ran when it was sent."""
        return [w for w in workers if self.replies[w]]

    def receive(self, worker: int, command: Command) -> Reply:
        return self.replies[worker].popleft()

    def discard(self, worker: int) -> None:
        if self.workers[worker] is not None:
            self.workers[worker].close()
        self.workers[worker] = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            for w in range(len(self.specs)):
                self.discard(w)
        finally:
            if self.previous_profile is None:
                omnigibson_patches.revert()
            else:
                omnigibson_patches.apply(self.previous_profile)


def make_executor(
    kind: str,
    specs: Sequence[WorkerSpec],
    supervision: Supervision,
    ray_actor_options: dict | None = None,
    placement: Setting = None,
) -> Supervisor:
    """The supervised executor of transport ``kind`` (one of :data:`EXECUTORS`) for ``specs``; nothing is
    started yet. ``placement``: as returned by :func:`~.placement.check_placement` (Ray only)."""
    if kind == "process":
        transport: Transport = ProcessTransport(specs)
    elif kind == "inline":
        transport = InlineTransport(specs)
    elif kind == "ray":
        from .ray_executor import RayTransport

        transport = RayTransport(specs, supervision.startup_timeout_s, ray_actor_options, placement)
    else:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
    return Supervisor(transport, supervision)
