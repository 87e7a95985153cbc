"""The process transport: env workers as spawned local processes. Observations and actions go through
shared memory, requests over pipes, each worker's step progress in a segment of its own (hang detection,
:mod:`~..supervision`)."""

from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Sequence

import numpy as np

from ..protocol import Attach, Chunk, Command, Reply, Request
from ..serve import CLOSE_GRACE_S, ProcessChannel, stop_processes
from ..shm import ACTIONS_KEY, SharedBuffers, action_buffer_space
from ..shutdown import close_on_sigterm, deferred_interrupts, release
from ..waiting import ChunkProgress
from ..worker import WorkerSpec, env_worker_main
from .base import RESTART_HINT, Transport


@dataclass
class ProcessSlot:
    """What one process worker holds on the driver: its channel and its shared-memory segments."""

    channel: ProcessChannel | None = None
    obs_buffers: SharedBuffers | None = None
    action_buffers: SharedBuffers | None = None
    progress: SharedBuffers | None = None

    def segments(self) -> list[SharedBuffers]:
        return [b for b in (self.obs_buffers, self.action_buffers, self.progress) if b is not None]


class ProcessTransport(Transport):
    """Workers as spawned local processes; observations and actions through shared memory, requests over
    pipes, each worker's step progress in a segment of its own (hang detection, :mod:`~..supervision`).

    ``close()`` is idempotent and retryable: what an interrupt left undone is done by the next call, or at
    interpreter exit. A Ctrl-C while it waits for busy workers cuts that wait short; the workers are killed
    and the segments unlinked before the ``KeyboardInterrupt`` is raised. While open, a SIGTERM closes it
    (:mod:`~..shutdown`)."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        super().__init__(specs)
        #: One slot per worker; shared with the finalizer, which must not hold a reference to self.
        self.slots = [ProcessSlot() for _ in self.specs]
        self._finalizer = weakref.finalize(self, _shutdown_processes, self.slots)
        #: Held while workers are stopped (:meth:`close`, :meth:`discard`): a trainer's thread may close the
        #: engine while its driving thread discards a worker that close killed (a ``Collector`` over a hung
        #: worker), and each pipe must be closed once.
        self._stopping = threading.RLock()  # reentrant: a SIGTERM handler may close inside a discard
        close_on_sigterm(self)

    @property
    def pids(self) -> list[int]:
        return [s.channel.pid for s in self.slots if s.channel is not None]

    def launch(self, worker: int) -> None:
        spec = self.specs[worker]
        self.slots[worker].channel = ProcessChannel(
            env_worker_main, (spec,), f"behavior1k_fast-env-{worker}", worker, spec.env_ids, RESTART_HINT,
            env=spec.env,
        )

    def setup(self, worker: int, payload: Any) -> tuple[tuple[Any, Any], Request | None]:
        observation_space, action_space = payload
        spec, slot = self.specs[worker], self.slots[worker]
        if slot.obs_buffers is None:  # a respawned worker attaches the segments of the one it replaces
            slot.obs_buffers = SharedBuffers.create(observation_space, spec.num_envs)
            slot.action_buffers = SharedBuffers.create(action_buffer_space(action_space, spec.profile["chunk_size"]),
                                                       spec.num_envs)
            slot.progress = ChunkProgress.create().buffers
        return payload, Attach(slot.obs_buffers.spec, slot.action_buffers.spec, slot.progress.spec)

    def send(self, worker: int, request: Request) -> None:
        slot = self.slots[worker]
        if isinstance(request, Chunk):  # actions through shared memory: the pipe message stays small
            slot.action_buffers.write(request.rows, [{ACTIONS_KEY: a} for a in request.actions])
            request = dataclasses.replace(request, actions=None)
        slot.channel.send(request)

    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """Wait on every worker's pipe and sentinel at once."""
        by_object = {}
        for w in workers:
            channel = self.slots[w].channel
            by_object[channel.conn] = by_object[channel.proc.sentinel] = w
        return sorted({by_object[o] for o in wait(list(by_object), timeout=timeout_s)})

    def receive(self, worker: int, command: Command) -> Reply:
        return self.slots[worker].channel.read(command)

    def who(self, worker: int) -> str:
        return f"pid {self.slots[worker].channel.pid}"

    def progress(self, worker: int) -> ChunkProgress | None:
        return ChunkProgress(self.slots[worker].progress)

    def read_obs(self, worker: int, rows: Sequence[int], out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        return self.slots[worker].obs_buffers.read(rows, out)

    def discard(self, worker: int) -> None:
        with self._stopping:
            stop_processes([self.slots[worker].channel], 0.0)  # dead or hung: no grace
            self.slots[worker].channel = None

    def close(self) -> None:
        with self._stopping, deferred_interrupts() as interrupted:
            _shutdown_processes(self.slots, interrupted)
        self._finalizer.detach()
        release(self)


def _shutdown_processes(slots: Sequence[ProcessSlot], cancel: threading.Event | None = None) -> None:
    """Stop every worker (the grace wait for busy ones ends early once ``cancel`` is set) and unlink every
    segment (close() and interpreter exit). Each entry is cleared only once done, so a call that was
    interrupted can be repeated."""
    try:
        stop_processes([s.channel for s in slots], CLOSE_GRACE_S, cancel)
    finally:
        for slot in slots:
            if slot.channel is not None and not slot.channel.proc.is_alive():
                slot.channel = None
            for name in ("obs_buffers", "action_buffers", "progress"):
                buffers = getattr(slot, name)
                if buffers is not None:
                    buffers.close()
                    buffers.unlink()
                    setattr(slot, name, None)
