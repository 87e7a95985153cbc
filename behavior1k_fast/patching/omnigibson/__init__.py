"""Runtime patches for OmniGibson, one module per upstream area, and the process-wide registry holding them.

``PATCHES`` is the patch set in application order: process settings first (they must precede the
simulator import), then class and function patches, then the changes around the Kit app launch.
``REGISTRY`` is the one registry of this process; :func:`apply`, :func:`revert` and :func:`status` (re-exported
as ``behavior1k_fast.apply`` ...) drive it. Importing this package imports no simulator.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...core.profile import RolloutProfile
from ..registry import PatchOutcome, PatchRegistry, PatchReport
from . import gpu, runtime, stepping, vector_env, viewport

PATCHES: tuple = (
    gpu.GpuBindingPatch(),
    runtime.IntraOpThreadsPatch(),
    runtime.NumbaCacheDirPatch(),
    *runtime.KERNEL_CACHE_PATCHES,
    viewport.HeadlessViewportPatch(),
    stepping.EnvironmentStepPatch(),
    stepping.MultiSceneStepPatch(),  # over env_step_obs's Environment.step on main
    stepping.VectorEnvironmentStepPatch(),
    vector_env.MultiSceneVectorEnvironmentPatch(),  # main: a VectorEnvironment over the multi-scene Environment
    stepping.EnvironmentWrapperForwardingPatch(),
    viewport.ViewerCameraOffPatch(),
    runtime.KitLaunchArgvPatch(),
    runtime.KitThreadCapsPatch(),
    runtime.KitDescriptorSetsPatch(),
    gpu.KitRendererGpuPatch(),
    runtime.GcAfterLaunchPatch(),
    runtime.TextureStreamingBudgetPatch(),
    runtime.RenderQualityPatch(),
)

#: The registry of this process: every ``apply()`` / ``revert()`` of the package goes through it.
REGISTRY = PatchRegistry(PATCHES)


def apply(profile: RolloutProfile | Mapping[str, Any] | None = None) -> PatchReport:
    """Apply the patch set for ``profile`` (default: the fast path). Idempotent; see the registry docs."""
    return REGISTRY.apply(profile)


def revert() -> None:
    """Restore every original object the patch set replaced."""
    REGISTRY.revert()


def status() -> dict[str, PatchOutcome]:
    """Name -> outcome of every patch for the active profile (empty when nothing is applied)."""
    return REGISTRY.status()


def active_profile() -> RolloutProfile | None:
    """The profile applied in this process, or ``None``."""
    return REGISTRY.profile
