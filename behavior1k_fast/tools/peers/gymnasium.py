"""The gymnasium peers: ``AsyncVectorEnv`` stepping the same envs the way a competent user writes it.

A peer sub-env (:class:`ChunkGymEnv`) holds E envs of one simulator process (one backend of E envs, built
with the profile the engine's rows use) and its ``step`` takes a whole chunk ``[E, N, action_dim]``, with
the observation at the chunk's end only (:func:`~behavior1k_fast.rollout.chunk.step_chunk`, the same chunk
loop the engine's workers run; envs whose episode ends inside the chunk are reset at its boundary). E = 1 is
gymnasium's usual one env per process. :func:`run_peer` drives ``buffers`` such ``AsyncVectorEnv`` s:

- ``buffers=1``: one ``AsyncVectorEnv`` of P sub-envs: the policy runs on all envs, then all step;
- ``buffers=2``: two ``AsyncVectorEnv`` s of P / 2 sub-envs each, alternated (a double buffer): the policy
  runs for one half while the other half steps.

So a peer runs at any P x E the engine runs (the double buffer at even P), on the same policy and envs. The
stock-profile peer (every modality rendered on every step) is the same runner with ``RolloutProfile.stock``.

The user-level lookahead (:func:`run_lookahead_peer`) is what a user writes over one ``AsyncVectorEnv`` to
pipeline in time: each sub-env (:class:`LeadChunkGymEnv`) takes a chunk in two ``step`` calls, the first
returning the observation after step N - d, the second running the last d actions while the driver computes
the next chunk from that observation and the d committed actions (the engine's ``lookahead`` schedule without
its protocol: two round trips per chunk, and the next chunk starts only when it is sent).
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gymnasium
import numpy as np
from gymnasium import spaces

from ...core.contract import patch_set_of
from ...rollout.bootstrap import bootstrap_process
from ...rollout.chunk import ChunkResult, ChunkRun, check_chunk_actions, stack_obs, step_chunk
from ...rollout.policy import COMMITTED_KEY
from ..measure.record import RowMeasure
from ..measure.runs import usage_fields


def batched_space(space: Any, envs: int) -> Any:
    """``space`` of one env, repeated over a leading axis of ``envs`` (a ``Box`` or a ``Dict`` of them)."""
    if isinstance(space, spaces.Dict):
        return spaces.Dict({k: batched_space(s, envs) for k, s in space.spaces.items()})
    shape = (envs, *space.shape)
    return spaces.Box(np.broadcast_to(space.low, shape), np.broadcast_to(space.high, shape), dtype=space.dtype)


class ChunkGymEnv(gymnasium.Env):
    """A ``gymnasium.Env`` over one backend of ``envs`` envs whose step is one chunk (module docs).

    ``observation_space`` / ``action_space`` are one env's (``single_spaces``, read once by the caller): in
    the process that owns the ``AsyncVectorEnv`` (which builds one env to read the spaces) no backend is
    built and nothing is applied; in a worker process the profile is applied first, as in an engine worker.
    ``step`` returns the chunk's summed reward, never ends (episodes end and reset inside), and reports
    the wall seconds of the chunk stepping as ``info["env_wall_seconds"]`` and the actions its envs took (an env
    whose episode ended inside the chunk holds for the rest of it) as ``info["own_actions"]``; with
    ``record`` also what a trainer records of the chunk as ``info["chunk"]`` (:func:`chunk_info`).
    """

    def __init__(self, factory: Callable[..., Any], envs: int, seed: int, profile: Any, chunk_size: int,
                 single_spaces: tuple[Any, Any], record: bool = False) -> None:
        import multiprocessing

        obs_space, act_space = single_spaces
        self.observation_space = batched_space(obs_space, envs)
        self.action_space = spaces.Box(-np.inf, np.inf, (envs, chunk_size, *act_space.shape), dtype=np.float64)
        self.skip_intermediate_obs = profile.skip_intermediate_obs
        self.record = record
        self.backend = None
        if multiprocessing.parent_process() is not None:
            bootstrap_process(profile, patch_set=patch_set_of(factory))
            self.backend = factory(envs, seed, profile)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, _ = self.backend.reset()
        keys = list(self.observation_space.spaces)
        return {k: np.stack([o[k] for o in obs]) for k in keys}, {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        result = step_chunk(self.backend, np.asarray(action, dtype=np.float64),
                            skip_intermediate_obs=self.skip_intermediate_obs)
        info = {"env_wall_seconds": float(result.env_wall_seconds[0]), "own_actions": int(result.applied.sum())}
        if self.record:
            info["chunk"] = chunk_info(result, list(self.observation_space.spaces))
        return result.obs, float(result.rewards.sum()), False, False, info

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()


def chunk_info(result: ChunkResult, keys: list[str]) -> dict[str, Any]:
    """What a trainer records of one chunk of E envs (:class:`~behavior1k_fast.rollout.trajectory.Trajectory`'s
    fields), as arrays ``AsyncVectorEnv`` stacks: the per-step ``rewards``, ``terminated``, ``truncated`` and
    ``applied`` ``[E, N]``; per env whose episode ended in the chunk its final observation (``ended_obs``: key
    -> ``[E, *shape]``, zeros for the other envs) and its final step's ``"success"`` (``ended_success``
    ``[E]``, False where the info has none)."""
    ended = result.episode_ended
    final = {k: np.zeros_like(result.obs[k]) for k in keys}
    success = np.zeros(len(ended), dtype=bool)
    for row in np.flatnonzero(ended):
        info = result.infos[row]
        for k in keys:
            final[k][row] = info["final_observation"][k]
        success[row] = bool(info["final_info"].get("success", False))
    return {"rewards": result.rewards, "terminated": result.terminated, "truncated": result.truncated,
            "applied": result.applied, "ended_obs": final, "ended_success": success}


def recorded_chunk(info: dict, env_ids: np.ndarray, obs: dict, sent: tuple[dict, np.ndarray, dict]) -> ChunkResult:
    """One chunk of a buffer's sub-envs as the engine records it: ``info["chunk"]`` (:func:`chunk_info`, stacked
    over the buffer's sub-envs by ``AsyncVectorEnv``; its ``_key`` masks are not read) for the envs ``env_ids``
    (in order), their boundary observations ``obs`` (key -> ``[envs, ...]``) and ``sent``: the observations the
    chunk was chosen from, the chunk and the policy's extras."""
    chunk = info["chunk"]
    flat = {name: np.asarray(chunk[name]).reshape(len(env_ids), -1) for name in ("rewards", "terminated",
                                                                                  "truncated", "applied")}
    ended = flat["terminated"].any(axis=1) | flat["truncated"].any(axis=1)
    final = {k: chunk["ended_obs"][k].reshape(len(env_ids), *chunk["ended_obs"][k].shape[2:]) for k in obs}
    success = np.asarray(chunk["ended_success"]).reshape(-1)
    infos = [{"final_observation": {k: v[row] for k, v in final.items()}, "final_info": {"success": success[row]}}
             if ended[row] else {} for row in range(len(env_ids))]
    policy_obs, actions, extras = sent
    return ChunkResult(env_ids=env_ids, obs=obs, infos=infos, policy_obs=policy_obs, actions=actions,
                       extras=extras, **flat)


