"""Chunk stepping against one backend: N actions per env, observation only where it is needed.

Inside a chunk every step runs physics, reward and termination for the selected envs. With on-demand
observation (``skip_intermediate_obs=True``) intermediate steps use ``get_obs=False, render=False`` and the
last step ``get_obs=True, render=True``; with it off every step renders and reads (the stock path). Both give
the same rewards, terminations and boundary observations.

An env whose episode ends (terminated or truncated) at step t of the chunk:

- its terminal observation is read at t (``backend.observe([i], render=True)`` when step t read none);
- its remaining actions are masked: it leaves ``env_indices`` for the rest of the chunk. Physics is shared
  by all envs of a backend, so its body still advances with the others, holding its last action;
- with ``auto_reset`` it is reset once, at the chunk boundary; its reset observation becomes its boundary
  observation and its info carries gymnasium-style ``final_observation`` and ``final_info``.

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
    #: Boundary observations: key -> array ``[n, *shape]``.
    obs: dict[str, np.ndarray] | None
    #: float64 ``[n, N]``; 0 where the action was masked.
    rewards: np.ndarray
    #: bool ``[n, N]``.
    terminated: np.ndarray
    #: bool ``[n, N]``.
    truncated: np.ndarray
    #: bool ``[n, N]``: True where the env took its own action (False once its episode ended).
    applied: np.ndarray
    #: Per env: info of its last applied step, or the reset info plus ``final_observation`` / ``final_info``.
    infos: list[dict] = field(default_factory=list)
    #: int ``[n]``: global steps the env's backend took in this chunk (shared by all rows of one backend).
    global_steps: np.ndarray | None = None
    #: float64 ``[n]``: simulated seconds the env's backend advanced in this chunk (backend ``sim_time``).
    sim_seconds: np.ndarray | None = None
    #: float64 ``[n]``: wall seconds the env's backend spent stepping this chunk, its masked-env terminal
    #: observations and boundary resets included (measured where the chunk runs; shared by all rows of
    #: one backend; 0 in a restarted worker's placeholder).
    env_wall_seconds: np.ndarray | None = None
    #: Set by the engine (``None`` / empty elsewhere): the boundary observations the chunk's actions were
    #: chosen from (key -> ``[n, *shape]``), the chunk ``[n, N, action_dim]`` as sent, and the policy's
    #: extras for it (key -> ``[n, ...]``; empty when the policy returned actions only).
    policy_obs: dict[str, np.ndarray] | None = None
    actions: np.ndarray | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def episode_ended(self) -> np.ndarray:
        """bool ``[n]``: the episode ended inside this chunk."""
        return (self.terminated | self.truncated).any(axis=1)


def action_dtype(action_space: Any) -> np.dtype:
    """The dtype chunk actions reach a backend in: the action space's float dtype (float64 when the space's
    dtype is not a float type)."""
    dtype = np.dtype(action_space.dtype)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


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
    ``on_step(done)`` is called after each step with the number of steps finished (worker progress)."""
    n, steps = actions.shape[:2]
    rewards = np.zeros((n, steps), dtype=np.float64)
    terminated = np.zeros((n, steps), dtype=bool)
    truncated = np.zeros((n, steps), dtype=bool)
    applied = np.zeros((n, steps), dtype=bool)
    obs: list[Any] = [None] * n
    infos: list[dict] = [{} for _ in range(n)]
    active = np.ones(n, dtype=bool)
    start_time = backend.sim_time
    start_wall = time.perf_counter()
    taken = 0
    for t in range(steps):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        read = t == steps - 1 or not skip_intermediate_obs
        step_obs, r, te, tr, step_infos = backend.step(actions[rows, t], env_indices[rows], get_obs=read, render=read)
        taken += 1
        if on_step is not None:
            on_step(taken)
        rewards[rows, t] = r
        terminated[rows, t] = te
        truncated[rows, t] = tr
        applied[rows, t] = True
        for j, row in enumerate(rows):
            infos[row] = step_infos[j]
            if read:
                obs[row] = step_obs[j]
        ended = rows[np.asarray(te) | np.asarray(tr)]
        if ended.size:
            if not read:
                for row, ob in zip(ended, backend.observe(env_indices[ended], render=True)):
                    obs[row] = ob
            active[ended] = False
    ended = np.flatnonzero(~active)
    if auto_reset and ended.size:
        reset_obs, reset_infos = backend.reset(env_indices[ended])
        for j, row in enumerate(ended):
            infos[row] = {**reset_infos[j], "final_observation": obs[row], "final_info": infos[row]}
            obs[row] = reset_obs[j]
    env_wall_seconds = time.perf_counter() - start_wall
    result = ChunkResult(
        env_ids=env_indices,
        obs=None,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        applied=applied,
        infos=infos,
        global_steps=np.full(n, taken, dtype=np.int64),
        sim_seconds=np.full(n, backend.sim_time - start_time, dtype=np.float64),
        env_wall_seconds=np.full(n, env_wall_seconds, dtype=np.float64),
    )
    return obs, result


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
    )
