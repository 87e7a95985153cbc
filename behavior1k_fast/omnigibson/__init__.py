"""Runtime patches for OmniGibson, one module per upstream area. Importing this imports no simulator.

``PATCHES`` is the patch set in application order: process settings first (they must precede the
simulator import), then class and function patches, then the changes around the Kit app launch.
"""

from . import modalities, runtime, stepping, viewport

PATCHES: tuple = (
    runtime.IntraOpThreadsPatch(),
    runtime.NumbaCacheDirPatch(),
    *runtime.KERNEL_CACHE_PATCHES,
    viewport.HeadlessViewportPatch(),
    modalities.CameraParametersPatch(),
    stepping.EnvironmentStepPatch(),
    stepping.VectorEnvironmentStepPatch(),
    stepping.EnvironmentWrapperForwardingPatch(),
    viewport.ViewerCameraOffPatch(),
    runtime.KitThreadCapsPatch(),
    runtime.GcAfterLaunchPatch(),
    runtime.TextureStreamingBudgetPatch(),
)
