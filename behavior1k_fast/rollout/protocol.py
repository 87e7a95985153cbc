"""The worker protocol: one request at a time, answered by exactly one reply, in order.

Requests (driver -> worker), one dataclass per :class:`Command`:

- :class:`Attach` ``(observations, actions, progress)``: attach the driver's shared-memory buffers (process
  workers); ``progress`` is the segment of the worker's step counter (:mod:`.supervision`).
- :class:`Reset` ``(rows)``: reset those local envs; reply payload ``(infos, obs)``.
- :class:`Chunk` ``(rows, actions, steps, lead_steps)``: run one chunk. ``actions`` is ``None`` when the driver
  left them in the worker's rows of the action buffer. Without a lead (``lead_steps=None``,
  :func:`~.chunk.run_chunk`) one reply ``(result, obs)``. With a lead d (the ``lookahead`` schedule,
  :class:`~.chunk.ChunkRun`) two replies: **LEAD** ``(lead, obs)`` (a :class:`~.chunk.ChunkLead`, sent as
  soon as the lead observations were read after step ``N - d``), then **END** ``result`` (the
  :class:`~.chunk.ChunkResult` once the d remaining actions ran; no observations: the lead's were this
  chunk's). ``lead_steps=0`` makes the backend calls of ``lead_steps=None``.
- :class:`Forward` ``(obs)``: one policy forward (the policy process); reply payload: the actions.
- :class:`Close`: stop serving (no reply).

The first reply of a process, before any request, answers :attr:`Command.INIT` (its payload: the env
worker's ``(observation_space, action_space)``). Replies are :class:`Ok` ``(payload, spans)`` (``spans``: the
worker tracer's drained spans) or :class:`Failure` (the exception's type, message and traceback, the command
and the global env ids). ``obs`` in a payload is ``None`` when the worker wrote its boundary (or lead)
observations into shared memory, else stacked arrays (Ray actors, the inline executor).

**Reply order.** A worker answers its requests in the order they came, each request's replies in the order
above; a :class:`Failure` is always the last reply to its request (a failure before the lead is the only
one). For the lookahead schedule that is ``LEAD(c), END(c), LEAD(c+1), END(c+1), ...``: the driver sends
chunk c + 1 once it has LEAD(c) from every worker (and read their lead observations), then receives
``END(c)`` from every worker, then ``LEAD(c+1)`` from every worker. A worker sends END(c) right after the
last step of chunk c and then takes chunk c + 1 at once when it is queued already; the wait otherwise is
its stall (:attr:`~.chunk.ChunkResult.stall_seconds`). Reading every END before any LEAD means no worker
waits on a full pipe (an END with images in ``final_observation``) while the driver waits for another
worker's lead. The observation rows are written once per chunk, at the lead; the action rows of chunk
c + 1 may be written once LEAD(c) came (the worker copied chunk c's when it started it).

**Worker state.** An env whose episode ended after a lead sits out its next chunk (:mod:`.chunk`); the
worker remembers that until a chunk with that row comes, and a :class:`Reset` of the row forgets it.
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence, Union

import numpy as np

from .errors import WorkerError


class Command(str, enum.Enum):
    INIT = "init"
    ATTACH = "attach"
    RESET = "reset"
    CHUNK = "chunk"
    FORWARD = "forward"
    CLOSE = "close"

    __str__ = str.__str__
    __format__ = str.__format__


@dataclass(frozen=True)
class Attach:
    command: ClassVar[Command] = Command.ATTACH
    #: ``BufferSpec`` of the worker's boundary-observation segment.
    observations: Any
    #: ``BufferSpec`` of the worker's chunk-action segment.
    actions: Any
    #: ``BufferSpec`` of the worker's progress segment (``None``: the worker publishes no progress).
    progress: Any = None

    @property
    def rows(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class Reset:
    command: ClassVar[Command] = Command.RESET
    #: Local indices of the envs to reset, in reply order.
    rows: tuple[int, ...]


@dataclass(frozen=True)
class Chunk:
    command: ClassVar[Command] = Command.CHUNK
    #: Local indices of the envs that step, in the order of ``actions``' rows.
    rows: tuple[int, ...]
    #: ``[len(rows), N, action_dim]``, validated by the engine; ``None`` when in the shared action buffer.
    actions: np.ndarray | None
    #: N, the chunk length (kept when ``actions`` travels through shared memory).
    steps: int
    #: d: read the lead observations after step ``N - d`` and reply twice (module docs); ``None``: once.
    lead_steps: int | None = None


@dataclass(frozen=True)
class Forward:
    command: ClassVar[Command] = Command.FORWARD
    #: Batched observations: key -> ``[B, ...]``.
    obs: dict

    @property
    def rows(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class Close:
    command: ClassVar[Command] = Command.CLOSE


Request = Union[Attach, Reset, Chunk, Forward, Close]


@dataclass(frozen=True)
class Ok:
    payload: Any = None
    #: The worker tracer's spans drained after the command (empty when tracing is off).
    spans: Sequence = ()


@dataclass(frozen=True)
class Failure:
    """An exception raised while a worker served one command."""

    type: str
    message: str
    traceback: str
    command: Command
    env_ids: tuple[int, ...]
    #: The exception itself where no process boundary was crossed (inline executor); never pickled.
    cause: BaseException | None = field(default=None, compare=False)

    @classmethod
    def from_exception(cls, exc: BaseException, command: Command, env_ids: Sequence[int]) -> "Failure":
        return cls(
            type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
            command=command,
            env_ids=tuple(int(i) for i in env_ids),
            cause=exc,
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, "cause": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def error(self, worker: int | str) -> WorkerError:
        """The :class:`WorkerError` to raise in the driver for ``worker``."""
        return WorkerError(worker, str(self.command), self.env_ids, self.type, self.message, self.traceback)


Reply = Union[Ok, Failure]


def unwrap(reply: Reply, worker: int | str) -> Any:
    """The payload of an :class:`Ok`; raises the :class:`WorkerError` of a :class:`Failure` (chained to the
    original exception where it is at hand, so a post-mortem debugger reaches the failing frame)."""
    if isinstance(reply, Failure):
        raise reply.error(worker) from reply.cause
    return reply.payload
