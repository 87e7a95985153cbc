"""Which OmniGibson layout is loaded: the one home of feature detection for the patch set and the backend.

Two upstream env layouts exist:

- single-scene (PyPI 1.1.1, v3.7.x): one ``Environment`` per env, a ``VectorEnvironment`` steps N of them;
- multi-scene (main, #2329): one ``Environment`` owns ``num_envs`` scenes and has no ``_post_step``.

And two launch layouts (:func:`kit_launcher`):

- the simulator's own ``_launch_app`` builds the Kit app (1.1.1, v3.7, main, the Isaac Sim 6.0 work);
- the render/physics-backend refactor: ``simulator`` picks its backends from ``RENDER_BACKENDS`` /
  ``PHYSICS_BACKENDS`` (``gm.RENDER_BACKEND``, ``gm.PHYSICS_BACKEND``), its ``_launch_app`` only hands off to
  ``PhysicsBackend.create_app()``, and Kit is built by ``launch_kit_app()`` in the module of the ``"kit"``
  render backend (``omnigibson.render_backends.kit_backend``); camera capture goes through
  ``og.sim.render_backend``. Where that layout launches no Kit app or renders with something other than
  Kit, the launch and RTX patches are "not applicable on this layout" (:func:`kit_launch_reason`,
  :func:`rtx_reason`), decided from ``gm.PHYSICS_BACKEND`` / ``gm.RENDER_BACKEND`` when the patch is applied
  (set them before ``apply()`` or the import that applies it).

What a render backend can capture (:func:`capture_reason`) is probed on its capability flags
(``supports_camera_capture`` and the multi-modality ones), on the class ``gm.RENDER_BACKEND`` picks
(:func:`render_backend_class`) or on ``og.sim.render_backend``; never on ``runs_inside_kit``, which some commits
of the refactor have and others do not.

Everything here reads the loaded classes (never a version number) and imports no simulator. The lookups
(:func:`class_in`, :func:`raw_member`) raise :class:`~behavior1k_fast.patching.registry.UpstreamLayoutError`,
which the registry reports as "unsupported upstream layout".
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
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


#: The prefix of every reason a patch gives where its target does not exist on the loaded layout.
NOT_APPLICABLE = "not applicable on this layout"
#: The render backend whose module builds the Kit app on the render/physics-backend layout.
KIT_RENDER_BACKEND = "kit"
#: The physics backend that runs inside Kit (its ``create_app()`` calls ``launch_kit_app()``).
KIT_PHYSICS_BACKEND = "physx"


def is_render_backend_layout(simulator: Any) -> bool:
    """Whether ``simulator`` (the ``omnigibson.simulator`` module) is the render/physics-backend refactor's: it
    picks its render backend from the ``RENDER_BACKENDS`` registry and its ``_launch_app`` hands the launch to
    the physics backend's ``create_app()`` (feature probe)."""
    launch = getattr(simulator, "_launch_app", None)
    return (isinstance(getattr(simulator, "RENDER_BACKENDS", None), dict) and callable(launch)
            and ".create_app()" in source_of(launch))


@dataclass(frozen=True)
class KitLauncher:
    """Where the loaded layout builds the Kit app: the function ``function`` of ``module``."""

    module: Any
    function: str

    @property
    def qualname(self) -> str:
        return f"{self.module.__name__}.{self.function}"

    @property
    def source(self) -> str:
        return source_of(getattr(self.module, self.function))


def kit_launcher(simulator: Any) -> KitLauncher:
    """The function that builds the Kit app on the layout of ``simulator`` (the ``omnigibson.simulator``
    module): its own ``_launch_app``, or on the render/physics-backend layout ``launch_kit_app`` of the module
    that defines ``RENDER_BACKENDS["kit"]``. UpstreamLayoutError naming what is missing."""
    if not callable(getattr(simulator, "_launch_app", None)):
        raise UpstreamLayoutError(f"{simulator.__name__}._launch_app is missing: unsupported OmniGibson layout")
    if not is_render_backend_layout(simulator):
        return KitLauncher(simulator, "_launch_app")
    backend = simulator.RENDER_BACKENDS.get(KIT_RENDER_BACKEND)
    module = sys.modules.get(getattr(backend, "__module__", ""))
    if module is None or not callable(getattr(module, "launch_kit_app", None)):
        raise UpstreamLayoutError(
            f"{simulator.__name__}.RENDER_BACKENDS[{KIT_RENDER_BACKEND!r}] has no module with launch_kit_app: "
            "unsupported render-backend layout"
        )
    return KitLauncher(module, "launch_kit_app")


