"""Supervision of env workers, in one home: the :class:`Supervisor` (the executor the engine talks to, the
same over every transport of :mod:`.transports`) and its parts: a deadline per command, hang detection
inside a chunk, bounded restarts, the placeholder replies of a respawned worker.

- **The supervisor** (:class:`Supervisor`): the pending-reply queue of each worker (replies in request
  order; a chunk with a lead owes two, its LEAD and its END, :func:`reply_parts`), the deadlines and hang
  detection (each reply waited for in the one loop :func:`~.waiting.wait_for_replies`, watched by a
  :class:`~.waiting.ReplyWatch`), the restart budget and respawn, and the placeholder results. A dead worker
  is detected at once (process sentinel / actor error): :class:`~.errors.WorkerDiedError`; a hung one is
  stopped and reported as :class:`~.errors.WorkerHungError`. With a restart policy the worker is replaced,
  within the policy's budget, by a fresh worker whose envs are all reset; every reply that was pending on it
  then is a placeholder (:func:`placeholder`): the reset observation, zero rewards, no action applied,
  ``info["worker_restarted"] = True``, ``truncated`` at the first step of the first pending chunk of each
  env only, so each cut episode ends once (a pending LEAD: every row's episode ended before the lead, its
  lead observation the reset one).
- **Deadlines** (:class:`Supervision`): the longest wait for a worker to build its backend
  (``startup_timeout_s``, long: Isaac Sim takes minutes), for one reset reply (``reset_timeout_s``) and for
  one chunk reply (``chunk_timeout_s``, the engine's ``timeout_s``). ``None`` is no limit.
- **Hang detection inside a chunk**: a process worker publishes its progress in a small shared-memory
  segment (:class:`~.waiting.ChunkProgress`): a counter it advances after every step of a chunk, and the
  steps finished of the chunk it runs. While the driver waits for a chunk reply, the reply's :class:`~.waiting.ReplyWatch` raises
  :class:`~.errors.WorkerHungError` once that counter stood still for the stall limit, long before the
  chunk deadline. The limit is ``stall_timeout_s``; ``"auto"`` derives it from the step times measured so
  far (:data:`STALL_FACTOR` x the median wall time of one step, at least :data:`STALL_FLOOR_S`). A stall
  is measured from the moment the driver starts waiting, so time the driver spent elsewhere never counts
  against a worker. Ray actors have deadlines only (a Ray actor serves one call at a time, so it cannot be
  asked for its progress while it runs a chunk). The inline executor has neither: its work runs in the
  caller's thread, where nothing can stop it, so a deadline chosen for it is refused
  (:func:`check_inline_deadlines`; the defaults, :class:`DefaultSeconds`, are taken and never fire).
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
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..core.checks import check_int, check_number, check_seconds
from ..core.tracing import IPC, WAIT, get_profiler
from .chunk import ChunkLead, ChunkResult
from .errors import WorkerDiedError, WorkerHungError, worker_label
from .protocol import Chunk, Command, Ok, Reply, Request, Reset, unwrap
from .waiting import WATCH_PERIOD_S, ChunkProgress, ReplyWatch, wait_for_replies
from .worker import WorkerSpec

if TYPE_CHECKING:  # the transports' package imports this module (make_executor)
    from .transports.base import Transport

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


# --- the supervisor -------------------------------------------------------------------------------
#: Which reply of its request a pending entry waits for (:mod:`.protocol`): the one reply of most requests,
#: or the LEAD and the END reply of a chunk with a lead.
ONLY, LEAD, END = "only", "lead", "end"


def reply_parts(request: Request) -> tuple[str, ...]:
    """The replies ``request`` is answered with, in order."""
    if isinstance(request, Chunk) and request.lead_steps is not None:
        return (LEAD, END)
    return (ONLY,)


@dataclass(eq=False)
class Pending:
    """One reply a worker owes, oldest first in the worker's queue."""

    request: Request
    #: :data:`ONLY`, :data:`LEAD` or :data:`END`.
    part: str = ONLY
    #: The reply once read (or the placeholder a respawn answered it with).
    reply: Reply | None = None
    #: Watched since the driver first waited for this reply (deadline, stall limit).
    watch: ReplyWatch | None = None
    #: The hang :meth:`Supervisor.ready` found, handled by the next :meth:`Supervisor.collect` of the worker.
    hung: WorkerHungError | None = None


