"""The smallest real backend: deterministic 2-D point masses sharing one physics clock.

Implements the full backend contract (env_indices, get_obs/render, observe, sim_time). Each env's
episode terminates after a fixed number of its own actions (``episode_lengths``, cycled over env ids),
so episode ends land at known steps. Frames are rendered from the positions at the last render, so a
stale frame is visible. Fault injection: ``fail_in_factory`` and ``fail_at_step`` (global step count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from behavior1k_fast.core.frequencies import Frequencies, rescale_for_stages


@dataclass(frozen=True)
class PointMassFactory:
    episode_lengths: tuple[int, ...] = (1000,)
    action_hz: float = 30.0
    physics_hz: float = 120.0
    image_size: int = 8
    #: Action dims; only the first two move the mass (wide actions make big chunk messages).
    action_dim: int = 2
    fail_in_factory: bool = False
    fail_at_step: int | None = None

    def timing(self, stages_sharing_physics: int, mode: str):
        base = Frequencies(self.action_hz, self.action_hz, self.physics_hz)
        return rescale_for_stages(base, stages_sharing_physics, mode)

    def __call__(self, num_envs: int, seed: int, profile) -> "PointMassVectorEnv":
        if self.fail_in_factory:
            raise RuntimeError("factory failed on purpose")
        return PointMassVectorEnv(num_envs, seed, self, self.timing(profile.stages_sharing_physics, profile.physics_rescale))


class PointMassVectorEnv:
    def __init__(self, num_envs: int, seed: int, config: PointMassFactory, timing):
        self.num_envs = num_envs
        self.seed = seed
        self.config = config
        freqs = timing.frequencies
        self.sim_step_dt = freqs.sim_step_dt
        self.substeps = freqs.physics_substeps
        self.physics_dt = freqs.physics_dt
        s = config.image_size
        self.action_space = spaces.Box(-1.0, 1.0, (config.action_dim,), np.float32)
        self.observation_space = spaces.Dict(
            {
                "head::rgb": spaces.Box(0, 255, (3, s, s), np.uint8),
                "proprio": spaces.Box(-np.inf, np.inf, (4,), np.float32),
            }
        )
        self.pos = np.zeros((num_envs, 2))
        self.vel = np.zeros((num_envs, 2))
        self.held = np.zeros((num_envs, 2))
        self.episode = np.zeros(num_envs, dtype=np.int64)
        self.episode_step = np.zeros(num_envs, dtype=np.int64)
        self.frames = np.zeros((num_envs, 3, s, s), dtype=np.uint8)
        self.global_steps = 0
        self.renders = 0
        self.resets = np.zeros(num_envs, dtype=np.int64)
        self._sim_time = 0.0
        self.reset()

    @property
    def sim_time(self) -> float:
        return self._sim_time

    def _idx(self, env_indices):
        return np.arange(self.num_envs) if env_indices is None else np.asarray(env_indices, dtype=np.int64)

    def _render(self) -> None:
        self.renders += 1
        level = np.clip((self.pos + 4.0) * 32.0, 0, 255).astype(np.uint8)
        self.frames[:, 0] = level[:, 0, None, None]
        self.frames[:, 1] = level[:, 1, None, None]
        self.frames[:, 2] = (self.episode % 256).astype(np.uint8)[:, None, None]

    def _obs(self, idx):
        return [
            {"head::rgb": self.frames[i].copy(), "proprio": np.concatenate([self.pos[i], self.vel[i]]).astype(np.float32)}
            for i in idx
        ]

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        idx = self._idx(env_indices)
        self.global_steps += 1
        if self.config.fail_at_step is not None and self.global_steps == self.config.fail_at_step:
            raise ValueError(f"point mass exploded at global step {self.global_steps}")
        self.held[idx] = np.asarray(actions)[:, :2]
        for _ in range(self.substeps):
            self.vel += (self.held - 0.5 * self.vel) * self.physics_dt
            self.pos += self.vel * self.physics_dt
        self._sim_time += self.sim_step_dt
        self.episode_step[idx] += 1
        if render:
            self._render()
        lengths = np.array(self.config.episode_lengths)[idx % len(self.config.episode_lengths)]
        rewards = -np.linalg.norm(self.pos[idx], axis=1)
        terminated = self.episode_step[idx] >= lengths
        truncated = np.zeros(len(idx), dtype=bool)
        infos = [{"episode_step": int(self.episode_step[i])} for i in idx]
        obs = self._obs(idx) if get_obs else [None] * len(idx)
        return obs, rewards, terminated, truncated, infos

    def reset(self, env_indices=None, get_obs=True):
        idx = self._idx(env_indices)
        for i in idx:
            rng = np.random.default_rng([self.seed, int(i), int(self.episode[i])])
            self.pos[i] = rng.uniform(-1.0, 1.0, 2)
        self.vel[idx] = 0.0
        self.held[idx] = 0.0
        self.episode[idx] += 1
        self.episode_step[idx] = 0
        self.resets[idx] += 1
        self._render()
        obs = self._obs(idx) if get_obs else [None] * len(idx)
        return obs, [{"episode": int(self.episode[i])} for i in idx]

    def observe(self, env_indices=None, render=True):
        if render:
            self._render()
        return self._obs(self._idx(env_indices))

    def close(self) -> None:
        pass
