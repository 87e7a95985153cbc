"""Spawned processes: the one serving loop (worker side) and the driver's channel to such a process.

Env workers and the policy process run the same loop, :func:`serve`: build the handler, send the
:attr:`~.protocol.Command.INIT` reply, then answer one request after the other until :class:`~.protocol.Close`
or the pipe closes. The process exits within :data:`OWNER_CHECK_PERIOD_S` once its owner is gone, and a pipe
its owner closed ends the loop quietly (no ``BrokenPipeError`` traceback). A served process ignores SIGINT
from its first line: a Ctrl-C in the terminal reaches the whole process group, and the driver, not each
worker, decides how its workers stop (:func:`stop_processes`). :class:`ProcessChannel` starts the process
with SIGINT ignored (an ignored signal stays ignored across the exec, and a Python that starts so keeps
it ignored), so a Ctrl-C while the new interpreter imports and unpickles its target does not reach it
either: no ``KeyboardInterrupt`` traceback from a starting worker. Meanwhile the driver's main thread holds
SIGINT blocked, so a Ctrl-C for it during those milliseconds is delivered right after the start.

:class:`ProcessChannel` is the driver's end: it starts the process (with extra environment variables, set
before the child imports anything), sends requests without blocking on the worker's work, and waits for each
reply while watching the process sentinel, so a death is seen at once (:meth:`ProcessChannel.poll` and
:meth:`ProcessChannel.read`, inside the one wait loop :func:`~.waiting.wait_for_replies`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from .errors import WorkerDiedError, exit_detail, exit_if_reimporting_main
from .protocol import Close, Command, Failure, Ok, Reply, Request
from .waiting import WATCH_PERIOD_S, ReplyWatch, wait_for_replies

#: Seconds between checks that the owner process is still alive.
OWNER_CHECK_PERIOD_S = 0.5
#: Seconds a process gets to finish its current request and exit after ``close()`` before it is killed.
CLOSE_GRACE_S = 5.0
#: Serialises the temporary environment of :class:`ProcessChannel` starts.
_SPAWN_LOCK = threading.Lock()
#: ``prctl`` option: the signal this process gets when the thread that started it ends (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1
#: Processes for :func:`_start_from_a_lasting_thread` to start off the main thread, with their futures.
_STARTS: "queue.SimpleQueue[tuple[Any, Future]]" = queue.SimpleQueue()
_STARTER: list[threading.Thread] = []


class Handler(Protocol):
    """What :func:`serve` hosts: an env worker or a policy."""

    #: Global env ids named by a failure that is not tied to one request's rows.
    env_ids: Sequence[int]

    def ready(self) -> Any:
        """Payload of the INIT reply."""

    def handle(self, request: Request) -> Reply | Iterator[Reply]:
        """Serve one request; never raises (an exception becomes a :class:`~.protocol.Failure`). A request
        answered more than once (a chunk with a lead) gives an iterator of its replies, a failure last."""

    def close(self) -> None: ...


def _exit_when_orphaned(owner_pid: int) -> None:
    while True:
        time.sleep(OWNER_CHECK_PERIOD_S)
        if os.getppid() != owner_pid:
            os._exit(1)


def watch_owner(owner_pid: int) -> None:
    """Exit this process (within :data:`OWNER_CHECK_PERIOD_S`) once its owner ``owner_pid`` is gone."""
    threading.Thread(target=_exit_when_orphaned, args=(owner_pid,), daemon=True, name="owner-watchdog").start()


def die_with_owner(owner_pid: int) -> None:
    """Have the kernel kill this process (SIGKILL) once the owner's thread that started it ends, whatever this
    process runs then: also a simulator stuck in native code holding the GIL, where the Python watchdog of
    :func:`watch_owner` cannot run (``prctl(PR_SET_PDEATHSIG)``, Linux; elsewhere the watchdog alone).
    :class:`ProcessChannel` starts every process from a thread that lasts as long as the owner. Exits at
    once when the owner ``owner_pid`` is already gone (it died before the request took effect)."""
    if sys.platform.startswith("linux"):
        import ctypes

        zero = ctypes.c_ulong(0)
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero)
    if os.getppid() != owner_pid:
        os._exit(1)


def serve(conn: Any, owner_pid: int, build: Callable[[], Handler], env_ids: Sequence[int] = ()) -> None:
    """Entry of a spawned process: build the handler, reply to INIT, then serve requests (module docs).

    ``env_ids``: the global env ids a failure to build is reported for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_owner(owner_pid)
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
            answer = handler.handle(request)
            for reply in (answer,) if isinstance(answer, (Ok, Failure)) else answer:
                try:
                    conn.send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the owner closed its end: nobody reads the reply
                except Exception as exc:  # e.g. an info value that does not pickle
                    if not _send_quietly(conn, Failure.from_exception(exc, request.command, handler.env_ids)):
                        return
                    break  # a failure is the last reply to its request
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

    ``worker`` and ``env_ids`` name it in errors; ``hint`` is appended to the message of a death. ``env``:
    environment variables the process starts with (e.g. its GPU), on top of this process's."""

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple,
        name: str,
        worker: int | str,
        env_ids: Sequence[int] = (),
        hint: str = "",
        env: Mapping[str, str] | None = None,
    ):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, os.getpid(), *args), daemon=True, name=name)
        with _SPAWN_LOCK, _environment(env or {}), _children_ignore_sigint():
            try:
                _start_from_a_lasting_thread(self.proc)
            except RuntimeError:
                exit_if_reimporting_main()  # a script without the main-module guard (errors.py)
                raise
        #: ``time.monotonic()`` when the process was started.
        self.started = time.monotonic()
        child.close()
        self.worker = worker
        self.env_ids = list(env_ids)
        self.hint = hint
        #: The environment variables the process started with on top of this process's.
        self.env = dict(env or {})

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

    def poll(self, timeout_s: float | None) -> bool:
        """Whether a reply arrived or the process died, waiting up to ``timeout_s`` seconds (``None``: block)."""
        return bool(wait([self.conn, self.proc.sentinel], timeout=timeout_s))

    def read(self, command: Command) -> Reply:
        """The reply :meth:`poll` found; :class:`~.errors.WorkerDiedError` (with the exit code) when the process
        died instead."""
        if self.conn.poll():
            try:
                return self.conn.recv()
            except (EOFError, ConnectionResetError):
                pass
        self.proc.join(OWNER_CHECK_PERIOD_S * 10)
        detail = exit_detail(self.proc.pid, self.proc.exitcode)
        if command == Command.INIT:
            detail += _startup_refusal(self.proc.exitcode, self.env)
        raise WorkerDiedError(self.worker, self.env_ids, str(command), detail, self.hint)

    def receive(self, command: Command, timeout_s: float | None, deadline_name: str = "timeout_s") -> Reply:
        """The next reply, waiting at most ``timeout_s`` seconds (``None``: no limit) in the one wait loop
        (:func:`~.waiting.wait_for_replies`): :class:`~.errors.WorkerHungError` past the deadline (named
        ``deadline_name``), :class:`~.errors.WorkerDiedError` at once if the process dies."""
        watch = ReplyWatch(self.worker, self.env_ids, command, timeout_s, deadline_name, who=f"pid {self.proc.pid}")
        wait_for_replies(lambda workers, seconds: workers if self.poll(seconds) else [], {self.worker: watch})
        return self.read(command)


