"""The GPUs doctor and the engine count: only ``nvidia-smi`` rows of the queried form (name, memory in MiB,
driver version) are GPUs; any other output is unreadable, so nothing is counted from it (a stand-in
``nvidia-smi`` on PATH prints each case)."""

import os
import stat

import pytest

from behavior1k_fast.core import gpus
from behavior1k_fast.tools import doctor


def stand_in_nvidia_smi(tmp_path, monkeypatch, output, code=0):
    """An ``nvidia-smi`` first on PATH that prints ``output`` and exits with ``code``."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    (tmp_path / "output.txt").write_text(output)
    tool.write_text(f"#!/bin/sh\ncat {tmp_path / 'output.txt'}\nexit {code}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpus, "DEVICE_DIR", str(tmp_path))  # no /dev/nvidia<N> files to fall back on


def test_rows_of_the_queried_form_are_the_gpus(tmp_path, monkeypatch):
    rows = ["NVIDIA H200, 143771 MiB, 570.133.20", "NVIDIA GeForce RTX 4090, 24564 MiB, 550.54"]
    stand_in_nvidia_smi(tmp_path, monkeypatch, "\n".join(rows) + "\n")
    assert gpus.nvidia_smi_gpus() == (rows, "")


@pytest.mark.parametrize("output", [
    "hello world\n",
    "No devices were found\n",
    "NVIDIA H200, 143771 MiB, 570.133.20\nFailed to initialize NVML: Driver/library version mismatch\n",
    "NVIDIA H200, 80 GiB, 570\n",
    "NVIDIA H200, 143771 MiB, [N/A]\n",
])
def test_any_other_output_is_unreadable_and_counts_no_gpu(tmp_path, monkeypatch, output):
    stand_in_nvidia_smi(tmp_path, monkeypatch, output)
    devices, why = gpus.nvidia_smi_gpus()
    assert devices is None and why.startswith("nvidia-smi output unreadable: ")


@pytest.mark.parametrize("output", ["hello world\n", "No devices were found\n"])
def test_doctor_prints_no_gpu_from_unreadable_output_and_fails_a_profile_that_needs_one(
        tmp_path, monkeypatch, capsys, output):
    stand_in_nvidia_smi(tmp_path, monkeypatch, output)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    from behavior1k_fast.core.profile import RolloutProfile

    report = doctor.collect(RolloutProfile(gpu_ids=(0,)))
    text = doctor.render_text(report)
    gpu_line = next(line for line in text.splitlines() if line.startswith("GPU: "))
    assert "unreadable" in gpu_line and output.strip() not in gpu_line.split("unreadable")[0]
    assert not report["ok"] and report["gpu_binding"]["error"].startswith(
        "gpu_ids place workers on GPU(s) [0], but this machine has 0 GPU(s)")
