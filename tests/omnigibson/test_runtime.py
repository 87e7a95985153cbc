"""Runtime patches: numba kernel cache, Kit launch settings, intra-op threads, GC, render quality.

The Kit launch settings are checked on each line's own ``_launch_app``, run up to the Kit start
(:func:`kit_start_argv`): what ``SimulationApp`` would read from ``sys.argv`` is what Kit gets."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import inspect
import os
import sys
import textwrap
import types
from typing import Any, Callable

import pytest

from behavior1k_fast.patching.omnigibson.runtime import (
    KERNEL_CACHE_PATCHES,
    RENDER_QUALITY_SETTINGS,
    TEXTURE_BUDGET_SETTING,
    GcAfterLaunchPatch,
    KitLaunchArgvPatch,
    KitThreadCapsPatch,
    NumbaCacheDirPatch,
    NumbaKernelCachePatch,
    TextureStreamingBudgetPatch,
    kit_app_path,
)
from behavior1k_fast.patching import APPLIED, FAILED, SKIPPED, PatchError, PatchRegistry
from behavior1k_fast.core.profile import RolloutProfile


def kernel_module(tmp_path, name: str, body: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


KERNELS = """
    import numpy as np
    from numba import jit

    @jit(nopython=True)
    def _compute_torques_numpy(u, mm):
        return mm @ u
