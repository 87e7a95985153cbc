"""The engine as a ``gymnasium.vector.VectorEnv``: code written for gymnasium vector envs runs on it.

One :meth:`EngineVectorEnv.step` is one action chunk per env: ``actions`` ``[num_envs, N, action_dim]``
(``single_action_space`` is the backend's action box repeated over the N steps of a chunk), sent to every
stage of the engine and collected, so the hybrid pipeline and on-demand observation run underneath (the
policy's forward cannot overlap env stepping through this synchronous API: use
:meth:`~.engine.RolloutEngine.rollout` for that, and for a ``lookahead`` profile, which is refused here: a
step has no lead observation to return). ``actions`` are checked as :meth:`~.engine.RolloutEngine.submit`
checks them (a masked array is refused); a tensor is taken as a policy's output is (:mod:`.policy`: on the
CPU, ``bfloat16`` widened to ``float32``). Envs are in global id order; observations are dicts of
batched arrays (``observation_space`` is ``batch_space(single_observation_space, num_envs)``).

Per env and step: ``reward`` is the sum of the rewards of the actions it applied in the chunk (undiscounted);
``terminated`` / ``truncated``: its episode ended inside the chunk. ``info`` is gymnasium's dict of
batched values with ``_key`` masks (built by ``VectorEnv._add_info``, as ``SyncVectorEnv`` does) holding
each env's backend info, plus ``step_rewards`` and ``applied`` ``[num_envs, N]`` (the per-step detail). A
backend info key that gymnasium's own vector code writes (:data:`GYMNASIUM_INFO_KEYS`: ``episode``, the
statistics of ``RecordEpisodeStatistics``, and the autoreset keys) is reported as ``backend_<key>`` (the
reference simulator's reset info has an ``episode`` counter).

Autoreset, as gymnasium 1.x defines it (``autoreset_mode``, also in ``metadata["autoreset_mode"]``):

- ``AutoresetMode.NEXT_STEP`` (default, as gymnasium's own vector envs): the step in which an env's episode
  ends returns its terminal observation; the next step resets it: that step's actions of the env are
  ignored, and it returns the reset observation, reward 0, ``terminated`` and ``truncated`` False and an
  info with no backend keys (``step_rewards`` 0, ``applied`` False). Underneath, the env steps that chunk in
  its ended episode (the physics it shares with the other envs of its worker advances it anyway) and is
  reset right after it, so the state the next actions act on is the reset observation's. Wrappers that
  need ``NEXT_STEP`` (``NormalizeObservation``, ...) run on it.
- ``AutoresetMode.SAME_STEP``: an env whose episode ends inside a chunk is reset at the chunk boundary; the
  step returns its reset observation, and ``info["final_obs"]`` / ``info["final_info"]`` (masks
  ``_final_obs`` / ``_final_info``) hold its terminal observation and info.
- ``AutoresetMode.DISABLED``: reset ended envs with ``reset(options={"reset_mask": mask})`` before
  stepping again (stepping an ended env raises).

``reset(seed=s)`` rebuilds the engine with ``seed=s`` (worker w seeds its backend with ``s + w``): the backend
contract has no seeded reset, so this is how a seed makes the episodes reproducible; it costs an engine
start. ``reset()`` without a seed starts new episodes in the running engine. ``close()`` stops the engine;
after it, ``reset`` and ``step`` raise :class:`~.errors.ClosedError` (nothing starts a new engine).
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..core.checks import check_int
from ..core.contract import BackendFactory
from ..core.profile import RolloutProfile
from .chunk import check_chunk_actions
from .engine import RolloutEngine
from .errors import ClosedError
from .policy import to_numpy
from .trajectory import gather_boundary_obs

#: Keys of the engine's auto-reset info and their gymnasium 1.x names.
_FINAL_KEYS = {"final_observation": "final_obs", "final_info": "final_info"}
#: Info keys gymnasium's vector code writes itself; a backend info key among them gets a ``backend_`` prefix.
GYMNASIUM_INFO_KEYS = ("episode", "final_obs", "final_info")


def _backend_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` with the keys of :data:`GYMNASIUM_INFO_KEYS` renamed ``backend_<key>``."""
    return {f"backend_{k}" if k in GYMNASIUM_INFO_KEYS else k: v for k, v in info.items()}


