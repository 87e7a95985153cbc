"""The lookahead schedule (issue 21) as a plain in-process loop: the reference the worker and the engine
are compared with. No engine, no processes, no :mod:`behavior1k_fast.rollout.chunk` code: it is written from
the schedule's rules, one global step of every backend after the other.

Rules (K = 1: every env of every backend is selected at every global step unless said otherwise):

- chunk 0 is chosen from the reset observations (every env reset once first), its committed actions all
  zeros;
- in chunk c each backend runs step ``t = 0 .. N - 1`` for its live envs; after step ``N - d - 1`` (the lead,
  rendered and read there with on-demand observation, every step without it) every env that ended since the
  last lead is reset, in one call per backend; then the policy chooses chunk c + 1 from the lead
  observations (reset observations for the envs just reset) and the committed actions ``chunk[:, N - d:]``
  (zeros for envs not live at the lead: theirs are never applied);
- an env whose episode ends at step t leaves the live set for the rest of chunk c (its terminal observation
  read at t); when t is after the lead it also sits out chunk c + 1 (never live in it) and is reset at that
  chunk's lead;
- info of an env: its last step's, with ``final_observation`` / ``final_info`` of the chunk its episode
  ended in, under the reset info when the reset is at that chunk's lead; a sitting-out env's is its reset
  info.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from behavior1k_fast import RolloutProfile

#: ``policy(obs, committed) -> chunk``: obs key -> ``[n, ...]``, committed ``[n, d, action_dim]`` (zeros where
#: an env's remaining actions are masked) -> ``[n, N, action_dim]`` float.
LookaheadPolicy = Callable[[dict, np.ndarray], np.ndarray]


def lookahead_profile(processes: int, envs_per_process: int, chunk_size: int, lead_steps: int,
                      **kw: Any) -> RolloutProfile:
    """The profile of a lookahead run of that layout (what each backend is built with)."""
    return RolloutProfile(num_env_processes=processes, total_num_envs=processes * envs_per_process,
                          chunk_size=chunk_size, schedule="lookahead", lookahead_steps=lead_steps,
                          gc_enable=False, **kw)


@dataclass
class EnvRecord:
    """One env's run, per chunk c (lists over chunks; see :meth:`stacked`)."""

    #: Observation chunk c was chosen from (reset observation for chunk 0).
    policy_obs: list = field(default_factory=list)
    #: Committed actions ``[d, action_dim]`` the policy was given with it.
    committed: list = field(default_factory=list)
    #: Chunk c ``[N, action_dim]``.
    actions: list = field(default_factory=list)
    #: Lead observation read in chunk c.
    lead_obs: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    terminated: list = field(default_factory=list)
    truncated: list = field(default_factory=list)
    applied: list = field(default_factory=list)
    #: The env sat chunk c out.
    sat_out: list = field(default_factory=list)
    #: The env's episode ended before chunk c's lead (reset there).
    ended_before_lead: list = field(default_factory=list)
    infos: list = field(default_factory=list)

    def stacked(self) -> dict[str, Any]:
        """Arrays stacked over chunks (observations: key -> ``[chunks, ...]``); ``infos`` stays a list."""
        out: dict[str, Any] = {}
        for name, values in self.__dict__.items():
            if name == "infos":
                out[name] = values
            elif name in ("policy_obs", "lead_obs"):
                out[name] = {k: np.stack([v[k] for v in values]) for k in values[0]}
            else:
                out[name] = np.stack(values)
        return out


