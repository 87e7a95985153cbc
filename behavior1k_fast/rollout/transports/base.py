"""The transport interface: how the driver talks to env workers of one kind (the process, inline and Ray
transports are its siblings; the :class:`~..supervision.Supervisor` runs over any of them)."""

from __future__ import annotations

import abc
from typing import Any, Sequence

import numpy as np

from ..protocol import Command, Reply, Request
from ..waiting import ChunkProgress
from ..worker import WorkerSpec

#: Appended to the message of a worker's death where a restart would help.
RESTART_HINT = "; pass restart_workers=True to respawn it and reset its envs"


class Transport(abc.ABC):
    """How the driver talks to the env workers of one kind: start a worker, send it a request, tell which
    workers have a reply (or died), read one reply, stop a worker; nothing else (deadlines, restarts and
    placeholders are the :class:`~..supervision.Supervisor`'s). Worker ids are ``0..len(specs)-1``."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        self.specs = list(specs)
        #: ``time.monotonic()`` when each worker was last launched (workers start in parallel).
        self.started = [0.0] * len(self.specs)

    @abc.abstractmethod
    def launch(self, worker: int) -> None:
        """Start ``worker`` without waiting for it; its first reply answers :attr:`~..protocol.Command.INIT`."""

    def setup(self, worker: int, payload: Any) -> tuple[tuple[Any, Any], Request | None]:
        """From ``worker``'s INIT payload: its ``(observation_space, action_space)`` and a request it must
        serve before any other (``None``: none)."""
        return payload, None

    @abc.abstractmethod
    def send(self, worker: int, request: Request) -> None:
        """Queue one request (never blocks on the worker's work)."""

    @abc.abstractmethod
    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Those of ``workers`` whose oldest reply arrived, or that died, within ``timeout_s`` seconds
        (``None``: block until one does); ``[]`` when none did."""

    @abc.abstractmethod
    def receive(self, worker: int, command: Command) -> Reply:
        """The oldest reply :meth:`poll` found; :class:`~..errors.WorkerDiedError` if the worker died."""

    def who(self, worker: int) -> str:
        """How errors name the worker's process or actor (``"pid 123"``)."""
        return ""

    def progress(self, worker: int) -> ChunkProgress | None:
        """The worker's step counter in shared memory, where it publishes one (hang detection)."""
        return None

    def read_obs(self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Boundary observations the worker left in shared memory for ``rows`` (into ``out`` if given).
        Only transports whose workers write to shared memory have them."""
        raise NotImplementedError(f"{type(self).__name__} workers return observations in their replies")

    @abc.abstractmethod
    def discard(self, worker: int) -> None:
        """Stop the worker (dead or alive) at once and forget it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker and free every resource. Idempotent."""

    @property
    def pids(self) -> list[int]:
        """OS pids of the worker processes this transport started (empty where it starts none)."""
        return []

    @property
    def worker_nodes(self) -> list[str | None]:
        """Ray node id of each worker (empty where workers are not Ray actors)."""
        return []