class EngineVectorEnv(VectorEnv):
    """A :class:`RolloutEngine` of ``factory`` and ``profile`` behind the gymnasium vector API (module docs).

    ``autoreset_mode``: an ``AutoresetMode`` or its value (``"NextStep"``, ``"SameStep"``, ``"Disabled"``),
    as gymnasium's ``SyncVectorEnv`` takes it. ``seed`` and ``engine_kwargs`` (``executor``, ``timeout_s``,
    ...) go to the engine; the engine's ``auto_reset`` is not among them: it follows ``autoreset_mode`` (on
    for ``SAME_STEP`` only).
    """

    def __init__(
        self,
        factory: BackendFactory,
        profile: RolloutProfile | Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **engine_kwargs: Any,
    ):
        seed = check_int("seed", seed, low=0)
        schedule = RolloutProfile.coerce(profile).schedule
        if schedule == "lookahead":
            raise ValueError("EngineVectorEnv steps one whole chunk per step() and has no lead observation to "
                             "give: a profile with schedule='lookahead' runs through engine.rollout(policy, ...); "
                             "use schedule='barrier' or 'async' here")
        if "auto_reset" in engine_kwargs:
            raise TypeError(f"auto_reset={engine_kwargs['auto_reset']!r}: EngineVectorEnv resets as autoreset_mode "
                            "says (AutoresetMode.SAME_STEP, NEXT_STEP or DISABLED); pass that instead")
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode must be one of {[m.value for m in AutoresetMode]} (an AutoresetMode), "
                             f"got {autoreset_mode!r}") from None
        # the engine resets at the chunk boundary only for SAME_STEP; NEXT_STEP resets in the next step()
        engine_auto_reset = self.autoreset_mode is AutoresetMode.SAME_STEP
        self._engine_args = (factory, profile, dict(auto_reset=engine_auto_reset, **engine_kwargs))
        self.engine = self._start(seed)
        #: The running engine was built with this seed and has not been reset yet.
        self._fresh_seed: int | None = seed
        engine = self.engine
        self.num_envs = engine.num_envs
        self.chunk_size = engine.chunk_size
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        box = engine.action_space
        shape = (self.chunk_size, *box.shape)
        self.single_action_space = gym.spaces.Box(
            np.broadcast_to(box.low, shape), np.broadcast_to(box.high, shape), shape, box.dtype
        )
        self.single_observation_space = engine.observation_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        #: bool [num_envs]: the env's episode ended in the last step and it is not reset yet.
        self._ended = np.zeros(self.num_envs, dtype=bool)

    def _start(self, seed: int) -> RolloutEngine:
        factory, profile, kwargs = self._engine_args
        return RolloutEngine(factory, profile, seed=seed, **kwargs)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every env (``seed``: rebuild the engine with it first), or with ``options={"reset_mask":
        bool [num_envs]}`` only the masked envs; returns ``(obs, {})``."""
        if self.closed:
            raise ClosedError("the vector env is closed")
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a dict such as {{'reset_mask': mask}}, or None, got {options!r}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"options may only hold 'reset_mask', got keys {sorted(options)}")
        if seed is not None:
            seed = check_int("seed", seed, low=0)
            if mask is not None:
                raise ValueError("reset(seed=...) resets every env; pass either seed or options['reset_mask']")
        super().reset(seed=seed)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), got {mask!r}")
            if mask.any():
                self.engine.reset(np.flatnonzero(mask))
                self._ended[mask] = False
            return self._gather_obs(), {}
        if seed is not None and seed != self._fresh_seed:
            self.engine.close()
            self.engine = self._start(seed)
        self._fresh_seed = None
        self.engine.reset()
        self._ended[:] = False
        return self._gather_obs(), {}

    def step(
        self, actions: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One chunk per env: ``actions`` ``[num_envs, N, action_dim]`` (module docs for what comes back)."""
        engine = self.engine
        # a tensor as a policy's actions are taken (bfloat16 widened), a list as an array; a masked array stays
        # one, which the engine's check refuses (np.asarray would drop the mask and apply the masked values)
        actions = np.asanyarray(to_numpy(actions, "actions"))
        actions = check_chunk_actions(actions, self.num_envs, engine.action_dim, self.chunk_size)
        if self._ended.any() and self.autoreset_mode is AutoresetMode.DISABLED:
            raise RuntimeError(
                f"envs {np.flatnonzero(self._ended).tolist()} ended and auto-reset is off: "
                "reset(options={'reset_mask': mask}) them first"
            )
        resetting = self._ended.copy()  # NEXT_STEP: this step resets them
        self._fresh_seed = None
        stages = range(engine.pipeline_stages)
        for k in stages:
            engine.submit(k, actions[engine.plan.stage_envs(k)])
        results = [engine.collect(k) for k in stages]
        n = self.num_envs
        rewards, terminated, truncated = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        for result in results:
            ids = result.env_ids
            rewards[ids] = result.rewards.sum(axis=1)
            terminated[ids] = result.terminated.any(axis=1)
            truncated[ids] = result.truncated.any(axis=1)
            for row, env in enumerate(ids.tolist()):
                if resetting[env]:
                    infos = self._add_info(infos, {"step_rewards": np.zeros_like(result.rewards[row]),
                                                   "applied": np.zeros_like(result.applied[row])}, env)
                    continue
                info = dict(result.infos[row])
                final = {_FINAL_KEYS[key]: info.pop(key) for key in _FINAL_KEYS if key in info}
                if final:
                    final["final_info"] = _backend_info(final["final_info"])
                    infos = self._add_info(infos, final, env)
                info = _backend_info(info)
                info.update(step_rewards=result.rewards[row], applied=result.applied[row])
                infos = self._add_info(infos, info, env)
        if resetting.any():
            engine.reset(np.flatnonzero(resetting))
            rewards[resetting] = 0.0
            terminated[resetting] = truncated[resetting] = False
        if not engine.auto_reset:
            self._ended = terminated | truncated
        return self._gather_obs(), rewards, terminated, truncated, infos

    def _gather_obs(self) -> dict[str, np.ndarray]:
        """The engine's boundary observations of every stage, in global env order (fresh arrays)."""
        out = {
            key: np.empty((self.num_envs, *space.shape), space.dtype)
            for key, space in self.single_observation_space.spaces.items()
        }
        gather_boundary_obs(self.engine, out)
        return out

    def close_extras(self, **kwargs: Any) -> None:
        self.engine.close()

    def __enter__(self) -> "EngineVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EngineVectorEnv({self.engine!r})"
