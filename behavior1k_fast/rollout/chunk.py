"""Chunk stepping against one backend: N actions per env, observation only where it is needed.

Inside a chunk every step runs physics, reward and termination for the selected envs. With on-demand
observation (``skip_intermediate_obs=True``) intermediate steps use ``get_obs=False, render=False`` and the
step before the lead ``get_obs=True, render=True``; with it off every step renders and reads (the stock
path). Both give the same rewards, terminations and lead observations.

**The lead.** A chunk has a lead ``d`` (``0 <= d < N``, :class:`ChunkRun`): its lead observations are read
after step ``N - d`` (index ``N - d - 1``), the next chunk is chosen from them while the ``d`` remaining
actions run (the ``lookahead`` schedule, profile ``lookahead_steps``). ``d = 0`` (:func:`run_chunk`, every
other schedule) reads them at the chunk's end: they are its boundary observations, and the backend sees
exactly the calls of a chunk without a lead. After the lead nothing is rendered or read except at an
episode's end.

An env whose episode ends (terminated or truncated) at step t of the chunk:

- its terminal observation is read at t (``backend.observe([i], render=True)`` when step t read none);
- its remaining actions are masked: it leaves ``env_indices`` for the rest of the chunk. Physics is shared
  by all envs of a backend, so its body still advances with the others, holding its last action;
- with ``auto_reset`` it is reset once, at the first lead after t (one ``backend.reset`` call per lead for
  every env reset there), and its reset observation is its lead observation, so no chunk is ever chosen
  from another episode's observation:

  - ``t < N - d`` (before the lead; always with ``d = 0``): reset at this chunk's lead; the next chunk is
    chosen from its reset observation; its info carries gymnasium-style ``final_observation`` and
    ``final_info`` under the reset info (today's boundary reset);
  - ``t >= N - d`` (after the lead, whose observation already chose its next chunk from the ended
    episode): its info carries ``final_observation`` and ``final_info``; it **sits out** the next chunk
    (every row masked, ``applied`` False, :attr:`ChunkResult.sat_out`), is reset at that chunk's lead (its
    info there: the reset info) and the chunk after is chosen from its reset observation.

  This rule, rather than a reset at the chunk's end, keeps ``d = 0`` the plain chunk, sits an env out only
  when its next chunk really came from its ended episode, gives a reset observation as fresh as every
  other lead observation (read ``d`` steps before the chunk it chooses starts), and costs no render or
  stored observation beyond the reset's own.

When every selected env has ended, the chunk stops early: the backend takes fewer than N global steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..core.contract import VectorBackend, check_env_indices, check_finite, check_float_dtype, check_plain_array


@dataclass
class ChunkResult:
    """Outcome of one chunk for ``n`` envs (rows in request order), ``N`` steps."""

    #: Env ids of the rows (backend indices in :func:`step_chunk`, global ids in the engine).
    env_ids: np.ndarray
    #: Boundary observations: key -> array ``[n, *shape]`` (``None`` where they travel apart, and for a
    #: chunk with a lead: its lead observations, :class:`ChunkLead`, were its only ones).
    obs: dict[str, np.ndarray] | None
    #: float64 ``[n, N]``; 0 where the action was masked.
    rewards: np.ndarray
    #: bool ``[n, N]``.
    terminated: np.ndarray
    #: bool ``[n, N]``.
    truncated: np.ndarray
    #: bool ``[n, N]``: True where the env took its own action (False once its episode ended, and over a
    #: chunk it sat out).
    applied: np.ndarray
    #: Per env: info of its last applied step, or the reset info plus ``final_observation`` / ``final_info``
    #: (after a lead: module docs).
    infos: list[dict] = field(default_factory=list)
    #: int ``[n]``: global steps the env's backend took in this chunk (shared by all rows of one backend).
    global_steps: np.ndarray | None = None
    #: float64 ``[n]``: simulated seconds the env's backend advanced in this chunk (backend ``sim_time``).
    sim_seconds: np.ndarray | None = None
    #: float64 ``[n]``: wall seconds the env's backend spent stepping this chunk, its masked-env terminal
    #: observations and the resets at its lead included (measured where the chunk runs; shared by all rows of
    #: one backend; 0 in a restarted worker's placeholder).
    env_wall_seconds: np.ndarray | None = None
    #: Set by the engine (``None`` / empty elsewhere): the boundary observations the chunk's actions were
    #: chosen from (key -> ``[n, *shape]``), the chunk ``[n, N, action_dim]`` as sent, and the policy's
    #: extras for it (key -> ``[n, ...]``; empty when the policy returned actions only).
    policy_obs: dict[str, np.ndarray] | None = None
    actions: np.ndarray | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    #: bool ``[n]``: the row sat this chunk out (module docs: its episode ended after the previous lead);
    #: all False when not given.
    sat_out: np.ndarray | None = None
    #: float64 ``[n]``: wall seconds the worker waited for this chunk, from its previous chunk or reset reply
    #: to this request (shared by all rows of one backend; 0 for a worker's first chunk and when not given).
    stall_seconds: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.rewards)
        if self.sat_out is None:
            self.sat_out = np.zeros(n, dtype=bool)
        if self.stall_seconds is None:
            self.stall_seconds = np.zeros(n, dtype=np.float64)

    @property
    def episode_ended(self) -> np.ndarray:
        """bool ``[n]``: the episode ended inside this chunk."""
        return (self.terminated | self.truncated).any(axis=1)


def action_dtype(action_space: Any) -> np.dtype:
    """The dtype chunk actions reach a backend in: the action space's float dtype (float64 when the space's
    dtype is not a float type)."""
    dtype = np.dtype(action_space.dtype)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


@dataclass
class ChunkLead:
    """What a worker reports at the lead of a chunk (module docs), for ``n`` rows in request order; the lead
    observations travel beside it (shared memory or the reply)."""

    #: Env ids of the rows (backend indices in :class:`ChunkRun`, global ids in the engine).
    env_ids: np.ndarray
    #: d: actions of the chunk still to run after the lead.
    lead_steps: int
    #: bool ``[n]``: the row's episode ended before the lead; with ``auto_reset`` it was reset at the lead
    #: (its lead observation is a reset observation), else its lead observation is the terminal one.
    ended: np.ndarray
    #: bool ``[n]``: the row sits this chunk out; it was reset at the lead.
    sat_out: np.ndarray

    @property
    def committed(self) -> np.ndarray:
        """bool ``[n]``: the row runs its ``d`` remaining actions (until its episode ends); False where they
        are masked (episode ended, or sitting out), so no choice should be conditioned on them."""
        return ~(self.ended | self.sat_out)


def check_chunk_actions(
    actions: Any, num_envs: int, action_dim: int, chunk_size: int | None = None, argname: str = "actions",
    dtype: Any = None,
) -> np.ndarray:
    """Validated float chunk actions ``[num_envs, chunk_size, action_dim]``; NaN or inf is an error.

    With ``dtype`` (:func:`action_dtype`) the result is a copy in that dtype, the values the backend will
    get, checked after the cast (``1e300`` as float32 is inf: an error naming the value): the engine keeps
    it with the chunk, so whatever the caller does with its array afterwards, the kept actions are the
    applied ones. Without, ``actions`` itself is returned."""
    check_plain_array(actions, argname, " [envs, steps, action_dim]")
    steps = chunk_size if chunk_size is not None else "N"
    if (
        actions.ndim != 3
        or actions.shape[0] != num_envs
        or actions.shape[2] != action_dim
        or (chunk_size is not None and actions.shape[1] != chunk_size)
        or actions.shape[1] < 1
    ):
        raise ValueError(f"{argname} must have shape ({num_envs}, {steps}, {action_dim}), got {actions.shape}")
    check_float_dtype(actions, argname)
    check_finite(actions, argname, "[env, step, dim]")
    if dtype is None:
        return actions
    with np.errstate(over="ignore"):
        cast = actions.astype(dtype)  # always a copy
    overflow = ~np.isfinite(cast)
    if overflow.any():
        index = tuple(np.argwhere(overflow)[0].tolist())
        raise ValueError(f"{argname} holds {actions[index]!r} at [env, step, dim] = {list(index)}, which the "
                         f"action dtype {cast.dtype} cannot hold (it would reach the backend as inf)")
    return cast


def stack_obs(obs: Sequence[dict[str, np.ndarray]], keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-env observation dicts -> key -> ``[n, *shape]``."""
    return {k: np.stack([o[k] for o in obs]) for k in keys}