class LeadChunkGymEnv(ChunkGymEnv):
    """A peer sub-env of the user-level lookahead (module docs): ``step`` alternates between a chunk's two
    parts around its lead d. The first takes the whole chunk, runs its first N - d actions
    (:meth:`~behavior1k_fast.rollout.chunk.ChunkRun.to_lead`) and returns the lead observation; the second
    (its action is not read) runs the d remaining ones and returns the same observation. An env whose
    episode ended after the lead sits the next chunk out, as in the engine."""

    def __init__(self, factory: Callable[..., Any], envs: int, seed: int, profile: Any, chunk_size: int,
                 single_spaces: tuple[Any, Any], lead_steps: int) -> None:
        super().__init__(factory, envs, seed, profile, chunk_size, single_spaces)
        self.lead_steps = lead_steps
        self.run: ChunkRun | None = None
        self.sit_out: np.ndarray | None = None
        self.obs: dict | None = None

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        keys = list(self.observation_space.spaces)
        if self.run is None:
            idx = np.arange(self.backend.num_envs)
            actions = check_chunk_actions(np.asarray(action, dtype=np.float64), len(idx),
                                          int(np.prod(self.backend.action_space.shape)))
            self.run = ChunkRun(self.backend, actions, idx, lead_steps=self.lead_steps, sit_out=self.sit_out,
                                skip_intermediate_obs=self.skip_intermediate_obs)
            obs, _ = self.run.to_lead()
            self.obs = stack_obs(obs, keys)
            return self.obs, 0.0, False, False, {"env_wall_seconds": 0.0, "own_actions": 0}
        run, self.run = self.run, None
        result = run.finish()
        self.sit_out = run.ended_after_lead
        info = {"env_wall_seconds": float(result.env_wall_seconds[0]), "own_actions": int(result.applied.sum())}
        return self.obs, float(result.rewards.sum()), False, False, info


