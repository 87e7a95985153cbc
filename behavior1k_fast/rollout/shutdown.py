"""Shutdown that a Ctrl-C or a SIGTERM cannot leave half done.

- :func:`deferred_interrupts`: in the main thread, a SIGINT (Ctrl-C) that arrives inside the block sets the
  yielded event instead of raising, so the cleanup can see it and cut its waits short, and is delivered
  again (a ``KeyboardInterrupt`` with Python's default handler) once the block has finished. A second
  Ctrl-C while ``close()`` waits for a busy worker therefore still ends with every worker stopped and every
  shared-memory segment unlinked.
- :func:`close_on_sigterm`: while objects registered here are open, a SIGTERM closes them and then kills
  the process with SIGTERM, as the default action would have (exit status included). Installed only from
  the main thread and only where SIGTERM has its default action: a handler someone else installed is left
  alone. Removed again when the last registered object is released.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import weakref
from typing import Any, Iterator

_closers: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[threading.Event]:
    """Hold SIGINT during the block (module docs); the event is set when one arrived. Outside the main
    thread nothing is held (Python delivers signals to the main thread only) and the event stays unset."""
    interrupted = threading.Event()
    if not _in_main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        signal.raise_signal(signal.SIGINT)


def close_on_sigterm(closable: Any) -> None:
    """Call ``closable.close()`` when this process gets SIGTERM (module docs), until :func:`release`."""
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, _on_sigterm):
        return
    _closers.add(closable)
    signal.signal(signal.SIGTERM, _on_sigterm)


def release(closable: Any) -> None:
    """``closable`` is closed: forget it; restore SIGTERM's default action when nothing is left open."""
    _closers.discard(closable)
    if not _closers and _in_main_thread() and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
    for closable in list(_closers):
        try:
            closable.close()
        except BaseException:  # noqa: BLE001 - the process dies of SIGTERM right below either way
            pass
    signal.raise_signal(signal.SIGTERM)
