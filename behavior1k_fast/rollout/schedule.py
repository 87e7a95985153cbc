"""The asynchronous schedule of :meth:`~.engine.RolloutEngine.rollout` (``schedule="async"``).

The barrier schedule sends stage k's chunk to all of its processes together and collects them together, so
the policy waits for the slowest process of the stage. Here the unit is the *slice* (one process's envs of
one stage, :class:`~.plan.StageSlice`):

- a slice's boundary observation joins the policy queue as soon as its process returns it (the driver
  waits on every busy process at once, :meth:`~.executors.Executor.ready`);
- the policy runs on the slices in the queue, oldest first, once they hold ``async_min_batch`` envs
  (default: one stage's, the barrier's batch), once the oldest waited ``async_max_wait_s``, or when no
  other slice is in flight; each slice's chunk goes out right after the forward;
- a slice's next chunk is sent only after its last one came back, and a process serves its requests in
  order, so the slices of one process keep their cyclic order: in hybrid partition they still alternate
  on the shared physics.

Per env, the chunks and their order on every process are those of the barrier schedule, and so are the
actions for a policy whose rows do not depend on one another: trajectories are bit-identical, only the
timing differs (tested). ``on_chunk(stage, result)`` receives each slice's result as it comes back (rows:
that slice's envs). Each slice's time in the queue and in the forward is added to the stats'
``slice_wait_seconds`` and traced as :data:`~behavior1k_fast.core.tracing.SLICE_WAIT` spans.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.tracing import SLICE_WAIT, WAIT, get_profiler
from .chunk import ChunkResult
from .policy import Policy
from .protocol import Chunk


@dataclass(eq=False)
class _Slice:
    stage: int
    worker: int
    local_envs: tuple[int, ...]
    env_ids: np.ndarray
    #: Rows of this slice in its stage's batch.
    batch_rows: slice
    #: Its latest boundary observations: key -> ``[len(local_envs), ...]``.
    obs: dict[str, np.ndarray]
    #: Chunks sent so far.
    sent: int = 0
    #: ``time.perf_counter_ns()`` when its observation reached the driver.
    arrived_ns: int = 0
    #: Order of its last chunk among all chunks sent (the oldest busy worker is waited on first).
    ticket: int = 0
    #: What its chunk in flight was made from: (observations the policy saw, actions, extras) rows.
    inputs: tuple = ()


@dataclass
class AsyncRun:
    """One asynchronous rollout of ``num_rounds`` chunks per slice (module docs)."""

    #: The :class:`~.engine.RolloutEngine` that runs this (its executor, plan, forward and batches).
    engine: Any
    policy: Policy
    num_rounds: int
    on_chunk: Callable[[int, ChunkResult], None] | None
    #: The engine's per-rollout counters (``add(result)``).
    accounting: Any
    #: float [num_envs]: seconds each env's slice spent at the driver between chunks.
    slice_wait: np.ndarray
    #: Slices waiting for the policy, oldest first.
    queue: deque = field(default_factory=deque)
    #: Worker -> its slices in flight, in the order they were sent.
    busy: dict[int, deque] = field(default_factory=dict)
    #: Slices that ran all their rounds.
    done: list = field(default_factory=list)
    _tickets: Any = field(default_factory=itertools.count)

    def run(self) -> None:
        engine = self.engine
        profile = engine.profile
        min_batch = profile.async_min_batch or engine.plan.stage_size
        now = time.perf_counter_ns()
        self.queue.extend(self._slices(now))
        while self.queue or any(self.busy.values()):
            if self.queue:
                envs = sum(len(s.local_envs) for s in self.queue)
                waited_s = (time.perf_counter_ns() - self.queue[0].arrived_ns) / 1e9
                if envs >= min_batch or waited_s >= profile.async_max_wait_s or not any(self.busy.values()):
                    self._dispatch(min_batch)
                    continue
            timeout = None
            if self.queue:
                timeout = max(0.0, profile.async_max_wait_s - (time.perf_counter_ns() - self.queue[0].arrived_ns) / 1e9)
            self._collect_ready(timeout)
        engine._stage_obs = self._stage_batches()

    def _slices(self, now_ns: int) -> list[_Slice]:
        """Every slice, stage by stage, with its observation from the stage batches (after a reset)."""
        engine, out = self.engine, []
        for k in range(engine.plan.stages):
            for s in engine.plan.stage_slices(k):
                obs = {key: arr[s.batch_rows].copy() for key, arr in engine._stage_obs[k].items()}
                out.append(_Slice(k, s.worker, s.local_envs, np.asarray(s.global_envs), s.batch_rows, obs,
                                  arrived_ns=now_ns))
        return out

    def _dispatch(self, min_batch: int) -> None:
        """One forward on the oldest queued slices (at least ``min_batch`` envs where there are), then each
        slice's chunk to its worker."""
        batch, envs = [], 0
        while self.queue and envs < min_batch:
            batch.append(self.queue.popleft())
            envs += len(batch[-1].local_envs)
        obs = {key: np.concatenate([s.obs[key] for s in batch]) for key in batch[0].obs}
        engine = self.engine
        actions, extras = engine._forward(self.policy, obs, envs, "policy output for an async batch")
        sent_ns = time.perf_counter_ns()
        profiler = get_profiler()
        offset = 0
        with engine._guard():
            for s in batch:
                rows = slice(offset, offset + len(s.local_envs))
                offset = rows.stop
                engine._executor.submit(s.worker, Chunk(s.local_envs, actions[rows], engine.chunk_size))
                s.inputs = (s.obs, actions[rows], {key: value[rows] for key, value in extras.items()})
                self.slice_wait[s.env_ids] += (sent_ns - s.arrived_ns) / 1e9
                profiler.add(SLICE_WAIT, s.arrived_ns, sent_ns - s.arrived_ns, {"worker": s.worker, "stage": s.stage})
                s.sent += 1
                s.ticket = next(self._tickets)
                self.busy.setdefault(s.worker, deque()).append(s)

    def _collect_ready(self, timeout_s: float | None) -> None:
        """Collect every slice whose process returned it (waiting up to ``timeout_s`` for the first)."""
        engine = self.engine
        workers = sorted((w for w, q in self.busy.items() if q), key=lambda w: self.busy[w][0].ticket)
        start = time.perf_counter_ns()
        with engine._guard():
            with get_profiler().section(WAIT, command="ready"):
                ready = engine._executor.ready(workers, timeout_s)
            for w in ready:
                s = self.busy[w].popleft()
                result, obs = engine._executor.collect(w)
                result.obs = obs
                result.policy_obs, result.actions, result.extras = s.inputs
                s.obs, s.arrived_ns = obs, time.perf_counter_ns()
                self.accounting.add(result)
                if self.on_chunk is not None:
                    self.on_chunk(s.stage, result)
                (self.queue if s.sent < self.num_rounds else self.done).append(s)
            self._refresh_respawned()
        engine._wait_s += (time.perf_counter_ns() - start) / 1e9

    def _refresh_respawned(self) -> None:
        """A respawned worker reset all its envs: queued slices of it take their reset observations (its
        slices in flight get them in their placeholder results)."""
        for worker, obs in self.engine._executor.take_respawned().items():
            for s in self.queue:
                if s.worker == worker:
                    s.obs = {key: arr[list(s.local_envs)] for key, arr in obs.items()}

    def _stage_batches(self) -> list[dict[str, np.ndarray]]:
        """Every slice's last observation in fresh stage batches (what :meth:`~.engine.RolloutEngine.stage_obs`
        returns after the run)."""
        batches = [self.engine._new_batch() for _ in range(self.engine.plan.stages)]
        for s in self.done:
            for key, arr in batches[s.stage].items():
                arr[s.batch_rows] = s.obs[key]
        return batches
