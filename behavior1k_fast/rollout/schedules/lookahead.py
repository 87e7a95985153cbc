"""The lookahead schedule (``schedule="lookahead"``, issue 21): a pipeline in time, not in space.

Every env of every process steps at every global step: one stage (``pipeline_stages=1``), or K stages of
whole processes (``partition="process"``), each stage its own pipeline in time, so that stage k's lead
render and transfer overlap the other stages' forwards. Each chunk c is sent with a lead d (profile
``lookahead_steps``): every worker reads its envs' **lead observations** after step ``N - d`` and reports
them at once (``driver.receive_lead``), then runs the d remaining actions. The driver
runs the policy on the lead observations of the stage's envs (one batch) together with each env's
**d committed actions** (the rest of chunk c, in the policy input under
:data:`~behavior1k_fast.rollout.policy.COMMITTED_KEY`, ``[n, d, action_dim]``; zeros where they do not
run: the episode ended before the lead, or the env sits the chunk out) and sends chunk c + 1, which each
worker starts right after step N - 1 of chunk c. A worker waits only when the policy was late (its stall,
``RolloutStats.stall_seconds_per_worker``, and ``wait`` spans with ``command="stall"`` in the trace).

Per round, stage after stage, the driver receives the stage's END(c - 1) (the result of its chunk c - 1;
its ``obs`` are that chunk's lead observations, ``policy_obs`` the policy input it was chosen from,
committed actions included) and LEAD(c), runs the forward and sends chunk c + 1 - the order of the replies
on every worker (:mod:`~behavior1k_fast.rollout.protocol`), so no stage waits for another stage's chunk end.

- ``d = 0`` is the K = 1 barrier schedule exactly (the same backend calls and chunks: tested bit-identical).
- Episodes (the worker's rule, :mod:`~behavior1k_fast.rollout.chunk`): no action is ever chosen from
  another episode's observation. An episode that ends before a lead is reset there and its next chunk is
  chosen from the reset observation; one that ends after the lead sits out the next chunk (every row
  masked, ``applied`` False, counted in ``RolloutStats.sat_out_chunks``), is reset at that chunk's lead, and
  the chunk after is chosen from its reset observation. Needs ``auto_reset=True``.
- The first chunk of a rollout is chosen from the engine's stage observations with no committed action
  (zeros), and the last chunk of a rollout is sent with lead 0, so that a rollout ends at a chunk boundary:
  the stage observations after it are boundary observations (a trainer's bootstrap value; the next
  rollout's first choice) and no action is left committed across rollouts.
- ``lookahead_steps="auto"``: the smallest d with ``d * t_step >= T_model + transfer``, measured per stage
  on the first round, and at most :func:`~behavior1k_fast.core.profile.auto_lead_cap` (a quarter of the
  chunk, its docs say why; the rest of a forward it does not hide is a stall): chunks 0 and 1 run with
  the cap, then T_model (the forward of chunk 1), the transfer (the driver's time receiving the lead
  reports) and t_step (the stage's slowest worker's wall seconds per step of chunk 0) give d for every
  later chunk. The committed actions are then always
  ``[n, cap, action_dim]`` (the last d columns hold them, the others are zeros), so the policy input keeps
  one shape.

Works with the process, Ray and inline executors; a respawned worker's envs take their reset observation
as lead observation (their episodes end, truncated, in the chunk they were in).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...core.profile import AUTO_LEAD, auto_lead_cap
from ..driver import COMMITTED_KEY, ChunkLead, CommittedActions, StageSlice, committed_width
from .base import Schedule


@dataclass(eq=False)
class LeadStage:
    """One stage as this schedule tracks it: its slices, the chunk last sent to them and with which lead."""

    stage: int
    slices: tuple[StageSlice, ...]
    #: The last chunk sent (``[n, N, action_dim]``), its lead, and chunks sent so far.
    chunk: np.ndarray | None = None
    sent_lead: int = 0
    sent: int = 0
    #: The lead of the chunks sent next (``auto``: the cap until measured, module docs).
    lead: int = 0
    #: Its last lead observations.
    obs: dict | None = None
    #: Seconds of its last forward and lead transfer (what an ``auto`` lead hides).
    hidden_s: float = 0.0


class Lookahead(Schedule):
    """Chunks chosen from lead observations while the current chunk ends (module docs)."""

    name = "lookahead"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        driver = self.driver
        # the profile's reason (ValueError) for a layout it refuses, asked for with rollout(schedule=...)
        profile = driver.profile.replace(schedule=self.name)
        if not driver.auto_reset:
            raise ValueError("schedule='lookahead' needs auto_reset=True: an episode that ends after a lead is "
                             "reset at the next lead")
        if COMMITTED_KEY in driver.observation_space.spaces:
            raise ValueError(f"schedule='lookahead' gives the policy its committed actions under "
                             f"{COMMITTED_KEY!r}, which the backend's observations use already")
        self.auto = driver.profile.lookahead_steps == AUTO_LEAD
        #: The committed actions in the policy input (their columns: ``spec.width``).
        self.spec = CommittedActions(COMMITTED_KEY, committed_width(profile), driver.action_dim, driver.action_dtype)
        self.cap = auto_lead_cap(driver.chunk_size)
        first_lead = self.cap if self.auto else driver.profile.lookahead_steps
        self.stages = [LeadStage(k, driver.plan.stage_slices(k), lead=first_lead)
                       for k in range(driver.plan.pipeline_stages)]

    def run(self) -> None:
        driver = self.driver
        for st in self.stages:
            st.obs = driver.stage_obs(st.stage)
            self.send(st, st.obs, self.spec.zeros(driver.plan.stage_size))
        for c in range(self.num_rounds):
            for st in self.stages:  # stage k's lead comes about 1/K of a round after stage k - 1's
                if c:
                    self.finish(st, c - 1)  # its worker replies in order: END of chunk c - 1, then LEAD of c
                start = time.perf_counter()
                lead, st.obs = driver.receive_lead(st.slices)
                transfer_s = time.perf_counter() - start
                if c + 1 < self.num_rounds:
                    st.hidden_s = self.send(st, st.obs, self.committed(st, lead)) + transfer_s
        for st in self.stages:
            self.finish(st, self.num_rounds - 1)

    def finish(self, st: LeadStage, c: int) -> None:
        """Receive stage ``st``'s chunk ``c`` and deliver it; after chunk 0 an ``auto`` lead is measured."""
        result = self.driver.collect(st.slices)  # the last chunk's lead observations are boundary ones (lead 0)
        if self.auto and c == 0 and self.num_rounds > 1:
            st.lead = self.auto_lead(result.env_wall_seconds / np.maximum(result.global_steps, 1), st.hidden_s)
        self.deliver(st.stage, result)

    def send(self, st: LeadStage, obs, committed) -> float:
        """The policy on ``obs`` and the ``committed`` actions of stage ``st``, its chunk to the stage's slices
        (lead 0 for the rollout's last chunk); returns the forward's wall seconds."""
        policy_input = {**obs, COMMITTED_KEY: committed}
        start = time.perf_counter()
        actions, extras = self.driver.forward(self.policy, policy_input, "policy output for the lookahead batch")
        forward_s = time.perf_counter() - start
        st.sent += 1
        st.chunk, st.sent_lead = actions, 0 if st.sent == self.num_rounds else st.lead
        self.driver.send(st.slices, actions, policy_input, extras, lead_steps=st.sent_lead)
        return forward_s

    def committed(self, st: LeadStage, lead: ChunkLead) -> np.ndarray:
        """The actions of stage ``st``'s last chunk still to run after its lead, right-aligned in ``width``
        columns, zeros where they do not run (module docs)."""
        chunk = st.chunk
        out = self.spec.zeros(len(chunk))
        d = st.sent_lead
        if d:
            out[:, self.spec.width - d:] = chunk[:, chunk.shape[1] - d:] * lead.committed[:, None, None]
        return out

    def auto_lead(self, step_s: np.ndarray, hidden_s: float) -> int:
        """The smallest d with ``d * t_step >= hidden_s`` (t_step: the slowest worker's), at most the cap."""
        t_step = float(np.max(step_s)) if len(step_s) else 0.0
        if t_step <= 0:
            return self.cap
        return int(min(self.cap, max(0, math.ceil(hidden_s / t_step - 1e-9))))
