"""Process runtime of an OmniGibson env worker: thread caps, numba kernel cache, GC, texture streaming.

- Kit thread caps (carb tasking, TBB, PhysX CPU workers) are Kit command-line settings
  (``--/path=value``, the form ``SimulationApp``'s ``extra_args`` takes). ``SimulationApp`` appends its
  own ``threadCount``/``maxThreadCount`` pair (``limit_cpu_threads``) after ``extra_args`` and the
  process's ``sys.argv`` extras after that, so the caps ride on ``sys.argv`` for the duration of
  ``_launch_app``: they come last and win. The values Kit ended up with are read back after launch
  (:func:`effective_kit_settings`).
- Python-side pools (OpenMP, MKL, OpenBLAS, torch intra-op) are capped through environment variables,
  and ``torch.set_num_threads`` when torch is already imported.
- numba: ``NUMBA_CACHE_DIR`` points at a writable directory, numba/llvmlite are imported before Kit (Isaac
  bundles an older numba; loading ours first avoids ``unknown attr 'nocapture'``), and the controller
  kernels get ``cache=True`` after their module ran (``Dispatcher.enable_caching()``), so compiled
  kernels load from disk in later processes.
- After launch: ``gc.enable()`` (Kit disables Python's GC; OmniGibson has reference cycles) and the RTX
  texture-streaming budget (fraction of GPU memory).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Iterable

from ..registry import Patch, PatchContext, UpstreamLayoutError
from ...core.checks import check_writable_dir
from ...core.profile import RolloutProfile
from ._util import LaunchAppPatch

#: Kit setting path of each thread-cap knob.
KIT_THREAD_SETTINGS = {
    "carb_tasking_threads": "/plugins/carb.tasking.plugin/threadCount",
    "tbb_max_threads": "/plugins/omni.tbb.globalcontrol/maxThreadCount",
    "physx_worker_threads": "/persistent/physics/numThreads",
}
#: Environment variables sizing the Python-side thread pools.
INTRA_OP_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
TEXTURE_BUDGET_SETTING = "/rtx-transient/resourcemanager/texturestreaming/memoryBudget"
#: Imported before Kit, in this order.
NUMBA_PRELOAD = ("llvmlite", "numba", "numba.np.arrayobj", "numba.core.runtime.context")

_effective: dict[str, Any] = {}


def kit_thread_args(profile: RolloutProfile) -> list[str]:
    """Kit ``--/path=value`` arguments for the profile's thread caps (knobs left at ``None`` are omitted)."""
    return [
        f"--{path}={getattr(profile, knob)}"
        for knob, path in KIT_THREAD_SETTINGS.items()
        if getattr(profile, knob) is not None
    ]


def effective_kit_settings() -> dict[str, Any]:
    """Kit setting path -> value read back after the last patched launch in this process (empty before)."""
    return dict(_effective)


def _carb_settings(module: Any) -> Any:
    return module.lazy.carb.settings.get_settings()


def _has_opt_in_macro(module: Any, macro: str) -> bool:
    """Whether the simulator module defines ``m.<macro>``: ``patches/`` adds the launch settings as macros that
    default to off, so their presence in ``_launch_app`` does not mean the launch applies them."""
    macros = getattr(module, "m", None)
    return macros is not None and macro in macros
def launch_with_kit_args(module: Any, args: list[str], read_back: Iterable[str], start: Callable[[], Any]) -> Any:
    """``start()`` with the Kit ``--/path=value`` ``args`` on ``sys.argv`` for the duration of the launch
    (they come last and win, see module docs); the values Kit ended up with for the setting paths
    ``read_back`` are recorded for :func:`effective_kit_settings`."""
    argv = list(sys.argv)
    sys.argv[:] = argv + args
    try:
        app = start()
    finally:
        sys.argv[:] = argv
    settings = _carb_settings(module)
    _effective.update({path: settings.get(path) for path in read_back})
    return app