class _Alternation:
    """``buffers`` ``AsyncVectorEnv`` s of ``per_buffer`` peer sub-envs each, stepped in turn: buffer b's
    forward and send while the others step. Counts the forward seconds, each worker's env seconds and the
    actions taken in timed rounds. ``policy`` returns the chunk, or ``(chunk, extras)``; ``on_chunk``, where
    given, gets each chunk received as the engine records it (:func:`recorded_chunk`: the sub-envs must
    ``record``)."""

    def __init__(self, venvs: list, policy: Callable[[dict], Any], per_buffer: int,
                 envs_per_process: int, on_chunk: Callable[[ChunkResult], None] | None = None) -> None:
        self.venvs, self.policy, self.on_chunk = venvs, policy, on_chunk
        self.per_buffer, self.envs_per_process = per_buffer, envs_per_process
        self.obs = [venv.reset()[0] for venv in venvs]
        self.model_s: list[float] = []
        self.env_s = np.zeros(self.per_buffer * len(venvs))
        self.own_actions = 0
        self.sent: list[tuple | None] = [None] * len(venvs)

    def flat_obs(self, b: int) -> dict[str, np.ndarray]:
        """Buffer ``b``'s latest boundary observations, key -> ``[per_buffer * envs_per_process, ...]`` (its
        envs in order)."""
        return {k: v.reshape(-1, *v.shape[2:]) for k, v in self.obs[b].items()}

    def _forward_and_send(self, b: int) -> None:
        flat = self.flat_obs(b)
        start = time.perf_counter()
        out = self.policy(flat)
        self.model_s.append(time.perf_counter() - start)
        actions, extras = out if isinstance(out, tuple) else (out, {})
        self.sent[b] = (flat, actions, extras)
        self.venvs[b].step_async(actions.reshape(self.per_buffer, self.envs_per_process, *actions.shape[1:]))

    def _receive(self, b: int, timed: bool) -> None:
        self.obs[b], _, _, _, info = self.venvs[b].step_wait()
        if self.on_chunk is not None:
            envs = self.per_buffer * self.envs_per_process
            self.on_chunk(recorded_chunk(info, np.arange(b * envs, (b + 1) * envs), self.flat_obs(b), self.sent[b]))
        if timed:
            self.env_s[b * self.per_buffer:(b + 1) * self.per_buffer] += info["env_wall_seconds"]
            self.own_actions += int(np.sum(info["own_actions"]))

    def rollout(self, rounds: int, timed: bool) -> None:
        """``rounds`` chunks per env, every buffer's next forward sent as soon as its last chunk is back."""
        if not rounds:
            return
        for r in range(rounds):
            for b in range(len(self.venvs)):
                if r:
                    self._receive(b, timed)
                self._forward_and_send(b)
        for b in range(len(self.venvs)):
            self._receive(b, timed)


@contextlib.contextmanager
def alternation(factory: Callable[..., Any], profile: Any, policy: Callable[[dict], Any], single_spaces: tuple,
                processes: int, envs_per_process: int, buffers: int, seed: int = 0,
                on_chunk: Callable[[ChunkResult], None] | None = None) -> Iterator[_Alternation]:
    """Inside: ``processes`` peer sub-envs of ``envs_per_process`` envs split into ``buffers`` alternated
    ``AsyncVectorEnv`` s (module docs), reset and ready to step; closed on the way out. Sub-env i (in buffer
    order) is seeded ``seed + i``, as engine worker i. ``on_chunk``: each chunk as the engine records it
    (:class:`_Alternation`; the sub-envs then record)."""
    from gymnasium.vector import AsyncVectorEnv

    if buffers not in (1, 2) or processes % buffers:
        raise ValueError(f"buffers={buffers} must be 1 or 2 and divide processes={processes}")
    per_buffer = processes // buffers
    venvs = []
    try:
        for b in range(buffers):
            fns = [functools.partial(ChunkGymEnv, factory, envs_per_process, seed + b * per_buffer + i, profile,
                                     profile.chunk_size, single_spaces, on_chunk is not None)
                   for i in range(per_buffer)]
            venvs.append(AsyncVectorEnv(fns, shared_memory=True, context="spawn"))
        yield _Alternation(venvs, policy, per_buffer, envs_per_process, on_chunk)
    finally:
        for venv in venvs:
            venv.close()


