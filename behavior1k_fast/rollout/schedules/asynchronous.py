"""The asynchronous schedule (``schedule="async"``): slice by slice, no barrier across processes.

The barrier schedule sends stage k's chunk to all of its processes together and receives them together, so
the policy waits for the slowest process of the stage. Here the unit is the *slice* (one process's envs of
one stage, :class:`~behavior1k_fast.rollout.plan.StageSlice`):

- a slice's boundary observation joins the policy queue as soon as its process returns it (the driver
  waits on every busy process at once, ``engine.ready``);
- the policy runs on the slices in the queue, oldest first, once they hold ``async_min_batch`` envs
  (default: one stage's, the barrier's batch), once the oldest waited ``async_max_wait_s``, or when no
  other slice is in flight; each slice's chunk goes out right after the forward;
- a slice's next chunk is sent only after its last one came back, and a process serves its requests in
  order, so the slices of one process keep their cyclic order: in hybrid partition they still alternate
  on the shared physics.

Per env, the chunks and their order on every process are those of the barrier schedule, and so are the
actions for a policy whose rows do not depend on one another: trajectories are bit-identical, only the
timing differs (tested). ``on_chunk(stage, result)`` receives each slice's result as it comes back (rows:
that slice's envs). Each slice's time in the queue and in the forward is the stats' ``slice_wait_seconds``
(the engine's accounting, as for every schedule).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..plan import StageSlice
from .base import Schedule


@dataclass(eq=False)
class QueuedSlice:
    """One slice as this schedule tracks it."""

    piece: StageSlice
    #: Its latest boundary observations: key -> ``[len(piece.local_envs), ...]``.
    obs: dict[str, np.ndarray]
    #: Chunks sent so far.
    sent: int = 0
    #: ``time.perf_counter_ns()`` when its observation reached the driver.
    arrived_ns: int = 0


class Asynchronous(Schedule):
    """Slice by slice (module docs)."""

    name = "async"

    def run(self) -> None:
        engine = self.engine
        profile = engine.profile
        self.min_batch = profile.async_min_batch or engine.plan.stage_size
        self.max_wait_s = profile.async_max_wait_s
        #: Slices waiting for the policy, oldest first; worker -> its slices in flight, in send order.
        self.queue: deque[QueuedSlice] = deque(self.slices())
        self.busy: dict[int, deque[QueuedSlice]] = {}
        self.done: list[QueuedSlice] = []
        while self.queue or self.busy_workers():
            if self.queue:
                envs = sum(len(s.piece.local_envs) for s in self.queue)
                if envs >= self.min_batch or self.oldest_wait_s() >= self.max_wait_s or not self.busy_workers():
                    self.dispatch()
                    continue
            timeout = None if not self.queue else max(0.0, self.max_wait_s - self.oldest_wait_s())
            self.receive_ready(timeout)
        for k in range(engine.plan.pipeline_stages):
            engine.set_stage_obs(k, self.stage_batch(k))

    def busy_workers(self) -> list[int]:
        return [w for w, q in self.busy.items() if q]

    def oldest_wait_s(self) -> float:
        return (time.perf_counter_ns() - self.queue[0].arrived_ns) / 1e9

    def slices(self) -> list[QueuedSlice]:
        """Every slice, stage by stage, with its observation from the stage batches (after a reset)."""
        engine, now, out = self.engine, time.perf_counter_ns(), []
        for k in range(engine.plan.pipeline_stages):
            batch = engine.stage_obs(k)
            for piece in engine.plan.stage_slices(k):
                obs = {key: arr[piece.batch_rows].copy() for key, arr in batch.items()}
                out.append(QueuedSlice(piece, obs, arrived_ns=now))
        return out

    def dispatch(self) -> None:
        """One forward on the oldest queued slices (at least ``min_batch`` envs where there are), then each
        slice's chunk to its worker."""
        batch, envs = [], 0
        while self.queue and envs < self.min_batch:
            batch.append(self.queue.popleft())
            envs += len(batch[-1].piece.local_envs)
        obs = {key: np.concatenate([s.obs[key] for s in batch]) for key in batch[0].obs}
        actions, extras = self.engine.forward(self.policy, obs, "policy output for an async batch")
        self.engine.send([s.piece for s in batch], actions, obs, extras)
        for s in batch:
            s.sent += 1
            self.busy.setdefault(s.piece.worker, deque()).append(s)

    def receive_ready(self, timeout_s: float | None) -> None:
        """Receive every slice whose process returned it (waiting up to ``timeout_s`` for the first)."""
        engine = self.engine
        for w in engine.ready(self.busy_workers(), timeout_s):
            s = self.busy[w].popleft()
            result = engine.receive([s.piece])
            s.obs, s.arrived_ns = result.obs, time.perf_counter_ns()
            self.deliver(s.piece.stage, result)
            (self.queue if s.sent < self.num_rounds else self.done).append(s)
        for worker, obs in engine.take_respawned().items():
            # A respawned worker reset all its envs: its queued slices take their reset observations (its
            # slices in flight get them in their placeholder results).
            for s in self.queue:
                if s.piece.worker == worker:
                    s.obs = {key: arr[list(s.piece.local_envs)] for key, arr in obs.items()}

    def stage_batch(self, stage: int) -> dict[str, np.ndarray]:
        """Every slice's last observation of ``stage`` in a fresh batch (the engine's stage observations
        after the run)."""
        batch = self.engine.new_batch()
        for s in self.done:
            if s.piece.stage == stage:
                for key, arr in batch.items():
                    arr[s.piece.batch_rows] = s.obs[key]
        return batch
