"""Env workers: one backend per worker, an explicit command protocol, shared-memory observation buffers.

A worker is told what to do by ``(command, args)`` messages and answers each with one reply, in order:

- ``("attach", (obs_spec, action_spec))``: attach the driver's :class:`SharedBuffers` (process workers).
- ``("reset", local_envs)``: reset those envs; reply ``(infos, obs)``.
- ``("chunk", (local_envs, actions))``: run one chunk (:func:`~.chunk.run_chunk`); reply ``(result, obs)``.
  ``actions`` is ``None`` when the driver left them in the worker's rows of the action buffer.
- ``("close", None)``: close the backend and stop.

Replies are ``("ok", payload, spans)`` (``spans``: the worker profiler's drained spans) or ``("error", info)``
with the exception type, message, traceback, command and global env ids; the driver raises
:class:`WorkerError` from it. Boundary observations go into the worker's rows of the shared-memory buffers
(``obs`` is then ``None``); without buffers (Ray actors) they travel in the reply as stacked arrays. With
arrays in shared memory, pipe messages stay small, so neither side blocks on a full pipe while the other
one waits for it (images of an episode that ended, in ``final_observation``, are the exception).

The command set does not assume a stage order: any subset of a worker's envs can be stepped in any order.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import wait
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.contract import BackendFactory, VectorBackend
from ..core.profile import RolloutProfile
from ..core.tracing import IPC, get_profiler
from .bootstrap import bootstrap_process
from .chunk import run_chunk, stack_obs

#: Name prefix of every shared-memory segment the engine creates (``/dev/shm/b1kf_*`` on Linux).
SHM_PREFIX = "b1kf_"
#: Key of the chunk actions ``[chunk_size, action_dim]`` in a worker's action buffer.
ACTIONS_KEY = "actions"
#: Seconds between checks that the owner process is still alive.
WATCHDOG_PERIOD_S = 0.5


def _label(worker: int | str) -> str:
    return f"worker {worker}" if isinstance(worker, int) else str(worker)


class WorkerError(RuntimeError):
    """An exception raised inside a worker, carried back with its traceback and the env ids involved.

    ``worker`` is the env worker's index, or a name (``"policy process"``)."""

    def __init__(self, worker: int | str, info: Mapping[str, Any]):
        self.worker = worker
        self.command = info["command"]
        self.env_ids = list(info["env_ids"])
        self.exc_type = info["type"]
        self.remote_traceback = info["traceback"]
        super().__init__(
            f"{_label(worker)} failed in {self.command!r} for envs {self.env_ids}: {self.exc_type}: "
            f"{info['message']}\n\nWorker traceback:\n{self.remote_traceback}"
        )


class WorkerDiedError(RuntimeError):
    """A worker process or actor died (killed, crashed) while the driver waited on it."""

    def __init__(self, worker: int | str, env_ids: Sequence[int], command: str, detail: str, hint: str = ""):
        self.worker = worker
        self.env_ids = list(env_ids)
        self.command = command
        super().__init__(f"{_label(worker)} (envs {self.env_ids}) died while running {command!r}: {detail}{hint}")


class ProcessDied(Exception):
    """Raised by :func:`wait_reply` when the process exited before it replied; ``str`` says how."""


def check_timeout(timeout_s: Any) -> float:
    """Validated ``timeout_s``: a positive number of seconds (the longest wait on one reply)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


def wait_reply(conn: Any, proc: Any, timeout_s: float, what: str) -> tuple:
    """The next reply on ``conn`` from process ``proc``; its death is seen at once through its sentinel.

    Raises TimeoutError after ``timeout_s`` without a reply, :class:`ProcessDied` if it exited."""
    ready = wait([conn, proc.sentinel], timeout=timeout_s)
    if conn in ready or conn.poll():
        try:
            return conn.recv()
        except (EOFError, ConnectionResetError):
            pass
    elif not ready:
        raise TimeoutError(f"{what} (pid {proc.pid}) gave no reply within timeout_s={timeout_s}")
    proc.join(WATCHDOG_PERIOD_S * 10)
    code = proc.exitcode
    detail = f"pid {proc.pid} exit code {code}"
    if code is not None and code < 0:
        detail += f" ({signal.Signals(-code).name})"
    raise ProcessDied(detail)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to build its backend (picklable)."""

    worker: int
    #: The pickled :class:`BackendFactory`. Unpickled in the worker only after the profile was applied,
    #: since unpickling imports the factory's module (and often the simulator with it).
    factory: bytes
    num_envs: int
    seed: int
    #: ``RolloutProfile.to_dict()``; ``pipeline_stages`` = stages sharing this worker's physics.
    profile: dict
    auto_reset: bool
    profiling: bool = False

    @property
    def env_ids(self) -> np.ndarray:
        """Global ids of this worker's envs."""
        return np.arange(self.worker * self.num_envs, (self.worker + 1) * self.num_envs)


