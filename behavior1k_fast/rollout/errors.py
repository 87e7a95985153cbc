"""Every exception the rollout layer raises on purpose. Each subclasses the built-in it refines, so code
that catches ``RuntimeError`` (or ``TimeoutError``) keeps working.

- Worker faults: :class:`WorkerError` (an exception raised inside a worker, with its traceback and env
  ids), :class:`WorkerDiedError` (the worker process or actor is gone) and :class:`WorkerHungError` (no
  reply within the command's deadline, or no progress inside a chunk: see :mod:`.supervision`).
- A rollout ended early on purpose: :class:`StopRollout`, raised by a policy at a chunk boundary; the
  engine receives the chunks in flight and stays usable (:meth:`~.engine.RolloutEngine.rollout`).
- Engine state: :class:`ClosedError` (also for a closed :class:`~.policy.PolicyProcess`), :class:`ChunkInFlightError`, :class:`NoChunkInFlightError`,
  :class:`NotResetError`: a call that does not fit the engine's state; :class:`EngineBusyError`: another
  thread drives the engine. The engine stays usable after each of them.

A death is described by :func:`exit_detail`. One death has a cause the driver cannot see by itself: the
spawn start method re-imports the main module in every child, so a script that starts an engine without
``if __name__ == "__main__":`` starts it again in each worker, where multiprocessing refuses to start a
process ("before the current process has finished its bootstrapping phase"). The child then calls
:func:`exit_if_reimporting_main`, which ends it with :data:`MAIN_GUARD_EXIT_CODE` and one line, and the
driver's :class:`WorkerDiedError` says to add the guard (a restart would die the same way).
"""

from __future__ import annotations

import inspect
import signal
import sys
from typing import Sequence

#: Exit code of a spawned process that re-imported its parent's main module and was asked there to start
#: a process of its own (:func:`exit_if_reimporting_main`).
MAIN_GUARD_EXIT_CODE = 86
#: What to do about it.
MAIN_GUARD_ADVICE = (
    'put the code that starts the engine under `if __name__ == "__main__":` (spawned workers import the main '
    "module, and it started the engine again there)"
)


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
    """A worker process or actor died (killed, crashed) while the driver waited on it. ``hint``: advice
    appended where a restart can help, i.e. not for a worker that died while starting (command ``init``:
    start-up failures are not restarted, and a respawn would fail the same way). ``history``: one line per
    earlier restart of this worker (when its restart budget is spent)."""

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
        hint = "" if self.command == "init" else hint
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


class StopRollout(Exception):
    """Raised by a policy (at a chunk boundary: its forward is where a rollout can stop) to end the rollout
    early: :meth:`~.engine.RolloutEngine.rollout` receives and discards the chunks in flight, leaves the
    engine idle with its envs mid-episode, and re-raises it (the :class:`~.collector.Collector` stops so)."""


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


def public_type_name(exc: BaseException) -> str:
    """The name of ``exc``'s type, or of its nearest public base class where that name is private
    (``_Something``): what a message a user reads may say."""
    return next(cls.__name__ for cls in type(exc).__mro__ if not cls.__name__.startswith("_"))


def exit_detail(pid: int, exitcode: int | None) -> str:
    """Why process ``pid`` is gone, from its exit code: the signal that killed it, or the main-module guard
    (:data:`MAIN_GUARD_EXIT_CODE`, with :data:`MAIN_GUARD_ADVICE`)."""
    detail = f"pid {pid} exit code {exitcode}"
    if exitcode is not None and exitcode < 0:
        detail += f" ({signal.Signals(-exitcode).name})"
    elif exitcode == MAIN_GUARD_EXIT_CODE:
        main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main module"
        detail += f": it re-imported {main} and stopped there; {MAIN_GUARD_ADVICE}"
    return detail


def _importing_main_module() -> bool:
    """True while this spawned process executes its parent's main module (multiprocessing runs it as
    ``__mp_main__`` before the child's target): a module-level frame of ``__mp_main__`` is on the stack."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def exit_if_reimporting_main() -> None:
    """Where starting a process raised ``RuntimeError``: if this process is a spawned child still importing
    its parent's main module (module docs), print one line and exit with :data:`MAIN_GUARD_EXIT_CODE`, which
    the parent reports (:func:`exit_detail`); otherwise return (the caller re-raises)."""
    if not _importing_main_module():
        return
    print(f"behavior1k_fast: this spawned process was asked to start a worker while it imported the main "
          f"module; {MAIN_GUARD_ADVICE}", file=sys.stderr)
    raise SystemExit(MAIN_GUARD_EXIT_CODE)
