"""The asynchronous schedule (``schedule="async"``): slice by slice, no barrier across processes.

The barrier schedule sends stage k's chunk to all of its processes together and receives them together, so
the policy waits for the slowest process of the stage. Here the unit is the *slice* (one process's envs of
one stage, :class:`~behavior1k_fast.rollout.plan.StageSlice`):

- a slice's boundary observation joins the policy queue as soon as its process returns it (the driver
  waits on every busy process at once, ``driver.ready``);
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
(the driver's accounting, as for every schedule).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..driver import StageSlice
from .base import Schedule


@dataclass(eq=False)
class QueuedSlice:
    """One slice as this schedule tracks it (its boundary observations are the driver's,
    :meth:`~behavior1k_fast.rollout.driver.EngineDriver.slice_obs`)."""

    stage_slice: StageSlice
    #: Chunks sent so far.
    sent: int = 0
    #: ``time.perf_counter_ns()`` when its observation reached the driver.
    arrived_ns: int = 0


class Asynchronous(Schedule):
    """Slice by slice (module docs)."""

    name = "async"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        driver = self.driver
        self.min_batch = driver.profile.async_min_batch or driver.plan.stage_size
        self.max_wait_s = driver.profile.async_max_wait_s
        #: Slices waiting for the policy, oldest first (every slice, stage by stage, to start with); worker ->
        #: its slices in flight, in send order.
        self.queue: deque[QueuedSlice] = deque(
            QueuedSlice(s) for k in range(driver.plan.pipeline_stages) for s in driver.plan.stage_slices(k))
        self.busy: dict[int, deque[QueuedSlice]] = {}

    def run(self) -> None:
        now = time.perf_counter_ns()
        for s in self.queue:
            s.arrived_ns = now
        while self.queue or self.busy_workers():
            if self.queue:
                envs = sum(len(s.stage_slice.local_envs) for s in self.queue)
                if envs >= self.min_batch or self.oldest_wait_s() >= self.max_wait_s or not self.busy_workers():
                    self.dispatch()
                    continue
            timeout = None if not self.queue else max(0.0, self.max_wait_s - self.oldest_wait_s())
            self.receive_ready(timeout)

    def busy_workers(self) -> list[int]:
        return [w for w, q in self.busy.items() if q]

    def oldest_wait_s(self) -> float:
        return (time.perf_counter_ns() - self.queue[0].arrived_ns) / 1e9

    def dispatch(self) -> None:
        """One forward on the oldest queued slices (at least ``min_batch`` envs where there are), then each
        slice's chunk to its worker."""
        batch, envs = [], 0
        while self.queue and envs < self.min_batch:
            batch.append(self.queue.popleft())
            envs += len(batch[-1].stage_slice.local_envs)
        views = [self.driver.slice_obs(s.stage_slice) for s in batch]
        obs = {key: np.concatenate([v[key] for v in views]) for key in views[0]}
        actions, extras = self.driver.forward(self.policy, obs, "policy output for an async batch")
        self.driver.send([s.stage_slice for s in batch], actions, obs, extras)
        for s in batch:
            s.sent += 1
            self.busy.setdefault(s.stage_slice.worker, deque()).append(s)

    def receive_ready(self, timeout_s: float | None) -> None:
        """Receive every slice whose process returned it (waiting up to ``timeout_s`` for the first); its
        observations become its boundary observations (a respawned worker's queued slices take their reset
        observations there too)."""
        driver = self.driver
        for w in driver.ready(self.busy_workers(), timeout_s):
            s = self.busy[w].popleft()
            result = driver.collect([s.stage_slice])
            s.arrived_ns = time.perf_counter_ns()
            self.deliver(s.stage_slice.stage, result)
            if s.sent < self.num_rounds:
                self.queue.append(s)