def run_peer(factory: Callable[..., Any], profile: Any, policy: Callable[[dict], np.ndarray], single_spaces: tuple,
             processes: int, envs_per_process: int, buffers: int, rounds: int, warmup: int = 1, seed: int = 0,
             monitor: Any = None) -> dict[str, Any]:
    """Step ``rounds`` timed chunks per env (after ``warmup`` untimed ones) in ``processes`` peer sub-envs of
    ``envs_per_process`` envs, split into ``buffers`` alternated ``AsyncVectorEnv`` s (:func:`alternation`).

    Returns wall seconds of the timed rounds, the seconds of each forward, each worker's summed env seconds
    over the timed chunks, the actions the envs took, the worker pids and ``monitor``'s usage (a
    :class:`~..measure.resources.ResourceMonitor` spanning the timed rounds).
    """
    with alternation(factory, profile, policy, single_spaces, processes, envs_per_process, buffers, seed) as steps:
        return _timed(steps, rounds, warmup, monitor, [p.pid for venv in steps.venvs for p in venv.processes])


class DoubleBufferBatches:
    """The double buffer (two alternated ``AsyncVectorEnv`` s over ``profile``'s P x E envs, :func:`alternation`)
    as a trainer's batch source (:func:`~behavior1k_fast.tools.train.learner.fit`): ``batches`` batches of
    ``rounds`` chunks per env, each a :class:`~behavior1k_fast.rollout.trajectory.Trajectory` as the engine
    records it (the extras: the behaviour policy's ``logprob`` and ``value`` and the weights version that
    chose the chunk). ``behaviour`` (a module returning ``(chunk, extras)``) acts; the trainer's weights reach
    it through :meth:`post` (``load_weights(behaviour, weights)``). The envs start at the first batch (the
    start is in the trainer's first wait); :meth:`close` (or leaving the ``with`` block) stops them.

    - ``on_thread=False``: the serial double buffer: a batch is collected when the trainer asks for it, and the
      update runs between two batches (every chunk chosen by the current weights, lag 0);
    - ``on_thread=True``: collect-while-train as a user writes it: :meth:`update` runs the PPO update on a
      ``ThreadPoolExecutor(1)`` while this thread collects the next batch with the weights it has (one update
      old), then waits for the update; the trainer posts the weights once both finished (lag 1). Its
      ``update_s`` is then the wall of the update and the next collection together, and its wait is the hand
      over of the batch collected meanwhile.
    """

    def __init__(self, factory: Callable[..., Any], profile: Any, behaviour: Any, single_spaces: tuple,
                 rounds: int, batches: int, seed: int, load_weights: Callable[[Any, Any], None],
                 on_thread: bool = False) -> None:
        self.factory, self.profile, self.behaviour, self.spaces = factory, profile, behaviour, single_spaces
        self.rounds, self.left, self.seed, self.load_weights = rounds, batches, seed, load_weights
        self.on_thread = on_thread
        self.stack = contextlib.ExitStack()
        self.steps: _Alternation | None = None
        self.pool: Any = None
        envs = profile.num_env_processes * profile.envs_per_process
        self.returns, self.lengths = np.zeros(envs), np.zeros(envs, dtype=np.int64)
        self.recording: Any = None
        self.version = self.acting = 0  # weights posted by the trainer; loaded into the behaviour policy
        self.ready: tuple[Any, Any] | None = None  # (batch, measure) collected while the update ran
        self.last: Any = None

    def __enter__(self) -> "DoubleBufferBatches":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.stack.close()

    def __iter__(self) -> Iterator[Any]:
        while self.left:
            if self.ready is None:
                self.ready = self._collect()
            batch, self.last = self.ready
            self.ready = None
            self.left -= 1
            yield batch

    def _act(self, obs: dict) -> tuple[np.ndarray, dict]:
        import torch

        from ...rollout.collector import WEIGHTS_VERSION_KEY

        chunk, extras = self.behaviour(obs)
        n = len(chunk)
        return chunk.numpy().astype(np.float64), {
            **{k: torch.as_tensor(v).numpy() for k, v in extras.items()},
            WEIGHTS_VERSION_KEY: np.full(n, self.acting, dtype=np.int64)}

    def _collect(self) -> tuple[Any, Any]:
        from ...rollout.trajectory import TrajectoryBatch
        from ..train.learner import BatchMeasure

        if self.steps is None:
            p = self.profile
            self.steps = self.stack.enter_context(alternation(
                self.factory, p, self._act, self.spaces, p.num_env_processes, p.envs_per_process, 2, self.seed,
                on_chunk=lambda chunk: self.recording.add(0, chunk)))
        steps = self.steps
        self.recording = TrajectoryBatch(self.spaces[0], len(self.returns), self.profile.chunk_size, self.rounds,
                                         self.returns, self.lengths)
        env_s, actions, forwards = steps.env_s.copy(), steps.own_actions, len(steps.model_s)
        start = time.perf_counter()
        steps.rollout(self.rounds, timed=True)
        collect_s = time.perf_counter() - start

        def last_obs(out: dict) -> None:
            for b in range(len(steps.venvs)):
                envs = steps.per_buffer * steps.envs_per_process
                for k, v in steps.flat_obs(b).items():
                    out[k][b * envs:(b + 1) * envs] = v

        batch = self.recording.finish(last_obs)
        return batch, BatchMeasure(steps.own_actions - actions, collect_s, float(np.max(steps.env_s - env_s)),
                                   float(np.sum(steps.model_s[forwards:])), float("nan"))

    def measure(self, batch: Any) -> Any:
        """The :class:`~behavior1k_fast.tools.train.learner.BatchMeasure` of the batch just handed out, its lag
        behind the weights the trainer is about to update."""
        from dataclasses import replace

        from ...rollout.collector import WEIGHTS_VERSION_KEY

        return replace(self.last, policy_lag=float(np.mean(self.version - batch.extras[WEIGHTS_VERSION_KEY])))

    def update(self, run: Callable[[], Any]) -> Any:
        """``run()`` (the PPO update); on a thread, with the next batch collected meanwhile (class docs)."""
        if not self.on_thread or self.left == 0:
            return run()
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(1, thread_name_prefix="ppo-update")
            self.stack.callback(self.pool.shutdown)
        future = self.pool.submit(run)
        try:
            self.ready = self._collect()
        finally:
            result = future.result()
        return result

    def post(self, weights: Any) -> None:
        """The trainer's weights into the behaviour policy (after the update and any collection finished)."""
        self.load_weights(self.behaviour, weights)
        self.version += 1
        self.acting = self.version


