"""Runtime patches: numba kernel cache, Kit launch settings, intra-op threads, GC."""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import textwrap
import types

import pytest

from behavior1k_fast.patching.omnigibson.runtime import (
    KERNEL_CACHE_PATCHES,
    KIT_THREAD_SETTINGS,
    TEXTURE_BUDGET_SETTING,
    KitThreadCapsPatch,
    NumbaCacheDirPatch,
    NumbaKernelCachePatch,
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


@pytest.fixture
def fake_launch(line, monkeypatch):
    """``_launch_app`` replaced by a stand-in for the Kit start (disables GC, as Kit does), plus carb settings."""
    from omnigibson import simulator

    seen: dict = {}
    settings: dict = {}

    def launch_app():
        seen["argv"] = list(sys.argv)
        gc.disable()
        return "app"

    carb_settings = types.SimpleNamespace(get=settings.get, set_float=settings.__setitem__)
    monkeypatch.setattr(simulator, "_launch_app", launch_app)
    monkeypatch.setattr(
        sys.modules["omnigibson.lazy"], "carb",
        types.SimpleNamespace(settings=types.SimpleNamespace(get_settings=lambda: carb_settings)), raising=False,
    )
    yield simulator, seen, settings
    gc.enable()


def test_launch_gets_thread_caps_gc_and_texture_budget(registry, fake_launch, tmp_path):
    from behavior1k_fast.patching.omnigibson.runtime import effective_kit_settings

    simulator, seen, settings = fake_launch
    launch = simulator._launch_app
    argv = list(sys.argv)
    profile = RolloutProfile(
        carb_tasking_threads=6, tbb_max_threads=3, physx_worker_threads=None, texture_streaming_budget=0.25,
        numba_cache_dir=str(tmp_path),
    )
    report = registry.apply(profile)
    assert all(report[n].state == APPLIED for n in ("kit_thread_caps", "gc_after_launch", "texture_streaming_budget"))
    assert simulator._launch_app() == "app"
    assert seen["argv"][len(argv):] == [
        "--/plugins/carb.tasking.plugin/threadCount=6",
        "--/plugins/omni.tbb.globalcontrol/maxThreadCount=3",
    ]
    assert sys.argv == argv
    assert gc.isenabled()
    assert settings[TEXTURE_BUDGET_SETTING] == 0.25
    assert set(effective_kit_settings()) == set(KIT_THREAD_SETTINGS.values())
    registry.revert()
    assert simulator._launch_app is launch


def test_launch_patches_follow_their_knobs(registry, fake_launch):
    simulator, seen, settings = fake_launch
    report = registry.apply(RolloutProfile.stock())
    for name in ("kit_thread_caps", "gc_after_launch", "texture_streaming_budget", "intra_op_threads"):
        assert report[name].state == "disabled"
    simulator._launch_app()
    assert not gc.isenabled() and settings == {}
    assert not any(a.startswith("--/plugins") for a in seen["argv"])


def test_thread_caps_skipped_when_upstream_launch_sets_them():
    module = types.ModuleType("fork_simulator")

    def _launch_app():
        return ["--/plugins/carb.tasking.plugin/threadCount=8"]

    module._launch_app = _launch_app
    assert "already sets Kit thread caps" in KitThreadCapsPatch().skip_reason(module)
    with pytest.raises(AttributeError, match="_launch_app is missing"):
        KitThreadCapsPatch().skip_reason(types.ModuleType("new_simulator"))


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


def test_launch_puts_the_kit_renderer_on_the_bound_gpu(registry, fake_launch, monkeypatch, tmp_path):
    from behavior1k_fast.patching.omnigibson.runtime import effective_kit_settings

    simulator, seen, settings = fake_launch
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")  # as the engine starts a worker bound to GPU 6
    argv = list(sys.argv)
    report = registry.apply(RolloutProfile(gpu_ids=[0], numba_cache_dir=str(tmp_path)))
    assert report["kit_renderer_gpu"].state == report["gpu_binding"].state == APPLIED
    simulator._launch_app()
    extra = seen["argv"][len(argv):]
    assert [a for a in extra if "renderer" in a or "cudaDevice" in a] == [
        "--/renderer/activeGpu=6",  # graphics device list: not filtered by CUDA_VISIBLE_DEVICES
        "--/renderer/multiGpu/enabled=false",
        "--/renderer/multiGpu/activeCudaGpus=0",  # CUDA index after the mask: the one visible GPU
        "--/physics/cudaDevice=0",
    ]
    assert sys.argv == argv and "/renderer/activeGpu" in effective_kit_settings()
    registry.revert()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6"