def run_chunk(
    backend: VectorBackend,
    actions: np.ndarray,
    env_indices: np.ndarray,
    *,
    skip_intermediate_obs: bool = True,
    auto_reset: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, np.ndarray]], ChunkResult]:
    """:func:`step_chunk` on already validated input (``env_indices`` an int array, ``actions`` checked by
    :func:`check_chunk_actions`), with the boundary observations left as a per-env list (``result.obs`` is
    ``None``). The engine's workers call this: the engine validated the chunk where it entered.
    ``on_step(done)`` is called after each step with the number of steps finished (worker progress).
    It is a :class:`ChunkRun` with no lead: its lead observations are the boundary observations."""
    run = ChunkRun(backend, actions, env_indices, skip_intermediate_obs=skip_intermediate_obs,
                   auto_reset=auto_reset, on_step=on_step)
    obs, _ = run.to_lead()
    return obs, run.finish()


class ChunkRun:
    """One chunk in two parts around its lead observation (module docs, "Lookahead"): :meth:`to_lead`
    runs the first ``N - lead_steps`` steps and returns the lead observations, :meth:`finish` runs the
    ``lead_steps`` remaining ones and returns the :class:`ChunkResult`. Input is validated already, as for
    :func:`run_chunk`.

    Args:
        backend: the backend the rows belong to.
        actions: ``[n, N, action_dim]``, one chunk per row.
        env_indices: int ``[n]``: the backend's env of each row.
        lead_steps: d, ``0 <= d < N``; 0 reads the lead observations at the chunk's end (a plain chunk).
        sit_out: bool ``[n]``: rows that sit this chunk out (their episode ended after the previous chunk's
            lead; they are reset at this lead). ``None``: none.
        skip_intermediate_obs: on-demand observation (module docs).
        auto_reset: reset an ended episode at the next lead; ``lead_steps > 0`` needs it.
        on_step: called after each step with the number of steps finished (worker progress).
    """

    def __init__(
        self,
        backend: VectorBackend,
        actions: np.ndarray,
        env_indices: np.ndarray,
        *,
        lead_steps: int = 0,
        sit_out: np.ndarray | None = None,
        skip_intermediate_obs: bool = True,
        auto_reset: bool = True,
        on_step: Callable[[int], None] | None = None,
    ):
        n, steps = actions.shape[:2]
        if not 0 <= lead_steps < steps:
            raise ValueError(f"lead_steps must be an int in [0, {steps - 1}] for a chunk of {steps}, got {lead_steps}")
        self.sat_out = np.zeros(n, dtype=bool) if sit_out is None else np.asarray(sit_out, dtype=bool).copy()
        if (lead_steps or self.sat_out.any()) and not auto_reset:
            raise ValueError(f"lead_steps={lead_steps} and rows sitting out need auto_reset=True: an episode that "
                             "ends after the lead is reset at the next lead")
        self.backend = backend
        self.actions = actions
        self.env_indices = env_indices
        self.lead_steps = lead_steps
        self.skip_intermediate_obs = skip_intermediate_obs
        self.auto_reset = auto_reset
        self.on_step = on_step
        self.rewards = np.zeros((n, steps), dtype=np.float64)
        self.terminated = np.zeros((n, steps), dtype=bool)
        self.truncated = np.zeros((n, steps), dtype=bool)
        self.applied = np.zeros((n, steps), dtype=bool)
        self.obs: list[Any] = [None] * n
        self.infos: list[dict] = [{} for _ in range(n)]
        self.active = ~self.sat_out
        #: bool ``[n]``: the row's episode ended after the lead (set by :meth:`finish`): it sits out the next
        #: chunk, whose actions were chosen from its ended episode.
        self.ended_after_lead = np.zeros(n, dtype=bool)
        self.taken = 0
        self.wall_seconds = 0.0
        self.start_time = backend.sim_time

    def to_lead(self) -> tuple[list[dict[str, np.ndarray]], ChunkLead]:
        """Run steps ``0 .. N - d - 1`` (reading at the last of them), reset the episodes that ended (in
        this chunk, or after the previous lead for rows sitting out) and return the lead observations
        (per-row list; reset observations for reset rows, terminal ones without ``auto_reset``)."""
        start = time.perf_counter()
        steps = self.actions.shape[1]
        lead_at = steps - self.lead_steps
        for t in range(lead_at):
            if not self._step(t, read=t == lead_at - 1 or not self.skip_intermediate_obs):
                break
        ended = ~self.active & ~self.sat_out
        reset = np.flatnonzero(ended | self.sat_out) if self.auto_reset else np.zeros(0, dtype=np.int64)
        if reset.size:
            reset_obs, reset_infos = self.backend.reset(self.env_indices[reset])
            for j, row in enumerate(reset):
                if ended[row]:
                    self.infos[row] = {**reset_infos[j], "final_observation": self.obs[row],
                                       "final_info": self.infos[row]}
                else:
                    self.infos[row] = dict(reset_infos[j])
                self.obs[row] = reset_obs[j]
        self.wall_seconds += time.perf_counter() - start
        lead = ChunkLead(env_ids=self.env_indices, lead_steps=self.lead_steps, ended=ended, sat_out=self.sat_out)
        return list(self.obs), lead

    def finish(self) -> ChunkResult:
        """Run the ``d`` steps after the lead (reading only at an episode's end, or every step without
        on-demand observation) and return the chunk's result (``obs`` ``None``: the lead observations were
        this chunk's). An episode that ends here gets ``final_observation`` and ``final_info`` in its info
        and is reset at the next chunk's lead (:attr:`ended_after_lead`)."""
        start = time.perf_counter()
        steps = self.actions.shape[1]
        running = self.active.copy()
        for t in range(steps - self.lead_steps, steps):
            if not self._step(t, read=not self.skip_intermediate_obs):
                break
        self.ended_after_lead = running & ~self.active
        for row in np.flatnonzero(self.ended_after_lead):
            self.infos[row] = {"final_observation": self.obs[row], "final_info": self.infos[row]}
        self.wall_seconds += time.perf_counter() - start
        n = len(self.env_indices)
        return ChunkResult(
            env_ids=self.env_indices,
            obs=None,
            rewards=self.rewards,
            terminated=self.terminated,
            truncated=self.truncated,
            applied=self.applied,
            infos=self.infos,
            global_steps=np.full(n, self.taken, dtype=np.int64),
            sim_seconds=np.full(n, self.backend.sim_time - self.start_time, dtype=np.float64),
            env_wall_seconds=np.full(n, self.wall_seconds, dtype=np.float64),
            sat_out=self.sat_out,
        )

    def _step(self, t: int, read: bool) -> bool:
        """Step ``t`` of the active rows (render and read when ``read``; an episode that ends gets its
        terminal observation); False when no row is active (the chunk stops: nothing is stepped)."""
        rows = np.flatnonzero(self.active)
        if rows.size == 0:
            return False
        step_obs, r, te, tr, step_infos = self.backend.step(
            self.actions[rows, t], self.env_indices[rows], get_obs=read, render=read
        )
        self.taken += 1
        if self.on_step is not None:
            self.on_step(self.taken)
        self.rewards[rows, t] = r
        self.terminated[rows, t] = te
        self.truncated[rows, t] = tr
        self.applied[rows, t] = True
        for j, row in enumerate(rows):
            self.infos[row] = step_infos[j]
            if read:
                self.obs[row] = step_obs[j]
        ended = rows[np.asarray(te) | np.asarray(tr)]
        if ended.size:
            if not read:
                for row, ob in zip(ended, self.backend.observe(self.env_indices[ended], render=True)):
                    self.obs[row] = ob
            self.active[ended] = False
        return True