def _timed(steps: Any, rounds: int, warmup: int, monitor: Any, pids: list[int]) -> dict[str, Any]:
    """``warmup`` untimed then ``rounds`` timed rounds of a peer's driver loop (``steps``), and what
    :func:`run_peer` returns of them."""
    steps.rollout(warmup, timed=False)
    steps.model_s.clear()
    if monitor is not None:
        monitor.start()
    start = time.perf_counter()
    steps.rollout(rounds, timed=True)
    wall_s = time.perf_counter() - start
    usage = monitor.stop() if monitor is not None else None
    return {"wall_s": wall_s, "model_s": steps.model_s, "env_s_per_worker": steps.env_s.tolist(),
            "own_actions": steps.own_actions, "usage": usage, "worker_pids": pids}


class _LeadSteps:
    """The user-level lookahead's driver loop over one ``AsyncVectorEnv`` of :class:`LeadChunkGymEnv` s: per
    chunk, wait for the lead observations, start the last d steps, run the forward on the lead observations
    and the committed actions, wait for the chunk's end, send the next chunk. Counts as :class:`_Alternation`."""

    def __init__(self, venv: Any, policy: Callable[[dict], np.ndarray], processes: int, envs_per_process: int,
                 lead_steps: int) -> None:
        self.venv, self.policy, self.lead_steps = venv, policy, lead_steps
        self.processes, self.envs_per_process = processes, envs_per_process
        self.model_s: list[float] = []
        self.env_s = np.zeros(processes)
        self.own_actions = 0
        obs = venv.reset()[0]
        self.chunk = self._forward(obs, None)
        venv.step_async(self.chunk)

    def _forward(self, obs: dict, chunk: np.ndarray | None) -> np.ndarray:
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items()}
        rows = self.processes * self.envs_per_process
        if chunk is None:
            committed = np.zeros((rows, self.lead_steps, self.venv.single_action_space.shape[-1]), np.float32)
        else:
            committed = chunk.reshape(rows, *chunk.shape[2:])[:, chunk.shape[2] - self.lead_steps:]
        start = time.perf_counter()
        actions = self.policy({**flat, COMMITTED_KEY: committed.astype(np.float32)})
        self.model_s.append(time.perf_counter() - start)
        return actions.reshape(self.processes, self.envs_per_process, *actions.shape[1:])

    def rollout(self, rounds: int, timed: bool) -> None:
        """``rounds`` chunks per env; the first chunk of the next call is in flight when this one returns."""
        for _ in range(rounds):
            lead_obs = self.venv.step_wait()[0]
            self.venv.step_async(self.chunk)  # the chunk's last d steps
            next_chunk = self._forward(lead_obs, self.chunk)
            _, _, _, _, info = self.venv.step_wait()
            if timed:
                self.env_s += info["env_wall_seconds"]
                self.own_actions += int(np.sum(info["own_actions"]))
            self.chunk = next_chunk
            self.venv.step_async(self.chunk)


