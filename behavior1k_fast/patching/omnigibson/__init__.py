"""Runtime patches for OmniGibson, one module per patched class or concern, and the process-wide registry.

``PATCHES`` is the patch set in application order: process settings first (they must precede the
simulator's own code), then class and function patches, then the changes around the Kit app launch.
``REGISTRY`` is the one registry of this process; :func:`apply`, :func:`revert` and :func:`status` (re-exported
as ``behavior1k_fast.apply`` ...) drive it and return a :class:`~..registry.PatchReport`. Its simulator is
``omnigibson``: process settings (thread pools, numba cache directory, GPU binding) apply only in a process
that runs OmniGibson, when it imports ``omnigibson`` (before OmniGibson's own code runs) or at once with
``apply(process="simulator")`` (what an engine worker of an OmniGibson backend does); a trainer that calls
``apply()`` and never imports OmniGibson keeps its thread pools. Importing this package imports no simulator.

Modules: :mod:`.layout` (which upstream layout is loaded: the one home of feature detection), :mod:`.methods`
(typed method-patch records, the keyword-adding base), :mod:`.env_step`, :mod:`.multi_scene_step`,
:mod:`.vector_env_step`, :mod:`.wrapper_forwarding` (the stepping patches), :mod:`.viewport`, :mod:`.annotators`,
:mod:`.gpu`,
:mod:`.runtime` (process and launch settings), :mod:`.cpu_import` (importing OmniGibson without CUDA),
:mod:`._util` (call binding, instance overrides, the launch-patch base).
"""

from __future__ import annotations

from typing import Any, Mapping

from ...core.profile import RolloutProfile
from ..registry import PatchRegistry, PatchReport
from . import (annotators, env_step, gpu, multi_scene_step, runtime, vector_env, vector_env_step, viewport,
               wrapper_forwarding)

PATCHES: tuple = (
    gpu.GpuBindingPatch(),
    runtime.IntraOpThreadsPatch(),
    runtime.NumbaCacheDirPatch(),
    *runtime.KERNEL_CACHE_PATCHES,
    viewport.HeadlessViewportPatch(),
    annotators.AnnotatorPruningPatch(),
    env_step.EnvironmentStepPatch(),
    multi_scene_step.MultiSceneStepPatch(),  # over env_step_obs's Environment.step on main
    vector_env_step.VectorEnvironmentStepPatch(),
    vector_env.MultiSceneVectorEnvironmentPatch(),  # main: a VectorEnvironment over the multi-scene Environment
    wrapper_forwarding.EnvironmentWrapperForwardingPatch(),
    viewport.ViewerCameraOffPatch(),
    runtime.KitLaunchArgvPatch(),
    runtime.KitThreadCapsPatch(),
    runtime.KitDescriptorSetsPatch(),
    runtime.KitHeadlessRenderSettingsPatch(),
    gpu.KitRendererGpuPatch(),
    runtime.GcAfterLaunchPatch(),
    runtime.TextureStreamingBudgetPatch(),
    runtime.RenderQualityPatch(),
)

#: The module whose import marks a process that runs the simulator.
SIMULATOR = "omnigibson"
#: The registry of this process: every ``apply()`` / ``revert()`` of the package goes through it.
REGISTRY = PatchRegistry(PATCHES, simulator=SIMULATOR)


def apply(profile: RolloutProfile | Mapping[str, Any] | None = None, process: str = "auto") -> PatchReport:
    """Apply the patch set for ``profile`` (default: the fast path; a mapping may use RLinf's key names).

    ``process="auto"``: process settings wait until this process imports OmniGibson; ``"simulator"``: this
    process runs the simulator, they apply now. Idempotent on the patch knobs (a profile that differs only
    in layout fields such as ``schedule`` or ``chunk_size`` reinstalls nothing); see the registry docs."""
    return REGISTRY.apply(RolloutProfile.coerce(profile), process)


def revert() -> PatchReport:
    """Restore every original object the patch set replaced; the report lists what was reverted."""
    return REGISTRY.revert()


def status() -> PatchReport:
    """The active profile and the outcome of every patch (``report.active`` is False when nothing is applied)."""
    return REGISTRY.status()


def active_profile() -> RolloutProfile | None:
    """The profile applied in this process, or ``None``."""
    return REGISTRY.profile
