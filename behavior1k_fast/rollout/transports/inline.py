"""The inline transport: every env worker in this process, run when its request is sent (for pdb and fast
tests). It imports no simulator's patch set: a worker applies the patch set its factory names
(``core.contract.patch_set_of``, :func:`~..bootstrap.bootstrap_process`) to this process, and closing the
transport restores, in each patch set the workers named, the profile that was active before."""

from __future__ import annotations

import importlib
from collections import deque
from typing import Sequence

from ..protocol import Command, Failure, Ok, Reply, Request
from ..worker import EnvWorker, WorkerSpec
from .base import Transport


class InlineTransport(Transport):
    """Every worker in this process, run when its request is sent: the same engine without subprocesses,
    debuggable under pdb (a worker's exception is chained to the :class:`~..errors.WorkerError`), and quick
    to start in unit tests. Nothing overlaps: ``submit`` returns after the chunk stepped.

    The workers apply their profile to this process with the patch set their factory names, as a worker
    process does to itself; ``close()`` restores, in each such patch set, the profile that was applied before
    (or none)."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        super().__init__(specs)
        self.workers: list[EnvWorker | None] = [None] * len(self.specs)
        self.replies: list[deque[Reply]] = [deque() for _ in self.specs]
        #: Patch set module path -> the profile active in it before the workers applied theirs (or ``None``).
        self.previous_profiles = {name: importlib.import_module(name).active_profile()
                                  for name in dict.fromkeys(s.patch_set for s in self.specs) if name is not None}
        self.closed = False

    def launch(self, worker: int) -> None:
        """Build the worker here and now; its INIT reply is queued (a failure as a worker process reports it)."""
        spec = self.specs[worker]
        try:
            self.workers[worker] = EnvWorker(spec)
        except Exception as exc:
            self.replies[worker] = deque([Failure.from_exception(exc, Command.INIT, spec.env_ids)])
            return
        self.replies[worker] = deque([Ok(self.workers[worker].ready())])

    def send(self, worker: int, request: Request) -> None:
        answer = self.workers[worker].handle(request)  # a lead chunk: both its replies, now
        self.replies[worker].extend((answer,) if isinstance(answer, (Ok, Failure)) else answer)

    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Every reply is there: inline work ran when it was sent."""
        return [w for w in workers if self.replies[w]]

    def receive(self, worker: int, command: Command) -> Reply:
        return self.replies[worker].popleft()

    def discard(self, worker: int) -> None:
        if self.workers[worker] is not None:
            self.workers[worker].close()
        self.workers[worker] = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            for w in range(len(self.specs)):
                self.discard(w)
        finally:
            for name, previous in self.previous_profiles.items():
                patch_set = importlib.import_module(name)
                if previous is None:
                    patch_set.revert()
                else:
                    patch_set.apply(previous)
