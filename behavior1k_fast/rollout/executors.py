"""Executors host the env workers: spawned local processes (``"process"``), Ray actors (``"ray"``, in
:mod:`.ray_executor`) or this process itself (``"inline"``).

All expose the same calls to the engine: ``start()``, ``submit(worker, request)``, ``collect(worker)``
(replies in submit order), ``close()``. Boundary observations come back through shared memory for
processes, in the replies otherwise. A dead worker is detected at once (process sentinel / actor error):
:class:`~.errors.WorkerDiedError`; a hung one (past its deadline, or without progress inside a chunk) is
stopped and reported as :class:`~.errors.WorkerHungError` (:mod:`.supervision`). With a restart policy
(``restart_workers``) the worker is replaced instead, within the policy's budget, by a fresh worker whose
envs are all reset; every request that was pending on it then yields a placeholder result: the reset
observation, zero rewards, ``truncated`` at the first step, no action applied,
``info["worker_restarted"] = True``.

Placement (where a worker runs) is the executor's business; what a worker does is :class:`~.worker.EnvWorker`'s.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
import weakref
from collections import deque
from multiprocessing.connection import wait
from typing import Any, Sequence

import numpy as np

from ..core.tracing import IPC, WAIT, get_profiler
from ..patching import omnigibson as omnigibson_patches
from .chunk import ChunkResult
from .errors import WorkerDiedError, WorkerHungError
from .protocol import Attach, Chunk, Command, Failure, Ok, Reply, Request, Reset, unwrap
from .serve import CLOSE_GRACE_S, WATCH_PERIOD_S, ProcessChannel, stop_processes
from .shm import ACTIONS_KEY, SharedBuffers, action_buffer_space
from .shutdown import close_on_sigterm, deferred_interrupts, release
from .supervision import ChunkProgress, RestartBudget, RestartRecord, StallWatch, StepTimes, Supervision
from .worker import EnvWorker, WorkerSpec, env_worker_main

RESTART_HINT = "; pass restart_workers=True to respawn it and reset its envs"


class _Pending:
    __slots__ = ("request", "reply")

    def __init__(self, request: Request):
        self.request = request
        self.reply: Reply | None = None  # filled with a placeholder after a restart


class Executor(abc.ABC):
    """Worker bookkeeping shared by every executor; subclasses move the messages."""

    def __init__(self, specs: Sequence[WorkerSpec], supervision: Supervision):
        self.specs = list(specs)
        self.supervision = supervision
        self._pending: list[deque[_Pending]] = [deque() for _ in self.specs]
        self._budget = None if supervision.restart is None else RestartBudget(supervision.restart)
        self.step_times = StepTimes()
        self._respawned: dict[int, dict[str, np.ndarray]] = {}  # worker -> reset obs of all its envs

    # --- transport (per executor) ----------------------------------------------------------------
    @abc.abstractmethod
    def _launch(self, worker: int) -> None:
        """Start the worker without waiting for it to build its backend."""

    @abc.abstractmethod
    def _await_init(self, worker: int) -> tuple[Any, Any]:
        """Wait until the worker built its backend; its (observation_space, action_space)."""

    @abc.abstractmethod
    def _send(self, worker: int, request: Request) -> None:
        """Queue one request (never blocks on the worker's work)."""

    @abc.abstractmethod
    def _receive(self, worker: int, command: Command) -> Reply:
        """The oldest unread reply; WorkerDiedError if the worker died, WorkerHungError past the command's
        deadline (or, where the executor can see it, without progress inside a chunk)."""

    def _read_obs(
        self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Boundary observations the worker left in shared memory for ``rows`` (into ``out`` if given).
        Only executors whose workers write to shared memory have them."""
        raise NotImplementedError(f"{type(self).__name__} workers return observations in their replies")

    @abc.abstractmethod
    def _discard(self, worker: int) -> None:
        """Stop the worker (dead or alive) and forget it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker and free every resource. Idempotent."""

    # --- shared -------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """OS pids of worker processes this executor started (empty where it starts none)."""
        return []

    @property
    def worker_nodes(self) -> list[str | None]:
        """Ray node id of each worker (empty where workers are not Ray actors)."""
        return []

    @property
    def restart_records(self) -> list[RestartRecord]:
        """Every restart so far, oldest first."""
        return [] if self._budget is None else list(self._budget.records)

    @property
    def restarts(self) -> int:
        """Workers respawned so far."""
        return 0 if self._budget is None else len(self._budget.records)

    def start(self) -> tuple[Any, Any]:
        """Launch every worker (they build in parallel), wait for all; returns the spaces of worker 0."""
        try:
            for w in range(len(self.specs)):
                self._launch(w)
            spaces = [self._init_or_stop(w) for w in range(len(self.specs))]
        except BaseException:
            self.close()
            raise
        return spaces[0]

    def _init_or_stop(self, worker: int) -> tuple[Any, Any]:
        """:meth:`_await_init`; a worker that dies or hangs in it is stopped at once (no close grace)."""
        try:
            return self._await_init(worker)
        except (WorkerDiedError, WorkerHungError):
            self._discard(worker)
            raise

    def submit(self, worker: int, request: Request) -> None:
        """Queue ``request`` (a :class:`~.protocol.Reset` or :class:`~.protocol.Chunk`) on ``worker``."""
        with get_profiler().section(IPC, worker=worker, command=str(request.command)):
            self._send(worker, request)
        self._pending[worker].append(_Pending(request))

    def ready(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Of ``workers`` (each with a pending request), those whose oldest reply :meth:`collect` can take
        without waiting: it arrived, or the worker died or hung (``collect`` then raises, or respawns it).
        Waits up to ``timeout_s`` seconds for the first one (``None``: until there is one); ``[]`` on timeout.
        ``workers`` come oldest request first. The asynchronous schedule waits here on every busy worker
        at once."""
        settled = [w for w in workers if self._pending[w][0].reply is not None]
        return settled or self._ready(workers, timeout_s)

    def _ready(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """:meth:`ready` for workers without a settled reply; here: every reply is there (inline work ran
        when it was submitted)."""
        return list(workers)

    def collect(self, worker: int, out: dict[str, np.ndarray] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """Payload and boundary observations of the oldest pending request of ``worker``.

        With ``out`` (key -> array with one row per env of the request) the observations are copied
        straight into it (one copy from shared memory) and ``out`` is returned."""
        pending = self._pending[worker]
        if not pending:
            raise RuntimeError(f"worker {worker} has no pending request to collect")
        entry = pending[0]
        if entry.reply is None:
            try:
                with get_profiler().section(WAIT, worker=worker, command=str(entry.request.command)):
                    entry.reply = self._receive(worker, entry.request.command)
            except (WorkerDiedError, WorkerHungError) as exc:
                self._discard(worker)
                if self._budget is None:
                    raise
                self._recover(worker, exc)
        pending.popleft()
        data, obs = unwrap(entry.reply, worker)
        get_profiler().merge(entry.reply.spans)
        if isinstance(data, ChunkResult):
            self.step_times.add(data)
        if obs is None:
            with get_profiler().section(IPC, worker=worker, command="read_obs"):
                obs = self._read_obs(worker, entry.request.rows, out)
        elif out is not None:
            for key, arr in out.items():
                arr[...] = obs[key]
            obs = out
        return data, obs

    def take_respawned(self) -> dict[int, dict[str, np.ndarray]]:
        """Workers respawned since the last call -> reset observations of all their envs."""
        respawned, self._respawned = self._respawned, {}
        return respawned

    def _call(self, worker: int, request: Request) -> Any:
        """Send ``request`` and wait for its payload (start-up and restart, outside the pending queue)."""
        self._send(worker, request)
        return unwrap(self._receive(worker, request.command), worker)

    def _recover(self, worker: int, cause: WorkerDiedError | WorkerHungError) -> None:
        """Respawn the stopped ``worker`` within the restart budget (which raises once it is spent); a
        respawn that dies or hangs itself is charged and retried."""
        while True:
            pending = [entry.request for entry in self._pending[worker]]
            backoff = self._budget.charge(worker, self.specs[worker].env_ids, pending, cause)
            time.sleep(backoff)
            try:
                self._respawn(worker)
                return
            except (WorkerDiedError, WorkerHungError) as exc:
                self._discard(worker)
                cause = exc

    def _respawn(self, worker: int) -> None:
        """Start ``worker`` afresh, reset all its envs, answer its pending requests with placeholders."""
        self._launch(worker)
        self._await_init(worker)
        spec = self.specs[worker]
        rows = tuple(range(spec.num_envs))
        infos, obs = self._call(worker, Reset(rows))
        obs = obs if obs is not None else self._read_obs(worker, rows)
        self._respawned[worker] = obs
        for entry in self._pending[worker]:
            sel = list(entry.request.rows)
            placeholder = _placeholder(entry.request, spec, [infos[r] for r in sel], {k: v[sel] for k, v in obs.items()})
            entry.reply = Ok(placeholder)


def _placeholder(request: Request, spec: WorkerSpec, infos: list[dict], obs: dict) -> tuple:
    infos = [{**i, "worker_restarted": True} for i in infos]
    if not isinstance(request, Chunk):
        return (infos, obs)
    n, steps = len(request.rows), request.steps
    truncated = np.zeros((n, steps), dtype=bool)
    truncated[:, 0] = True
    result = ChunkResult(
        env_ids=spec.env_ids[list(request.rows)],
        obs=None,
        rewards=np.zeros((n, steps)),
        terminated=np.zeros((n, steps), dtype=bool),
        truncated=truncated,
        applied=np.zeros((n, steps), dtype=bool),
        infos=infos,
        global_steps=np.zeros(n, dtype=np.int64),
        sim_seconds=np.zeros(n),
        env_seconds=np.zeros(n),
    )
    return (result, obs)


class ProcessExecutor(Executor):
    """Workers as spawned local processes; observations and actions through shared memory, requests over
    pipes, each worker's step progress in a segment of its own (hang detection, :mod:`.supervision`).

    ``close()`` is idempotent and retryable: what an interrupt left undone is done by the next call, or at
    interpreter exit. A Ctrl-C while it waits for busy workers cuts that wait short; the workers are killed
    and the segments unlinked before the ``KeyboardInterrupt`` is raised. While open, a SIGTERM closes it
    (:mod:`.shutdown`)."""

    def __init__(self, specs: Sequence[WorkerSpec], supervision: Supervision):
        super().__init__(specs, supervision)
        # Shared with the finalizer, which must not hold a reference to self.
        self._state: dict[str, list] = {
            key: [None] * len(self.specs) for key in ("channels", "obs_buffers", "action_buffers", "progress")
        }
        self._finalizer = weakref.finalize(self, _shutdown_processes, self._state)
        close_on_sigterm(self)
        #: worker -> (the pending entry watched, its stall watch, monotonic start of the wait): :meth:`_ready`.
        self._watching: dict[int, tuple[_Pending, StallWatch | None, float]] = {}
        #: worker -> the hang :meth:`_ready` found, raised by the next :meth:`_receive` of it.
        self._hung: dict[int, WorkerHungError] = {}

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._state["channels"] if c is not None]

    def _launch(self, worker: int) -> None:
        spec = self.specs[worker]
        self._state["channels"][worker] = ProcessChannel(
            env_worker_main, (spec,), f"behavior1k_fast-env-{worker}", worker, spec.env_ids, RESTART_HINT,
            env=spec.env,
        )

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        observation_space, action_space = unwrap(self._receive(worker, Command.INIT), worker)
        spec, state = self.specs[worker], self._state
        if state["obs_buffers"][worker] is None:
            space = action_buffer_space(action_space, spec.profile["chunk_size"])
            state["obs_buffers"][worker] = SharedBuffers.create(observation_space, spec.num_envs)
            state["action_buffers"][worker] = SharedBuffers.create(space, spec.num_envs)
            state["progress"][worker] = ChunkProgress.create().buffers
        self._call(worker, Attach(state["obs_buffers"][worker].spec, state["action_buffers"][worker].spec,
                                  state["progress"][worker].spec))
        return observation_space, action_space

    def _send(self, worker: int, request: Request) -> None:
        if isinstance(request, Chunk):  # actions through shared memory: the pipe message stays small
            self._state["action_buffers"][worker].write(request.rows, [{ACTIONS_KEY: a} for a in request.actions])
            request = dataclasses.replace(request, actions=None)
        self._state["channels"][worker].send(request)

    def _receive(self, worker: int, command: Command) -> Reply:
        hung = self._hung.pop(worker, None)
        if hung is not None:  # found by ready()
            raise hung
        channel = self._state["channels"][worker]
        seconds, name = self.supervision.deadline(command)
        since = channel.started if command == Command.INIT else None  # workers start in parallel
        return channel.receive(command, seconds, self._watch(worker, command), name, since)

    def _ready(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Wait on every worker's pipe and sentinel at once; meanwhile watch each one's progress and chunk
        deadline as :meth:`_receive` does, from the first wait on its oldest request. A worker found hung is
        stopped here and reported by the next :meth:`collect` of it."""
        by_object = {}
        for w in workers:
            channel = self._state["channels"][w]
            by_object[channel.conn] = by_object[channel.proc.sentinel] = w
            entry = self._pending[w][0]
            if self._watching.get(w, (None,))[0] is not entry:
                self._watching[w] = (entry, self._watch(w, entry.request.command), time.monotonic())
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            period = WATCH_PERIOD_S if deadline is None else min(WATCH_PERIOD_S, max(0.0, deadline - time.monotonic()))
            found = sorted({by_object[o] for o in wait(list(by_object), timeout=period)})
            if found:
                return found
            for w in workers:
                entry, watch, since = self._watching[w]
                seconds, name = self.supervision.deadline(entry.request.command)
                try:
                    if watch is not None:
                        watch()
                    if seconds is not None and time.monotonic() - since >= seconds:
                        raise WorkerHungError(w, self.specs[w].env_ids, str(entry.request.command),
                                              f"gave no reply within {name}={seconds:g} s")
                except WorkerHungError as exc:
                    self._hung[w] = exc
                    return [w]
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def _watch(self, worker: int, command: Command) -> StallWatch | None:
        """The stall watch of ``worker``'s running chunk (``None`` for other commands or without a limit)."""
        limit = self.step_times.stall_limit(self.supervision.stall_timeout_s) if command == Command.CHUNK else None
        if limit is None:
            return None
        progress = ChunkProgress(self._state["progress"][worker])
        return StallWatch(progress, limit, worker, self.specs[worker].env_ids, command)

    def _read_obs(
        self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        return self._state["obs_buffers"][worker].read(rows, out)

    def _discard(self, worker: int) -> None:
        self._watching.pop(worker, None)
        stop_processes([self._state["channels"][worker]], 0.0)  # dead or hung: no grace
        self._state["channels"][worker] = None

    def close(self) -> None:
        with deferred_interrupts() as interrupted:
            _shutdown_processes(self._state, interrupted)
        self._finalizer.detach()
        release(self)


def _shutdown_processes(state: dict[str, list], cancel: threading.Event | None = None) -> None:
    """Stop every worker (the grace wait for busy ones ends early once ``cancel`` is set) and unlink every
    segment (close() and interpreter exit). Each entry is cleared only once done, so a call that was
    interrupted can be repeated."""
    channels = state["channels"]
    try:
        stop_processes(channels, CLOSE_GRACE_S, cancel)
    finally:
        channels[:] = [c if c is not None and c.proc.is_alive() else None for c in channels]
        for key in ("obs_buffers", "action_buffers", "progress"):
            for i, buffers in enumerate(state[key]):
                if buffers is not None:
                    buffers.close()
                    buffers.unlink()
                    state[key][i] = None


class InlineExecutor(Executor):
    """Every worker in this process, run when its request is submitted: the same engine without
    subprocesses, debuggable under pdb (a worker's exception is chained to the :class:`~.errors.WorkerError`),
    and quick to start in unit tests. Nothing overlaps: ``submit`` returns after the chunk stepped.

    The workers apply their profile to this process, as a worker process does to itself; ``close()``
    restores the profile that was applied before (or none)."""

    def __init__(self, specs: Sequence[WorkerSpec], supervision: Supervision):
        super().__init__(specs, supervision)
        self._workers: list[EnvWorker | None] = [None] * len(self.specs)
        self._replies: list[deque[Reply]] = [deque() for _ in self.specs]
        self._previous_profile = omnigibson_patches.active_profile()
        self._closed = False

    def _launch(self, worker: int) -> None:
        self._replies[worker] = deque()

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        spec = self.specs[worker]
        try:
            self._workers[worker] = EnvWorker(spec)
        except Exception as exc:  # as a worker process reports it
            unwrap(Failure.from_exception(exc, Command.INIT, spec.env_ids), worker)
        return self._workers[worker].ready()

    def _send(self, worker: int, request: Request) -> None:
        self._replies[worker].append(self._workers[worker].handle(request))

    def _receive(self, worker: int, command: Command) -> Reply:
        return self._replies[worker].popleft()

    def _discard(self, worker: int) -> None:
        if self._workers[worker] is not None:
            self._workers[worker].close()
        self._workers[worker] = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for w in range(len(self.specs)):
                self._discard(w)
        finally:
            if self._previous_profile is None:
                omnigibson_patches.revert()
            else:
                omnigibson_patches.apply(self._previous_profile)