def selected_backends() -> tuple[Any, Any]:
    """``(gm.PHYSICS_BACKEND, gm.RENDER_BACKEND)`` of the loaded macros (``physx`` / ``kit`` where a macro is
    absent: the refactor's defaults, and what every other layout runs)."""
    gm = sys.modules["omnigibson.macros"].gm
    return gm.get("PHYSICS_BACKEND", KIT_PHYSICS_BACKEND), gm.get("RENDER_BACKEND", KIT_RENDER_BACKEND)


def kit_launch_reason(simulator: Any) -> str | None:
    """Why no Kit app is launched on this layout (``None``: one is): on the render/physics-backend layout only
    the ``physx`` physics backend and the ``kit`` render backend reach ``launch_kit_app()``."""
    if not is_render_backend_layout(simulator):
        return None
    physics, render = selected_backends()
    if physics == KIT_PHYSICS_BACKEND or render == KIT_RENDER_BACKEND:
        return None
    return (f"{NOT_APPLICABLE}: gm.PHYSICS_BACKEND={physics!r} and gm.RENDER_BACKEND={render!r} launch no Kit app "
            "(only PhysXBackend.create_app and the kit render backend reach launch_kit_app)")


def rtx_reason(simulator: Any) -> str | None:
    """Why Kit's RTX renderer draws no camera on this layout (``None``: it does): on the render/physics-backend
    layout cameras render through ``gm.RENDER_BACKEND``, and only ``kit`` is RTX."""
    if not is_render_backend_layout(simulator):
        return None
    render = selected_backends()[1]
    if render == KIT_RENDER_BACKEND:
        return None
    return f"{NOT_APPLICABLE}: gm.RENDER_BACKEND={render!r}: cameras do not render through Kit's RTX renderer"


#: Capture capabilities a render backend declares beyond ``supports_camera_capture`` for modalities other than
#: RGB (the kit backend declares them; the null backend none, the Newton backend, RGB only, none either).
MULTI_MODALITY_CAPABILITIES = ("supports_bbox", "supports_pointcloud", "supports_tiled_rendering")


def render_backend_class(simulator: Any) -> type | None:
    """The render backend class ``gm.RENDER_BACKEND`` picks from ``RENDER_BACKENDS`` on the render/physics-backend
    layout of ``simulator`` (the ``omnigibson.simulator`` module); ``None`` on the other layouts, where cameras
    capture through Replicator directly, and for a name the registry lacks (upstream's simulator refuses it when
    it starts)."""
    if not is_render_backend_layout(simulator):
        return None
    backend = simulator.RENDER_BACKENDS.get(selected_backends()[1])
    return backend if isinstance(backend, type) else None


def capture_reason(backend: Any) -> str | None:
    """Why the render backend ``backend`` (an instance, e.g. ``og.sim.render_backend``, or its class) keeps no
    per-frame annotators worth pruning (``None``: it captures several modalities, rendering every attached
    annotator each frame). Probes its capability flags (a flag it does not declare is ``False``), never
    ``runs_inside_kit``, which some commits of the refactor have and others do not."""
    name = backend.__name__ if isinstance(backend, type) else type(backend).__name__
    if not getattr(backend, "supports_camera_capture", False):
        return f"{NOT_APPLICABLE}: the render backend {name} has no camera capture (supports_camera_capture is False)"
    if not any(getattr(backend, flag, False) for flag in MULTI_MODALITY_CAPABILITIES):
        return (f"{NOT_APPLICABLE}: the render backend {name} captures RGB only (it declares none of "
                f"{', '.join(MULTI_MODALITY_CAPABILITIES)}): there is no other modality's annotator to prune")
    return None
