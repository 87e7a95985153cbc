"""Supervision of env workers: a deadline per command, hang detection inside a chunk, bounded restarts.

- **Deadlines** (:class:`Supervision`): the longest wait for a worker to build its backend
  (``startup_timeout_s``, long: Isaac Sim takes minutes), for one reset reply (``reset_timeout_s``) and for
  one chunk reply (``chunk_timeout_s``, the engine's ``timeout_s``). ``None`` is no limit.
- **Hang detection inside a chunk**: a process worker publishes its progress in a small shared-memory
  segment (:class:`ChunkProgress`, one per worker, created and unlinked by the driver like the other
  ``b1kf_*`` segments): a counter it advances after every step of a chunk, and the steps finished of the
  chunk it runs. While the driver waits for a chunk reply, the reply's :class:`ReplyWatch` raises
  :class:`~.errors.WorkerHungError` once that counter stood still for the stall limit, long before the
  chunk deadline. The limit is ``stall_timeout_s``; ``"auto"`` derives it from the step times measured so
  far (:data:`STALL_FACTOR` x the median wall time of one step, at least :data:`STALL_FLOOR_S`). A stall
  is measured from the moment the driver starts waiting, so time the driver spent elsewhere never counts
  against a worker. Ray actors have deadlines only (a Ray actor serves one call at a time, so it cannot be
  asked for its progress while it runs a chunk). The inline executor has neither: its work runs in the
  caller's thread, where nothing can stop it, so a deadline chosen for it is refused
  (:func:`check_inline_deadlines`; the defaults, :class:`DefaultSeconds`, are taken and never fire).
- **One wait loop** (:func:`wait_for_replies`): every transport (process, Ray, inline) and the policy
  process wait for replies there, each reply watched by a :class:`ReplyWatch` (its deadline, its stall
  limit): the one place a hang is detected and named.
- **Bounded restarts** (:class:`RestartPolicy`, the engine's ``restart_workers``): a dead or hung worker
  is respawned at most ``max_restarts`` times within ``window_s`` seconds, the n-th restart of a window
  after ``min(max_backoff_s, backoff_s * 2**(n-2))`` seconds (the first at once). Every restart is logged
  as a warning and recorded with its back-off (:class:`RestartRecord`); once the budget is spent,
  :class:`~.errors.WorkerDiedError` carries the history.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.checks import check_int, check_number, check_seconds
from .errors import WorkerDiedError, WorkerHungError, worker_label
from .protocol import Chunk, Command, Request
from .shm import SharedBuffers

logger = logging.getLogger("behavior1k_fast.rollout")

#: ``stall_timeout_s="auto"``: this many times the median wall time of one step ...
STALL_FACTOR = 20.0
#: ... and never less than this many seconds (covers a first step, a boundary render and reset).
STALL_FLOOR_S = 30.0
#: Step times kept for the median of ``stall_timeout_s="auto"``.
STEP_SAMPLES = 64


@dataclass(frozen=True)
class RestartPolicy:
    """How often a dead or hung worker is respawned: at most ``max_restarts`` times within ``window_s``
    seconds (per worker), the n-th restart of a window after ``min(max_backoff_s, backoff_s * 2**(n-2))``
    seconds (the first at once; never longer than ``window_s`` either). ``max_backoff_s`` keeps a worker
    that dies often under a large ``max_restarts`` from spending its time asleep in back-off."""

    max_restarts: int = 3
    window_s: float = 600.0
    backoff_s: float = 1.0
    #: The longest one back-off, in seconds.
    max_backoff_s: float = 60.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_restarts", check_int("max_restarts", self.max_restarts, 0))
        object.__setattr__(self, "window_s", check_number("window_s", self.window_s, 0.0, low_open=True,
                                                          unit="of seconds"))
        object.__setattr__(self, "backoff_s", check_number("backoff_s", self.backoff_s, 0.0, unit="of seconds"))
        object.__setattr__(self, "max_backoff_s", check_number("max_backoff_s", self.max_backoff_s, 0.0,
                                                               unit="of seconds"))

    def backoff(self, n: int) -> float:
        """Seconds to wait before the ``n``-th restart (1-based) of a worker within one window."""
        if n <= 1:
            return 0.0
        return min(self.backoff_s * 2.0 ** min(n - 2, 30), self.max_backoff_s, self.window_s)

    @classmethod
    def coerce(cls, value: Any) -> "RestartPolicy | None":
        """``restart_workers``: ``False`` (never restart), ``True`` (the default policy), a policy or a
        mapping of its fields."""
        if value is True or value is False or type(value).__name__ == "bool_":
            return cls() if value else None
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        raise TypeError(f"restart_workers must be a bool, a RestartPolicy or a mapping of its fields, got {value!r}")


class DefaultSeconds(float):
    """A deadline left at its default: a float that knows it was not chosen. The inline executor, which has
    no deadlines, takes it and refuses a deadline that was chosen (:func:`check_inline_deadlines`)."""

    def __repr__(self) -> str:
        return float.__repr__(self)


#: The engine's default deadlines, in seconds (``startup_timeout_s``, ``reset_timeout_s``, ``timeout_s``).
STARTUP_TIMEOUT_S = DefaultSeconds(1200.0)
RESET_TIMEOUT_S = DefaultSeconds(300.0)
CHUNK_TIMEOUT_S = DefaultSeconds(300.0)


def check_inline_deadlines(**deadlines: Any) -> None:
    """The inline executor runs every worker in the caller's thread, where nothing can stop a hung one (and
    an alarm would cut into a pdb session), so it has no deadlines and no hang detection: a deadline chosen
    for it (anything but ``None``, a default, or ``stall_timeout_s="auto"``) is a ``ValueError`` naming it."""
    for name, value in deadlines.items():
        if value is None or isinstance(value, DefaultSeconds) or (isinstance(value, str) and value == "auto"):
            continue
        raise ValueError(f"executor='inline' runs the workers in this thread, where nothing can stop a hung one, "
                         f"so it has no deadlines: {name}={value!r} would never fire (pass None, or use "
                         f"executor='process')")


@dataclass(frozen=True)
class Supervision:
    """Deadlines (seconds, ``None``: no limit), the stall limit inside a chunk and the restart policy
    (``None``: a dead or hung worker is an error). See the module docs."""

    startup_timeout_s: float | None = STARTUP_TIMEOUT_S
    reset_timeout_s: float | None = RESET_TIMEOUT_S
    chunk_timeout_s: float | None = CHUNK_TIMEOUT_S
    #: Seconds without a finished step inside a chunk; ``"auto"`` (from measured step times) or ``None``.
    stall_timeout_s: float | str | None = "auto"
    restart: RestartPolicy | None = None

    def __post_init__(self) -> None:
        # named as the engine's arguments are (chunk_timeout_s is the engine's timeout_s)
        for name, argument in (("startup_timeout_s", "startup_timeout_s"), ("reset_timeout_s", "reset_timeout_s"),
                               ("chunk_timeout_s", "timeout_s")):
            object.__setattr__(self, name, check_seconds(argument, getattr(self, name)))
        if not (isinstance(self.stall_timeout_s, str) and self.stall_timeout_s == "auto"):
            object.__setattr__(self, "stall_timeout_s", check_seconds(
                "stall_timeout_s", self.stall_timeout_s, others="'auto' (from measured step times), None (no limit) or "))
        if self.restart is not None and not isinstance(self.restart, RestartPolicy):
            raise TypeError(f"restart must be a RestartPolicy or None, got {self.restart!r}")

    def deadline(self, command: Command) -> tuple[float | None, str]:
        """Seconds the driver waits for the reply to ``command``, and the name of that setting."""
        if command in (Command.INIT, Command.ATTACH):
            return self.startup_timeout_s, "startup_timeout_s"
        if command == Command.RESET:
            return self.reset_timeout_s, "reset_timeout_s"
        return self.chunk_timeout_s, "timeout_s"


class StepTimes:
    """The wall seconds per step of the chunks collected so far (the last :data:`STEP_SAMPLES`)."""

    def __init__(self) -> None:
        self._samples: deque[float] = deque(maxlen=STEP_SAMPLES)

    def add(self, result: Any) -> None:
        """Record one collected :class:`~.chunk.ChunkResult` (a restart's placeholder has no steps)."""
        steps = 0 if result.global_steps is None else int(result.global_steps[0])
        if steps > 0:
            self._samples.append(float(result.env_wall_seconds[0]) / steps)

    def stall_limit(self, stall_timeout_s: float | str | None) -> float | None:
        """The stall limit in seconds for the setting ``stall_timeout_s`` (module docs)."""
        if stall_timeout_s != "auto":
            return stall_timeout_s
        median = float(np.median(self._samples)) if self._samples else 0.0
        return max(STALL_FLOOR_S, STALL_FACTOR * median)


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


# --- restarts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RestartRecord:
    """One respawn of a worker: when (seconds since the executor started), why, and what it cost."""

    worker: int
    at_s: float
    command: str
    cause: str
    #: Global env id -> own actions of that env lost with the chunks pending on the dead worker.
    lost_actions: Mapping[int, int] = field(default_factory=dict)
    #: Seconds waited before the respawn (:meth:`RestartPolicy.backoff`).
    backoff_s: float = 0.0

    def __str__(self) -> str:
        lost = sum(self.lost_actions.values())
        return f"at {self.at_s:.1f} s in {self.command!r}: {self.cause} ({lost} own actions lost)"


class RestartBudget:
    """The restarts of every worker against a :class:`RestartPolicy` (module docs)."""

    def __init__(self, policy: RestartPolicy):
        self.policy = policy
        self.records: list[RestartRecord] = []
        self._start = time.monotonic()

    def charge(self, worker: int, env_ids: Sequence[int], pending: Sequence[Request],
               cause: WorkerDiedError | WorkerHungError) -> float:
        """Record a restart of ``worker`` (whose ``pending`` requests are lost) and return the back-off in
        seconds before it; :class:`~.errors.WorkerDiedError` with the history when the budget is spent."""
        now = time.monotonic() - self._start
        mine = [r for r in self.records if r.worker == worker]
        recent = [r for r in mine if now - r.at_s < self.policy.window_s]
        if len(recent) >= self.policy.max_restarts:
            raise WorkerDiedError(
                worker, env_ids, cause.command,
                f"{_cause_text(cause)}; restart budget spent ({len(recent)} restarts within "
                f"{self.policy.window_s:g} s, max_restarts={self.policy.max_restarts})",
                history=[str(r) for r in mine],
            ) from cause
        lost: dict[int, int] = {}
        for request in pending:
            if isinstance(request, Chunk):
                for row in request.rows:
                    env = int(env_ids[row])
                    lost[env] = lost.get(env, 0) + request.steps
        backoff = self.policy.backoff(len(recent) + 1)
        record = RestartRecord(worker, now, cause.command, _cause_text(cause), lost, backoff)
        self.records.append(record)
        logger.warning(
            "%s (envs %s) restarted, %d of %d within %g s%s: %s", worker_label(worker), list(env_ids),
            len(recent) + 1, self.policy.max_restarts, self.policy.window_s,
            f" after {backoff:g} s back-off" if backoff else "", record,
        )
        return backoff


def _cause_text(cause: BaseException) -> str:
    return getattr(cause, "detail", None) or str(cause)