def run_lookahead(
    factory: Any,
    policy: LookaheadPolicy,
    *,
    processes: int,
    envs_per_process: int,
    chunk_size: int,
    lead_steps: int,
    rounds: int,
    seed: int = 0,
    skip_intermediate_obs: bool = True,
) -> dict[int, dict[str, Any]]:
    """Per global env id, its :meth:`EnvRecord.stacked` run of ``rounds`` chunks of the lookahead schedule
    over ``processes`` backends of ``envs_per_process`` envs (backend w built with seed ``seed + w``, env g
    is env ``g % E`` of backend ``g // E``, as in the engine)."""
    n_steps, d, per = chunk_size, lead_steps, envs_per_process
    lead_at = n_steps - d
    profile = lookahead_profile(processes, per, chunk_size, lead_steps, skip_intermediate_obs=skip_intermediate_obs)
    backends = [factory(per, seed + w, profile) for w in range(processes)]
    n = processes * per
    dim = int(np.prod(backends[0].action_space.shape))
    records = [EnvRecord() for _ in range(n)]

    latest: list[Any] = [None] * n  # each env's last observation read (terminal one once its episode ended)
    for w, backend in enumerate(backends):
        reset_obs, _ = backend.reset(list(range(per)))
        latest[w * per : (w + 1) * per] = reset_obs
    sits_next = np.zeros(n, dtype=bool)  # ended after a lead: sits the next chunk out
    choose_obs = list(latest)
    committed = np.zeros((n, d, dim), dtype=np.float32)
    chunk = policy(_stack(choose_obs), committed)

    for c in range(rounds):
        for g in range(n):
            records[g].policy_obs.append(choose_obs[g])
            records[g].committed.append(committed[g])
            records[g].actions.append(chunk[g])
        sat_out = sits_next.copy()
        sits_next[:] = False
        live = ~sat_out
        ended_at = np.full(n, -1)
        rewards = np.zeros((n, n_steps))
        terminated = np.zeros((n, n_steps), dtype=bool)
        truncated = np.zeros((n, n_steps), dtype=bool)
        applied = np.zeros((n, n_steps), dtype=bool)
        infos: list[dict] = [{} for _ in range(n)]
        next_chunk = None
        for t in range(n_steps):
            read = t == lead_at - 1 or not skip_intermediate_obs
            for w, backend in enumerate(backends):
                ids = [i for i in range(per) if live[w * per + i]]
                if not ids:
                    continue
                step_obs, r, te, tr, step_infos = backend.step(
                    chunk[[w * per + i for i in ids], t], ids, get_obs=read, render=read)
                for j, i in enumerate(ids):
                    g = w * per + i
                    rewards[g, t], terminated[g, t], truncated[g, t], applied[g, t] = r[j], te[j], tr[j], True
                    infos[g] = step_infos[j]
                    if read:
                        latest[g] = step_obs[j]
                ends = [i for j, i in enumerate(ids) if te[j] or tr[j]]
                if ends and not read:
                    for i, ob in zip(ends, backend.observe(ends, render=True)):
                        latest[w * per + i] = ob
                for i in ends:
                    live[w * per + i] = False
                    ended_at[w * per + i] = t
            if t == lead_at - 1:  # the lead
                ended_before = (ended_at >= 0) & ~sat_out
                for w, backend in enumerate(backends):
                    ids = [i for i in range(per) if ended_before[w * per + i] or sat_out[w * per + i]]
                    if not ids:
                        continue
                    reset_obs, reset_infos = backend.reset(ids)
                    for i, ob, info in zip(ids, reset_obs, reset_infos):
                        g = w * per + i
                        if ended_before[g]:
                            info = {**info, "final_observation": latest[g], "final_info": infos[g]}
                        infos[g] = dict(info)
                        latest[g] = ob
                for g in range(n):
                    records[g].lead_obs.append(latest[g])
                    records[g].sat_out.append(bool(sat_out[g]))
                    records[g].ended_before_lead.append(bool(ended_before[g]))
                if c + 1 < rounds:
                    mask = ~(ended_before | sat_out)
                    next_committed = (chunk[:, lead_at:] * mask[:, None, None]).astype(chunk.dtype)
                    next_obs = list(latest)
                    next_chunk = policy(_stack(next_obs), next_committed)
        for g in range(n):
            if ended_at[g] >= lead_at:
                infos[g] = {"final_observation": latest[g], "final_info": infos[g]}
                sits_next[g] = True
            rec = records[g]
            rec.rewards.append(rewards[g])
            rec.terminated.append(terminated[g])
            rec.truncated.append(truncated[g])
            rec.applied.append(applied[g])
            rec.infos.append(infos[g])
        if next_chunk is not None:
            chunk, committed, choose_obs = next_chunk, next_committed, next_obs
    for backend in backends:
        backend.close()
    return {g: rec.stacked() for g, rec in enumerate(records)}


def _stack(obs: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in obs]) for k in obs[0]}


class CallLogBackend:
    """A backend that passes every call on to ``inner`` and logs it: ``(method, env_indices, actions,
    get_obs, render)`` with array copies, so two runs' backend calls can be compared."""

    def __init__(self, inner: Any, log: list):
        self.inner = inner
        self.log = log
        self.num_envs = inner.num_envs
        self.action_space = inner.action_space
        self.observation_space = inner.observation_space

    @property
    def sim_time(self) -> float:
        return self.inner.sim_time

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        self.log.append(("step", _ids(env_indices), np.array(actions), get_obs, render))
        return self.inner.step(actions, env_indices, get_obs=get_obs, render=render)

    def reset(self, env_indices=None, get_obs=True):
        self.log.append(("reset", _ids(env_indices), None, get_obs, None))
        return self.inner.reset(env_indices, get_obs=get_obs)

    def observe(self, env_indices=None, render=True):
        self.log.append(("observe", _ids(env_indices), None, None, render))
        return self.inner.observe(env_indices, render=render)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class CallLogFactory:
    """Builds ``inner``'s backend wrapped in a :class:`CallLogBackend`; the logs of the backends built in
    this process are in :data:`CALL_LOGS` (one list per build, in build order)."""

    inner: Any

    def __call__(self, num_envs: int, seed: int, profile: Any) -> CallLogBackend:
        log: list = []
        CALL_LOGS.append(log)
        return CallLogBackend(self.inner(num_envs, seed, profile), log)


#: Call logs of the :class:`CallLogFactory` backends built in this process.
CALL_LOGS: list[list] = []


def _ids(env_indices: Any) -> tuple[int, ...] | None:
    return None if env_indices is None else tuple(int(i) for i in env_indices)
