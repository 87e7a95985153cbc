"""Every exception the rollout layer raises on purpose. Each subclasses the built-in it refines, so code
that catches ``RuntimeError`` (or ``TimeoutError``) keeps working.

- Worker faults: :class:`WorkerError` (an exception raised inside a worker, with its traceback and env
  ids), :class:`WorkerDiedError` (the worker process or actor is gone) and :class:`WorkerHungError` (no
  reply within the command's deadline, or no progress inside a chunk: see :mod:`.supervision`).
- Engine state: :class:`ClosedError` (also for a closed :class:`~.policy.PolicyProcess`), :class:`ChunkInFlightError`, :class:`NoChunkInFlightError`,
  :class:`NotResetError`: a call that does not fit the engine's state; :class:`EngineBusyError`: another
  thread drives the engine. The engine stays usable after each of them.
"""

from __future__ import annotations

from typing import Sequence


def worker_label(worker: int | str) -> str:
    """``worker 3`` for an env worker's index, the name itself otherwise (``policy process``)."""
    return f"worker {worker}" if isinstance(worker, int) else str(worker)


class WorkerError(RuntimeError):
    """An exception raised inside a worker, carried back with its traceback and the env ids involved.

    ``worker`` is the env worker's index, or a name (``"policy process"``)."""

    def __init__(
        self, worker: int | str, command: str, env_ids: Sequence[int], exc_type: str, message: str, remote_traceback: str
    ):
        self.worker = worker
        self.command = command
        self.env_ids = [int(i) for i in env_ids]
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        super().__init__(
            f"{worker_label(worker)} failed in {command!r} for envs {self.env_ids}: {exc_type}: {message}"
            f"\n\nWorker traceback:\n{remote_traceback}"
        )


class WorkerDiedError(RuntimeError):
    """A worker process or actor died (killed, crashed) while the driver waited on it. ``history``: one
    line per earlier restart of this worker (when its restart budget is spent)."""

    def __init__(
        self, worker: int | str, env_ids: Sequence[int], command: str, detail: str, hint: str = "",
        history: Sequence[str] = (),
    ):
        self.worker = worker
        self.env_ids = [int(i) for i in env_ids]
        self.command = str(command)
        self.detail = detail
        self.history = list(history)
        lines = "".join(f"\n  restart {i + 1}: {line}" for i, line in enumerate(self.history))
        super().__init__(
            f"{worker_label(worker)} (envs {self.env_ids}) died while running {self.command!r}: {detail}{hint}"
            + (f"\nRestarts so far:{lines}" if lines else "")
        )


class WorkerHungError(TimeoutError):
    """A worker gave no reply within the deadline of its command, or finished no step of a chunk for the
    stall limit (:mod:`.supervision`). The worker is stopped before this is raised."""

    def __init__(self, worker: int | str, env_ids: Sequence[int], command: str, detail: str):
        self.worker = worker
        self.env_ids = [int(i) for i in env_ids]
        self.command = str(command)
        self.detail = detail
        super().__init__(f"{worker_label(worker)} (envs {self.env_ids}) hung in {self.command!r}: {detail}")


class ClosedError(RuntimeError):
    """The engine or policy process was closed (explicitly, or after a failure); start a new one."""


class ChunkInFlightError(RuntimeError):
    """The call needs a stage (or every stage) without a chunk in flight: ``collect()`` it first."""


class NoChunkInFlightError(RuntimeError):
    """``collect()`` of a stage that has no chunk in flight: ``submit()`` one first."""


class EngineBusyError(RuntimeError):
    """Another thread is driving the engine (a rollout, a reset, a submit or collect): one thread drives an
    engine at a time. Raised at once, before anything is sent; the other thread's call goes on."""


class NotResetError(RuntimeError):
    """The call needs observations, which exist only after a full ``reset()``."""