@dataclass(frozen=True)
class BufferSpec:
    """Name and layout ``(key, shape, dtype, byte offset)`` of one worker's observation segment."""

    name: str
    num_envs: int
    layout: tuple[tuple[str, tuple[int, ...], str, int], ...]


class SharedBuffers:
    """One shared-memory segment holding ``[num_envs, *shape]`` per key of a gymnasium Dict of Box spaces.

    The driver creates (and unlinks) one for each worker's boundary observations (the worker writes
    them) and one for its chunk actions (the driver writes them). A row is written by one side only
    while the other side does not read it (the engine keeps at most one chunk in flight per env).
    """

    def __init__(self, shm: shared_memory.SharedMemory, spec: BufferSpec):
        self._shm = shm
        self.spec = spec
        self.arrays = {
            key: np.ndarray((spec.num_envs, *shape), dtype=np.dtype(dtype), buffer=shm.buf, offset=offset)
            for key, shape, dtype, offset in spec.layout
        }

    @classmethod
    def create(cls, observation_space: Any, num_envs: int) -> "SharedBuffers":
        """A new segment for ``num_envs`` rows of ``observation_space`` (a gymnasium Dict of Box)."""
        check_observation_space(observation_space)
        layout, offset = [], 0
        for key, space in observation_space.spaces.items():
            dtype = np.dtype(space.dtype)
            offset = -(-offset // 64) * 64  # 64-byte aligned rows
            layout.append((key, tuple(space.shape), dtype.str, offset))
            offset += num_envs * int(np.prod(space.shape, dtype=np.int64)) * dtype.itemsize
        name = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=max(offset, 1))
        return cls(shm, BufferSpec(name, num_envs, tuple(layout)))

    @classmethod
    def attach(cls, spec: BufferSpec) -> "SharedBuffers":
        return cls(shared_memory.SharedMemory(name=spec.name), spec)

    def write(self, rows: Sequence[int], values: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Copy one dict (key -> array of the space's shape) per row into the buffers."""
        for row, value in zip(rows, values):
            for key, arr in self.arrays.items():
                item = value[key]
                if np.shape(item) != arr.shape[1:]:
                    raise ValueError(f"{key!r} has shape {np.shape(item)}, its space says {arr.shape[1:]}")
                arr[row] = item

    def read(self, rows: Sequence[int], out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """A copy of the observations of ``rows``: key -> ``[len(rows), *shape]``, into ``out`` if given."""
        rows = np.asarray(rows)
        if out is None:
            out = {k: np.empty((rows.size, *a.shape[1:]), a.dtype) for k, a in self.arrays.items()}
        first, last = int(rows[0]), int(rows[-1])
        contiguous = last - first + 1 == rows.size and np.all(np.diff(rows) == 1)
        for key, arr in self.arrays.items():
            if contiguous:
                out[key][...] = arr[first : last + 1]
            else:
                np.take(arr, rows, axis=0, out=out[key])
        return out

    def close(self) -> None:
        self.arrays = {}
        self._shm.close()

    def unlink(self) -> None:
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


def action_buffer_space(action_space: Any, chunk_size: int) -> Any:
    """The Dict space of one worker's action buffer: ``[chunk_size, action_dim]`` per env, in the action
    space's dtype (float64 when that is not a float type)."""
    from gymnasium import spaces

    dtype = action_space.dtype if np.issubdtype(action_space.dtype, np.floating) else np.float64
    shape = (chunk_size, int(np.prod(action_space.shape)))
    return spaces.Dict({ACTIONS_KEY: spaces.Box(-np.inf, np.inf, shape, dtype)})


def check_observation_space(space: Any) -> None:
    """The engine needs a gymnasium Dict of Box spaces with fixed shapes and dtypes."""
    from gymnasium import spaces

    if not isinstance(space, spaces.Dict) or not all(isinstance(s, spaces.Box) for s in space.spaces.values()):
        raise TypeError(f"backend observation_space must be a gymnasium Dict of Box spaces, got {space!r}")


class EnvWorker:
    """One backend and the handlers of the command protocol; hosted by a process loop or a Ray actor."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.profile = RolloutProfile.from_dict(spec.profile)
        factory: BackendFactory = pickle.loads(spec.factory)
        self.backend = factory(spec.num_envs, spec.seed, self.profile)
        if not isinstance(self.backend, VectorBackend):
            raise TypeError(f"factory returned {type(self.backend).__name__}, which is not a VectorBackend")
        if self.backend.num_envs != spec.num_envs:
            raise ValueError(f"factory built num_envs={self.backend.num_envs}, asked for num_envs={spec.num_envs}")
        check_observation_space(self.backend.observation_space)
        self.keys = list(self.backend.observation_space.spaces)
        self.buffers: SharedBuffers | None = None  # boundary observations
        self.action_buffers: SharedBuffers | None = None

    def spaces(self) -> tuple[Any, Any]:
        return self.backend.observation_space, self.backend.action_space

    def handle(self, command: str, args: Any) -> tuple:
        """Run one command; never raises (errors become an ``("error", info)`` reply)."""
        env_ids = self.spec.env_ids
        try:
            if command == "attach":
                self.buffers, self.action_buffers = (SharedBuffers.attach(spec) for spec in args)
                payload = None
            elif command == "reset":
                env_ids = env_ids[list(args)]
                obs, infos = self.backend.reset(list(args))
                payload = (infos, self._ship(args, obs))
            elif command == "chunk":
                local, actions = args
                env_ids = env_ids[list(local)]
                if actions is None:
                    actions = self.action_buffers.read(local)[ACTIONS_KEY]
                obs, result = run_chunk(
                    self.backend,
                    actions,
                    local,
                    skip_intermediate_obs=self.profile.skip_intermediate_obs,
                    auto_reset=self.spec.auto_reset,
                )
                result.env_ids = env_ids
                payload = (result, self._ship(local, obs))
            else:
                raise ValueError(f"unknown worker command {command!r}")
            return ("ok", payload, get_profiler().drain())
        except Exception as exc:
            return error_reply(exc, command, env_ids)

    def _ship(self, rows: Sequence[int], obs: Sequence[Mapping[str, np.ndarray]]) -> dict | None:
        with get_profiler().section(IPC, worker=self.spec.worker, command="write_obs"):
            if self.buffers is not None:
                self.buffers.write(rows, obs)
                return None
            return stack_obs(obs, self.keys)

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            for buffers in (self.buffers, self.action_buffers):
                if buffers is not None:
                    buffers.close()
            self.buffers = self.action_buffers = None


def error_reply(exc: BaseException, command: str, env_ids: Sequence[int]) -> tuple:
    return (
        "error",
        {
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)),
            "command": command,
            "env_ids": [int(i) for i in env_ids],
        },
    )


def start_worker(spec: WorkerSpec) -> EnvWorker:
    """Apply the profile (before the simulator is imported), then build the worker."""
    bootstrap_process(spec.profile, spec.profiling)
    return EnvWorker(spec)


def _watch_owner(owner_pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        if os.getppid() != owner_pid:
            os._exit(1)


def watch_owner(owner_pid: int) -> None:
    """Exit this process (within ``WATCHDOG_PERIOD_S``) once its owner ``owner_pid`` is gone."""
    threading.Thread(target=_watch_owner, args=(owner_pid,), daemon=True, name="owner-watchdog").start()


def stop_processes(procs: Sequence[Any], conns: Sequence[Any], grace_s: float) -> None:
    """Send ``("close", None)`` on every pipe, give the processes ``grace_s`` seconds together to exit,
    kill those still alive, close the pipes. ``None`` entries are skipped."""
    for conn in conns:
        if conn is not None:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass  # already gone
    deadline = time.monotonic() + grace_s
    for proc in procs:
        if proc is not None:
            proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(grace_s)
    for conn in conns:
        if conn is not None:
            conn.close()


def process_worker_main(conn: Any, owner_pid: int, spec: WorkerSpec) -> None:
    """Entry point of a spawned env worker process: build, then serve commands until close or EOF.

    The worker exits when its owner dies (watchdog on the parent pid) or its pipe closes.
    """
    watch_owner(owner_pid)
    try:
        worker = start_worker(spec)
    except Exception as exc:
        conn.send(error_reply(exc, "init", spec.env_ids))
        return
    try:
        conn.send(("ok", worker.spaces(), []))
        while True:
            try:
                command, args = conn.recv()
            except EOFError:
                break
            if command == "close":
                break
            reply = worker.handle(command, args)
            try:
                conn.send(reply)
            except Exception as exc:  # e.g. an info value that does not pickle
                conn.send(error_reply(exc, command, spec.env_ids))
    finally:
        worker.close()
