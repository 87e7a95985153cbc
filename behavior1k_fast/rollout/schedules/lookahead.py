"""The lookahead schedule (``schedule="lookahead"``, issue 21): a pipeline in time, not in space.

One stage (``pipeline_stages=1``): every env of every process steps at every global step. Each chunk c is
sent with a lead d (profile ``lookahead_steps``): every worker reads its envs' **lead observations** after
step ``N - d`` and reports them at once (``engine.receive_lead``), then runs the d remaining actions. The
driver runs the policy on the lead observations of all envs (one batch) together with each env's **d
committed actions** (the rest of chunk c, in the policy input under
:data:`~behavior1k_fast.rollout.policy.COMMITTED_KEY`, ``[n, d, action_dim]``; zeros where they do not
run: the episode ended before the lead, or the env sits the chunk out) and sends chunk c + 1, which each
worker starts right after step N - 1 of chunk c. A worker waits only when the policy was late (its stall,
``RolloutStats.stall_seconds_per_worker``, and ``wait`` spans with ``command="stall"`` in the trace).

Per round, the driver receives every worker's LEAD(c), sends chunk c + 1 to all, then receives every END(c)
(the chunk's result; its ``obs`` are the lead observations, ``policy_obs`` the policy input it was chosen
from, committed actions included), the replies' order on every worker (:mod:`~behavior1k_fast.rollout.protocol`).

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
- ``lookahead_steps="auto"``: the smallest d with ``d * t_step >= T_model + transfer``, measured on the
  first round: chunks 0 and 1 run with d = N - 1, then T_model (the forward of chunk 1), the transfer (the
  driver's time receiving the lead reports) and t_step (the slowest worker's wall seconds per step of
  chunk 0) give d for every later chunk. The committed actions are then always ``[n, N - 1, action_dim]``
  (the last d columns hold them, the others are zeros), so the policy input keeps one shape.

Works with the process, Ray and inline executors; a respawned worker's envs take their reset observation
as lead observation (their episodes end, truncated, in the chunk they were in).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...core.profile import AUTO_LEAD
from ..chunk import ChunkLead
from ..policy import COMMITTED_KEY
from .base import Schedule


class Lookahead(Schedule):
    """Chunks chosen from lead observations while the current chunk ends (module docs)."""

    name = "lookahead"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        engine = self.engine
        if not engine.auto_reset:
            raise ValueError("schedule='lookahead' needs auto_reset=True: an episode that ends after a lead is "
                             "reset at the next lead")
        if COMMITTED_KEY in engine.observation_space.spaces:
            raise ValueError(f"schedule='lookahead' gives the policy its committed actions under "
                             f"{COMMITTED_KEY!r}, which the backend's observations use already")
        self.auto = engine.profile.lookahead_steps == AUTO_LEAD
        n = engine.chunk_size
        #: The lead of the chunks sent next; ``auto`` starts at N - 1 (module docs).
        self.lead = n - 1 if self.auto else engine.profile.lookahead_steps
        #: Columns of the committed actions in the policy input.
        self.width = n - 1 if self.auto else self.lead

    def run(self) -> None:
        engine = self.engine
        pieces = engine.plan.stage_slices(0)
        n = engine.plan.stage_size
        obs = engine.stage_obs(0)
        committed = np.zeros((n, self.width, engine.action_dim), np.float32)
        self.send(pieces, obs, committed, last=self.num_rounds == 1)
        for c in range(self.num_rounds):
            start = time.perf_counter()
            lead, obs = engine.receive_lead(pieces)
            transfer_s = time.perf_counter() - start
            if c + 1 < self.num_rounds:
                chunk = self.chunk
                committed = self.committed(chunk, lead)
                forward_s = self.send(pieces, obs, committed, last=c + 2 == self.num_rounds)
            result = engine.receive(pieces)
            engine.take_respawned()  # a respawned worker's reset observations came as its lead observations
            if self.auto and c == 0 and c + 1 < self.num_rounds:
                self.lead = self.auto_lead(result.env_wall_seconds / np.maximum(result.global_steps, 1),
                                           forward_s + transfer_s)
            self.deliver(0, result)
        engine.set_stage_obs(0, obs)

    def send(self, pieces, obs, committed, last: bool) -> float:
        """The policy on ``obs`` and the ``committed`` actions, its chunk to every slice (lead 0 for the
        rollout's ``last`` chunk); returns the forward's wall seconds."""
        policy_input = {**obs, COMMITTED_KEY: committed}
        start = time.perf_counter()
        actions, extras = self.engine.forward(self.policy, policy_input, "policy output for the lookahead batch")
        forward_s = time.perf_counter() - start
        self.engine.send(pieces, actions, policy_input, extras, lead_steps=0 if last else self.lead)
        self.chunk, self.sent_lead = actions, 0 if last else self.lead
        return forward_s

    def committed(self, chunk: np.ndarray, lead: ChunkLead) -> np.ndarray:
        """The actions of ``chunk`` still to run after its lead, right-aligned in ``width`` columns, zeros
        where they do not run (module docs)."""
        out = np.zeros((len(chunk), self.width, chunk.shape[2]), chunk.dtype)
        d = self.sent_lead
        if d:
            out[:, self.width - d:] = chunk[:, chunk.shape[1] - d:] * lead.committed[:, None, None]
        return out

    def auto_lead(self, step_s: np.ndarray, hidden_s: float) -> int:
        """The smallest d with ``d * t_step >= hidden_s`` (t_step: the slowest worker's), at most N - 1."""
        t_step = float(np.max(step_s)) if len(step_s) else 0.0
        if t_step <= 0:
            return self.engine.chunk_size - 1
        return int(min(self.engine.chunk_size - 1, max(0, math.ceil(hidden_s / t_step - 1e-9))))