"""


@pytest.fixture
def kernels(tmp_path):
    name = f"b1k_kernels_{tmp_path.name}"
    yield kernel_module(tmp_path, name, KERNELS)
    sys.modules.pop(name, None)


def test_numba_kernel_cache_writes_to_cache_dir_and_reverts(kernels, tmp_path, monkeypatch):
    import numpy as np
    from numba.core import config

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    cache_dir = tmp_path / "numba cache"
    previous_cache = kernels._compute_torques_numpy._cache
    previous_dir = config.CACHE_DIR
    patch = NumbaKernelCachePatch("numba_cache_test", kernels.__name__, ("_compute_torques_numpy",), None)
    registry = PatchRegistry([NumbaCacheDirPatch(), patch])
    report = registry.apply(RolloutProfile(numba_cache_dir=str(cache_dir)))
    assert report["numba_cache_test"].state == APPLIED
    assert os.environ["NUMBA_CACHE_DIR"] == str(cache_dir)
    result = kernels._compute_torques_numpy(np.ones(3), np.eye(3))
    assert result.tolist() == [1.0, 1.0, 1.0]
    written = [f for _, _, files in os.walk(cache_dir) for f in files]
    assert any(f.endswith(".nbi") for f in written) and any(f.endswith(".nbc") for f in written)
    registry.revert()
    assert kernels._compute_torques_numpy._cache is previous_cache
    assert config.CACHE_DIR == previous_dir and "NUMBA_CACHE_DIR" not in os.environ


def test_numba_cache_dir_must_be_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    registry = PatchRegistry([NumbaCacheDirPatch()])
    with pytest.raises(PatchError) as info:
        registry.apply(RolloutProfile(numba_cache_dir=str(blocker / "numba")))
    reason = info.value.report["numba_cache_dir"].reason
    assert "numba_cache_dir=" in reason and str(blocker / "numba") in reason


def test_numba_cache_dir_is_skipped_where_numba_is_absent(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real_find_spec(name, *a))
    registry = PatchRegistry([NumbaCacheDirPatch()])
    profile = RolloutProfile(numba_cache_dir=str(tmp_path / "numba"))
    assert registry.plan(profile)["numba_cache_dir"].state == SKIPPED
    report = registry.apply(profile)
    assert report["numba_cache_dir"].state == SKIPPED
    assert report["numba_cache_dir"].reason == "numba not installed: no numba kernels to cache"
    assert "NUMBA_CACHE_DIR" not in os.environ or os.environ["NUMBA_CACHE_DIR"] != str(tmp_path / "numba")
    registry.revert()


def test_kernel_cache_layout_checks(kernels, tmp_path):
    missing = NumbaKernelCachePatch("t", kernels.__name__, ("_compute_ik_qpos_numpy",), None)
    with pytest.raises(AttributeError, match=r"not \['_compute_ik_qpos_numpy'\]"):
        missing.skip_reason(kernels)
    no_kernels = types.ModuleType("plain_controllers")
    assert "compiles no numba kernels" in missing.skip_reason(no_kernels)
    cached = kernel_module(tmp_path, f"b1k_cached_{tmp_path.name}", KERNELS.replace("nopython=True", "nopython=True, cache=True"))
    patch = NumbaKernelCachePatch("t", cached.__name__, ("_compute_torques_numpy",), None)
    assert "already compiles _compute_torques_numpy with cache=True" in patch.skip_reason(cached)


#: Plan of the kernel-cache patches on each line's real controller modules, and why.
KERNEL_PLAN = {
    "1.1.1": {  # no numpy controller backend
        "numba_cache_joint_controller": (SKIPPED, "no numpy controller backend"),
        "numba_cache_ik_controller": (SKIPPED, "no numpy controller backend"),
        "numba_cache_osc_controller": (SKIPPED, "no numpy controller backend"),
    },
    "v3.7": {  # the only v3.7 ik_controller.py text available is RLinf's, which already has cache=True
        "numba_cache_joint_controller": (APPLIED, "installed"),
        "numba_cache_ik_controller": (SKIPPED, "already compiles _compute_ik_qpos_numpy with cache=True"),
        "numba_cache_osc_controller": (APPLIED, "installed"),
    },
    "main": {
        "numba_cache_joint_controller": (APPLIED, "installed"),
        "numba_cache_ik_controller": (APPLIED, "installed"),
        "numba_cache_osc_controller": (APPLIED, "installed"),
    },
}


def test_real_controller_kernels_get_cache_where_upstream_lacks_it(line, fast_profile):
    from numba.core.caching import NullCache

    registry = PatchRegistry([NumbaCacheDirPatch(), *KERNEL_CACHE_PATCHES])
    report = registry.apply(fast_profile)
    try:
        for patch in KERNEL_CACHE_PATCHES:
            state, reason = KERNEL_PLAN[line.name][patch.name]
            assert report[patch.name].state == state and reason in report[patch.name].reason, report[patch.name]
            if state == APPLIED:
                module = line.module(patch.module)
                assert not any(isinstance(getattr(module, t)._cache, NullCache) for t in patch.targets)
    finally:
        registry.revert()
    for patch in KERNEL_CACHE_PATCHES:
        if KERNEL_PLAN[line.name][patch.name][0] == APPLIED:
            module = line.module(patch.module)
            assert all(isinstance(getattr(module, t)._cache, NullCache) for t in patch.targets)


def test_real_launch_app_sets_no_thread_caps_or_texture_budget(line):
    from omnigibson import simulator

    from behavior1k_fast.patching.omnigibson.runtime import TextureStreamingBudgetPatch

    assert simulator is line.module("omnigibson.simulator")
    assert KitThreadCapsPatch().skip_reason(simulator) is None
    assert TextureStreamingBudgetPatch().skip_reason(simulator) is None


class KitStarted(Exception):
    """Raised by the stand-in ``SimulationApp``: the launch stops where Kit would start."""


def kit_start_argv(module, monkeypatch, tmp_path, function: str = "_launch_app"):
    """``launch() -> argv``: runs the launch function ``function`` of ``module`` (a line's own ``_launch_app``
    of ``omnigibson.simulator``, or ``launch_kit_app`` of the render-backend layout's kit backend) up to the Kit
    start and returns the ``sys.argv`` its ``SimulationApp`` would read. Stand-ins: the Isaac Sim install folders
    (``ISAAC_PATH`` with a ``VERSION`` the module's ``m.KIT_FILES`` knows, the newest, ``EXP_PATH``),
    ``import isaacsim``, the kit-file copy, the log suppression, main's asset check and Warp cache folder, and
    ``SimulationApp`` itself (through ``omnigibson.lazy``, where upstream reaches it), which raises
    :class:`KitStarted`."""
    from omnigibson.macros import gm

    launch_fn = getattr(module, function)
    path = kit_app_path(inspect.getsource(launch_fn))
    isaac, exp = tmp_path / "isaac", tmp_path / "exp"
    isaac.mkdir(exist_ok=True)
    exp.mkdir(exist_ok=True)
    (isaac / "VERSION").write_text(".".join(map(str, max(module.m.KIT_FILES))) + "-rc.1")
    for var, value in (("ISAAC_PATH", str(isaac)), ("EXP_PATH", str(exp)), ("OMNI_KIT_ACCEPT_EULA", "YES"),
                       ("MDL_USER_PATH", "")):
        monkeypatch.setenv(var, value)  # upstream sets the last two itself: restored after the test
    monkeypatch.setitem(gm, "APPDATA_PATH", str(tmp_path / "appdata"))
    seen: list = []

    def simulation_app(config, experience=None):
        seen.append(list(sys.argv))
        raise KitStarted

    app_module: object = types.SimpleNamespace(SimulationApp=simulation_app)
    first, *rest = path.split(".")
    for name in reversed(rest):
        app_module = types.SimpleNamespace(**{name: app_module})
    monkeypatch.setattr(sys.modules["omnigibson.lazy"], first, app_module, raising=False)
    monkeypatch.setitem(sys.modules, "isaacsim", types.ModuleType("isaacsim"))

    def copy(source, target):
        open(target, "w").close()

    monkeypatch.setattr(module, "shutil", types.SimpleNamespace(copy=copy, copyfile=copy))
    for name in ("suppress_omni_log", "SuppressLogsUntilError", "suppress_kit_log"):
        monkeypatch.setattr(module, name, contextlib.nullcontext, raising=False)
    if hasattr(module, "ensure_omnigibson_robot_assets_version"):  # main
        monkeypatch.setattr(module, "ensure_omnigibson_robot_assets_version", lambda: None)
    if hasattr(module, "wp"):  # main (cbd13c78), the kit backend: Warp's kernel cache folder
        monkeypatch.setattr(module, "wp", types.SimpleNamespace(config=types.SimpleNamespace()))

    def launch(entry: Callable[[], Any] | None = None) -> list:
        """Runs ``entry`` (default: the launch function itself) until ``SimulationApp`` is constructed."""
        with pytest.raises(KitStarted):
            (entry or getattr(module, function))()
        return seen.pop()

    return launch


@pytest.fixture
def kit_launch(line, monkeypatch, tmp_path):
    """:func:`kit_start_argv` for this test's line."""
    from omnigibson import simulator

    return kit_start_argv(simulator, monkeypatch, tmp_path)


@pytest.fixture
def settings(og, monkeypatch):
    """Stand-in carb settings (``omnigibson.lazy.carb``): path -> value."""
    values: dict = {}
    carb_settings = types.SimpleNamespace(get=values.get, set_float=values.__setitem__, set_bool=values.__setitem__)
    monkeypatch.setattr(
        sys.modules["omnigibson.lazy"], "carb",
        types.SimpleNamespace(settings=types.SimpleNamespace(get_settings=lambda: carb_settings)), raising=False,
    )
    return values


@pytest.fixture
def fake_launch(line, monkeypatch, settings):
    """``_launch_app`` replaced by a stand-in for the Kit start (disables GC, as Kit does), plus carb settings."""
    from omnigibson import simulator

    seen: dict = {}

    def launch_app():
        seen["argv"] = list(sys.argv)
        gc.disable()
        return "app"

    monkeypatch.setattr(simulator, "_launch_app", launch_app)
    yield simulator, seen, settings
    gc.enable()


def test_launch_gets_gc_and_texture_budget(fake_launch, tmp_path):
    simulator, seen, settings = fake_launch
    launch = simulator._launch_app
    registry = PatchRegistry([GcAfterLaunchPatch(), TextureStreamingBudgetPatch()])
    report = registry.apply(RolloutProfile(texture_streaming_budget=0.25, numba_cache_dir=str(tmp_path)))
    assert all(report[n].state == APPLIED for n in ("gc_after_launch", "texture_streaming_budget"))
    assert simulator._launch_app() == "app"
    assert gc.isenabled()
    assert settings[TEXTURE_BUDGET_SETTING] == 0.25
    registry.revert()
    assert simulator._launch_app is launch


def test_kit_gets_the_launch_settings_on_every_line(registry, kit_launch, settings, monkeypatch, tmp_path):
    """Thread caps and descriptor sets reach the command line Kit reads, also on main, whose ``_launch_app``
    replaces ``sys.argv`` before it builds the app; afterwards ``sys.argv`` is what upstream leaves (1.1.1 and v3.7
    keep their own launch arguments on it), without ours."""
    from omnigibson import simulator

    launch = simulator._launch_app
    argv = list(sys.argv)

    def launched() -> tuple[list, list]:
        monkeypatch.setattr(sys, "argv", list(argv))
        return kit_launch(), list(sys.argv)

    stock, stock_after = launched()
    profile = RolloutProfile(carb_tasking_threads=6, tbb_max_threads=3, physx_worker_threads=None,
                             total_num_envs=4, num_env_processes=2, numba_cache_dir=str(tmp_path))
    report = registry.apply(profile)
    assert report["kit_thread_caps"].state == report["rtx_descriptor_sets"].state == APPLIED
    patched, patched_after = launched()
    added = ["--/plugins/carb.tasking.plugin/threadCount=6", "--/plugins/omni.tbb.globalcontrol/maxThreadCount=3",
             "--/rtx/descriptorSets=72000"]  # 2 envs per process x 3 cameras x 12000
    assert patched == stock + added and patched[0] == argv[0]
    assert patched_after == stock_after
    registry.revert()
    assert simulator._launch_app is launch and launched() == (stock, stock_after)


def test_launch_patches_follow_their_knobs(registry, fake_launch):
    simulator, seen, settings = fake_launch
    report = registry.apply(RolloutProfile.stock())
    for name in ("kit_thread_caps", "gc_after_launch", "texture_streaming_budget", "intra_op_threads",
                 "rtx_descriptor_sets", "kit_launch_argv", "render_quality"):
        assert report[name].state == "disabled"
    simulator._launch_app()
    assert not gc.isenabled() and settings == {}
    assert not any(a.startswith("--/plugins") for a in seen["argv"])


#: The kit_launch_argv patch on each line's ``_launch_app``: (state, reason).
ARGV_PLAN = {
    "1.1.1": (SKIPPED, "does not clear sys.argv"),
    "v3.7": (SKIPPED, "does not clear sys.argv"),
    "main": (SKIPPED, "already keeps sys.argv[0] (PR #2178)"),
}


def test_argv0_patch_follows_each_lines_launch_text(line, fast_profile):
    outcome = PatchRegistry([KitLaunchArgvPatch()]).plan(fast_profile)["kit_launch_argv"]
    state, reason = ARGV_PLAN[line.name]
    assert outcome.state == state and reason in outcome.reason, outcome


def test_argv0_reaches_kit_where_launch_clears_argv(og, monkeypatch, tmp_path, fast_profile):
    """main/'s simulator text (before #2178) sets ``sys.argv = []``: Kit takes its first argument for the script
    name. With the patch, Kit's command line is the caller's ``argv[0]`` and then upstream's own arguments."""
    from ..upstream_lines import get_line, missing_reason

    if missing_reason("main-pre2178"):
        pytest.skip(missing_reason("main-pre2178"))
    get_line("main-pre2178").activate(monkeypatch)
    from omnigibson import simulator

    assert "sys.argv = []" in inspect.getsource(simulator._launch_app)
    kit_launch = kit_start_argv(simulator, monkeypatch, tmp_path)
    argv = list(sys.argv)

    def launch() -> list:
        monkeypatch.setattr(sys, "argv", list(argv))
        return kit_launch()

    stock = launch()
    assert stock[0] != sys.argv[0] and stock[0].startswith("--")  # Kit would skip this argument
    registry = PatchRegistry([KitLaunchArgvPatch(), KitThreadCapsPatch()])
    report = registry.apply(fast_profile)
    assert report["kit_launch_argv"].state == report["kit_thread_caps"].state == APPLIED
    patched = launch()
    assert patched[0] == sys.argv[0] and patched[1:len(stock) + 1] == stock
    assert patched[len(stock) + 1:] == ["--/plugins/carb.tasking.plugin/threadCount=8",
                                        "--/plugins/omni.tbb.globalcontrol/maxThreadCount=4",
                                        "--/persistent/physics/numThreads=4"]
    registry.revert()
    assert launch() == stock


def test_descriptor_sets_follow_envs_and_cameras_never_below_upstream(tmp_path):
    from behavior1k_fast.patching.omnigibson.runtime import descriptor_sets, launch_kit_args

    def sets(**knobs):
        return descriptor_sets(RolloutProfile(numba_cache_dir=str(tmp_path), **knobs))

    assert sets() == 36000  # 1 env x 3 cameras
    assert sets(total_num_envs=10) == 360000  # #2152's failing run: Isaac Sim's own value
    assert sets(total_num_envs=8, num_env_processes=4, cameras_per_env=1) == 24000
    assert sets(rtx_descriptor_sets=50000) == 50000 and sets(rtx_descriptor_sets=None) is None
    with pytest.raises(ValueError, match="rtx_descriptor_sets must be an int >= 10000"):
        RolloutProfile(rtx_descriptor_sets=9999)
    with pytest.raises(ValueError, match="'auto' or None, got 'max'"):
        RolloutProfile(rtx_descriptor_sets="max")
    assert "--/rtx/descriptorSets=36000" in launch_kit_args(RolloutProfile())
    assert not any("descriptorSets" in a for a in launch_kit_args(RolloutProfile.stock()))


def test_render_quality_knobs_win_over_the_simulators_settings_and_revert(og, line, settings, monkeypatch, tmp_path):
    """The simulator sets its renderer settings while ``og.launch()`` builds it; the knobs the profile sets are
    set after that, the others left as upstream set them."""
    from behavior1k_fast.patching.omnigibson.runtime import RenderQualityPatch

    def launch(**kwargs):  # as og.launch(): the simulator applies its own renderer settings
        for path in RENDER_QUALITY_SETTINGS.values():
            settings[path] = True
        return "sim"

    monkeypatch.setattr(og, "launch", launch)
    registry = PatchRegistry([RenderQualityPatch()])
    assert registry.apply(RolloutProfile(numba_cache_dir=str(tmp_path)))["render_quality"].state == "disabled"
    report = registry.apply(RolloutProfile(rtx_reflections=False, rtx_ambient_occlusion=False,
                                           numba_cache_dir=str(tmp_path)))
    assert report["render_quality"].state == APPLIED
    assert og.launch(physics_dt=0.01) == "sim"
    assert settings == {"/rtx/reflections/enabled": False, "/rtx/indirectDiffuse/enabled": True,
                        "/rtx/ambientOcclusion/enabled": False, "/rtx/directLighting/sampledLighting/enabled": True}
    registry.revert()
    assert og.launch is launch


LAUNCHER = """
    import sys

    lazy = None  # set by the test


    def _launch_app():  # as main's: replaces sys.argv, builds the app, restores the caller's argv
        saved = sys.argv[:]
        try:
            sys.argv = [saved[0], "--portable-root", "/appdata"]
            app = lazy.isaacsim.SimulationApp({"headless": True})
        finally:
            sys.argv = saved
        return app
"""


def test_kit_args_nest_reach_the_app_and_are_read_back(og, tmp_path, settings):
    """Two launch patches' arguments both reach ``SimulationApp`` (hooks nest, outer last), ``lazy`` and
    ``sys.argv`` are the caller's again after the launch, and the values Kit ended up with are read back."""
    from behavior1k_fast.patching.omnigibson.layout import KitLauncher
    from behavior1k_fast.patching.omnigibson.runtime import effective_kit_settings, launch_with_kit_args

    module = kernel_module(tmp_path, f"b1k_launcher_{tmp_path.name}", LAUNCHER)
    launcher = KitLauncher(module, "_launch_app")
    lazy = types.SimpleNamespace(isaacsim=types.SimpleNamespace(SimulationApp=lambda config: list(sys.argv)),
                                 carb=sys.modules["omnigibson.lazy"].carb)
    module.lazy = lazy
    settings.update({"/a": 1, "/b": 2})
    argv = list(sys.argv)

    def inner():
        return launch_with_kit_args(launcher, ["--/a=1"], ["/a"], module._launch_app)

    app_argv = launch_with_kit_args(launcher, ["--/b=2", "--/c=3"], ["/b"], inner)
    assert app_argv == [argv[0], "--portable-root", "/appdata", "--/a=1", "--/b=2", "--/c=3"]
    assert sys.argv == argv and module.lazy is lazy
    assert {k: effective_kit_settings()[k] for k in ("/a", "/b")} == {"/a": 1, "/b": 2}
    sys.modules.pop(module.__name__, None)


def test_thread_caps_skipped_when_upstream_launch_sets_them():
    module = types.ModuleType("fork_simulator")

    def _launch_app():
        return ["--/plugins/carb.tasking.plugin/threadCount=8"]

    module._launch_app = _launch_app
    assert "already sets Kit thread caps" in KitThreadCapsPatch().skip_reason(module)
    with pytest.raises(AttributeError, match="_launch_app is missing"):
        KitThreadCapsPatch().skip_reason(types.ModuleType("new_simulator"))
    module._launch_app = lambda: None  # builds no SimulationApp: nowhere to put Kit arguments
    with pytest.raises(AttributeError, match="builds no lazy.<module>.SimulationApp"):
        KitThreadCapsPatch().skip_reason(module)


def test_intra_op_threads_set_and_restored(monkeypatch, tmp_path):
    import torch

    from behavior1k_fast.patching.omnigibson.runtime import IntraOpThreadsPatch

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    threads = torch.get_num_threads()
    registry = PatchRegistry([IntraOpThreadsPatch()])
    registry.apply(RolloutProfile(intra_op_threads=1, numba_cache_dir=str(tmp_path)))
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1
    registry.revert()
    assert os.environ["OMP_NUM_THREADS"] == "7" and torch.get_num_threads() == threads


def test_failed_launch_patch_rolls_back_earlier_patches(line, fast_profile, monkeypatch):
    from omnigibson import simulator
    from omnigibson.envs.env_wrapper import EnvironmentWrapper

    from behavior1k_fast.patching.omnigibson.wrapper_forwarding import EnvironmentWrapperForwardingPatch

    step = EnvironmentWrapper.__dict__["step"]
    monkeypatch.delattr(simulator, "_launch_app")
    registry = PatchRegistry([EnvironmentWrapperForwardingPatch(), KitThreadCapsPatch()])
    with pytest.raises(PatchError) as info:
        registry.apply(fast_profile)
    assert info.value.report["kit_thread_caps"].state == FAILED
    assert info.value.report["env_wrapper_forwarding"].state == APPLIED
    assert EnvironmentWrapper.__dict__["step"] is step


def test_gpu_binding_sets_and_restores_the_process_gpu(monkeypatch, tmp_path):
    from behavior1k_fast.patching.omnigibson.gpu import GpuBindingPatch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID", raising=False)
    registry = PatchRegistry([GpuBindingPatch()])
    assert registry.apply(RolloutProfile(gpu_ids=[1], numba_cache_dir=str(tmp_path)))["gpu_binding"].state == APPLIED
    assert os.environ["CUDA_VISIBLE_DEVICES"] == os.environ["MUJOCO_EGL_DEVICE_ID"] == "5"
    registry.revert()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,5" and "MUJOCO_EGL_DEVICE_ID" not in os.environ


def test_gpu_binding_fails_once_cuda_is_initialised(monkeypatch, tmp_path):
    import torch

    from behavior1k_fast.patching.omnigibson.gpu import GpuBindingPatch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(PatchError, match="CUDA is already initialised in this process"):
        PatchRegistry([GpuBindingPatch()]).apply(RolloutProfile(gpu_ids=[0], numba_cache_dir=str(tmp_path)))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_launch_puts_the_kit_renderer_on_the_bound_gpu(registry, kit_launch, settings, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")  # as the engine starts a worker bound to GPU 6
    argv = list(sys.argv)
    report = registry.apply(RolloutProfile(gpu_ids=[0], numba_cache_dir=str(tmp_path)))
    assert report["kit_renderer_gpu"].state == report["gpu_binding"].state == APPLIED
    extra = kit_launch()
    monkeypatch.setattr(sys, "argv", argv)
    assert [a for a in extra if "renderer" in a or "cudaDevice" in a] == [
        "--/renderer/activeGpu=6",  # graphics device list: not filtered by CUDA_VISIBLE_DEVICES
        "--/renderer/multiGpu/enabled=false",
        "--/renderer/multiGpu/activeCudaGpus=0",  # CUDA index after the mask: the one visible GPU
        "--/physics/cudaDevice=0",
    ]
    assert sys.argv == argv
    registry.revert()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6"


@pytest.mark.parametrize("headless", [True, False], ids=["headless", "gui"])
def test_headless_render_settings_reach_kit_on_request_only(registry, kit_launch, monkeypatch, tmp_path, headless):
    """Isaac Lab 3.0's settings that keep a rendered frame current are on Kit's command line when the profile asks
    (the present thread is switched off only in a headless run, which presents to no window), and absent by
    default."""
    from omnigibson.macros import gm

    from behavior1k_fast.patching.omnigibson.runtime import HEADLESS_RENDER_SETTINGS, PRESENT_THREAD_SETTING

    monkeypatch.setitem(gm, "HEADLESS", headless)
    argv = list(sys.argv)
    stock = kit_launch()
    monkeypatch.setattr(sys, "argv", list(argv))
    default = registry.apply(RolloutProfile(numba_cache_dir=str(tmp_path)))
    assert default["kit_headless_render_settings"].state == "disabled"
    registry.revert()
    report = registry.apply(RolloutProfile(headless_render_settings=True, numba_cache_dir=str(tmp_path)))
    assert report["kit_headless_render_settings"].state == APPLIED
    patched = kit_launch()
    monkeypatch.setattr(sys, "argv", list(argv))
    expected = {**HEADLESS_RENDER_SETTINGS, **({PRESENT_THREAD_SETTING: "false"} if headless else {})}
    added = [a for a in patched if a not in stock]
    assert added[-len(expected):] == [f"--{path}={value}" for path, value in expected.items()]
    assert "--/omni/replicator/asyncRendering=false" in added and (PRESENT_THREAD_SETTING in str(added)) is headless
