"""The engine's driver face: what a schedule (:mod:`.schedules`) drives, and the one state machine of an engine.

:class:`~.engine.RolloutEngine` is the user's face (``rollout``, ``submit`` / ``collect``, ``reset``, spaces,
workers); it holds one :class:`EngineDriver`, and a schedule gets that driver and nothing else (EnvPool's
send / recv habit). A schedule module imports this module only (``tests/unit/test_private_access.py``), which
also names the types it works with (:class:`~.plan.StageSlice`, :class:`~.chunk.ChunkResult`,
:class:`~.chunk.ChunkLead`, :data:`~.policy.COMMITTED_KEY`, :class:`~.policy.CommittedActions`).

- :meth:`~EngineDriver.forward`: the policy on a batch of observations, its output validated once;
- :meth:`~EngineDriver.send`: a chunk to the envs of some stage slices, with the observations the policy saw
  and its extras, attached to the result when it comes back;
- :meth:`~EngineDriver.ready`: which busy workers have a result, waiting on any of them up to a deadline;
- :meth:`~EngineDriver.receive_lead`: for a chunk sent with a lead (``lead_steps``), its lead report and
  observations first (the ``lookahead`` schedule);
- :meth:`~EngineDriver.collect`: the one way a schedule closes a round of some slices: their result, whose
  observations become their boundary observations in the stage batches, where a respawned worker's idle
  slices take their reset observations;
- :meth:`~EngineDriver.stage_obs` / :meth:`~EngineDriver.slice_obs`: the boundary observations a schedule
  chooses chunks from;
- :attr:`~EngineDriver.accounting`: the one :class:`~.accounting.Accounting` of the running rollout.

The driver is in one :class:`EngineState` at a time, checked in one place (:meth:`EngineDriver.require`): a
call that does not fit raises a typed error (:mod:`.errors`) and leaves the engine usable; ``send`` and the
receives move it between ``IDLE`` and ``STEPPING``, a schedule never sets a state itself.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..core.checks import check_int
from ..core.contract import check_env_indices
from ..core.tracing import MODEL_FORWARD, WAIT, get_profiler
from .accounting import Accounting
from .chunk import ChunkLead, ChunkResult, action_dtype, check_chunk_actions, concat_leads, concat_results
from .errors import (ChunkInFlightError, ClosedError, NoChunkInFlightError, NotResetError, WorkerDiedError, WorkerError,
                     public_type_name)
from .plan import PartitionPlan, StageSlice
from .policy import COMMITTED_KEY, CommittedActions, Policy, call_policy, committed_width, split_policy_output
from .protocol import Chunk, Reset
from .supervision import Supervisor


class EngineState(enum.Enum):
    """Where the engine is (gymnasium's ``AsyncState`` habit); see :meth:`EngineDriver.require`."""

    #: Workers started, no observation yet: :meth:`~.engine.RolloutEngine.reset` first.
    NOT_RESET = "not reset"
    #: Every env has a boundary observation, no chunk is in flight.
    IDLE = "idle"
    #: Chunks are in flight (:meth:`EngineDriver.send` without its receive).
    STEPPING = "stepping"
    #: Closed (by :meth:`~.engine.RolloutEngine.close` or a failure): every call raises ClosedError.
    CLOSED = "closed"


@dataclass(frozen=True)
class ChunkInputs:
    """What a chunk was made from: the observations the policy saw (key -> ``[n, ...]``), the actions sent
    ``[n, N, action_dim]`` and the policy's extras (key -> ``[n, ...]``), rows in the order they were sent."""

    #: ``None`` for a chunk submitted before any reset (no observation was seen).
    policy_obs: Mapping[str, np.ndarray] | None
    actions: np.ndarray
    extras: Mapping[str, np.ndarray]

    def rows(self, rows: slice) -> "ChunkInputs":
        """The inputs of ``rows`` (views, no copy)."""
        obs = None if self.policy_obs is None else {k: v[rows] for k, v in self.policy_obs.items()}
        return ChunkInputs(obs, self.actions[rows], {k: v[rows] for k, v in self.extras.items()})

    def attach(self, result: ChunkResult) -> ChunkResult:
        """``result`` with these inputs in its ``policy_obs``, ``actions`` and ``extras``: the one place a
        result gets the inputs of its chunk."""
        result.policy_obs = None if self.policy_obs is None else dict(self.policy_obs)
        result.actions, result.extras = self.actions, dict(self.extras)
        return result


@dataclass(eq=False)
class InFlight:
    """One slice's chunk in flight: the slice, the inputs of the send it was part of and its rows there."""

    stage_slice: StageSlice
    inputs: ChunkInputs
    rows: slice
    #: d of a chunk sent with a lead (two replies: LEAD, END); ``None``: one reply.
    lead_steps: int | None = None
    #: Once its LEAD came: the batch :meth:`EngineDriver.receive_lead` wrote the lead observations into and
    #: this slice's rows there.
    lead_batch: dict[str, np.ndarray] | None = None
    lead_rows: slice | None = None


def _rows_of(slices: Sequence[StageSlice]) -> int:
    return sum(len(s.local_envs) for s in slices)


class EngineDriver:
    """The driver face of one engine over its supervised executor (module docs). Built by
    :class:`~.engine.RolloutEngine` once its workers started; ``action_space`` is one env's."""

    def __init__(self, executor: Supervisor, plan: PartitionPlan, profile: Any, observation_space: Any,
                 action_space: Any, auto_reset: bool):
        self.plan, self.profile, self.auto_reset = plan, profile, auto_reset
        self.chunk_size: int = profile.chunk_size
        self.observation_space = observation_space
        self.action_dim = int(np.prod(action_space.shape))
        #: The dtype the backends get chunk actions in; every chunk is cast to it (a copy) and checked there.
        self.action_dtype = action_dtype(action_space)
        #: The counters of the running (or last) rollout; every forward, send and receive adds to them.
        self.accounting = Accounting(plan)
        self._executor = executor
        self._state = EngineState.NOT_RESET
        #: Why the engine closed (the ClosedError of every later call says it).
        self._closed_because = ""
        self._stage_obs: list[dict[str, np.ndarray] | None] = [None] * plan.pipeline_stages
        #: Stages whose batch left the driver (a result's obs, a reset's return, :meth:`stage_obs`): the next
        #: write into it copies it first, so observations handed out never change.
        self._handed_out: set[int] = set()
        #: Worker -> its slices' chunks in flight, in the order they were sent (its replies' order).
        self._in_flight: dict[int, deque[InFlight]] = {w: deque() for w in range(plan.num_env_processes)}

    # --- the state machine ---------------------------------------------------------------------
    @property
    def state(self) -> EngineState:
        return self._state

    def require(self, *states: EngineState, doing: str = "do this") -> None:
        """The one check of the engine's state: raise the typed error of the state it is in unless that is
        one of ``states`` (``doing`` names the call in the message)."""
        if self._state in states:
            return
        if self._state is EngineState.CLOSED:
            raise ClosedError(f"the rollout engine is closed ({self._closed_because})")
        if self._state is EngineState.NOT_RESET:
            raise NotResetError(f"call reset() before you {doing}")
        if self._state is EngineState.STEPPING:
            busy = sorted({f.stage_slice.stage for q in self._in_flight.values() for f in q})
            raise ChunkInFlightError(f"cannot {doing} with chunks in flight for stages {busy}")
        raise NoChunkInFlightError(f"cannot {doing}: no chunk is in flight; send one first")

    def _settle(self) -> None:
        """After a receive, once nothing is in flight: ``IDLE``, or ``NOT_RESET`` while a stage has no
        observations yet (chunks stepped without a reset)."""
        if self._state is EngineState.STEPPING and not any(self._in_flight.values()):
            ready = all(batch is not None for batch in self._stage_obs)
            self._state = EngineState.IDLE if ready else EngineState.NOT_RESET

    def stage_busy(self, stage: int) -> bool:
        """Whether a slice of ``stage`` has a chunk in flight."""
        return any(f.stage_slice.stage == stage for q in self._in_flight.values() for f in q)

    def _slice_busy(self, stage_slice: StageSlice) -> bool:
        return any(f.stage_slice == stage_slice for f in self._in_flight[stage_slice.worker])

    # --- observations --------------------------------------------------------------------------
    def new_batch(self, rows: int | None = None) -> dict[str, np.ndarray]:
        """An empty observation batch of ``rows`` envs (default: one stage's): key -> [rows, ...]."""
        n = self.plan.stage_size if rows is None else rows
        return {k: np.empty((n, *b.shape), b.dtype) for k, b in self.observation_space.spaces.items()}

    def stage_obs(self, stage: int) -> dict[str, np.ndarray]:
        """The latest boundary observations of ``stage``: key -> [stage_size, ...]; they never change."""
        self.plan.check_stage(stage)
        if self._stage_obs[stage] is None:
            raise NotResetError("call reset() before reading observations")
        self._handed_out.add(stage)
        return self._stage_obs[stage]

    def slice_obs(self, stage_slice: StageSlice) -> dict[str, np.ndarray]:
        """The latest boundary observations of one slice: key -> [len(local_envs), ...], views into the stage
        batch, valid until the next :meth:`collect` (copy them to keep them)."""
        batch = self._stage_obs[stage_slice.stage]
        if batch is None:
            raise NotResetError("call reset() before reading observations")
        return {k: v[stage_slice.batch_rows] for k, v in batch.items()}

    def _writable(self, stage: int) -> dict[str, np.ndarray]:
        """Stage ``stage``'s batch, copied first when it was handed out."""
        if stage in self._handed_out:
            self._stage_obs[stage] = {k: v.copy() for k, v in self._stage_obs[stage].items()}
            self._handed_out.discard(stage)
        return self._stage_obs[stage]

    def _land(self, slices: Sequence[StageSlice], obs: dict[str, np.ndarray]) -> None:
        """``obs`` (rows: ``slices``' envs in order) become the boundary observations of ``slices``; then
        every worker respawned since the last landing gives its reset observations to its slices with no
        chunk in flight (those in flight get them in their placeholder results)."""
        stage = slices[0].stage
        if tuple(slices) == self.plan.stage_slices(stage):
            self._stage_obs[stage] = obs
            self._handed_out.add(stage)  # it is the result's obs
        else:
            if any(self._stage_obs[s.stage] is None for s in slices):
                raise NotResetError("reset() every env before collecting a part of a stage")
            offset = 0
            for s in slices:
                rows, offset = slice(offset, offset + len(s.local_envs)), offset + len(s.local_envs)
                for key, arr in self._writable(s.stage).items():
                    arr[s.batch_rows] = obs[key][rows]
        for worker, fresh in self._executor.take_respawned().items():
            for k in range(self.plan.pipeline_stages):
                if self._stage_obs[k] is None:
                    continue
                for s in self.plan.stage_slices(k):
                    if s.worker == worker and not self._slice_busy(s):
                        for key, arr in self._writable(k).items():
                            arr[s.batch_rows] = fresh[key][list(s.local_envs)]

    # --- the surface of the schedules -----------------------------------------------------------
    def forward(self, policy: Policy, obs: Mapping[str, np.ndarray], argname: str = "policy output") -> tuple[
            np.ndarray, dict[str, np.ndarray]]:
        """The policy's chunk and extras for the envs of ``obs`` (key -> [n, ...]): the one check of the
        policy's output on its way in (``argname`` names it in errors); its time counts as model seconds.
        Both are copies (the chunk in :attr:`action_dtype`), so a policy may reuse its output buffers."""
        self.require(EngineState.IDLE, EngineState.STEPPING, doing="run the policy")
        batch = len(next(iter(obs.values())))
        start = time.perf_counter()
        with get_profiler().section(MODEL_FORWARD, batch=batch):
            out = call_policy(policy, obs)
        self.accounting.model_seconds += time.perf_counter() - start
        actions, extras = split_policy_output(out, batch, argname)
        return check_chunk_actions(actions, batch, self.action_dim, self.chunk_size, argname, self.action_dtype), extras

    def send(
        self,
        slices: Sequence[StageSlice],
        actions: np.ndarray,
        policy_obs: Mapping[str, np.ndarray] | None,
        extras: Mapping[str, np.ndarray] | None = None,
        lead_steps: int | None = None,
    ) -> None:
        """Send each of ``slices`` its rows of the validated chunk ``actions`` (rows: the slices' envs in
        order, as :meth:`forward` returned them); returns at once. ``policy_obs`` and ``extras`` (same rows)
        are what the chunk was made from: the receive attaches them to the result. A slice's next chunk may
        be sent before its last one was received (its worker serves them in order). ``lead_steps`` d
        (``0 <= d < chunk_size``): the workers read the lead observations after step ``N - d`` and report
        them at once (:meth:`receive_lead`) before the chunk's result (:mod:`.chunk`)."""
        self.require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        envs = _rows_of(slices)
        if len(actions) != envs:
            raise ValueError(f"actions have {len(actions)} rows, the slices to send hold {envs} envs")
        if lead_steps is not None:
            lead_steps = check_int("lead_steps", lead_steps, 0, self.chunk_size - 1)
        inputs = ChunkInputs(policy_obs, actions, dict(extras or {}))
        offset = 0
        with self.guard():
            for s in slices:
                rows = slice(offset, offset + len(s.local_envs))
                offset = rows.stop
                self._executor.submit(s.worker, Chunk(s.local_envs, actions[rows], self.chunk_size, lead_steps))
                self._in_flight[s.worker].append(InFlight(s, inputs, rows, lead_steps))
                self._state = EngineState.STEPPING
                self.accounting.sent(s, lead_steps)

    def ready(self, workers: Sequence[int], timeout_s: float | None = None) -> list[int]:
        """Of ``workers`` (each with a chunk in flight), those whose oldest result a receive can take
        without waiting (or which died or hung: the receive then raises, or gets the placeholder of a
        respawn). Waits on all of them at once, up to ``timeout_s`` seconds for the first (``None``: until
        one is ready); ``[]`` on timeout. Counts as wait seconds."""
        self.require(EngineState.STEPPING, doing="wait for results")
        start = time.perf_counter()
        with self.guard(), get_profiler().section(WAIT, command="ready"):
            ready = self._executor.ready(list(workers), timeout_s)
        self.accounting.wait_seconds += time.perf_counter() - start
        return ready

    def _oldest_sent_together(self, slices: Sequence[StageSlice], lead: bool) -> list[InFlight]:
        """The in-flight entries of ``slices``: each the oldest on its worker (``lead``: its LEAD not yet
        received; else its result), all from one :meth:`send`, in its order."""
        entries = []
        for s in slices:
            queue = self._in_flight[s.worker]
            if not queue or queue[0].stage_slice != s:
                raise NoChunkInFlightError(f"the slice of stage {s.stage} on worker {s.worker} is not the "
                                           "oldest chunk in flight on its worker")
            entry = queue[0]
            if lead and (entry.lead_steps is None or entry.lead_batch is not None):
                raise NoChunkInFlightError(f"the chunk of worker {s.worker} has no lead report to receive "
                                           f"({'sent without a lead' if entry.lead_steps is None else 'received'})")
            if not lead and entry.lead_steps is not None and entry.lead_batch is None:
                raise NoChunkInFlightError(f"the chunk of worker {s.worker} was sent with a lead: "
                                           "receive_lead() it first")
            entries.append(entry)
        first = entries[0]
        if any(e.inputs is not first.inputs for e in entries) or any(
                a.rows.stop != b.rows.start for a, b in zip(entries, entries[1:])):
            raise ValueError("collect() takes slices sent together by one send(), in their order")
        return entries

    def _replies(self, entries: Sequence[InFlight], out: dict[str, np.ndarray] | None) -> list[Any]:
        """The payloads of ``entries``' oldest replies, their observations into the rows of ``out``."""
        start = time.perf_counter()
        offset, parts = 0, []
        with self.guard():
            for entry in entries:
                n = len(entry.stage_slice.local_envs)
                rows = slice(offset, offset + n)
                offset += n
                part = None if out is None else {k: v[rows] for k, v in out.items()}
                parts.append(self._executor.collect(entry.stage_slice.worker, part)[0])
        self.accounting.wait_seconds += time.perf_counter() - start
        return parts

    def receive_lead(self, slices: Sequence[StageSlice], out: dict[str, np.ndarray] | None = None) -> tuple[
            ChunkLead, dict[str, np.ndarray]]:
        """The lead report (:class:`~.chunk.ChunkLead`: which rows' episodes ended before the lead, which
        sit the chunk out, whose committed actions run) and the lead observations (into ``out`` when given)
        of the chunk of ``slices``, sent together with a lead and each the oldest on its worker. The result
        of that chunk follows with :meth:`collect`, whose ``obs`` are these lead observations."""
        self.require(EngineState.STEPPING, doing="receive")
        entries = self._oldest_sent_together(slices, lead=True)
        out = self.new_batch(_rows_of(slices)) if out is None else out
        lead = concat_leads(self._replies(entries, out))
        offset = 0
        for entry in entries:
            n = len(entry.stage_slice.local_envs)
            entry.lead_batch, entry.lead_rows = out, slice(offset, offset + n)
            offset += n
        self.accounting.lead_received(lead.env_ids)
        return lead, out

    def collect(self, slices: Sequence[StageSlice]) -> ChunkResult:
        """Close a round of ``slices`` (sent together by one :meth:`send`, each the oldest in flight on its
        worker): their result, rows in order, ``env_ids`` global, the chunk's inputs attached, its
        observations in ``result.obs`` (for a chunk with a lead: its lead observations, :meth:`receive_lead`
        first), which become the slices' boundary observations (:meth:`stage_obs`); a worker respawned
        meanwhile gives its reset observations to its slices with no chunk in flight. Counts as wait
        seconds; the result is added to :attr:`accounting`."""
        self.require(EngineState.STEPPING, doing="receive")
        entries = self._oldest_sent_together(slices, lead=False)
        first, last = entries[0], entries[-1]
        led = first.lead_steps is not None
        out = None if led else self.new_batch(_rows_of(slices))
        parts = self._replies(entries, out)
        for entry in entries:
            self._in_flight[entry.stage_slice.worker].popleft()
        result = first.inputs.rows(slice(first.rows.start, last.rows.stop)).attach(concat_results(parts))
        if not led:
            result.obs = out
        elif all(e.lead_batch is first.lead_batch for e in entries) and all(
                a.lead_rows.stop == b.lead_rows.start for a, b in zip(entries, entries[1:])):
            span = slice(first.lead_rows.start, last.lead_rows.stop)
            result.obs = {k: v[span] for k, v in first.lead_batch.items()}
        else:
            result.obs = {k: np.concatenate([e.lead_batch[k][e.lead_rows] for e in entries]) for k in first.lead_batch}
        self.accounting.received(result, arrived=not led)
        self._land(slices, result.obs)
        self._settle()
        return result

    # --- what the engine's user face drives ----------------------------------------------------
    def reset(self, env_ids: Sequence[int] | None = None) -> list[dict[str, np.ndarray]]:
        """:meth:`~.engine.RolloutEngine.reset`: every env, or only the global ``env_ids``."""
        if env_ids is None:
            self.require(EngineState.NOT_RESET, EngineState.IDLE, doing="reset")
            ids = np.arange(self.plan.num_envs)
            batches = [self.new_batch() for _ in range(self.plan.pipeline_stages)]
        else:
            self.require(EngineState.IDLE, EngineState.NOT_RESET, doing="reset")
            if any(batch is None for batch in self._stage_obs):
                raise NotResetError("reset() every env once before resetting a subset with env_ids")
            ids = np.sort(check_env_indices(env_ids, self.plan.num_envs))
            batches = [{k: v.copy() for k, v in batch.items()} for batch in self._stage_obs]
        e = self.plan.envs_per_process
        rows = {int(w): (ids[ids // e == w] % e).tolist() for w in np.unique(ids // e)}
        with self.guard():
            for w, local in rows.items():
                self._executor.submit(w, Reset(tuple(local)))
            for w, local in rows.items():
                obs = self._executor.collect(w)[1]
                worker_ids = w * e + np.asarray(local)
                for k in range(self.plan.pipeline_stages):
                    batch_rows, obs_rows = np.nonzero(self.plan.stage_envs(k)[:, None] == worker_ids)
                    for key, arr in batches[k].items():
                        arr[batch_rows] = obs[key][obs_rows]
            self._executor.take_respawned()
        self._stage_obs, self._handed_out = batches, set(range(self.plan.pipeline_stages))  # returned below
        self._state = EngineState.IDLE
        return list(batches)

    def submit(self, stage: int, actions: np.ndarray) -> None:
        """:meth:`~.engine.RolloutEngine.submit`: ``actions`` validated, as a copy in :attr:`action_dtype`,
        to the slices of ``stage``, made from its boundary observations (``None`` before any reset)."""
        self.require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        self.plan.check_stage(stage)
        if self.stage_busy(stage):
            raise ChunkInFlightError(f"stage {stage} already has a chunk in flight; collect({stage}) it first")
        actions = check_chunk_actions(actions, self.plan.stage_size, self.action_dim, self.chunk_size,
                                      dtype=self.action_dtype)
        if self._stage_obs[stage] is not None:
            self._handed_out.add(stage)  # attached to the result as its policy_obs
        self.send(self.plan.stage_slices(stage), actions, self._stage_obs[stage])

    def collect_stage(self, stage: int) -> ChunkResult:
        """:meth:`~.engine.RolloutEngine.collect`: :meth:`collect` of every slice of ``stage``."""
        self.require(EngineState.NOT_RESET, EngineState.IDLE, EngineState.STEPPING)
        self.plan.check_stage(stage)
        if not self.stage_busy(stage):
            raise NoChunkInFlightError(f"stage {stage} has no chunk in flight; submit() one first")
        return self.collect(self.plan.stage_slices(stage))

    def drain(self) -> list[int]:
        """Receive every chunk in flight and drop it (their steps ran; their results, lead reports included,
        go nowhere): the engine is then idle at a chunk boundary of every env. Returns the global ids of the
        envs whose chunk ran past the lead observations it reported (sent with ``lead_steps`` d > 0): their
        boundary observations are d steps old."""
        behind: set[int] = set()
        while True:
            entry = next((queue[0] for queue in self._in_flight.values() if queue), None)
            if entry is None:
                return sorted(behind)
            slices = [entry.stage_slice]
            if entry.lead_steps is not None and entry.lead_batch is None:
                self.receive_lead(slices)
            self.collect(slices)
            if entry.lead_steps:
                behind.update(entry.stage_slice.global_envs)

    def new_rollout(self) -> None:
        """A rollout starts: fresh :attr:`accounting`."""
        self.accounting = Accounting(self.plan)

    # --- lifecycle ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Close the engine when a worker fails, dies or times out (state of its envs unknown)."""
        try:
            yield
        except (WorkerError, WorkerDiedError, TimeoutError) as exc:
            self.close_after(exc)
            raise

    def close_after(self, exc: BaseException, where: str = "") -> None:
        """:meth:`close` because of ``exc`` (raised ``where``, e.g. ``"inside rollout()"``)."""
        text = str(exc).strip().splitlines()
        line = text[0] if text else ""
        line = line if len(line) <= 200 else line[:197] + "..."
        cause = f"after {public_type_name(exc)}{' ' + where if where else ''}"
        self.close(f"{cause}: {line}" if line else cause)

    def close(self, because: str = "by close()") -> None:
        """Stop every worker and free the shared memory; ``because`` says why (in every later ClosedError,
        the first reason kept). Idempotent, and retryable after an interrupt."""
        if self._state is not EngineState.CLOSED:
            self._state, self._closed_because = EngineState.CLOSED, f"closed {because}"
        self._executor.close()


__all__ = ["COMMITTED_KEY", "ChunkInputs", "ChunkLead", "ChunkResult", "CommittedActions", "EngineDriver",
           "EngineState", "InFlight", "Policy", "StageSlice", "committed_width"]