class Supervisor:
    """The executor the engine talks to: one :class:`Transport` supervised (module docs).

    Calls: :meth:`start`, :meth:`submit` ``(worker, request)``, :meth:`ready` (workers whose reply is
    there), :meth:`collect` ``(worker)`` (replies in submit order; a chunk with a lead is collected twice,
    its LEAD then its END), :meth:`take_respawned`, :meth:`close`."""

    def __init__(self, transport: Transport, supervision: Supervision):
        self.transport = transport
        self.specs = transport.specs
        self.supervision = supervision
        self.pending: list[deque[Pending]] = [deque() for _ in self.specs]
        self.budget = None if supervision.restart is None else RestartBudget(supervision.restart)
        self.step_times = StepTimes()
        #: Worker -> reset observations of all its envs, for workers respawned since :meth:`take_respawned`.
        self.respawned: dict[int, dict[str, np.ndarray]] = {}

    @property
    def pids(self) -> list[int]:
        return self.transport.pids

    @property
    def worker_nodes(self) -> list[str | None]:
        return self.transport.worker_nodes

    @property
    def restart_records(self) -> list[RestartRecord]:
        """Every restart so far, oldest first."""
        return [] if self.budget is None else list(self.budget.records)

    @property
    def restarts(self) -> int:
        """Workers respawned so far."""
        return len(self.restart_records)

    # --- start-up -------------------------------------------------------------------------------
    def start(self) -> tuple[Any, Any]:
        """Launch every worker (they build in parallel), wait for all; returns the spaces of worker 0. When
        one fails, the workers still building are stopped at once (they could not take a close request
        before their build ends, so a close grace would only delay the error) and the others closed."""
        spaces = []
        try:
            for w in range(len(self.specs)):
                self._launch(w)
            for w in range(len(self.specs)):
                spaces.append(self._init_or_stop(w))
        except BaseException:
            for w in range(len(spaces), len(self.specs)):
                self.transport.discard(w)
            self.close()
            raise
        return spaces[0]

    def _launch(self, worker: int) -> None:
        self.transport.launch(worker)
        self.transport.started[worker] = time.monotonic()

    def _init_or_stop(self, worker: int) -> tuple[Any, Any]:
        """:meth:`_await_init`; a worker that dies or hangs in it is stopped at once (no close grace)."""
        try:
            return self._await_init(worker)
        except (WorkerDiedError, WorkerHungError):
            self.transport.discard(worker)
            raise

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        """Wait (from its launch) until ``worker`` built its backend, then serve its set-up request."""
        payload = unwrap(self._wait_and_read(worker, Command.INIT, self.transport.started[worker]), worker)
        spaces, first = self.transport.setup(worker, payload)
        if first is not None:
            self._call(worker, first)
        return spaces

    def _watch(self, worker: int, command: Command, since: float | None = None) -> ReplyWatch:
        """The watch of ``worker``'s reply to ``command``: its deadline, and inside a chunk its stall limit."""
        seconds, name = self.supervision.deadline(command)
        stall = self.step_times.stall_limit(self.supervision.stall_timeout_s) if command == Command.CHUNK else None
        progress = None if stall is None else self.transport.progress(worker)
        return ReplyWatch(worker, self.specs[worker].env_ids, command, seconds, name, since=since,
                          progress=progress, stall_s=stall, who=self.transport.who(worker))

    def _wait_and_read(self, worker: int, command: Command, since: float | None = None,
                       watch: ReplyWatch | None = None) -> Reply:
        """Wait for ``worker``'s oldest reply (in the one wait loop) and read it."""
        watch = watch or self._watch(worker, command, since)
        wait_for_replies(self.transport.poll, {worker: watch})
        return self.transport.receive(worker, command)

    def _call(self, worker: int, request: Request) -> Any:
        """Send ``request`` and wait for its payload (start-up and restart, outside the pending queue)."""
        self.transport.send(worker, request)
        return unwrap(self._wait_and_read(worker, request.command), worker)

    # --- requests -------------------------------------------------------------------------------
    def submit(self, worker: int, request: Request) -> None:
        """Queue ``request`` (a :class:`~.protocol.Reset` or :class:`~.protocol.Chunk`) on ``worker``."""
        with get_profiler().section(IPC, worker=worker, command=str(request.command)):
            self.transport.send(worker, request)
        self.pending[worker].extend(Pending(request, part) for part in reply_parts(request))

    def _oldest(self, worker: int) -> Pending:
        """The oldest pending request of ``worker``, its watch started on the first wait for it."""
        if not self.pending[worker]:
            raise RuntimeError(f"worker {worker} has no pending request to collect")
        entry = self.pending[worker][0]
        if entry.watch is None:
            entry.watch = self._watch(worker, entry.request.command)
        return entry

    def ready(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Of ``workers`` (each with a pending request), those whose oldest reply :meth:`collect` can take
        without waiting: it arrived, or the worker died or hung (``collect`` then raises, or respawns it).
        Waits up to ``timeout_s`` seconds for the first one (``None``: until there is one); ``[]`` on timeout.
        Each reply's deadline and stall limit count from the first wait for it, here or in :meth:`collect`."""
        entries = {w: self._oldest(w) for w in workers}
        settled = [w for w, e in entries.items() if e.reply is not None or e.hung is not None]
        if settled:
            return settled
        try:
            return sorted(wait_for_replies(self.transport.poll, {w: e.watch for w, e in entries.items()}, timeout_s))
        except WorkerHungError as exc:
            entries[exc.worker].hung = exc
            return [exc.worker]

    def collect(self, worker: int, out: dict[str, np.ndarray] | None = None) -> tuple[Any, dict[str, np.ndarray] | None]:
        """Payload and observations of the oldest reply ``worker`` owes: a chunk's result and its boundary
        observations, a reset's infos and observations, a lead chunk's :class:`~.chunk.ChunkLead` and its
        lead observations, or its END result and ``None`` (the lead's observations were the chunk's).

        With ``out`` (key -> array with one row per env of the request) the observations are copied
        straight into it (one copy from shared memory) and ``out`` is returned."""
        entry = self._oldest(worker)
        if entry.reply is None:
            try:
                with get_profiler().section(WAIT, worker=worker, command=str(entry.request.command)):
                    if entry.hung is not None:
                        raise entry.hung
                    entry.reply = self._wait_and_read(worker, entry.request.command, watch=entry.watch)
            except (WorkerDiedError, WorkerHungError) as exc:
                self.transport.discard(worker)
                if self.budget is None:
                    raise
                self._recover(worker, exc)
        self.pending[worker].popleft()
        payload = unwrap(entry.reply, worker)
        get_profiler().merge(entry.reply.spans)
        data, obs = (payload, None) if entry.part == END else payload
        if isinstance(data, ChunkResult):
            self.step_times.add(data)
        if entry.part == END:
            return data, None
        if obs is None:
            with get_profiler().section(IPC, worker=worker, command="read_obs"):
                obs = self.transport.read_obs(worker, entry.request.rows, out)
        elif out is not None:
            for key, arr in out.items():
                arr[...] = obs[key]
            obs = out
        return data, obs

    def take_respawned(self) -> dict[int, dict[str, np.ndarray]]:
        """Workers respawned since the last call -> reset observations of all their envs."""
        respawned, self.respawned = self.respawned, {}
        return respawned

    # --- restarts -------------------------------------------------------------------------------
    def _recover(self, worker: int, cause: WorkerDiedError | WorkerHungError) -> None:
        """Respawn the stopped ``worker`` within the restart budget (which raises once it is spent); a
        respawn that dies or hangs itself is charged and retried."""
        while True:
            pending = list({id(e.request): e.request for e in self.pending[worker]}.values())
            backoff = self.budget.charge(worker, self.specs[worker].env_ids, pending, cause)
            time.sleep(backoff)
            try:
                self._respawn(worker)
                return
            except (WorkerDiedError, WorkerHungError) as exc:
                self.transport.discard(worker)
                cause = exc

    def _respawn(self, worker: int) -> None:
        """Start ``worker`` afresh, reset all its envs, answer its pending requests with placeholders."""
        self._launch(worker)
        self._await_init(worker)
        spec = self.specs[worker]
        rows = tuple(range(spec.num_envs))
        infos, obs = self._call(worker, Reset(rows))
        obs = obs if obs is not None else self.transport.read_obs(worker, rows)
        self.respawned[worker] = obs
        #: Local rows whose episode a placeholder result of this respawn ended already: a later chunk pending
        #: on them (the lookahead schedule's next chunk) steps nothing and ends nothing (issue 33, N3).
        cut = np.zeros(spec.num_envs, dtype=bool)
        for entry in self.pending[worker]:
            sel = list(entry.request.rows)
            entry.reply = Ok(placeholder(entry.request, entry.part, spec, [infos[r] for r in sel],
                                         {k: v[sel] for k, v in obs.items()}, ends=~cut[sel]))
            if isinstance(entry.request, Chunk) and entry.part != LEAD:
                cut[sel] = True
            entry.hung = None

    def close(self) -> None:
        """Stop every worker and free every resource. Idempotent."""
        self.transport.close()


def placeholder(request: Request, part: str, spec: WorkerSpec, infos: list[dict], obs: dict,
                ends: np.ndarray | None = None) -> Any:
    """The payload a respawned worker's pending reply ``part`` of ``request`` is answered with (module
    docs). A lead chunk's LEAD: every row's episode ended before the lead (its lead observation is the
    reset one, no committed action runs); its END: the placeholder result without observations. A chunk's
    result ends (``truncated`` at its first step) the episodes of the rows ``ends`` selects (bool ``[n]``;
    default: every row): the rows whose episode no earlier placeholder ended."""
    infos = [{**i, "worker_restarted": True} for i in infos]
    if not isinstance(request, Chunk):
        return (infos, obs)
    n, steps = len(request.rows), request.steps
    env_ids = spec.env_ids[list(request.rows)]
    if part == LEAD:
        return (ChunkLead(env_ids, request.lead_steps, np.ones(n, dtype=bool), np.zeros(n, dtype=bool)), obs)
    truncated = np.zeros((n, steps), dtype=bool)
    truncated[:, 0] = True if ends is None else ends
    result = ChunkResult(
        env_ids=env_ids,
        obs=None,
        rewards=np.zeros((n, steps)),
        terminated=np.zeros((n, steps), dtype=bool),
        truncated=truncated,
        applied=np.zeros((n, steps), dtype=bool),
        infos=infos,
        global_steps=np.zeros(n, dtype=np.int64),
        sim_seconds=np.zeros(n),
        env_wall_seconds=np.zeros(n),
    )
    return result if part == END else (result, obs)


__all__ = ["ChunkProgress", "ReplyWatch", "RestartBudget", "RestartPolicy", "RestartRecord", "StepTimes", "Supervision",
           "Supervisor", "WATCH_PERIOD_S", "check_inline_deadlines", "placeholder", "reply_parts", "wait_for_replies"]
