"""Trajectories a trainer can consume: one batch per rollout, ``[rounds, envs, ...]``, with the policy's extras.

:class:`TrajectoryRecorder` runs :meth:`~.engine.RolloutEngine.rollout` and gathers every collected chunk
(:class:`~.chunk.ChunkResult`) into a :class:`Trajectory`. Axes: ``R`` rounds of the rollout, ``E`` envs in
global id order (row ``e`` is env ``e`` whatever its stage), ``N`` steps per chunk.

- ``obs``: key -> ``[R, E, *shape]``: the boundary observation each env's policy forward saw in round r;
  ``last_obs``: key -> ``[E, *shape]``: the boundary observations after the last round (what the next
  rollout's first forward sees; the bootstrap value of a trainer).
- ``actions`` ``[R, E, N, action_dim]``: the chunk sent, in the engine's ``action_dtype`` (what the backend
  got, whatever the policy did with its output buffer later; after an episode ended inside a chunk its
  remaining actions were not applied, see ``applied``).
- ``extras``: key -> ``[R, E, ...]``: what the policy returned with those actions (``logprob``, ``value``).
- ``committed`` ``[R, E, d, action_dim]`` (``lookahead`` schedule; ``None`` otherwise): the committed
  actions the policy was given with ``obs`` (:data:`~.policy.COMMITTED_KEY`). Under ``lookahead``, ``obs[r]``
  is the lead observation chunk r was chosen from, and ``rewards[r]`` are those of chunk r itself, so an
  on-policy learner trains on exactly what the policy saw.
- ``rewards`` float64, ``terminated``, ``truncated``, ``applied`` bool, each ``[R, E, N]``: per step;
  ``rewards`` is 0 where ``applied`` is False. An env whose episode ended at step t of round r (with
  auto-reset) starts its next episode at round r + 1 from ``obs[r + 1, e]``.
- ``episodes`` (:class:`Episodes`): one row per episode that ended in this batch, in the order its chunk was
  collected:
  env, round, step, return (summed applied rewards over the whole episode, rounds of earlier rollouts of
  the same recorder included), length (own actions), success (from the backend's final step info; ``None``
  when the backend's info has no ``"success"``), terminated / truncated, and its final observation.

Memory per round, in bytes: ``E * (obs_bytes + N * action_dim * action_itemsize + extras_bytes + 11 * N)``
(``obs_bytes``, ``extras_bytes``: one env's observation and extras; 11 = float64 reward + three bools per
step; under ``lookahead`` plus ``d * action_dim * action_itemsize`` of committed actions), plus
``obs_bytes + 44`` per episode that ends (43 without ``success``), and ``E * obs_bytes`` once
per batch (``last_obs``).
:attr:`Trajectory.nbytes` gives the total of a batch.

Output: numpy arrays by default; ``tensors=True`` gives torch CPU tensors (allocated once per batch and
written in place, no second copy), ``pin_memory=True`` in page-locked memory for fast, asynchronous
host-to-GPU copies (needs a CUDA device). Every batch is freshly allocated, so a batch handed out is never
overwritten by the next rollout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ..core.checks import check_bool, check_positive_int
from .chunk import ChunkResult
from .engine import RolloutEngine
from .policy import COMMITTED_KEY

#: Per-step arrays of a batch ``[R, E, N]`` and their dtypes.
STEP_FIELDS = {"rewards": np.float64, "terminated": np.bool_, "truncated": np.bool_, "applied": np.bool_}


@dataclass
class Episodes:
    """The episodes that ended in one batch, one row each (``M`` rows, in the order their chunks were
    collected)."""

    #: int64 [M]: global env id.
    env: Any
    #: int64 [M]: round of the batch in which the episode ended.
    round: Any
    #: int64 [M]: step of that round's chunk at which it ended (its last applied action).
    step: Any
    #: float64 [M]: summed rewards of the episode's applied steps.
    returns: Any
    #: int64 [M]: own actions the env applied in the episode.
    lengths: Any
    #: bool [M]: the ``"success"`` of the episode's last step info; ``None`` where the backend reports none.
    success: Any
    #: bool [M]: the episode terminated / was truncated (time limit, or a respawned worker).
    terminated: Any
    truncated: Any
    #: bool [M]: a respawned worker cut the episode (``restart_workers=True``); its final observation is
    #: then the fresh reset one (the terminal state was lost with the worker).
    worker_restarted: Any
    #: key -> [M, *shape]: the observation at the episode's last step (before any auto-reset).
    final_obs: dict


@dataclass
class Trajectory:
    """One recorded rollout (see module docs for every field's layout)."""

    obs: dict
    last_obs: dict
    actions: Any
    extras: dict
    rewards: Any
    terminated: Any
    truncated: Any
    applied: Any
    episodes: Episodes
    #: ``[R, E, d, action_dim]`` under the ``lookahead`` schedule, else ``None`` (module docs).
    committed: Any = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the batch's arrays (or tensors)."""
        return sum(_nbytes(v) for v in _leaves(self))


def _leaves(obj: Any) -> list:
    if isinstance(obj, (Trajectory, Episodes)):
        return [leaf for f in fields(obj) for leaf in _leaves(getattr(obj, f.name))]
    if isinstance(obj, Mapping):
        return [leaf for v in obj.values() for leaf in _leaves(v)]
    return [] if obj is None else [obj]


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    return value.element_size() * value.nelement()  # a torch tensor


def gather_boundary_obs(engine: Any, out: Mapping[str, np.ndarray]) -> None:
    """Write every env's latest boundary observation into ``out`` (key -> ``[num_envs, *shape]``, rows in
    global env id order), from the engine's per-stage batches."""
    for k in range(engine.pipeline_stages):
        ids = engine.plan.stage_envs(k)
        for key, value in engine.stage_obs(k).items():
            out[key][ids] = value


class _Allocator:
    """Empty arrays, or torch tensors (optionally pinned) with a numpy view to write into."""

    def __init__(self, tensors: bool, pin_memory: bool):
        self.tensors, self.pin_memory = tensors, pin_memory
        if tensors:
            import torch

            self._torch = torch
            if pin_memory and not torch.cuda.is_available():
                raise ValueError("pin_memory=True needs a CUDA device, and torch.cuda.is_available() is False")

    def empty(self, shape: tuple[int, ...], dtype: Any) -> tuple[Any, np.ndarray]:
        """``(output, writable numpy view of it)``."""
        if not self.tensors:
            array = np.empty(shape, dtype)
            return array, array
        torch_dtype = self._torch.from_numpy(np.empty(0, dtype)).dtype
        tensor = self._torch.empty(shape, dtype=torch_dtype, pin_memory=self.pin_memory)
        return tensor, tensor.numpy()

    def wrap(self, array: np.ndarray) -> Any:
        """``array`` as the output type (a small array built at the end of a batch)."""
        if not self.tensors:
            return array
        tensor = self._torch.from_numpy(np.ascontiguousarray(array))
        return tensor.pin_memory() if self.pin_memory else tensor


class TrajectoryRecorder:
    """Records rollouts of ``engine`` into :class:`Trajectory` batches (module docs: layout, memory).

    ``stats, batch = recorder.rollout(policy, num_rounds, reset=False)`` once per training iteration:
    episodes continue across calls, and their returns and lengths are counted from their first step
    whichever rollout it was in. A recorder object, rather than a flag of ``engine.rollout``, because
    those running episode sums outlive one rollout, and the output kind (numpy, torch, pinned) is the
    trainer's choice, not the engine's; the engine only keeps each chunk's inputs with its result.

    The engine must not be reset or stepped outside the recorder between two of its rollouts with
    ``reset=False`` (the running sums would no longer match the envs); that is detected and raises
    ``RuntimeError``; :meth:`reset_episodes` starts the sums afresh. With ``restart_workers=True``, a
    respawned worker's envs whose chunk was in flight end their episodes truncated (``worker_restarted``);
    its other envs are reset without a chunk saying so, and their next episode's sums start with the
    cut one's (the engine reports no per-env reset outside a chunk).
    """

    def __init__(self, engine: Any, *, tensors: bool = False, pin_memory: bool = False):
        if not isinstance(engine, RolloutEngine):
            raise TypeError(f"engine must be a RolloutEngine, got {engine!r}")
        check_bool("tensors", tensors)
        check_bool("pin_memory", pin_memory)
        if pin_memory and not tensors:
            raise ValueError("pin_memory=True needs tensors=True (numpy arrays cannot be pinned)")
        self.engine = engine
        #: Allocates each batch's arrays (numpy, torch, pinned).
        self.alloc = _Allocator(tensors, pin_memory)
        #: float [num_envs], int [num_envs]: the running episode's summed rewards and own actions, per env.
        self.returns = np.zeros(engine.num_envs)
        self.lengths = np.zeros(engine.num_envs, dtype=np.int64)
        #: Per stage, the engine's boundary observations after the last recorded rollout (outside resets and
        #: steps replace them).
        self._last_obs: list[Any] = [None] * engine.pipeline_stages
        #: Wall seconds this recorder has spent inside its rollouts' recording, over its life: writing each
        #: chunk into the batch with its episode bookkeeping, and building the batch at the end (what
        #: recording costs on top of ``engine.rollout``; ``benchmarks/recording_overhead.py``).
        self.recording_s = 0.0

    def reset_episodes(self) -> None:
        """Forget the running episode sums (after resetting the engine by hand)."""
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self._last_obs = [None] * self.engine.pipeline_stages

    def rollout(
        self,
        policy: Any,
        num_rounds: int,
        *,
        reset: bool = True,
        overlap: bool = True,
        on_chunk: Callable[[int, ChunkResult], None] | None = None,
    ) -> tuple[Any, Trajectory]:
        """``engine.rollout`` with the same arguments; returns its stats and the recorded batch."""
        num_rounds = check_positive_int("num_rounds", num_rounds)
        check_bool("reset", reset)
        if reset:
            self.reset_episodes()
        elif any(last is not None for last in self._last_obs):
            stale = [k for k, last in enumerate(self._last_obs) if self.engine.stage_obs(k) is not last]
            if stale:
                raise RuntimeError(
                    f"the engine's stages {stale} were reset or stepped outside this recorder since its last "
                    "rollout; pass reset=True or call reset_episodes() first"
                )
        batch = TrajectoryBatch(self.engine.observation_space, self.engine.num_envs, self.engine.chunk_size,
                                num_rounds, self.returns, self.lengths, self.alloc)

        def record(stage: int, result: ChunkResult) -> None:
            start = time.perf_counter()
            batch.add(stage, result)
            self.recording_s += time.perf_counter() - start
            if on_chunk is not None:
                on_chunk(stage, result)

        stats = self.engine.rollout(policy, num_rounds, reset=reset, overlap=overlap, on_chunk=record)
        self._last_obs = [self.engine.stage_obs(k) for k in range(self.engine.pipeline_stages)]
        start = time.perf_counter()
        trajectory = batch.finish(lambda out: gather_boundary_obs(self.engine, out))
        self.recording_s += time.perf_counter() - start
        return stats, trajectory


class _Ended(NamedTuple):
    """One row of :class:`Episodes`, as the chunk that ended the episode gives it."""

    env: int
    round: int
    step: int
    returns: float
    lengths: int
    success: Any
    terminated: bool
    truncated: bool
    worker_restarted: bool
    final_obs: dict


#: dtype of each numeric column of :class:`Episodes`.
_EPISODE_DTYPES = {"env": np.int64, "round": np.int64, "step": np.int64, "returns": np.float64,
                   "lengths": np.int64, "terminated": bool, "truncated": bool, "worker_restarted": bool}


class TrajectoryBatch:
    """The buffers of one batch of ``num_rounds`` rounds of ``num_envs`` envs (module docs), filled chunk by chunk
    (:meth:`add`) and handed out by :meth:`finish`. ``returns`` / ``lengths`` (float64 / int64 ``[num_envs]``)
    are the running episode sums, updated in place, which the caller carries from batch to batch; ``alloc``:
    numpy arrays where not given. A :class:`TrajectoryRecorder` fills one per rollout; a collector outside the
    engine (the time-to-train judge's gymnasium peers) fills one from the :class:`~.chunk.ChunkResult` s it
    builds, with ``env_ids``, ``policy_obs``, ``actions`` and ``extras`` set as the engine sets them."""

    def __init__(self, observation_space: Any, num_envs: int, chunk_size: int, num_rounds: int,
                 returns: np.ndarray, lengths: np.ndarray, alloc: "_Allocator | None" = None):
        self.returns, self.lengths = returns, lengths
        self.alloc = alloc or _Allocator(False, False)
        self.keys = observation_space.spaces
        self.shape = (num_rounds, num_envs)
        self.chunk_size = chunk_size
        self.out: dict[str, Any] = {}
        self.views: dict[str, np.ndarray] = {}
        for key, space in self.keys.items():
            self._allocate(f"obs/{key}", self.shape + tuple(space.shape), space.dtype)
            self._allocate(f"last_obs/{key}", self.shape[1:] + tuple(space.shape), space.dtype)
        for name, dtype in STEP_FIELDS.items():
            self._allocate(name, self.shape + (self.chunk_size,), dtype)
        #: Chunks recorded per env: an env's next chunk goes to this round (results may hold any subset of
        #: envs: a stage, or one slice of it).
        self.rounds_done = np.zeros(num_envs, dtype=np.int64)
        self.ended: list[_Ended] = []
        self.extras_keys: set[str] | None = None

    def _allocate(self, name: str, shape: tuple[int, ...], dtype: Any) -> None:
        self.out[name], self.views[name] = self.alloc.empty(shape, dtype)

    def add(self, stage: int, result: ChunkResult) -> None:
        """Write one collected chunk into the rows of its envs, each at its env's next round."""
        ids = result.env_ids
        r = self.rounds_done[ids]
        self.rounds_done[ids] += 1
        if self.extras_keys is None:  # dtypes and shapes of actions and extras: from the first chunk
            self.extras_keys = set(result.extras)
            self._allocate("actions", self.shape + result.actions.shape[1:], result.actions.dtype)
            for key, value in result.extras.items():
                self._allocate(f"extras/{key}", self.shape + value.shape[1:], value.dtype)
            if COMMITTED_KEY in result.policy_obs:
                committed = result.policy_obs[COMMITTED_KEY]
                self._allocate("committed", self.shape + committed.shape[1:], committed.dtype)
        elif set(result.extras) != self.extras_keys:
            raise ValueError(f"the policy's extras keys changed within a rollout: {sorted(self.extras_keys)} "
                             f"then {sorted(result.extras)} (stage {stage}, round {int(r.max())})")
        views = self.views
        for key, value in result.policy_obs.items():
            views["committed" if key == COMMITTED_KEY else f"obs/{key}"][r, ids] = value
        views["actions"][r, ids] = result.actions
        for key, value in result.extras.items():
            views[f"extras/{key}"][r, ids] = value
        for name in STEP_FIELDS:
            views[name][r, ids] = getattr(result, name)
        self._account(r, ids, result)

    def _account(self, r: np.ndarray, ids: np.ndarray, result: ChunkResult) -> None:
        """Running episode sums; a row for every episode that ended in this chunk."""
        recorder = self
        done = result.terminated | result.truncated
        # Rewards are 0 where masked, and no step after an episode's end is applied: whole-row sums.
        recorder.returns[ids] += result.rewards.sum(axis=1)
        recorder.lengths[ids] += result.applied.sum(axis=1)
        for row in np.flatnonzero(done.any(axis=1)):
            env, info = int(ids[row]), result.infos[row]
            final_info = info.get("final_info", info)
            final_obs = info.get("final_observation")
            if final_obs is None:  # no auto-reset: the boundary observation is the terminal one
                final_obs = {key: value[row] for key, value in result.obs.items()}
            step = int(np.argmax(done[row]))
            self.ended.append(_Ended(
                env, int(r[row]), step, recorder.returns[env], recorder.lengths[env], final_info.get("success"),
                bool(result.terminated[row, step]), bool(result.truncated[row, step]),
                bool(info.get("worker_restarted", False)), final_obs,
            ))
            recorder.returns[env] = 0.0
            recorder.lengths[env] = 0

    def finish(self, write_last_obs: Callable[[Mapping[str, np.ndarray]], None]) -> Trajectory:
        """The batch, once every env has ``num_rounds`` chunks; ``write_last_obs(out)`` writes every env's
        boundary observation after the last round into ``out`` (key -> ``[num_envs, *shape]``)."""
        if not (self.rounds_done == self.shape[0]).all():
            raise RuntimeError(f"incomplete batch: rounds recorded per env {self.rounds_done.tolist()}")
        keys = self.keys
        write_last_obs({key: self.views[f"last_obs/{key}"] for key in keys})
        ended, wrap = self.ended, self.alloc.wrap
        success = [e.success for e in ended]
        episodes = Episodes(
            **{name: wrap(np.array([getattr(e, name) for e in ended], dtype=dtype))
               for name, dtype in _EPISODE_DTYPES.items()},
            success=None if None in success else wrap(np.array(success, dtype=bool)),
            final_obs={
                key: wrap(np.stack([e.final_obs[key] for e in ended]) if ended
                          else np.empty((0, *space.shape), space.dtype))
                for key, space in keys.items()
            },
        )
        out = self.out
        return Trajectory(
            obs={key: out[f"obs/{key}"] for key in keys},
            last_obs={key: out[f"last_obs/{key}"] for key in keys},
            actions=out["actions"],
            extras={name.split("/", 1)[1]: value for name, value in out.items() if name.startswith("extras/")},
            rewards=out["rewards"],
            terminated=out["terminated"],
            truncated=out["truncated"],
            applied=out["applied"],
            episodes=episodes,
            committed=out.get("committed"),
        )
