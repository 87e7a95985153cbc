"""Process runtime of an OmniGibson env worker: Kit launch settings, thread caps, numba kernel cache, GC, texture
streaming, render quality.

- Kit launch settings (thread caps of carb tasking, TBB and PhysX CPU workers; ``/rtx/descriptorSets``) are
  Kit command-line settings (``--/path=value``, the form ``SimulationApp``'s ``extra_args`` takes).
  ``SimulationApp`` appends its own ``threadCount``/``maxThreadCount`` pair (``limit_cpu_threads``) after
  ``extra_args`` and the process's ``sys.argv`` extras after that, so settings on ``sys.argv`` come last and
  win. main's ``_launch_app`` replaces ``sys.argv`` before it builds the app (``[]`` before BEHAVIOR-1K #2178,
  ``[argv0]`` since), so anything put on ``sys.argv`` before the launch would be dropped there: the settings
  go onto ``sys.argv`` at the moment upstream's ``_launch_app`` constructs ``SimulationApp`` (its
  ``lazy.<path>.SimulationApp`` is redirected for the launch, :func:`kit_app_hook`) and are taken off again
  after it. The values Kit ended up with are read back after launch (:func:`effective_kit_settings`).
  Where the launch is depends on the layout (:func:`~.layout.kit_launcher`): the simulator's ``_launch_app``,
  or on the render/physics-backend refactor ``launch_kit_app`` of the kit render backend, which builds the app
  the same way (``lazy.isaacsim.SimulationApp``, ``sys.argv = [argv0]``).
- ``argv[0]``: Kit skips ``sys.argv[0]`` as the script name; where ``_launch_app`` clears ``sys.argv`` to
  ``[]``, its first own argument is lost (#2178: Kit then recompiles its Vulkan pipelines on every launch), so
  the caller's ``argv[0]`` is put back in front when ``SimulationApp`` is constructed.
- Render quality (reflections, indirect diffuse, ambient occlusion, sampled direct lighting): RTX runtime
  settings, set after ``og.launch()`` returned, i.e. after the simulator applied its own renderer settings.
  Changes pixels; only where the profile asks.
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

import contextlib
import gc
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..registry import Patch, PatchContext, UpstreamLayoutError
from ...core.checks import check_writable_dir
from ...core.profile import RENDER_QUALITY_FIELDS, RTX_DESCRIPTOR_SETS_UPSTREAM, RolloutProfile
from ._util import LaunchAppPatch
from .layout import KitLauncher, kit_launcher, rtx_reason

#: Kit setting path of each thread-cap knob.
KIT_THREAD_SETTINGS = {
    "carb_tasking_threads": "/plugins/carb.tasking.plugin/threadCount",
    "tbb_max_threads": "/plugins/omni.tbb.globalcontrol/maxThreadCount",
    "physx_worker_threads": "/persistent/physics/numThreads",
}
#: Environment variables sizing the Python-side thread pools.
INTRA_OP_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
TEXTURE_BUDGET_SETTING = "/rtx-transient/resourcemanager/texturestreaming/memoryBudget"
DESCRIPTOR_SETS_SETTING = "/rtx/descriptorSets"
#: ``rtx_descriptor_sets="auto"``: descriptor sets per camera (render product). Isaac Sim's own extensions set
#: 360000, which ran BEHAVIOR-1K #2152's failing case of 10 envs x 3 cameras (30 render products): 12000 each.
DESCRIPTOR_SETS_PER_CAMERA = 12000
#: ``headless_render_settings``: Kit setting path -> value, from Isaac Lab 3.0's
#: ``apps/isaaclab.python.headless.rendering.kit`` (isaac-sim/IsaacLab 00315b6c), the ones BEHAVIOR's use tolerates
#: (docs/omnigibson.md weighs each, and the ones left out). With one render per chunk, a render that returns before
#: its frame is complete, or Replicator data of the frame before, hands the policy a frame from before the chunk.
HEADLESS_RENDER_SETTINGS = {
    "/omni/replicator/asyncRendering": "false",  # annotator data of the frame just rendered (synchronous)
    "/app/renderer/waitIdle": "true",  # an app update returns once the renderer is idle ...
    "/app/hydraEngine/waitIdle": "true",  # ... and the Hydra engine too ("avoids frame offset issue")
    "/app/updateOrder/checkForHydraRenderComplete": "1000",  # wait for Hydra's render to complete (Isaac Lab's 1000)
    "/exts/omni.replicator.core/Orchestrator/enabled": "false",  # OmniGibson reads annotators, runs no writers
}
#: Headless only: nothing is presented to a window (a run with a GUI keeps it).
PRESENT_THREAD_SETTING = "/exts/omni.renderer.core/present/enabled"
#: RTX setting path of each render-quality knob.
RENDER_QUALITY_SETTINGS = dict(zip(RENDER_QUALITY_FIELDS, (
    "/rtx/reflections/enabled",
    "/rtx/indirectDiffuse/enabled",
    "/rtx/ambientOcclusion/enabled",
    "/rtx/directLighting/sampledLighting/enabled",
)))
#: ``lazy.<path>.SimulationApp(`` in ``_launch_app``: where upstream builds the Kit app.
_KIT_APP = re.compile(r"\blazy\.([\w.]+)\.SimulationApp\(")
#: ``_launch_app`` clearing ``sys.argv`` (main before #2178) or keeping ``argv[0]`` (#2178).
_CLEARS_ARGV = re.compile(r"^\s*sys\.argv\s*=\s*\[\s*\]", re.M)
#: An uncommented ``descriptorSets = N`` in a ``.kit`` experience file (1.1.1's files carry it commented out).
_KIT_DESCRIPTOR_SETS = re.compile(r"^\s*(?:rtx\.)?descriptorSets\s*=\s*(\d+)", re.M)
_KEEPS_ARGV0 = re.compile(r"^\s*sys\.argv\s*=\s*\[\s*_saved_argv\[0\]\s*\]", re.M)
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


def descriptor_sets(profile: RolloutProfile) -> int | None:
    """The ``/rtx/descriptorSets`` the launch gets for ``profile`` (``None``: upstream's): ``"auto"`` is
    :data:`DESCRIPTOR_SETS_PER_CAMERA` per camera of the process (envs per process x ``cameras_per_env``), never
    below Kit's built-in :data:`~behavior1k_fast.core.profile.RTX_DESCRIPTOR_SETS_UPSTREAM`."""
    value = profile.rtx_descriptor_sets
    if value != "auto":
        return value
    cameras = profile.envs_per_process * profile.cameras_per_env
    return max(RTX_DESCRIPTOR_SETS_UPSTREAM, DESCRIPTOR_SETS_PER_CAMERA * cameras)


def launch_kit_args(profile: RolloutProfile, headless: bool = True) -> list[str]:
    """Every Kit ``--/path=value`` argument the profile's launch patches add (thread caps, descriptor sets, the
    headless render settings) to a launch that is ``headless`` or not, in the order Kit reads them."""
    sets = descriptor_sets(profile)
    return (kit_thread_args(profile) + ([] if sets is None else [f"--{DESCRIPTOR_SETS_SETTING}={sets}"])
            + (headless_render_args(headless) if profile.headless_render_settings else []))


def render_quality_settings(profile: RolloutProfile) -> dict[str, bool]:
    """RTX setting path -> value for the render-quality knobs the profile sets (``None`` knobs are left out)."""
    return {path: getattr(profile, knob) for knob, path in RENDER_QUALITY_SETTINGS.items()
            if getattr(profile, knob) is not None}


def effective_kit_settings() -> dict[str, Any]:
    """Kit setting path -> value read back after the last patched launch in this process (empty before)."""
    return dict(_effective)


def _carb_settings(module: Any) -> Any:
    return module.lazy.carb.settings.get_settings()


def _package_folder(module: Any) -> Path:
    """The ``omnigibson/`` folder of the package module ``module`` (e.g. ``omnigibson.simulator``,
    ``omnigibson.render_backends.kit_backend``) lives in: where the ``.kit`` experience files are."""
    return Path(getattr(module, "__file__", "") or "./x").parents[max(module.__name__.count(".") - 1, 0)]


def _has_opt_in_macro(module: Any, macro: str) -> bool:
    """Whether the simulator module defines ``m.<macro>``: ``patches/`` adds the launch settings as macros that
    default to off, so their presence in ``_launch_app`` does not mean the launch applies them."""
    macros = getattr(module, "m", None)
    return macros is not None and macro in macros
def kit_app_path(launch_source: str, function: str = "_launch_app") -> str:
    """The ``omnigibson.lazy`` path of the class upstream's launch function (``function``, whose source is
    ``launch_source``) builds the Kit app from (``isaacsim`` on v3.7, main and the render-backend layout,
    ``omni.isaac.kit`` on 1.1.1); ``UpstreamLayoutError`` where it builds none."""
    match = _KIT_APP.search(launch_source)
    if match is None:
        raise UpstreamLayoutError(f"{function} builds no lazy.<module>.SimulationApp: unsupported OmniGibson layout")
    return match[1]


class _Redirect:
    """``target`` seen through ``path`` (dotted attribute names): the last one's value is ``hook(value)``; every
    other attribute is ``target``'s, looked up when it is read (``omnigibson.lazy`` imports on access)."""

    def __init__(self, target: Any, path: str, hook: Callable[[Any], Any]) -> None:
        self._target, self._path, self._hook = target, path, hook

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        first, _, rest = self._path.partition(".")
        if name != first:
            return value
        return _Redirect(value, rest, self._hook) if rest else self._hook(value)


@contextlib.contextmanager
def kit_app_hook(launcher: KitLauncher, before_start: Callable[[], None]) -> Iterator[None]:
    """For the block, ``before_start()`` runs right before upstream's launch function (``launcher``) constructs
    its ``SimulationApp`` (through its module's ``lazy``, redirected for the block; hooks nest)."""
    module = launcher.module
    path = f"{kit_app_path(launcher.source, launcher.function)}.SimulationApp"

    def hook(app_class: Any) -> Callable[..., Any]:
        def construct(*args: Any, **kwargs: Any) -> Any:
            before_start()
            return app_class(*args, **kwargs)

        return construct

    lazy = module.lazy
    module.lazy = _Redirect(lazy, path, hook)
    try:
        yield
    finally:
        module.lazy = lazy


def launch_with_kit_args(launcher: KitLauncher, args: list[str], read_back: Iterable[str],
                         start: Callable[[], Any]) -> Any:
    """``start()`` with the Kit ``--/path=value`` ``args`` appended to ``sys.argv`` when ``SimulationApp`` is
    constructed (they come last and win; taken off again after the launch, see module docs); the values Kit
    ended up with for the setting paths ``read_back`` are recorded for :func:`effective_kit_settings`."""
    added: list = []

    def before_start() -> None:
        added.append(sys.argv)
        sys.argv.extend(args)

    try:
        with kit_app_hook(launcher, before_start):
            app = start()
    finally:
        if added and added[0] is sys.argv:  # still the list the arguments went on (1.1.1 and v3.7 keep it)
            _remove_last_run(sys.argv, args)
    settings = _carb_settings(launcher.module)
    _effective.update({path: settings.get(path) for path in read_back})
    return app


def _remove_last_run(items: list, run: list) -> None:
    """Delete the last occurrence of the consecutive items ``run`` from ``items`` (nothing if absent)."""
    for at in range(len(items) - len(run), -1, -1):
        if items[at:at + len(run)] == run:
            del items[at:at + len(run)]
            return


class KitArgsPatch(LaunchAppPatch):
    """A launch patch that puts Kit arguments on ``SimulationApp``'s command line (:func:`kit_app_hook`): it
    needs a launch function that builds ``lazy.<module>.SimulationApp``."""

    def skip_reason(self, module: Any) -> str | None:
        reason = super().skip_reason(module)
        if reason is None:
            launcher = kit_launcher(module)
            kit_app_path(launcher.source, launcher.function)
        return reason


class KitThreadCapsPatch(KitArgsPatch):
    """Carb tasking, TBB and PhysX worker thread caps on the Kit command line at launch."""

    name = "kit_thread_caps"
    knobs = tuple(KIT_THREAD_SETTINGS)

    def wanted(self, profile: RolloutProfile) -> bool:
        return any(getattr(profile, knob) is not None for knob in KIT_THREAD_SETTINGS)

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        if "carb.tasking.plugin/threadCount" in launcher.source and not _has_opt_in_macro(
            launcher.module, "KIT_TASKING_THREADS"
        ):
            return f"upstream {launcher.function} already sets Kit thread caps"
        return None

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        return launch_with_kit_args(launcher, kit_thread_args(profile), KIT_THREAD_SETTINGS.values(), start)


class KitDescriptorSetsPatch(KitArgsPatch):
    """Kit ``/rtx/descriptorSets`` on the launch command line (:func:`descriptor_sets`): OmniGibson's trimmed
    ``.kit`` inherits Kit's 10000, which runs out at 8-10 envs x 3 cameras (BEHAVIOR-1K #2152)."""

    name = "rtx_descriptor_sets"
    knobs = ("rtx_descriptor_sets", "envs_per_process", "cameras_per_env")
    rtx = True

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.rtx_descriptor_sets is not None

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        module = launcher.module
        if "descriptorSets" in launcher.source and not _has_opt_in_macro(module, "RTX_DESCRIPTOR_SETS"):
            return f"upstream {launcher.function} already sets /rtx/descriptorSets"
        kit_files = getattr(getattr(module, "m", None), "KIT_FILES", None) or {}
        folder = _package_folder(module)
        for name in sorted(set(kit_files.values())):
            path = folder / name
            match = _KIT_DESCRIPTOR_SETS.search(path.read_text(errors="replace")) if path.is_file() else None
            if match:
                return f"upstream's {name} already sets /rtx/descriptorSets={match[1]}"
        return None

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        args = [f"--{DESCRIPTOR_SETS_SETTING}={descriptor_sets(profile)}"]
        return launch_with_kit_args(launcher, args, [DESCRIPTOR_SETS_SETTING], start)


def headless_render_args(headless: bool) -> list[str]:
    """Kit ``--/path=value`` arguments of ``headless_render_settings`` (the present thread off only ``headless``)."""
    settings = dict(HEADLESS_RENDER_SETTINGS, **({PRESENT_THREAD_SETTING: "false"} if headless else {}))
    return [f"--{path}={value}" for path, value in settings.items()]


class KitHeadlessRenderSettingsPatch(KitArgsPatch):
    """Isaac Lab 3.0's headless-rendering settings on the Kit command line at launch (:func:`headless_render_args`):
    the frame read after a render is the one just rendered. Opt-in: it trades the overlap of rendering with the
    next update for that guarantee."""

    name = "kit_headless_render_settings"
    knobs = ("headless_render_settings",)
    rtx = True

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.headless_render_settings

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        if "asyncRendering" in launcher.source:
            return f"upstream {launcher.function} already sets Replicator's rendering mode"
        return None

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        headless = bool(sys.modules["omnigibson.macros"].gm["HEADLESS"])
        args = headless_render_args(headless)
        return launch_with_kit_args(launcher, args, [arg[2:].split("=", 1)[0] for arg in args], start)


class KitLaunchArgvPatch(KitArgsPatch):
    """Kit gets the caller's ``argv[0]`` where upstream's ``_launch_app`` clears ``sys.argv`` to ``[]`` (the fix
    of BEHAVIOR-1K #2178, ``sys.argv = [argv0]``): otherwise Kit takes the first launch argument for the script
    name and drops it."""

    name = "kit_launch_argv"
    knobs = ("keep_launch_argv0",)

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.keep_launch_argv0

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        if _CLEARS_ARGV.search(launcher.source):
            return None
        if _KEEPS_ARGV0.search(launcher.source):
            return f"upstream {launcher.function} already keeps sys.argv[0] (PR #2178)"
        return f"upstream {launcher.function} does not clear sys.argv: Kit gets the caller's argv[0]"

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        argv0 = sys.argv[:1]

        def before_start() -> None:
            if argv0 and sys.argv[:1] != argv0:
                sys.argv.insert(0, argv0[0])

        with kit_app_hook(launcher, before_start):
            return start()


class RenderQualityPatch(Patch):
    """RTX reflections, indirect diffuse, ambient occlusion and sampled direct lighting as the profile sets them,
    right after ``og.launch()`` (the simulator sets its own renderer settings while it is built). Changes pixels."""

    name = "render_quality"
    module = "omnigibson"
    knobs = tuple(RENDER_QUALITY_SETTINGS)
    targets = ("launch",)
    upstream_file = "omnigibson/simulator.py"

    def wanted(self, profile: RolloutProfile) -> bool:
        return bool(render_quality_settings(profile))

    def skip_reason(self, module: Any) -> str | None:
        if not callable(getattr(module, "launch", None)):
            raise UpstreamLayoutError(f"{module.__name__}.launch is missing: unsupported OmniGibson layout")
        simulator = sys.modules.get("omnigibson.simulator")
        return rtx_reason(simulator) if simulator is not None else None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        wanted = render_quality_settings(profile)

        def launch(wrapped, instance, args, kwargs):
            sim = wrapped(*args, **kwargs)
            settings = _carb_settings(module)
            for path, value in wanted.items():
                settings.set_bool(path, value)
            _effective.update({path: settings.get(path) for path in wanted})
            return sim

        ctx.wrap(module, "launch", launch)


class GcAfterLaunchPatch(LaunchAppPatch):
    """``gc.enable()`` right after the app started (Kit disables Python's garbage collector)."""

    name = "gc_after_launch"
    knobs = ("gc_enable",)

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.gc_enable

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        app = start()
        gc.enable()
        return app


class TextureStreamingBudgetPatch(LaunchAppPatch):
    """Sets the RTX texture-streaming memory budget (fraction of GPU memory) right after launch."""

    name = "texture_streaming_budget"
    knobs = ("texture_streaming_budget",)
    rtx = True

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.texture_streaming_budget is not None

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        if "texturestreaming/memoryBudget" in launcher.source and not _has_opt_in_macro(
            launcher.module, "TEXTURE_STREAMING_MEMORY_BUDGET"
        ):
            return f"upstream {launcher.function} already sets the texture-streaming budget"
        return None

    def launch(self, launcher: KitLauncher, profile: RolloutProfile, start: Callable[[], Any]) -> Any:
        app = start()
        _carb_settings(launcher.module).set_float(TEXTURE_BUDGET_SETTING, float(profile.texture_streaming_budget))
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
