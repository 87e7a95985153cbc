"""``OmniGibsonBackend``: a patched OmniGibson ``VectorEnvironment`` behind the backend contract.

The contract is :class:`behavior1k_fast.core.contract.VectorBackend`. Observations are flattened to one level
(keys joined with ``::``, as OmniGibson's ``flatten_obs_space``) and converted to numpy; actions are rows of
the flat action Box (one row per selected env) handed to each env as a float32 torch tensor. ``sim_time``
is ``og.sim.current_time`` (simulated seconds, shared by every env of the process).

:class:`OmniGibsonBackendFactory` is the picklable factory the engine calls inside each worker, after the
worker applied the package profile: it slims the config to the profile's modalities, rescales the
frequencies for the profile's stage count, switches automatic reset off (the engine resets) and builds the
``VectorEnvironment``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ...core.checks import check_int
from ...core.contract import check_actions, check_env_indices
from ...core.profile import RolloutProfile
from ...patching.omnigibson._util import has_parameter
from .config import rescale_env_config
from .config import slim_config

SEPARATOR = "::"


def _flat_items(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for key, value in tree.items():
        name = f"{prefix}{SEPARATOR}{key}" if prefix else str(key)
        items.extend(_flat_items(value, name) if isinstance(value, Mapping) else [(name, value)])
    return items


def flat_observation_space(space: Any) -> Any:
    """A nested gymnasium ``Dict`` observation space as a one-level ``Dict`` keyed ``a::b::c`` (a gymnasium
    ``Dict`` is a ``Mapping``: the keys are those :func:`flat_observation` gives)."""
    import gymnasium as gym

    return gym.spaces.Dict(dict(_flat_items(space)))


def flat_observation(obs: Mapping[str, Any] | None) -> dict[str, np.ndarray] | None:
    """A nested observation of torch tensors / arrays as ``{"a::b::c": np.ndarray}`` (``None`` stays None)."""
    if obs is None:
        return None
    return {k: v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for k, v in _flat_items(obs)}


def _sim() -> Any:
    return sys.modules["omnigibson"].sim


class OmniGibsonBackend:
    """The backend contract over a ``VectorEnvironment`` whose ``step``/``reset`` carry the patches of
    :mod:`behavior1k_fast.omnigibson.stepping`. ``observe_renders`` app renders precede an observation
    read by :meth:`observe` (RTX lags physics by frames)."""

    def __init__(self, venv: Any, observe_renders: int = 1) -> None:
        import gymnasium as gym

        if not has_parameter(type(venv).step, "env_indices"):
            raise RuntimeError(
                "VectorEnvironment.step takes no env_indices: apply the behavior1k_fast profile "
                "(behavior1k_fast.apply()) before building the env"
            )
        observe_renders = check_int("observe_renders", observe_renders, 0)
        self._venv = venv
        self._observe_renders = observe_renders
        self.num_envs = len(venv.envs)
        first = venv.envs[0]
        if not isinstance(first.action_space, gym.spaces.Box):
            raise TypeError(
                f"the env's action_space must be a Box (env.flatten_action_space=True), got {first.action_space!r}"
            )
        self.action_space = gym.spaces.flatten_space(first.action_space)
        self.observation_space = flat_observation_space(first.observation_space)

    @property
    def venv(self) -> Any:
        return self._venv

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        import torch

        idx = check_env_indices(env_indices, self.num_envs)
        actions = check_actions(actions, len(idx), self.action_space.shape[0])
        rows = [torch.as_tensor(row, dtype=torch.float32) for row in actions]
        obs, rewards, terminated, truncated, infos = self._venv.step(
            rows, env_indices=idx.tolist(), get_obs=get_obs, render=render
        )
        return (
            [flat_observation(o) for o in obs],
            np.asarray([float(r) for r in rewards], dtype=np.float64),
            np.asarray([bool(t) for t in terminated], dtype=bool),
            np.asarray([bool(t) for t in truncated], dtype=bool),
            list(infos),
        )

    def reset(self, env_indices=None, get_obs=True):
        idx = check_env_indices(env_indices, self.num_envs)
        obs, infos = self._venv.reset(env_indices=idx.tolist(), get_obs=get_obs)
        return [flat_observation(o) for o in obs], list(infos)

    def observe(self, env_indices=None, render=True):
        idx = check_env_indices(env_indices, self.num_envs)
        if render:
            for _ in range(self._observe_renders):
                _sim().render()
        return [flat_observation(self._venv.envs[i].get_obs()[0]) for i in idx.tolist()]

    @property
    def sim_time(self) -> float:
        return float(_sim().current_time)

    def close(self) -> None:
        self._venv.close()


@dataclass(frozen=True)
class OmniGibsonBackendFactory:
    """Picklable: builds an :class:`OmniGibsonBackend` from an OmniGibson env ``config`` in a worker."""

    config: Mapping[str, Any]
    headless: bool = True

    def build_config(self, profile: RolloutProfile) -> dict:
        """The env config the worker builds: slimmed, rescaled for ``profile.pipeline_stages``, no auto-reset."""
        config = dict(self.config)  # slim_config and rescale_env_config return deep copies
        if profile.obs_modalities is not None:
            config = slim_config(config, profile.obs_modalities).config
        config, _ = rescale_env_config(config, profile.pipeline_stages, profile.physics_rescale, self.headless)
        env = config.setdefault("env", {})
        env["automatic_reset"] = False
        env["flatten_action_space"] = True
        return config

    def check(self, num_envs: int, seed: int, profile: RolloutProfile) -> None:
        """Raise what building with these arguments would (seed, stage count against the config's
        frequencies), building nothing and importing no simulator."""
        check_int("num_envs", num_envs, 1)
        check_int("seed", seed, 0, 2**32 - 1)  # numpy's seed range
        self.build_config(profile)

    def __call__(self, num_envs: int, seed: int, profile: RolloutProfile) -> OmniGibsonBackend:
        import torch

        from ...patching.omnigibson.cpu_import import import_omnigibson

        config = self.build_config(profile)
        if "omnigibson" not in sys.modules:
            os.environ["OMNIGIBSON_HEADLESS"] = "1" if self.headless else "0"
        import_omnigibson()
        from omnigibson.envs.vec_env_base import VectorEnvironment

        torch.manual_seed(seed)
        np.random.seed(seed)
        return OmniGibsonBackend(VectorEnvironment(num_envs, config), observe_renders=profile.boundary_rerenders)

