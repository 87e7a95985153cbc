"""``VectorEnvironment.step(env_indices, get_obs, render)`` and ``reset(get_obs, env_indices)`` on the
single-scene layout (PyPI 1.1.1, v3.7.x; patch ``vector_env_step``, skipped on main's multi-scene layout,
where ``multi_scene_step`` does per-env stepping).

Patched signatures (RLinf's order): ``VectorEnvironment.step(self, actions, env_indices=None, get_obs=True,
render=True)`` and ``VectorEnvironment.reset(self, get_obs=True, env_indices=None, **kwargs)``.

- ``step(env_indices=...)`` (the contract of :mod:`behavior1k_fast.core.contract`): only those envs take an
  action (rows of ``actions``, in ``env_indices`` order) and get ``_pre_step``/``_post_step``; every other
  env holds its last action while the shared physics advances all of them. From the shared
  ``og.sim.step()`` through the last ``_post_step`` (and so an automatic reset inside it, whose
  ``og.sim.step()`` would otherwise advance every scene) the simulator's scene list is scoped to their
  scenes (:func:`scoped_scenes`): robot controllers, object states and visuals of the other scenes are not
  stepped, while PhysX still simulates every scene and flushes whatever targets the batched control views
  hold (whether those are exactly the last action's targets on Isaac Sim is unverified: upstream doc §6). If
  the controller views were rebuilt meanwhile, ``og.sim.update_handles()`` runs after the list is restored.
  ``get_obs`` and ``render`` mean what they mean for ``Environment.step`` (:mod:`.env_step`).
- ``reset(env_indices=...)`` resets only the selected envs, each with its scene scoped as above (the
  upstream trap that reset every env, or raised ``TypeError`` in 1.1.1, is gone), and returns ``(obs,
  infos)`` lists for the selected envs (``obs`` entries ``None`` when ``get_obs=False``).
- Calls without the new arguments run upstream's own code (v3.7: ``reset(get_obs=False)`` returns ``None``).
  Only where upstream's ``reset`` cannot take the call (1.1.1's ``reset()`` takes no arguments) does
  ``reset(get_obs=..., ...)`` reset every env as with ``env_indices`` selecting all, and return those lists.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any, Iterator, Sequence

from ...core.contract import check_env_indices
from ._util import bind, simulator
from .env_step import render_scope
from .layout import has_parameter, multi_scene_reason
from .methods import MethodPatch, NewKeywordsPatch, check_flags


def _vector_step_signature(self, actions, env_indices=None, get_obs=True, render=True):
    """Signature of the patched ``VectorEnvironment.step``."""


def _vector_reset_signature(self, get_obs=True, env_indices=None, **kwargs):
    """Signature of the patched ``VectorEnvironment.reset``."""


@contextlib.contextmanager
def scoped_scenes(sim: Any, envs: Sequence[Any], num_envs: int) -> Iterator[None]:
    """Restrict ``sim``'s per-scene loops to the scenes of ``envs`` for the block (nothing when all envs
    are selected or the simulator keeps no ``_scenes`` list); see the module docs."""
    if len(envs) == num_envs or not hasattr(sim, "_scenes"):
        yield
        return
    from omnigibson.utils.usd_utils import ControllableObjectViewAPI

    selected = {id(env.scene) for env in envs}
    views = ControllableObjectViewAPI._VIEWS_BY_PATTERN
    all_scenes = sim._scenes
    sim._scenes = [scene for scene in all_scenes if id(scene) in selected]
    try:
        yield
    finally:
        sim._scenes = all_scenes
        if ControllableObjectViewAPI._VIEWS_BY_PATTERN is not views:
            sim.update_handles()


def _selected_envs(venv: Any, env_indices: Any) -> list[Any]:
    return [venv.envs[i] for i in check_env_indices(env_indices, venv.num_envs).tolist()]


def _vector_step(wrapped, venv, args, kwargs):
    a = bind(_vector_step_signature, args, kwargs)
    check_flags(a)
    envs = _selected_envs(venv, a["env_indices"])
    actions = a["actions"]
    try:
        rows = len(actions)
    except TypeError:
        raise TypeError(f"actions must be a sequence of per-env actions, got {type(actions).__name__}") from None
    if rows != len(envs):
        raise ValueError(
            f"actions has {rows} rows but env_indices={a['env_indices']!r} selects {len(envs)} envs "
            f"(one row per selected env, in env_indices order)"
        )
    get_obs = a["get_obs"]
    if not get_obs and not has_parameter(type(envs[0])._post_step, "get_obs"):
        raise TypeError("VectorEnvironment.step(get_obs=False) needs Environment._post_step(get_obs); "
                        "the env_step_obs patch is not applied")
    if a["env_indices"] is None and get_obs and a["render"]:
        return wrapped(actions)  # upstream's own step
    sim = simulator()
    for env, action in zip(envs, actions):
        env._pre_step(action)
    post_kwargs = {} if get_obs else {"get_obs": False}
    with scoped_scenes(sim, envs, venv.num_envs):
        with render_scope(a["render"]):
            sim.step()
        results = [env._post_step(action, **post_kwargs) for env, action in zip(envs, actions)]
    obs, rewards, terminated, truncated, infos = (list(column) for column in zip(*results))
    return obs, rewards, terminated, truncated, infos


def _takes(fn: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the bound method ``fn`` accepts ``args`` and ``kwargs``."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _vector_reset(wrapped, venv, args, kwargs):
    a = bind(_vector_reset_signature, args, kwargs)
    check_flags(a)
    if a["env_indices"] is None:
        # the caller's arguments without env_indices (the second positional one, or a keyword)
        upstream_args, upstream_kwargs = args[:1], {k: v for k, v in kwargs.items() if k != "env_indices"}
        if _takes(wrapped, upstream_args, upstream_kwargs):
            return wrapped(*upstream_args, **upstream_kwargs)  # upstream's own reset
    envs = _selected_envs(venv, a["env_indices"])
    obs, infos = [], []
    for env in envs:
        with scoped_scenes(simulator(), [env], venv.num_envs):
            result = env.reset(get_obs=a["get_obs"], **a["kwargs"])
        ob, info = result if result is not None else (None, {})
        obs.append(ob)
        infos.append(info)
    return obs, infos


class VectorEnvironmentStepPatch(NewKeywordsPatch):
    """``VectorEnvironment.step(env_indices, get_obs, render)`` and ``reset(get_obs, env_indices)`` (module
    docs); also fixes upstream's reset-all trap. Skipped where ``Environment`` is main's multi-scene layout."""

    name = "vector_env_step"
    module = "omnigibson.envs.vec_env_base"
    owner = "VectorEnvironment"
    methods = (
        MethodPatch("step", _vector_step, _vector_step_signature, ("env_indices", "get_obs", "render")),
        MethodPatch("reset", _vector_reset, _vector_reset_signature, ("get_obs", "env_indices")),
    )

    def skip_reason(self, module: Any) -> str | None:
        return multi_scene_reason(sys.modules.get("omnigibson.envs.env_base")) or super().skip_reason(module)
