"""On-demand observation and per-env stepping for OmniGibson's ``Environment``, ``VectorEnvironment`` and
``EnvironmentWrapper``.

Patched signatures (new parameters come after upstream's, so positional calls keep their meaning):

- ``Environment.step(self, action, n_render_iterations=1, render=True, get_obs=True)`` (``render`` where
  BEHAVIOR-1K 343d786a has it)
- ``Environment._post_step(self, action, get_obs=True)``
- ``VectorEnvironment.step(self, actions, env_indices=None, get_obs=True, render=True)`` (RLinf's order)
- ``VectorEnvironment.reset(self, get_obs=True, env_indices=None, **kwargs)``
- ``EnvironmentWrapper.step(self, action, *args, **kwargs)`` and ``EnvironmentWrapper.reset(self, *args, **kwargs)``

Semantics:

- ``get_obs=False``: no sensor is read; ``task.step`` (reward, termination), info, the terminated/truncated
  split and the step counter still run every step; ``obs`` is ``None`` and ``info["obs_info"]`` is empty.
  An automatic reset inside ``_post_step`` still returns the new episode's first observation, as upstream.
- ``render=False``: ``og.sim.step()`` runs inside ``og.sim.render_on_step(False)``: physics-only substeps,
  the same simulated time (``sim_step_dt``) as a rendered step. It excludes ``n_render_iterations > 1``.
  The render flag is restored even when the step raises (upstream's ``render_on_step`` restores it only
  on a normal exit).
- ``env_indices``: only those envs take an action (rows of ``actions`` in that order) and get
  ``_pre_step``/``_post_step``. From the shared ``og.sim.step()`` through the last ``_post_step`` (and so an
  automatic reset inside it, whose ``og.sim.step()`` would otherwise advance every scene) the simulator's
  scene list is scoped to their scenes: robot controllers, object states and visuals of the other scenes
  are not stepped, while PhysX still simulates every scene and flushes whatever targets the batched control
  views hold (whether those are exactly the last action's targets on Isaac Sim is unverified: upstream doc
  §6). If the controller views were rebuilt meanwhile, ``og.sim.update_handles()`` runs after the list is
  restored.
- ``reset(env_indices=...)`` resets only the selected envs (the upstream trap that reset every env, or raised
  ``TypeError`` in 1.1.1, is gone), each with its scene scoped as above, and returns ``(obs, infos)``
  lists for the selected envs (``obs`` entries ``None`` when ``get_obs=False``).
- Upstream's default paths are upstream's own code: ``step(actions)`` and ``reset(...)`` without
  ``env_indices`` call the original method with the caller's arguments, so they return what upstream
  returns (v3.7: ``reset(get_obs=False)`` returns ``None``). Only where upstream's ``reset`` cannot take the
  call (1.1.1's ``reset()`` takes no arguments) does ``reset(get_obs=..., ...)`` reset every env as with
  ``env_indices`` selecting all, and return those lists.
- ``EnvironmentWrapper.step``/``reset`` pass every argument on to the wrapped env unchanged (upstream passes
  only named ones), so ``get_obs``, ``render`` and reset keywords reach a wrapped ``Environment``.
- main's multi-scene ``Environment`` (one env owning ``num_envs`` scenes, no ``_post_step``) is a different
  design: ``env_step_obs`` and ``vector_env_step`` report ``skipped`` there (``patches/main`` carries the
  ``Environment.step`` change as an upstream patch).

These patches are capabilities the engine needs on every profile (the stock path calls them with the
default ``get_obs=True, render=True``); ``skip_intermediate_obs`` and ``pipeline_stages`` decide how
the engine's chunk stepping (``behavior1k_fast.rollout.chunk``) calls them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Any, Iterator, Sequence

from ...core.contract import check_env_indices
from ..registry import Patch, PatchContext
from ...core.profile import RolloutProfile
from ._util import bind, class_in, has_parameter, instance_override, raw_member


def _og() -> Any:
    return sys.modules["omnigibson"]


# --- Environment ------------------------------------------------------------------------------------
def _env_step_signature(self, action, n_render_iterations=1, render=True, get_obs=True):
    """Signature of the patched ``Environment.step``."""


def _env_post_step_signature(self, action, get_obs=True):
    """Signature of the patched ``Environment._post_step``."""


class _ObservationSkippedOnce:
    """Stands in for ``env.get_obs`` during one ``_post_step``: the step's own read returns ``(None, {})``;
    later reads in the same call (an automatic reset) go to the real ``get_obs``."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self._skipped = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._skipped:
            return type(self._env).get_obs(self._env, *args, **kwargs)
        self._skipped = True
        return None, {}


