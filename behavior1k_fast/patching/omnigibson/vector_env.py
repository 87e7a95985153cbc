"""A ``VectorEnvironment`` for main's multi-scene ``Environment(num_envs)``, for code written against v3.7's.

main (#2329) replaced ``VectorEnvironment`` (a list of single-scene ``Environment``s stepped together) by one
``Environment`` that owns ``num_envs`` scenes. Code written for v3.7, such as RLinf 0.3.0's BEHAVIOR worker
(``BehaviorProcess``: ``from omnigibson.envs import VectorEnvironment``, ``VectorEnvironment(num_envs, config)``,
``step(actions, env_indices=, get_obs=, render=)``, ``reset(get_obs=, env_indices=)``, ``envs[i]``), has no
``VectorEnvironment`` it can use on main. :class:`MultiSceneVectorEnvironment` is that interface over one
multi-scene ``Environment``:

- ``VectorEnvironment(num_envs, config)`` builds ``og.Environment(configs=config)`` with ``env.num_envs`` set
  (a config ``env.num_envs`` that differs is a ``ValueError``);
- ``step(actions, env_indices=None, get_obs=True, render=True)``: ``actions`` is one row per selected env (all
  envs without ``env_indices``), in ``env_indices`` order; they are stacked into the ``(rows, action_dim)``
  tensor main's ``Environment.step`` takes (dict actions stay a list, as main takes them), which steps the selected envs (``multi_scene_step``,
  ``env_step_obs``). Returns ``(obs list, rewards, terminated, truncated, infos list)``, one entry per row;
- ``reset(get_obs=True, env_indices=None, **kwargs)``: main's ``reset`` of those envs (all by default); returns
  ``(obs list, infos list)`` with each env's ``{"obs_info": ...}``, or ``None`` with ``get_obs=False``;
- ``envs[i]``: an :class:`EnvView` of env ``i`` (its ``scene`` and ``robots``; every other attribute, the batched
  ``task`` included, is the ``Environment``'s). The list may be rewritten (RLinf wraps its items); stepping
  always goes through the one ``Environment``, so a wrapper around a view sees no step.

The patch (:class:`MultiSceneVectorEnvironmentPatch`) puts the class at ``omnigibson.envs.VectorEnvironment``
where ``omnigibson.envs.env_base.Environment`` is the multi-scene one and the package's ``VectorEnvironment`` is
absent or builds one single-scene ``Environment`` per env (``in_vec_env``), as 1.1.1's and v3.7's do.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Mapping, Sequence

from ...core.checks import check_positive_int
from ...core.profile import RolloutProfile
from ..registry import Patch, PatchContext
from .layout import has_parameter, is_multi_scene, source_of


class EnvView:
    """Env ``index`` of a multi-scene ``Environment``, read as a ``VectorEnvironment``'s ``envs[index]``: its own
    ``scene`` and ``robots``; any other attribute is the ``Environment``'s (``task`` is the batched task)."""

    def __init__(self, env: Any, index: int) -> None:
        self.env = env
        self.index = index

    @property
    def scene(self) -> Any:
        return self.env.scenes[self.index]

    @property
    def robots(self) -> list:
        return self.env.scenes[self.index].robots

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class MultiSceneVectorEnvironment:
    """v3.7's ``VectorEnvironment`` interface over one multi-scene ``Environment`` (module docs).

    Args:
        num_envs: envs (scenes) of the ``Environment``.
        config: the OmniGibson config of one env; ``env.num_envs`` is set to ``num_envs`` in a copy.
    """

    def __init__(self, num_envs: int, config: dict) -> None:
        import omnigibson as og

        num_envs = check_positive_int("num_envs", num_envs)
        config = copy.deepcopy(dict(config))
        env_config = dict(config.get("env") or {})
        if env_config.get("num_envs", num_envs) != num_envs:
            raise ValueError(f"config env.num_envs={env_config['num_envs']!r} differs from num_envs={num_envs}")
        env_config["num_envs"] = num_envs
        config["env"] = env_config
        self.env = og.Environment(configs=config)
        if not has_parameter(self.env.step, "env_indices"):
            raise TypeError(f"{type(self.env).__name__}.step takes no env_indices: apply the behavior1k_fast "
                            "profile (behavior1k_fast.apply()) before building the env")
        self.num_envs = num_envs
        self.envs = [EnvView(self.env, i) for i in range(num_envs)]

    def step(self, actions: Sequence[Any], env_indices: Sequence[int] | None = None, get_obs: bool = True,
             render: bool = True) -> tuple:
        """Step the envs ``env_indices`` (all by default) with one action row each; see the module docs."""
        import torch

        rows = list(actions)
        if not any(isinstance(row, Mapping) for row in rows):  # dict actions go as main takes them: a list
            rows = torch.stack([torch.as_tensor(row, dtype=torch.float32) for row in rows])
        obs, rewards, terminated, truncated, infos = self.env.step(
            rows, env_indices=None if env_indices is None else list(env_indices), get_obs=get_obs, render=render,
        )
        return list(obs), rewards, terminated, truncated, list(infos)

    def reset(self, get_obs: bool = True, env_indices: Sequence[int] | None = None, **kwargs: Any) -> tuple | None:
        """Reset the envs ``env_indices`` (all by default); ``(obs list, infos list)``, or ``None`` without obs."""
        indices = None if env_indices is None else list(env_indices)
        result = self.env.reset(env_indices=indices, get_obs=get_obs, **kwargs)
        if not get_obs:
            return None
        obs, info = result
        return list(obs), [{"obs_info": env_info} for env_info in info["obs_info"]]

    def close(self) -> None:
        self.env.close()

    def __len__(self) -> int:
        return self.num_envs


class MultiSceneVectorEnvironmentPatch(Patch):
    """``omnigibson.envs.VectorEnvironment`` is :class:`MultiSceneVectorEnvironment` where main's multi-scene
    ``Environment`` has no usable ``VectorEnvironment`` (module docs)."""

    name = "multi_scene_vector_env"
    module = "omnigibson.envs"
    targets = ("VectorEnvironment",)
    knobs = ()

    def wanted(self, profile: RolloutProfile) -> bool:
        return True  # the contract: a VectorEnvironment with env_indices on every line

    def skip_reason(self, module: Any) -> str | None:
        environment = getattr(importlib.import_module(f"{module.__name__}.env_base"), "Environment", None)
        if not is_multi_scene(environment):
            return "upstream Environment holds one scene: its own VectorEnvironment steps several (vector_env_step)"
        vector = getattr(module, "VectorEnvironment", None)
        if vector is not None and "in_vec_env" not in source_of(vector.__init__):
            return "upstream VectorEnvironment already drives the multi-scene Environment"
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        ctx.set_attribute(module, "VectorEnvironment", MultiSceneVectorEnvironment)
