"""Spawned processes: the one serving loop (worker side) and the driver's channel to such a process.

Env workers and the policy process run the same loop, :func:`serve`: build the handler, send the
:attr:`~.protocol.Command.INIT` reply, then answer one request after the other until :class:`~.protocol.Close`
or the pipe closes. The process exits within :data:`OWNER_CHECK_PERIOD_S` once its owner is gone, and a pipe
its owner closed ends the loop quietly (no ``BrokenPipeError`` traceback).

:class:`ProcessChannel` is the driver's end: it starts the process, sends requests without blocking on the
worker's work, and waits for each reply while watching the process sentinel, so a death is seen at once.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import Any, Callable, Protocol, Sequence

from .errors import WorkerDiedError, worker_label
from .protocol import Close, Command, Failure, Ok, Reply, Request

#: Seconds between checks that the owner process is still alive.
OWNER_CHECK_PERIOD_S = 0.5


class Handler(Protocol):
    """What :func:`serve` hosts: an env worker or a policy."""

    #: Global env ids named by a failure that is not tied to one request's rows.
    env_ids: Sequence[int]

    def ready(self) -> Any:
        """Payload of the INIT reply."""

    def handle(self, request: Request) -> Reply:
        """Serve one request; never raises (an exception becomes a :class:`~.protocol.Failure`)."""

    def close(self) -> None: ...


def _exit_when_orphaned(owner_pid: int) -> None:
    while True:
        time.sleep(OWNER_CHECK_PERIOD_S)
        if os.getppid() != owner_pid:
            os._exit(1)


def watch_owner(owner_pid: int) -> None:
    """Exit this process (within :data:`OWNER_CHECK_PERIOD_S`) once its owner ``owner_pid`` is gone."""
    threading.Thread(target=_exit_when_orphaned, args=(owner_pid,), daemon=True, name="owner-watchdog").start()


def serve(conn: Any, owner_pid: int, build: Callable[[], Handler], env_ids: Sequence[int] = ()) -> None:
    """Entry of a spawned process: build the handler, reply to INIT, then serve requests (module docs).

    ``env_ids``: the global env ids a failure to build is reported for."""
    watch_owner(owner_pid)
    try:
        handler = build()
    except Exception as exc:
        _send_quietly(conn, Failure.from_exception(exc, Command.INIT, env_ids))
        return
    try:
        if not _send_quietly(conn, Ok(handler.ready())):
            return
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(request, Close):
                return
            reply = handler.handle(request)
            try:
                conn.send(reply)
            except (BrokenPipeError, ConnectionResetError):
                return  # the owner closed its end: nobody reads the reply
            except Exception as exc:  # e.g. an info value that does not pickle
                if not _send_quietly(conn, Failure.from_exception(exc, request.command, handler.env_ids)):
                    return
    finally:
        handler.close()


def _send_quietly(conn: Any, reply: Reply) -> bool:
    """Send ``reply``; False when the owner's end is gone."""
    try:
        conn.send(reply)
    except (BrokenPipeError, ConnectionResetError, OSError):
        return False
    return True


class ProcessChannel:
    """The driver's end of one spawned process serving :func:`serve`: its pipe and its sentinel.

    ``worker`` and ``env_ids`` name it in errors; ``hint`` is appended to the message of a death."""

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple,
        name: str,
        worker: int | str,
        env_ids: Sequence[int] = (),
        hint: str = "",
    ):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, os.getpid(), *args), daemon=True, name=name)
        self.proc.start()
        child.close()
        self.worker = worker
        self.env_ids = list(env_ids)
        self.hint = hint

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, request: Request) -> None:
        """Queue one request (never blocks on the worker's work); a dead process is reported by
        :meth:`receive`."""
        try:
            self.conn.send(request)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def receive(self, command: Command, timeout_s: float | None) -> Reply:
        """The next reply. :class:`WorkerDiedError` at once if the process exits first, ``TimeoutError``
        after ``timeout_s`` seconds without a reply (``None``: no limit)."""
        ready = wait([self.conn, self.proc.sentinel], timeout=timeout_s)
        if self.conn in ready or self.conn.poll():
            try:
                return self.conn.recv()
            except (EOFError, ConnectionResetError):
                pass
        elif not ready:
            raise TimeoutError(
                f"{worker_label(self.worker)} (pid {self.proc.pid}) gave no reply to {str(command)!r} "
                f"within timeout_s={timeout_s}"
            )
        self.proc.join(OWNER_CHECK_PERIOD_S * 10)
        code = self.proc.exitcode
        detail = f"pid {self.proc.pid} exit code {code}"
        if code is not None and code < 0:
            detail += f" ({signal.Signals(-code).name})"
        raise WorkerDiedError(self.worker, self.env_ids, str(command), detail, self.hint)


def stop_processes(channels: Sequence[ProcessChannel | None], grace_s: float) -> None:
    """Ask every process to close, give them ``grace_s`` seconds together to exit, kill those still alive,
    close the pipes. ``None`` entries are skipped."""
    live = [c for c in channels if c is not None]
    for channel in live:
        channel.send(Close())
    deadline = time.monotonic() + grace_s
    for channel in live:
        channel.proc.join(max(0.0, deadline - time.monotonic()))
    for channel in live:
        if channel.proc.is_alive():
            channel.proc.kill()
            channel.proc.join(grace_s)
    for channel in live:
        channel.conn.close()
