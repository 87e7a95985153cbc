"""Executors host the env workers: local spawned processes (``"process"``) or Ray actors (``"ray"``).

Both expose the same calls to the engine: ``start()``, ``submit(worker, command, args)``,
``collect(worker)`` (replies in submit order), ``close()``. Boundary observations come back through shared
memory for processes and through Ray's object store for actors. A dead worker is detected at once
(process sentinel / actor error): :class:`~.worker.WorkerDiedError`, or, with ``restart_workers``, a fresh
worker whose envs are all reset; every command that was pending on the dead worker then yields a
placeholder result: the reset observation, zero rewards, ``truncated`` at the first step, no action applied,
``info["worker_restarted"] = True``.
"""

from __future__ import annotations

import abc
import multiprocessing as mp
import os
import weakref
from collections import deque
from typing import Any, Sequence

import numpy as np

from ..core.tracing import IPC, WAIT, get_profiler
from .chunk import ChunkResult
from .worker import (
    ACTIONS_KEY,
    SharedBuffers,
    action_buffer_space,
    ProcessDied,
    WorkerDiedError,
    WorkerError,
    WorkerSpec,
    error_reply,
    process_worker_main,
    start_worker,
    stop_processes,
    wait_reply,
)

#: Seconds ``close()`` waits for a worker to exit before it is terminated.
CLOSE_GRACE_S = 5.0

EXECUTORS = ("process", "ray")
RESTART_HINT = "; pass restart_workers=True to respawn it and reset its envs"


class _Pending:
    __slots__ = ("command", "rows", "steps", "reply")

    def __init__(self, command: str, rows: tuple[int, ...], steps: int):
        self.command = command
        self.rows = rows
        self.steps = steps  # chunk length (0 for other commands)
        self.reply: tuple | None = None  # filled with a placeholder after a restart


