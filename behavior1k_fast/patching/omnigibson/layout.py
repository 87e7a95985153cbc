"""Which OmniGibson layout is loaded: the one home of feature detection for the patch set and the backend.

Two upstream layouts exist:

- single-scene (PyPI 1.1.1, v3.7.x): one ``Environment`` per env, a ``VectorEnvironment`` steps N of them;
- multi-scene (main, #2329): one ``Environment`` owns ``num_envs`` scenes and has no ``_post_step``.

Everything here reads the loaded classes (never a version number) and imports no simulator. The lookups
(:func:`class_in`, :func:`raw_member`) raise :class:`~behavior1k_fast.patching.registry.UpstreamLayoutError`,
which the registry reports as "unsupported upstream layout".
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..registry import UpstreamLayoutError


def class_in(module: Any, name: str) -> type:
    """``module.name`` as a class; UpstreamLayoutError naming it if this OmniGibson layout has no such class."""
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise UpstreamLayoutError(f"{module.__name__}.{name} is missing: unsupported OmniGibson layout")
    return cls


def raw_member(owner: type, attr: str) -> Any:
    """The raw class ``__dict__`` entry ``owner.attr``; UpstreamLayoutError naming it if the layout lacks it."""
    try:
        return owner.__dict__[attr]
    except KeyError:
        raise UpstreamLayoutError(
            f"{owner.__module__}.{owner.__qualname__}.{attr} is missing: unsupported OmniGibson layout"
        ) from None


def has_parameter(fn: Callable, name: str) -> bool:
    """Whether ``fn`` (a function, or a property's getter) names parameter ``name``."""
    return name in inspect.signature(fn).parameters


def source_of(fn: Callable) -> str:
    """Source text of ``fn`` ('' when unavailable, e.g. a compiled extension)."""
    try:
        return inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return ""


def is_multi_scene(env_cls: Any) -> bool:
    """Whether ``env_cls`` is main's multi-scene ``Environment`` (#2329): it reads the observations of a subset
    of its envs (``get_obs(env_indices)``) and has no ``_post_step`` (its ``step`` does every env's post-step
    work). PyPI 1.1.1's and v3.7's single-scene ``Environment`` has ``_post_step``."""
    get_obs = getattr(env_cls, "get_obs", None)
    return (
        isinstance(env_cls, type)
        and callable(getattr(env_cls, "step", None))
        and callable(get_obs)
        and not hasattr(env_cls, "_post_step")
        and has_parameter(get_obs, "env_indices")
    )


def steps_per_env(env_cls: type) -> bool:
    """Whether ``env_cls.step`` takes ``env_indices`` (the per-env stepping patch is installed, or upstream
    has it): what the backend needs from a ``VectorEnvironment`` or a multi-scene ``Environment``."""
    return has_parameter(env_cls.step, "env_indices")


MULTI_SCENE_REASON = (
    "upstream Environment is main's multi-scene layout (one Environment steps num_envs scenes): there is no "
    "VectorEnvironment of Environments to patch; per-env stepping is multi_scene_step's (Environment.step(env_indices))"
)
SINGLE_SCENE_REASON = (
    "upstream Environment holds one scene (VectorEnvironment steps N of them): per-env stepping is "
    "vector_env_step's (VectorEnvironment.step(env_indices))"
)


def multi_scene_reason(env_base: Any) -> str | None:
    """:data:`MULTI_SCENE_REASON` when ``env_base`` (the ``omnigibson.envs.env_base`` module) holds main's
    multi-scene ``Environment``, else ``None``."""
    return MULTI_SCENE_REASON if is_multi_scene(getattr(env_base, "Environment", None)) else None
