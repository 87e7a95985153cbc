"""An easy variant of the reference task, for RL that must learn in minutes: reach and touch the target can.

:class:`ReachVectorEnv` wraps a :class:`~.env.ReferenceVectorEnv` and keeps its scene, robot, actions,
physics, cameras, reset distribution and horizon (truncation); only the task on top changes:

- success (``terminated``, ``info["success"]``): a grip point of either arm within ``TOUCH_RADIUS`` of
  the target's centre, or a finger in contact with the target;
- reward per own action: minus the distance (m) from the nearest grip point to the target's centre, plus
  ``SUCCESS_BONUS`` on success (so ending the episode early pays);
- observation: the wrapped env's, plus ``"task::target"`` float32 ``[6]``: the target's centre minus each
  arm's grip point (left then right; env axes, m), which proprioception alone does not give.

It implements the backend contract itself (``step``/``reset``/``observe`` with ``env_indices``,
``get_obs``, ``render``), so the engine drives it like any backend (:class:`ReachFactory`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from ...core.contract import check_env_indices
from . import task
from .config import ReferenceConfig
from .env import ReferenceVectorEnv

#: Grip point to target centre distance (m) that counts as touching.
TOUCH_RADIUS = 0.06
#: Reward added at the step of success.
SUCCESS_BONUS = 5.0
#: Observation key of the target's position relative to the grip points.
TARGET_KEY = "task::target"


class ReachVectorEnv:
    """The reach-and-touch task over ``env``'s envs (module docs); a ``VectorBackend``."""

    def __init__(self, env: ReferenceVectorEnv):
        if not isinstance(env, ReferenceVectorEnv):
            raise TypeError(f"env must be a ReferenceVectorEnv, got {type(env).__name__}")
        self.env = env
        self.num_envs = env.num_envs
        self.action_space = env.action_space
        self.observation_space = gym.spaces.Dict(
            {**env.observation_space.spaces, TARGET_KEY: gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)}
        )

    def _target_offsets(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Target centre minus each grip point ``[e, arms, 3]`` and the fingers' contact with it ``[e]``."""
        env = self.env
        center = np.asarray(task.object_boxes(env.data, env.index, idx, task.TARGET + 1)[0])[:, task.TARGET]
        offsets = center[:, None] - task.grip_points(env.data, env.index, idx)
        touch = task.finger_contacts(env.data, env.index)[idx, :, task.TARGET].any(axis=1)
        return offsets, touch

    def _add_target(self, obs: list, offsets: np.ndarray) -> list:
        for row, ob in enumerate(obs):
            if ob is not None:
                ob[TARGET_KEY] = offsets[row].reshape(-1).astype(np.float32)
        return obs

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        idx = check_env_indices(env_indices, self.num_envs)
        obs, _, _, truncated, infos = self.env.step(actions, idx, get_obs=get_obs, render=render)
        offsets, touch = self._target_offsets(idx)
        distance = np.sqrt((offsets * offsets).sum(axis=-1)).min(axis=1)
        success = touch | (distance <= TOUCH_RADIUS)
        rewards = -distance + SUCCESS_BONUS * success
        infos = [
            {**info, "success": ok, "reward_terms": {"distance": d, "success": SUCCESS_BONUS * ok}}
            for info, ok, d in zip(infos, success.tolist(), distance.tolist())
        ]
        return self._add_target(obs, offsets), rewards, success, truncated, infos

    def reset(self, env_indices=None, get_obs=True):
        idx = check_env_indices(env_indices, self.num_envs)
        obs, infos = self.env.reset(idx, get_obs=get_obs)
        return self._add_target(obs, self._target_offsets(idx)[0]), infos

    def observe(self, env_indices=None, render=True):
        idx = check_env_indices(env_indices, self.num_envs)
        return self._add_target(self.env.observe(idx, render=render), self._target_offsets(idx)[0])

    @property
    def sim_time(self) -> float:
        return self.env.sim_time

    def close(self) -> None:
        self.env.close()


@dataclasses.dataclass(frozen=True)
class ReachFactory:
    """Picklable ``BackendFactory`` of :class:`ReachVectorEnv` over a ``ReferenceVectorEnv`` of ``config``."""

    config: ReferenceConfig = dataclasses.field(default_factory=ReferenceConfig)

    def __call__(self, num_envs: int, seed: int, profile: Any) -> ReachVectorEnv:
        return ReachVectorEnv(ReferenceVectorEnv(num_envs, seed=seed, profile=profile, config=self.config))