class KitThreadCapsPatch(LaunchAppPatch):
    """Carb tasking, TBB and PhysX worker thread caps on the Kit command line at launch."""

    name = "kit_thread_caps"
    knobs = tuple(KIT_THREAD_SETTINGS)

    def wanted(self, profile: RolloutProfile) -> bool:
        return any(getattr(profile, knob) is not None for knob in KIT_THREAD_SETTINGS)

    def upstream_has_it(self, module: Any, launch_source: str) -> str | None:
        if "carb.tasking.plugin/threadCount" in launch_source and not _has_opt_in_macro(module, "KIT_TASKING_THREADS"):
            return "upstream _launch_app already sets Kit thread caps"
        return None

    def launch(self, module: Any, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        return launch_with_kit_args(module, kit_thread_args(profile), KIT_THREAD_SETTINGS.values(), start)


class GcAfterLaunchPatch(LaunchAppPatch):
    """``gc.enable()`` right after the app started (Kit disables Python's garbage collector)."""

    name = "gc_after_launch"
    knobs = ("gc_enable",)

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.gc_enable

    def launch(self, module: Any, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        app = start()
        gc.enable()
        return app


class TextureStreamingBudgetPatch(LaunchAppPatch):
    """Sets the RTX texture-streaming memory budget (fraction of GPU memory) right after launch."""

    name = "texture_streaming_budget"
    knobs = ("texture_streaming_budget",)

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.texture_streaming_budget is not None

    def upstream_has_it(self, module: Any, launch_source: str) -> str | None:
        if "texturestreaming/memoryBudget" in launch_source and not _has_opt_in_macro(
            module, "TEXTURE_STREAMING_MEMORY_BUDGET"
        ):
            return "upstream _launch_app already sets the texture-streaming budget"
        return None

    def launch(self, module: Any, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        app = start()
        _carb_settings(module).set_float(TEXTURE_BUDGET_SETTING, float(profile.texture_streaming_budget))
        return app


class IntraOpThreadsPatch(Patch):
    """OMP / MKL / OpenBLAS thread counts and torch intra-op threads of this process."""

    name = "intra_op_threads"
    module = None
    knobs = ("intra_op_threads",)
    targets = INTRA_OP_ENV_VARS + ("torch.set_num_threads",)

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.intra_op_threads is not None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        threads = profile.intra_op_threads
        for var in INTRA_OP_ENV_VARS:
            ctx.set_env(var, str(threads))
        torch = sys.modules.get("torch")
        if torch is not None:
            previous = torch.get_num_threads()
            torch.set_num_threads(threads)
            ctx.on_undo(lambda: torch.set_num_threads(previous))


def _numba_cache_dir(profile: RolloutProfile) -> str:
    """The profile's ``numba_cache_dir`` as an absolute path (``~`` expanded)."""
    return os.path.abspath(os.path.expanduser(profile.numba_cache_dir))


class NumbaCacheDirPatch(Patch):
    """Writable ``NUMBA_CACHE_DIR`` and numba/llvmlite imported before Kit (see :data:`NUMBA_PRELOAD`)."""

    name = "numba_cache_dir"
    module = None
    knobs = ("numba_cache", "numba_cache_dir")
    targets = ("NUMBA_CACHE_DIR",) + NUMBA_PRELOAD

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.numba_cache

    def skip_reason(self, module: Any) -> str | None:
        missing = [name for name in ("numba", "llvmlite") if importlib.util.find_spec(name) is None]
        return f"{' and '.join(missing)} not installed: no numba kernels to cache" if missing else None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        path = check_writable_dir("numba_cache_dir", _numba_cache_dir(profile))
        ctx.set_env("NUMBA_CACHE_DIR", path)
        for name in NUMBA_PRELOAD:
            importlib.import_module(name)
        ctx.set_attribute(sys.modules["numba.core.config"], "CACHE_DIR", path)


class NumbaKernelCachePatch(Patch):
    """``cache=True`` for the numba kernels of one controller module (numpy controller backend)."""

    knobs = ("numba_cache", "numba_cache_dir")

    def __init__(self, name: str, module: str, targets: tuple[str, ...], upstream_file: str | None) -> None:
        self.name = name
        self.module = module
        self.targets = targets
        self.upstream_file = upstream_file

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.numba_cache

    def skip_reason(self, module: Any) -> str | None:
        from numba.core.caching import NullCache
        from numba.core.dispatcher import Dispatcher

        if not any(isinstance(obj, Dispatcher) for obj in vars(module).values()):
            return f"{module.__name__} compiles no numba kernels (no numpy controller backend in this OmniGibson)"
        missing = [t for t in self.targets if not isinstance(getattr(module, t, None), Dispatcher)]
        if missing:
            raise UpstreamLayoutError(f"{module.__name__} has numba kernels but not {missing}: unsupported layout")
        if not any(isinstance(getattr(module, t)._cache, NullCache) for t in self.targets):
            return f"upstream already compiles {', '.join(self.targets)} with cache=True"
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        from numba.core import config

        if os.path.abspath(config.CACHE_DIR or "") != _numba_cache_dir(profile):
            raise RuntimeError("the numba_cache_dir patch must be applied before the kernel cache patches")
        for target in self.targets:
            kernel = getattr(module, target)
            previous = kernel._cache
            kernel.enable_caching()
            ctx.on_undo(lambda kernel=kernel, previous=previous: setattr(kernel, "_cache", previous))


#: One kernel-cache patch per controller module of the numpy controller backend (v3.7.x names).
KERNEL_CACHE_PATCHES = (
    NumbaKernelCachePatch(
        "numba_cache_joint_controller",
        "omnigibson.controllers.joint_controller",
        ("numba_ix", "_compute_joint_torques_numpy"),
        "omnigibson/controllers/joint_controller.py",
    ),
    NumbaKernelCachePatch(
        "numba_cache_ik_controller",
        "omnigibson.controllers.ik_controller",
        ("_compute_ik_qpos_numpy",),
        "omnigibson/controllers/ik_controller.py",
    ),
    NumbaKernelCachePatch(
        "numba_cache_osc_controller",
        "omnigibson.controllers.osc_controller",
        ("_compute_osc_torques_numpy",),
        "omnigibson/controllers/osc_controller.py",
    ),
)