def step_chunk(
    backend: VectorBackend,
    actions: np.ndarray,
    env_indices: Sequence[int] | None = None,
    *,
    skip_intermediate_obs: bool = True,
    auto_reset: bool = True,
) -> ChunkResult:
    """Run one chunk ``actions [n, N, action_dim]`` on the selected envs of ``backend`` (see module docs).

    Works in-process on any backend; validates its input (NaN or inf actions, bad env indices are errors).
    """
    idx = check_env_indices(env_indices, backend.num_envs)
    actions = check_chunk_actions(actions, len(idx), int(np.prod(backend.action_space.shape)))
    obs, result = run_chunk(backend, actions, idx, skip_intermediate_obs=skip_intermediate_obs, auto_reset=auto_reset)
    result.obs = stack_obs(obs, list(backend.observation_space.spaces))
    return result


def concat_results(results: Sequence[ChunkResult]) -> ChunkResult:
    """Rows of several chunk results, in order (one stage gathered from its workers); ``obs`` is left
    ``None``: the engine gathers observations straight into the stage batch."""
    if len(results) == 1:
        return results[0]
    return ChunkResult(
        env_ids=np.concatenate([r.env_ids for r in results]),
        obs=None,
        rewards=np.concatenate([r.rewards for r in results]),
        terminated=np.concatenate([r.terminated for r in results]),
        truncated=np.concatenate([r.truncated for r in results]),
        applied=np.concatenate([r.applied for r in results]),
        infos=[i for r in results for i in r.infos],
        global_steps=np.concatenate([r.global_steps for r in results]),
        sim_seconds=np.concatenate([r.sim_seconds for r in results]),
        env_wall_seconds=np.concatenate([r.env_wall_seconds for r in results]),
        sat_out=np.concatenate([r.sat_out for r in results]),
        stall_seconds=np.concatenate([r.stall_seconds for r in results]),
    )


def concat_leads(leads: Sequence[ChunkLead]) -> ChunkLead:
    """Rows of several lead reports of one chunk (its slices, gathered from their workers), in order."""
    if len(leads) == 1:
        return leads[0]
    return ChunkLead(
        env_ids=np.concatenate([lead.env_ids for lead in leads]),
        lead_steps=leads[0].lead_steps,
        ended=np.concatenate([lead.ended for lead in leads]),
        sat_out=np.concatenate([lead.sat_out for lead in leads]),
    )
