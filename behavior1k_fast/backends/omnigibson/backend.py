"""``OmniGibsonBackend``: a patched OmniGibson env behind the backend contract, on either upstream layout.

- 1.1.1 / v3.7: a ``VectorEnvironment`` of single-scene ``Environment``\ s (patch ``vector_env_step``);
- main: one multi-scene ``Environment`` owning ``num_envs`` scenes (patches ``env_step_obs`` and
  ``multi_scene_step``; with ``gm.ENABLE_TILED_RENDERING`` one tiled read serves any subset of envs).

The contract is :class:`behavior1k_fast.core.contract.VectorBackend`. Observations are flattened to one level
(keys joined with ``::``, as OmniGibson's ``flatten_obs_space``) and converted to numpy; actions are rows of
the flat action Box (one row per selected env) handed to the env as float32 torch tensors. ``sim_time``
is ``og.sim.current_time`` (simulated seconds, shared by every env of the process).

:class:`OmniGibsonBackendFactory` is the picklable factory the engine calls inside each worker, after the
worker applied the package profile: it slims the config to the profile's modalities, rescales the
frequencies for the profile's stage count, switches automatic reset off (the engine resets) and builds,
from the same config, the layout the installed OmniGibson has: ``VectorEnvironment(num_envs, config)``, or
``og.Environment(config)`` with ``env.num_envs`` set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from ...core.checks import check_int, check_positive_int
from ...core.contract import check_actions, check_env_indices
from ...core.profile import RolloutProfile
from ...patching.omnigibson.layout import is_multi_scene, steps_per_env
from .config import check_env_config, rescale_env_config, slim_config

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


class _VectorEnvironmentLayout:
    """1.1.1 / v3.7: a ``VectorEnvironment``; env ``i`` is ``venv.envs[i]``."""

    def __init__(self, venv: Any) -> None:
        self.env = venv
        self.num_envs = len(venv.envs)
        self.first = venv.envs[0]

    def step(self, rows: np.ndarray, idx: list[int], get_obs: bool, render: bool) -> tuple:
        import torch

        actions = [torch.as_tensor(row, dtype=torch.float32) for row in rows]
        return self.env.step(actions, env_indices=idx, get_obs=get_obs, render=render)

    def reset(self, idx: list[int], get_obs: bool) -> tuple[list, list]:
        obs, infos = self.env.reset(env_indices=idx, get_obs=get_obs)
        return list(obs), list(infos)

    def read(self, idx: list[int]) -> list:
        return [self.env.envs[i].get_obs()[0] for i in idx]


class _MultiSceneLayout:
    """main: one ``Environment`` owning ``num_envs`` scenes; its spaces are one env's."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.num_envs = int(env.num_envs)
        self.first = env

    def step(self, rows: np.ndarray, idx: list[int], get_obs: bool, render: bool) -> tuple:
        import torch

        actions = torch.as_tensor(rows, dtype=torch.float32)
        return self.env.step(actions, env_indices=idx, get_obs=get_obs, render=render)

    def reset(self, idx: list[int], get_obs: bool) -> tuple[list, list]:
        result = self.env.reset(env_indices=idx, get_obs=get_obs)
        if result is None:  # main's reset(get_obs=False) returns nothing
            return [None] * len(idx), [{} for _ in idx]
        obs, info = result
        return list(obs), [{"obs_info": obs_info} for obs_info in info["obs_info"]]

    def read(self, idx: list[int]) -> list:
        return list(self.env.get_obs(env_indices=idx)[0])  # with tiled rendering: one tiled read, sliced


def _layout(env: Any) -> _VectorEnvironmentLayout | _MultiSceneLayout:
    if hasattr(env, "envs"):
        return _VectorEnvironmentLayout(env)
    if is_multi_scene(type(env)):
        return _MultiSceneLayout(env)
    raise TypeError(
        f"env must be an OmniGibson VectorEnvironment or main's multi-scene Environment, got {type(env).__name__}"
    )


