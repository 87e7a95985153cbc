"""GPU binding: each worker process starts on its GPU, as it reports from inside (no GPU needed)."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.core import gpus
from behavior1k_fast.rollout import RolloutEngine

from .faulty import FaultyFactory
from .helpers import CHUNK, our_segments

REPORT = FaultyFactory(seeds=(), report_env=(gpus.CUDA_VISIBLE_DEVICES, gpus.MUJOCO_EGL_DEVICE_ID))
PROFILE = RolloutProfile(num_env_processes=3, total_num_envs=3, chunk_size=CHUNK)


@pytest.fixture
def eight_gpus(monkeypatch):
    """This machine reports eight GPUs (the engine checks the plan against ``nvidia-smi`` where it runs)."""
    monkeypatch.setattr(gpus, "nvidia_smi_gpus", lambda: ([f"GPU {i}, 80 GiB, 550" for i in range(8)], ""))


def seen_by_workers(profile):
    with RolloutEngine(REPORT, profile, timeout_s=60) as engine:
        engine.reset()
        result = engine.step(0, np.zeros((engine.plan.stage_size, CHUNK, 2), np.float32))
        return [info["env"] for info in result.infos], engine.profile


def test_each_worker_sees_only_its_gpu_round_robin_over_gpu_ids(eight_gpus, monkeypatch):
    monkeypatch.delenv(gpus.CUDA_VISIBLE_DEVICES, raising=False)
    seen, profile = seen_by_workers(PROFILE.replace(gpu_ids=[3, 1]))
    assert [s[gpus.CUDA_VISIBLE_DEVICES] for s in seen] == ["3", "1", "3"]
    assert [s[gpus.MUJOCO_EGL_DEVICE_ID] for s in seen] == ["3", "1", "3"]
    assert profile.gpu_ids == (3, 1)  # the driver's profile keeps the plan


def test_gpu_ids_index_the_gpus_the_driver_itself_sees(eight_gpus, monkeypatch):
    monkeypatch.setenv(gpus.CUDA_VISIBLE_DEVICES, "4,6")  # e.g. set by a cluster scheduler
    seen, _ = seen_by_workers(PROFILE.replace(gpu_ids=[1, 0]))
    assert [s[gpus.CUDA_VISIBLE_DEVICES] for s in seen] == ["6", "4", "6"]


@pytest.mark.parametrize(
    "env, gpu_ids, kwargs, text",
    [
        ("4,6", [2], {}, "gpu_ids asks for GPU 2, but CUDA_VISIBLE_DEVICES='4,6' shows 2 GPU(s): valid ids are 0..1"),
        ("GPU-1f2e", [0], {}, "gpu_ids needs CUDA_VISIBLE_DEVICES to list GPU indices, got 'GPU-1f2e'"),
        ("", [0], {}, "hides every GPU"),
        (None, [9], {}, "gpu_ids place workers on GPU(s) [9], but this machine has 8 GPU(s)"),
        (None, [0], {"executor": "inline"}, "gpu_ids bind worker processes: executor='inline' does not start any"),
    ],
)
def test_a_binding_that_cannot_hold_fails_before_any_worker_starts(eight_gpus, monkeypatch, env, gpu_ids, kwargs,
                                                                    text):
    if env is None:
        monkeypatch.delenv(gpus.CUDA_VISIBLE_DEVICES, raising=False)
    else:
        monkeypatch.setenv(gpus.CUDA_VISIBLE_DEVICES, env)
    with pytest.raises(ValueError) as info:
        RolloutEngine(REPORT, PROFILE.replace(gpu_ids=gpu_ids), **kwargs)
    assert text in str(info.value)
    assert our_segments() == []


@pytest.fixture
def no_nvidia_smi(monkeypatch, tmp_path):
    """No ``nvidia-smi`` here; the driver's device files are those put into the returned directory."""
    monkeypatch.setattr(gpus, "nvidia_smi_gpus", lambda: (None, "nvidia-smi not found"))
    monkeypatch.setattr(gpus, "DEVICE_DIR", str(tmp_path))
    monkeypatch.delenv(gpus.CUDA_VISIBLE_DEVICES, raising=False)
    return tmp_path


def test_without_nvidia_smi_a_gpu_with_no_device_file_is_refused_before_any_worker_starts(no_nvidia_smi):
    (no_nvidia_smi / "nvidiactl").write_text("")  # the driver's control file is no GPU
    with pytest.raises(ValueError, match=r"gpu_ids place workers on GPU\(s\) \[7\], but this machine has 0 GPU\(s\) "
                                         r"\(nvidia-smi not found; 0 .*/nvidia<N> device file\(s\)\)"):
        RolloutEngine(REPORT, PROFILE.replace(gpu_ids=[7]))
    assert our_segments() == []


def test_without_nvidia_smi_the_device_files_count_the_gpus(no_nvidia_smi, caplog):
    for i in range(8):
        (no_nvidia_smi / f"nvidia{i}").write_text("")
    assert gpus.check_gpus_present([7, 0], None, "nvidia-smi not found") == ""
    with pytest.raises(ValueError, match="has 8 GPU"):
        gpus.check_gpus_present([8], None)
    no_nvidia_smi.rename(no_nvidia_smi.with_name("gone"))  # no device directory at all: nothing to count
    warning = gpus.check_gpus_present([7], None, "nvidia-smi not found")
    assert warning.endswith("no GPU could be checked") and warning in caplog.text