def run_lookahead_peer(factory: Callable[..., Any], profile: Any, policy: Callable[[dict], np.ndarray],
                       single_spaces: tuple, processes: int, envs_per_process: int, lead_steps: int, rounds: int,
                       warmup: int = 1, seed: int = 0, monitor: Any = None) -> dict[str, Any]:
    """The user-level lookahead (module docs) with lead ``lead_steps``: ``rounds`` timed chunks per env after
    ``warmup`` untimed ones in ``processes`` sub-envs of ``envs_per_process`` envs; returns what
    :func:`run_peer` returns."""
    from gymnasium.vector import AsyncVectorEnv

    fns = [functools.partial(LeadChunkGymEnv, factory, envs_per_process, seed + i, profile, profile.chunk_size,
                             single_spaces, lead_steps) for i in range(processes)]
    venv = AsyncVectorEnv(fns, shared_memory=True, context="spawn")
    try:
        steps = _LeadSteps(venv, policy, processes, envs_per_process, lead_steps)
        result = _timed(steps, rounds, warmup, monitor, [p.pid for p in venv.processes])
        venv.step_wait()  # the chunk sent last
        return result
    finally:
        venv.close()


@dataclass(frozen=True)
class Peer:
    """One peer row: P sub-envs of E envs each in ``buffers`` alternated ``AsyncVectorEnv`` s, on ``profile``.
    ``fair``: the same env profile as the engine's rows (the stock-profile peer is not)."""

    name: str
    label: str
    profile: Any
    processes: int
    envs_per_process: int
    buffers: int
    fair: bool = True
    #: The user-level lookahead's lead d (:func:`run_lookahead_peer`); ``None``: chunk steps.
    lead_steps: int | None = None


def run_peer_row(factory: Callable[..., Any], peer: Peer, policy: Callable, single_spaces: tuple,
                 config: Any) -> RowMeasure:
    """Run ``peer`` (``config.rounds`` timed rounds after ``config.warmup``) and measure it like an engine row:
    T_env is the busiest sub-env's chunk stepping wall time per chunk, T_model the median forward; the
    pipeline model sees the double buffer as K = 2 stages of one chunk per worker per round."""
    from ..measure.resources import ResourceMonitor

    if peer.lead_steps is None:
        raw = run_peer(factory, peer.profile, policy, single_spaces, peer.processes, peer.envs_per_process,
                       peer.buffers, config.rounds, warmup=config.warmup, seed=config.seed, monitor=ResourceMonitor())
    else:
        raw = run_lookahead_peer(factory, peer.profile, policy, single_spaces, peer.processes,
                                 peer.envs_per_process, peer.lead_steps, config.rounds, warmup=config.warmup,
                                 seed=config.seed, monitor=ResourceMonitor())
    total = peer.processes * peer.envs_per_process
    return RowMeasure(
        name=peer.name, label=f"{peer.label} (peer)", processes=peer.processes,
        envs_per_process=peer.envs_per_process, pipeline_stages=peer.buffers, stages_sharing_physics=1,
        chunk_size=peer.profile.chunk_size, rounds=config.rounds, own_actions=raw["own_actions"],
        wall_s=raw["wall_s"], model_s=float(np.sum(raw["model_s"])),
        t_model_ms=float(np.median(raw["model_s"])) * 1e3,
        t_env_ms=max(raw["env_s_per_worker"]) * 1e3 / config.rounds,
        t_env_source="busiest peer sub-env's wall time per chunk (ChunkGymEnv.step)",
        partition=("user-level lookahead" if peer.lead_steps is not None
                   else "double buffer" if peer.buffers == 2 else "AsyncVectorEnv"),
        overlap=peer.buffers == 2 or bool(peer.lead_steps), lookahead_steps=peer.lead_steps or 0,
        profile=peer.profile.to_dict(), **usage_fields(raw["usage"], raw["worker_pids"], total),
    )