class OmniGibsonBackend:
    """The backend contract over a ``VectorEnvironment`` or main's multi-scene ``Environment`` whose ``step``
    carries the per-env stepping patches of :mod:`behavior1k_fast.patching.omnigibson` (``vector_env_step`` or
    ``multi_scene_step``). ``observe_renders`` app
    renders precede an observation read by :meth:`observe` (RTX lags physics by frames)."""

    def __init__(self, env: Any, observe_renders: int = 1) -> None:
        import gymnasium as gym

        observe_renders = check_int("observe_renders", observe_renders, 0)
        layout = _layout(env)
        if not steps_per_env(type(env)):
            raise RuntimeError(
                f"{type(env).__name__}.step takes no env_indices: apply the behavior1k_fast profile "
                "(behavior1k_fast.apply()) before building the env"
            )
        self._layout = layout
        self._observe_renders = observe_renders
        self.num_envs = layout.num_envs
        if not isinstance(layout.first.action_space, gym.spaces.Box):
            raise TypeError(
                "the env's action_space must be a Box (env.flatten_action_space=True), "
                f"got {layout.first.action_space!r}"
            )
        self.action_space = gym.spaces.flatten_space(layout.first.action_space)
        self.observation_space = flat_observation_space(layout.first.observation_space)

    @property
    def env(self) -> Any:
        """The OmniGibson env: a ``VectorEnvironment`` or main's multi-scene ``Environment``."""
        return self._layout.env

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        idx = check_env_indices(env_indices, self.num_envs)
        actions = check_actions(actions, len(idx), self.action_space.shape[0])
        obs, rewards, terminated, truncated, infos = self._layout.step(actions, idx.tolist(), get_obs, render)
        return (
            [flat_observation(o) for o in obs],
            np.asarray([float(r) for r in rewards], dtype=np.float64),
            np.asarray([bool(t) for t in terminated], dtype=bool),
            np.asarray([bool(t) for t in truncated], dtype=bool),
            list(infos),
        )

    def reset(self, env_indices=None, get_obs=True):
        idx = check_env_indices(env_indices, self.num_envs)
        obs, infos = self._layout.reset(idx.tolist(), get_obs)
        return [flat_observation(o) for o in obs], infos

    def observe(self, env_indices=None, render=True):
        idx = check_env_indices(env_indices, self.num_envs)
        if render:
            for _ in range(self._observe_renders):
                _sim().render()
        return [flat_observation(o) for o in self._layout.read(idx.tolist())]

    @property
    def sim_time(self) -> float:
        return float(_sim().current_time)

    def close(self) -> None:
        self._layout.env.close()


@dataclass(frozen=True)
class OmniGibsonBackendFactory:
    """Picklable: builds an :class:`OmniGibsonBackend` from an OmniGibson env ``config`` in a worker, on the
    layout the installed OmniGibson has (a ``VectorEnvironment`` on 1.1.1 / v3.7, main's multi-scene
    ``Environment``). The config is the same for both: ``env.num_envs`` may be left out (the engine decides
    how many envs each worker builds) or must equal that count."""

    config: Mapping[str, Any]
    headless: bool = True
    #: The patch set every process that builds this backend applies first (``core.contract.patch_set_of``).
    patch_set: ClassVar[str] = "behavior1k_fast.patching.omnigibson"

    def build_config(self, profile: RolloutProfile, num_envs: int | None = None) -> dict:
        """The env config the worker builds: slimmed, rescaled for ``profile.stages_sharing_physics``, no
        auto-reset, without ``env.num_envs`` (ValueError when it differs from ``num_envs``; TypeError for a config
        of another shape: :func:`~.config.check_env_config`)."""
        config = dict(check_env_config(self.config))  # slim_config and rescale_env_config return deep copies
        if profile.obs_modalities is not None:
            config = slim_config(config, profile.obs_modalities).config
        config, _ = rescale_env_config(config, profile.stages_sharing_physics, profile.physics_rescale, self.headless)
        env = config.setdefault("env", {})
        asked = env.pop("num_envs", None)
        if asked is not None and num_envs is not None and asked != num_envs:
            raise ValueError(
                f"config env.num_envs={asked!r} but this backend builds num_envs={num_envs} envs (the engine's "
                "envs per worker): leave env.num_envs out of the config or make them equal"
            )
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

        num_envs = check_positive_int("num_envs", num_envs)
        config = self.build_config(profile, num_envs)
        if "omnigibson" not in sys.modules:
            os.environ["OMNIGIBSON_HEADLESS"] = "1" if self.headless else "0"
        og = import_omnigibson()
        torch.manual_seed(seed)
        np.random.seed(seed)
        if is_multi_scene(og.Environment):
            config["env"]["num_envs"] = num_envs
            env = og.Environment(configs=config)
        else:
            from omnigibson.envs.vec_env_base import VectorEnvironment

            env = VectorEnvironment(num_envs, config)
        return OmniGibsonBackend(env, observe_renders=profile.boundary_rerenders)
