"""The one loop in which the driver waits for worker replies, and what it watches (the bottom of the
rollout layer's supervision: transports, the supervisor, the process channel and the policy process import
it; it imports nothing of theirs).

- :func:`wait_for_replies`: every transport (process, Ray, inline) and the policy process wait for replies
  there, each reply watched by a :class:`ReplyWatch` (its deadline, its stall limit): the one place a hang
  is detected and named (:class:`~.errors.WorkerHungError`).
- :class:`ChunkProgress`: a process worker's step counter in a small shared-memory segment (one per worker,
  created and unlinked by the driver like the other ``b1kf_*`` segments), which a :class:`ReplyWatch`
  reads to find a worker that stopped stepping inside a chunk (:mod:`.supervision` says how the limit is
  chosen).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import WorkerHungError
from .shm import SharedBuffers


# --- progress of one process worker ---------------------------------------------------------------
#: Slots of a worker's progress segment: steps finished since the worker started (the counter the
#: driver watches), steps finished of the running chunk, steps of that chunk.
BEATS, DONE, TOTAL = range(3)


class ChunkProgress:
    """One worker's progress counters in shared memory (module docs): the driver creates the segment and
    unlinks it; the worker attaches it and writes it, the driver reads it."""

    KEY = "progress"

    def __init__(self, buffers: SharedBuffers):
        self.buffers = buffers
        #: int64 [3]: :data:`BEATS`, :data:`DONE`, :data:`TOTAL`.
        self.counters = buffers.arrays[self.KEY][0]

    @classmethod
    def create(cls) -> "ChunkProgress":
        from gymnasium import spaces

        space = spaces.Dict({cls.KEY: spaces.Box(0, np.iinfo(np.int64).max, (3,), np.int64)})
        progress = cls(SharedBuffers.create(space, 1))
        progress.counters[:] = 0
        return progress

    @classmethod
    def attach(cls, spec: Any) -> "ChunkProgress":
        return cls(SharedBuffers.attach(spec))

    def begin(self, steps: int) -> None:
        """Worker: a chunk of ``steps`` steps starts."""
        self.counters[TOTAL] = steps
        self.counters[DONE] = 0

    def step(self, done: int) -> None:
        """Worker: ``done`` steps of the running chunk are finished."""
        self.counters[DONE] = done
        self.counters[BEATS] += 1


#: Seconds between two checks of the watches while the driver waits for replies (:func:`wait_for_replies`).
WATCH_PERIOD_S = 0.1


class ReplyWatch:
    """What the driver watches while it waits for one reply of ``worker``: the deadline of ``command``
    (``seconds`` after ``since``, a ``time.monotonic()``; default: when the watch is made; ``None``: no limit)
    and, for a process worker's chunk, its step counter (``progress``): once that stood still for ``stall_s``
    seconds (since the watch was made, at the latest) the worker is hung. :meth:`check` is the one place a
    hang is named (:class:`~.errors.WorkerHungError`); ``who`` starts its message (``"pid 123"``, ``"the Ray
    actor"``)."""

    def __init__(
        self,
        worker: int | str,
        env_ids: Sequence[int],
        command: str,
        seconds: float | None,
        deadline_name: str = "timeout_s",
        *,
        since: float | None = None,
        progress: ChunkProgress | None = None,
        stall_s: float | None = None,
        who: str = "",
    ):
        now = time.monotonic()
        self.worker, self.env_ids, self.command = worker, env_ids, str(command)
        self.seconds, self.deadline_name, self.who = seconds, deadline_name, who
        self.deadline = None if seconds is None else (now if since is None else since) + seconds
        self.counters = None if progress is None or stall_s is None else progress.counters
        self.stall_s = stall_s
        self.beats = 0 if self.counters is None else int(self.counters[BEATS])
        self.beat_at = now

    @property
    def active(self) -> bool:
        """It has a deadline or a stall limit: the wait must wake up to check it."""
        return self.deadline is not None or self.counters is not None

    def check(self) -> None:
        """Raise :class:`~.errors.WorkerHungError` when the worker stalled or its deadline passed."""
        now = time.monotonic()
        if self.counters is not None:
            beats = int(self.counters[BEATS])
            if beats != self.beats:
                self.beats, self.beat_at = beats, now
            elif now - self.beat_at >= self.stall_s:
                done, total = int(self.counters[DONE]), int(self.counters[TOTAL])
                last = f"last step finished: {done} of {total} of its chunk" if done else "no step of its chunk finished"
                raise WorkerHungError(
                    self.worker, self.env_ids, self.command,
                    f"no step finished for {now - self.beat_at:.1f} s (stall_timeout_s={self.stall_s:g}); {last}",
                )
        if self.deadline is not None and now >= self.deadline:
            who = f"{self.who} " if self.who else ""
            raise WorkerHungError(self.worker, self.env_ids, self.command,
                                  f"{who}gave no reply within {self.deadline_name}={self.seconds:g} s")


def wait_for_replies(
    poll: Callable[[Sequence[Any], float | None], Sequence[Any]],
    watches: Mapping[Any, ReplyWatch],
    timeout_s: float | None = None,
) -> list[Any]:
    """The one loop in which the driver waits for replies, whatever the transport.

    ``poll(workers, seconds)`` returns those of ``workers`` whose oldest reply arrived, or that died, within
    ``seconds`` (``None``: block until one does); ``watches`` maps each worker waited on to its
    :class:`ReplyWatch`, checked at least every :data:`WATCH_PERIOD_S` while any of them has a limit.
    Returns the workers ``poll`` found, or ``[]`` once ``timeout_s`` passed (``None``: no limit); a watch
    that finds its worker hung raises :class:`~.errors.WorkerHungError`."""
    workers = list(watches)
    end = None if timeout_s is None else time.monotonic() + timeout_s
    watched = any(w.active for w in watches.values())
    while True:
        period = WATCH_PERIOD_S if watched else None
        if end is not None:
            remaining = max(0.0, end - time.monotonic())
            period = remaining if period is None else min(period, remaining)
        found = list(poll(workers, period))
        if found:
            return found
        for watch in watches.values():
            watch.check()
        if end is not None and time.monotonic() >= end:
            return []