class Executor(abc.ABC):
    """Worker bookkeeping shared by the process and Ray executors; subclasses move the messages."""

    def __init__(self, specs: Sequence[WorkerSpec], timeout_s: float, restart_workers: bool):
        self.specs = list(specs)
        self.timeout_s = timeout_s
        self.restart_workers = restart_workers
        self._pending: list[deque[_Pending]] = [deque() for _ in self.specs]
        self.restarts = 0
        self._fresh: dict[int, dict[str, np.ndarray]] = {}  # worker -> reset obs of all its envs

    # --- transport (per executor) ----------------------------------------------------------------
    @abc.abstractmethod
    def _launch(self, worker: int) -> None:
        """Start the worker without waiting for it to build its backend."""

    @abc.abstractmethod
    def _await_init(self, worker: int) -> tuple[Any, Any]:
        """Wait until the worker built its backend; its (observation_space, action_space)."""

    @abc.abstractmethod
    def _send(self, worker: int, command: str, args: Any) -> None:
        """Queue one command (never blocks on the worker's work)."""

    @abc.abstractmethod
    def _receive(self, worker: int, command: str) -> tuple:
        """The oldest unread reply; WorkerDiedError if the worker died, TimeoutError after ``timeout_s``."""

    def _receive_ok(self, worker: int, command: str) -> Any:
        """The payload of the oldest unread reply; :class:`WorkerError` if the worker answered an error."""
        status, payload, *_ = self._receive(worker, command)
        if status == "error":
            raise WorkerError(worker, payload)
        return payload

    @abc.abstractmethod
    def _read_obs(
        self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Boundary observations the worker left in shared memory for ``rows`` (into ``out`` if given)."""

    @abc.abstractmethod
    def _discard(self, worker: int) -> None:
        """Stop the worker (dead or alive) and forget it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker and free every resource. Idempotent."""

    # --- shared -------------------------------------------------------------------------------
    def start(self) -> tuple[Any, Any]:
        """Launch every worker (they build in parallel), wait for all; returns the spaces of worker 0."""
        try:
            for w in range(len(self.specs)):
                self._launch(w)
            spaces = [self._await_init(w) for w in range(len(self.specs))]
        except BaseException:
            self.close()
            raise
        return spaces[0]

    def submit(self, worker: int, command: str, args: Any) -> None:
        """Queue ``command`` on ``worker``: ``("reset", local_envs)`` or ``("chunk", (local_envs, actions))``."""
        with get_profiler().section(IPC, worker=worker, command=command):
            self._send(worker, command, args)
        rows, steps = (args[0], args[1].shape[1]) if command == "chunk" else (args, 0)
        self._pending[worker].append(_Pending(command, tuple(rows), steps))

    def collect(self, worker: int, out: dict[str, np.ndarray] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
        """Payload and boundary observations of the oldest pending command of ``worker``.

        With ``out`` (key -> array with one row per env of the command) the observations are copied
        straight into it (one copy from shared memory) and ``out`` is returned."""
        pending = self._pending[worker]
        if not pending:
            raise RuntimeError(f"worker {worker} has no pending command to collect")
        entry = pending[0]
        if entry.reply is None:
            try:
                with get_profiler().section(WAIT, worker=worker, command=entry.command):
                    entry.reply = self._receive(worker, entry.command)
            except WorkerDiedError:
                if not self.restart_workers:
                    raise
                self._restart(worker)
        pending.popleft()
        status, payload, *rest = entry.reply
        if status == "error":
            raise WorkerError(worker, payload)
        get_profiler().merge(rest[0])
        data, obs = payload
        if obs is None:
            with get_profiler().section(IPC, worker=worker, command="read_obs"):
                obs = self._read_obs(worker, entry.rows, out)
        elif out is not None:
            for key, arr in out.items():
                arr[...] = obs[key]
            obs = out
        return data, obs

    def pop_restarts(self) -> dict[int, dict[str, np.ndarray]]:
        """Workers respawned since the last call -> reset observations of all their envs."""
        fresh, self._fresh = self._fresh, {}
        return fresh

    def _restart(self, worker: int) -> None:
        """Replace a dead worker, reset all its envs, answer its pending commands with placeholders."""
        self._discard(worker)
        self._launch(worker)
        self._await_init(worker)
        self.restarts += 1
        spec = self.specs[worker]
        rows = tuple(range(spec.num_envs))
        self._send(worker, "reset", rows)
        infos, obs = self._receive_ok(worker, "reset")
        obs = obs if obs is not None else self._read_obs(worker, rows)
        self._fresh[worker] = obs
        for entry in self._pending[worker]:
            sel = list(entry.rows)
            placeholder = _placeholder(entry, spec, [infos[r] for r in sel], {k: v[sel] for k, v in obs.items()})
            entry.reply = ("ok", placeholder, [])


def _placeholder(entry: _Pending, spec: WorkerSpec, infos: list[dict], obs: dict) -> tuple:
    infos = [{**i, "worker_restarted": True} for i in infos]
    if entry.command != "chunk":
        return (infos, obs)
    n = len(entry.rows)
    steps = entry.steps
    truncated = np.zeros((n, steps), dtype=bool)
    truncated[:, 0] = True
    result = ChunkResult(
        env_ids=spec.env_ids[list(entry.rows)],
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
    """Workers as spawned local processes; observations through shared memory, commands over pipes."""

    def __init__(self, specs: Sequence[WorkerSpec], timeout_s: float, restart_workers: bool):
        super().__init__(specs, timeout_s, restart_workers)
        self._ctx = mp.get_context("spawn")
        # Shared with the finalizer, which must not hold a reference to self.
        self._state: dict[str, list] = {
            "procs": [None] * len(self.specs),
            "conns": [None] * len(self.specs),
            "buffers": [None] * len(self.specs),
            "action_buffers": [None] * len(self.specs),
        }
        self._finalizer = weakref.finalize(self, _shutdown_processes, self._state)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._state["procs"] if p is not None]

    def _launch(self, worker: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=process_worker_main,
            args=(child, os.getpid(), self.specs[worker]),
            daemon=True,
            name=f"behavior1k_fast-env-{worker}",
        )
        proc.start()
        child.close()
        self._state["procs"][worker] = proc
        self._state["conns"][worker] = parent

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        observation_space, action_space = self._receive_ok(worker, "init")
        spec = self.specs[worker]
        if self._state["buffers"][worker] is None:
            space = action_buffer_space(action_space, spec.profile["chunk_size"])
            self._state["buffers"][worker] = SharedBuffers.create(observation_space, spec.num_envs)
            self._state["action_buffers"][worker] = SharedBuffers.create(space, spec.num_envs)
        specs = (self._state["buffers"][worker].spec, self._state["action_buffers"][worker].spec)
        self._send(worker, "attach", specs)
        self._receive_ok(worker, "attach")
        return observation_space, action_space

    def _send(self, worker: int, command: str, args: Any) -> None:
        if command == "chunk":  # actions through shared memory: the pipe message stays small
            local, actions = args
            self._state["action_buffers"][worker].write(local, [{ACTIONS_KEY: a} for a in actions])
            args = (local, None)
        try:
            self._state["conns"][worker].send((command, args))
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the dead worker is reported by _receive

    def _receive(self, worker: int, command: str) -> tuple:
        conn, proc = self._state["conns"][worker], self._state["procs"][worker]
        try:
            return wait_reply(conn, proc, self.timeout_s, f"worker {worker} running {command!r}")
        except ProcessDied as exc:
            raise WorkerDiedError(worker, self.specs[worker].env_ids, command, str(exc), RESTART_HINT) from None

    def _read_obs(
        self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        return self._state["buffers"][worker].read(rows, out)

    def _discard(self, worker: int) -> None:
        stop_processes([self._state["procs"][worker]], [self._state["conns"][worker]], CLOSE_GRACE_S)
        self._state["procs"][worker] = self._state["conns"][worker] = None

    def close(self) -> None:
        self._finalizer()


def _shutdown_processes(state: dict[str, list]) -> None:
    """Stop every worker and unlink every segment (close() and interpreter exit)."""
    stop_processes(state["procs"], state["conns"], CLOSE_GRACE_S)
    state["procs"][:] = state["conns"][:] = [None] * len(state["procs"])
    for key in ("buffers", "action_buffers"):
        for i, buffers in enumerate(state[key]):
            if buffers is not None:
                buffers.close()
                buffers.unlink()
                state[key][i] = None


class RayEnvHost:
    """Ray actor body: the same :class:`~.worker.EnvWorker` behind ``init()`` and ``call()``."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.worker = None

    def init(self) -> tuple:
        try:
            self.worker = start_worker(self.spec)
        except Exception as exc:
            return error_reply(exc, "init", self.spec.env_ids)
        return ("ok", self.worker.spaces(), [])

    def call(self, command: str, args: Any) -> tuple:
        return self.worker.handle(command, args)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class RayExecutor(Executor):
    """Workers as Ray actors (one per process slot of the plan), so one config runs across machines."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        timeout_s: float,
        restart_workers: bool,
        actor_options: dict | None = None,
    ):
        super().__init__(specs, timeout_s, restart_workers)
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self._ray = ray
        self._actor_cls = ray.remote(RayEnvHost)
        self._actor_options = {"num_cpus": 1, "max_restarts": 0, **(actor_options or {})}
        self._actors: list[Any] = [None] * len(self.specs)
        self._refs: list[deque] = [deque() for _ in self.specs]

    def _launch(self, worker: int) -> None:
        actor = self._actor_cls.options(**self._actor_options).remote(self.specs[worker])
        self._actors[worker] = actor
        self._refs[worker] = deque([actor.init.remote()])

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        return self._receive_ok(worker, "init")

    def _send(self, worker: int, command: str, args: Any) -> None:
        self._refs[worker].append(self._actors[worker].call.remote(command, args))

    def _receive(self, worker: int, command: str) -> tuple:
        from ray.exceptions import GetTimeoutError, RayActorError

        ref = self._refs[worker][0]
        try:
            reply = self._ray.get(ref, timeout=self.timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"worker {worker} (Ray actor) gave no reply to {command!r} within timeout_s={self.timeout_s}"
            ) from None
        except RayActorError as exc:
            raise WorkerDiedError(
                worker, self.specs[worker].env_ids, command, f"Ray actor died: {exc}", RESTART_HINT
            ) from None
        self._refs[worker].popleft()
        return reply

    def _read_obs(
        self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        raise RuntimeError("Ray workers return observations in their replies")

    def _discard(self, worker: int) -> None:
        if self._actors[worker] is not None:
            self._ray.kill(self._actors[worker])
        self._actors[worker] = None
        self._refs[worker] = deque()

    def close(self) -> None:
        for w, actor in enumerate(self._actors):
            if actor is None:
                continue
            try:
                self._ray.get(actor.close.remote(), timeout=CLOSE_GRACE_S)
            except Exception:
                pass  # a dead or stuck actor is killed below either way
            self._discard(w)


def make_executor(
    kind: str,
    specs: Sequence[WorkerSpec],
    timeout_s: float,
    restart_workers: bool,
    ray_actor_options: dict | None = None,
) -> Executor:
    if kind == "process":
        return ProcessExecutor(specs, timeout_s, restart_workers)
    if kind == "ray":
        return RayExecutor(specs, timeout_s, restart_workers, ray_actor_options)
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