def _startup_refusal(exitcode: int | None, env: Mapping[str, str]) -> str:
    """Why a process started with ``env`` on top of this environment and gone with ``exitcode`` before its
    INIT reply was ended by the strict start-up hook (:func:`~..patching.startup_env.strict_refusal`), as a
    clause for the :class:`~.errors.WorkerDiedError`; ``""`` where the hook did not end it. Reads the hook's
    variables only (:mod:`..patching.startup_env`): no simulator's patch set is imported here."""
    from ..patching import startup_env  # only where a process died at start-up

    reason = None
    if exitcode == startup_env.STRICT_EXIT_CODE:
        reason = startup_env.strict_refusal({**os.environ, **env})
    if reason is None:
        return ""
    return f" (ended at start-up by the auto-apply hook under {startup_env.STRICT_VAR}: {reason})"


def _start_from_a_lasting_thread(proc: Any) -> None:
    """``proc.start()`` from a thread that lasts as long as this process: here in the main thread, else in
    one daemon thread kept for it. The kernel ends a started process with the thread that started it
    (:func:`die_with_owner`), and a caller's own thread may end while its workers should go on."""
    if threading.current_thread() is threading.main_thread():
        proc.start()
        return
    if not (_STARTER and _STARTER[-1].is_alive()):  # the caller holds _SPAWN_LOCK; none alive in a forked child
        _STARTER.append(threading.Thread(target=_serve_starts, daemon=True, name="process-starter"))
        _STARTER[-1].start()
    done: Future = Future()
    _STARTS.put((proc, done))
    done.result()


def _serve_starts() -> None:
    while True:
        proc, done = _STARTS.get()
        try:
            proc.start()
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(None)


def stop_processes(
    channels: Sequence[ProcessChannel | None], grace_s: float, cancel: threading.Event | None = None
) -> None:
    """Ask every process to close, give them ``grace_s`` seconds together to exit (cut short once
    ``cancel`` is set), kill those still alive, close the pipes. ``None`` entries are skipped. The kill
    runs even when the wait is interrupted (an exception, a ``KeyboardInterrupt``)."""
    live = [c for c in channels if c is not None]
    try:
        for channel in live:
            channel.send(Close())
        deadline = time.monotonic() + grace_s
        while any(c.proc.is_alive() for c in live) and not (cancel is not None and cancel.is_set()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wait([c.proc.sentinel for c in live if c.proc.is_alive()], timeout=min(remaining, WATCH_PERIOD_S))
    finally:
        for channel in live:
            if channel.proc.is_alive():
                channel.proc.kill()
        for channel in live:
            channel.proc.join(OWNER_CHECK_PERIOD_S * 10)
            channel.conn.close()


@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Inside, SIGINT is ignored (a process started here inherits that) and blocked in this (the main)
    thread, so a Ctrl-C delivered to it meanwhile stays pending (Linux never drops a blocked signal) and
    reaches its own handler once the block ends; with other threads running, the kernel may hand a Ctrl-C
    of those milliseconds to one of them, where it is ignored. Only the main thread can change a handler:
    elsewhere this does nothing, and such a child ignores SIGINT from the first line of :func:`serve` on."""
    handler = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread() or handler is None
            or not hasattr(signal, "pthread_sigmask")):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` on top for the duration of the block (a child started inside inherits it)."""
    previous = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