@contextlib.contextmanager
def _render_scope(render: bool) -> Iterator[None]:
    """``og.sim.render_on_step(False)`` when ``render`` is False (else nothing); the simulator's render flag is
    restored even when the block raises, which upstream's ``render_on_step`` does not do."""
    if render:
        yield
        return
    sim = _og().sim
    previous = sim._render_on_step
    try:
        with sim.render_on_step(False):
            yield
    finally:
        sim._render_on_step = previous


def _check_flags(arguments: dict) -> None:
    """TypeError naming ``get_obs`` / ``render`` when one is not a bool."""
    for name in ("get_obs", "render"):
        if name in arguments and not isinstance(arguments[name], bool):
            raise TypeError(f"{name} must be a bool, got {arguments[name]!r}")


def _env_post_step(wrapped, env, args, kwargs):
    a = bind(_env_post_step_signature, args, kwargs)
    _check_flags(a)
    if a["get_obs"]:
        return wrapped(a["action"])
    with instance_override(env, "get_obs", _ObservationSkippedOnce(env)):
        return wrapped(a["action"])


def _env_step(wrapped, env, args, kwargs):
    a = bind(_env_step_signature, args, kwargs)
    _check_flags(a)
    n = a["n_render_iterations"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_render_iterations must be an int >= 1, got {n!r}")
    if a["render"] is False and n != 1:
        raise ValueError(f"n_render_iterations={n} renders, which contradicts render=False")
    post_step = contextlib.nullcontext()
    if not a["get_obs"]:
        post_step = instance_override(env, "_post_step", functools.partial(env._post_step, get_obs=False))
    with _render_scope(a["render"]), post_step:
        return wrapped(a["action"], n)


class _NewKeywordsPatch(Patch):
    """Adds keyword arguments to methods of one upstream class.

    ``methods`` maps a method to ``(wrapper, adapter, new keywords)``; the patch is skipped when upstream's
    methods already take every new keyword. Wanted on every profile: these are capabilities of the backend
    contract, and ``skip_intermediate_obs`` / ``pipeline_stages`` decide how the engine calls them."""

    owner: str
    methods: dict

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.targets = tuple(f"{cls.owner}.{attr}" for attr in cls.methods)
        cls.upstream_file = cls.module.replace(".", "/") + ".py"

    def wanted(self, profile: RolloutProfile) -> bool:
        return True

    def skip_reason(self, module: Any) -> str | None:
        cls = class_in(module, self.owner)
        members = {attr: raw_member(cls, attr) for attr in self.methods}  # every target must exist
        if all(
            all(has_parameter(members[attr], kw) for kw in keywords)
            for attr, (_, _, keywords) in self.methods.items()
        ):
            taken = "; ".join(f"{attr} takes {', '.join(kws)}" for attr, (_, _, kws) in self.methods.items())
            return f"upstream {self.owner} already has them: {taken}"
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        cls = class_in(module, self.owner)
        for attr, (wrapper, adapter, _) in self.methods.items():
            ctx.wrap(cls, attr, wrapper, adapter=adapter)


MULTI_SCENE_REASON = (
    "upstream Environment is main's multi-scene layout (one Environment steps num_envs scenes, no _post_step): "
    "get_obs/render for its step ship as an upstream patch in patches/main, not as a runtime patch"
)


def multi_scene_reason(env_base: Any) -> str | None:
    """:data:`MULTI_SCENE_REASON` when ``env_base`` (the ``omnigibson.envs.env_base`` module) holds main's
    multi-scene ``Environment``, else ``None``."""
    env_cls = getattr(env_base, "Environment", None)
    if isinstance(env_cls, type) and hasattr(env_cls, "step") and not hasattr(env_cls, "_post_step"):
        return MULTI_SCENE_REASON
    return None


class EnvironmentStepPatch(_NewKeywordsPatch):
    """``Environment.step(render, get_obs)`` and ``Environment._post_step(get_obs)``."""

    name = "env_step_obs"
    module = "omnigibson.envs.env_base"
    owner = "Environment"
    methods = {
        "step": (_env_step, _env_step_signature, ("render", "get_obs")),
        "_post_step": (_env_post_step, _env_post_step_signature, ("get_obs",)),
    }

    def skip_reason(self, module: Any) -> str | None:
        return multi_scene_reason(module) or super().skip_reason(module)


# --- VectorEnvironment -----------------------------------------------------------------------------
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
    _check_flags(a)
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
    sim = _og().sim
    for env, action in zip(envs, actions):
        env._pre_step(action)
    post_kwargs = {} if get_obs else {"get_obs": False}
    with scoped_scenes(sim, envs, venv.num_envs):
        with _render_scope(a["render"]):
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
    _check_flags(a)
    if a["env_indices"] is None:
        # the caller's arguments without env_indices (the second positional one, or a keyword)
        upstream_args, upstream_kwargs = args[:1], {k: v for k, v in kwargs.items() if k != "env_indices"}
        if _takes(wrapped, upstream_args, upstream_kwargs):
            return wrapped(*upstream_args, **upstream_kwargs)  # upstream's own reset
    envs = _selected_envs(venv, a["env_indices"])
    obs, infos = [], []
    for env in envs:
        with scoped_scenes(_og().sim, [env], venv.num_envs):
            result = env.reset(get_obs=a["get_obs"], **a["kwargs"])
        ob, info = result if result is not None else (None, {})
        obs.append(ob)
        infos.append(info)
    return obs, infos


class VectorEnvironmentStepPatch(_NewKeywordsPatch):
    """``VectorEnvironment.step(env_indices, get_obs, render)`` and ``reset(get_obs, env_indices)``; also
    fixes upstream's reset-all trap. Skipped where ``Environment`` is main's multi-scene layout."""

    name = "vector_env_step"
    module = "omnigibson.envs.vec_env_base"
    owner = "VectorEnvironment"
    methods = {
        "step": (_vector_step, _vector_step_signature, ("env_indices", "get_obs", "render")),
        "reset": (_vector_reset, _vector_reset_signature, ("get_obs", "env_indices")),
    }

    def skip_reason(self, module: Any) -> str | None:
        return multi_scene_reason(sys.modules.get("omnigibson.envs.env_base")) or super().skip_reason(module)


# --- EnvironmentWrapper ----------------------------------------------------------------------------
def _wrapper_step_signature(self, action, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.step``."""


def _wrapper_reset_signature(self, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.reset``."""


def _forward_step(wrapped, wrapper, args, kwargs):
    return wrapper.env.step(*args, **kwargs)


def _forward_reset(wrapped, wrapper, args, kwargs):
    return wrapper.env.reset(*args, **kwargs)


class EnvironmentWrapperForwardingPatch(_NewKeywordsPatch):
    """``EnvironmentWrapper.step``/``reset`` forward every argument to the wrapped env; skipped when upstream's
    already take ``**kwargs``."""

    name = "env_wrapper_forwarding"
    module = "omnigibson.envs.env_wrapper"
    owner = "EnvironmentWrapper"
    methods = {
        "step": (_forward_step, _wrapper_step_signature, ("kwargs",)),
        "reset": (_forward_reset, _wrapper_reset_signature, ("kwargs",)),
    }
