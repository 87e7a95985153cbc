"""GPU binding: which GPU each env worker runs on, as the environment variables that put it there.

The profile's ``gpu_ids`` lists GPUs as CUDA numbers them in the process that starts the workers, i.e. after
that process's own ``CUDA_VISIBLE_DEVICES`` (under a scheduler that set ``CUDA_VISIBLE_DEVICES=4,5``,
``gpu_ids=(0, 1)`` are the physical GPUs 4 and 5). Worker ``w`` runs on ``gpu_ids[w % len(gpu_ids)]``; a
process that applies such a profile itself binds to ``gpu_ids[0]``.

A bound process sees exactly one GPU: ``CUDA_VISIBLE_DEVICES`` is that GPU's physical index (it is CUDA
device 0 there) and ``MUJOCO_EGL_DEVICE_ID`` names the same GPU for MuJoCo's EGL renderer. The engine
starts each worker process with these variables, so they hold before the worker imports anything; the
OmniGibson launch patch adds the Kit renderer settings (``behavior1k_fast.patching.omnigibson.gpu``).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
MUJOCO_EGL_DEVICE_ID = "MUJOCO_EGL_DEVICE_ID"
#: Where the NVIDIA driver's device files (``nvidia0``, ``nvidia1``...) are, counted without ``nvidia-smi``.
DEVICE_DIR = "/dev"

logger = logging.getLogger("behavior1k_fast.gpus")


def physical_gpu(gpu_id: int, environ: Mapping[str, str]) -> int:
    """The physical (``nvidia-smi``) index of CUDA device ``gpu_id`` of a process with environment
    ``environ``; ValueError when that process cannot see such a device."""
    visible = environ.get(CUDA_VISIBLE_DEVICES)
    if visible is None:
        return gpu_id
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if not entries:
        raise ValueError(f"gpu_ids asks for GPU {gpu_id}, but {CUDA_VISIBLE_DEVICES}={visible!r} hides every GPU")
    if gpu_id >= len(entries):
        raise ValueError(
            f"gpu_ids asks for GPU {gpu_id}, but {CUDA_VISIBLE_DEVICES}={visible!r} shows {len(entries)} "
            f"GPU(s): valid ids are 0..{len(entries) - 1}"
        )
    entry = entries[gpu_id]
    if not entry.isdigit():
        raise ValueError(
            f"gpu_ids needs {CUDA_VISIBLE_DEVICES} to list GPU indices, got {entry!r} in {visible!r}"
        )
    return int(entry)


def worker_gpus(gpu_ids: Sequence[int], num_workers: int, environ: Mapping[str, str]) -> list[int]:
    """The physical GPU of each of ``num_workers`` workers (round robin over ``gpu_ids``)."""
    return [physical_gpu(gpu_ids[w % len(gpu_ids)], environ) for w in range(num_workers)]


def binding_env(physical: int) -> dict[str, str]:
    """The environment variables of a process bound to the physical GPU ``physical``."""
    return {CUDA_VISIBLE_DEVICES: str(physical), MUJOCO_EGL_DEVICE_ID: str(physical)}


#: One GPU row of ``nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader``:
#: ``NVIDIA H200, 143771 MiB, 570.133.20``.
SMI_ROW = re.compile(r"[^,]*[^\s,][^,]*,\s*\d+ MiB,\s*\d+(?:\.\d+)*")


def nvidia_smi_gpus() -> tuple[list[str] | None, str]:
    """``(rows "name, memory MiB, driver", "")`` per GPU of this machine from ``nvidia-smi`` (all GPUs, whatever
    ``CUDA_VISIBLE_DEVICES`` says), or ``(None, why)`` when the tool is absent, fails, or prints a line that
    is not such a row (:data:`SMI_ROW`: "No devices were found", a wrapper's message): unreadable, so
    nothing is counted from it."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None, "nvidia-smi not found"
    try:
        out = subprocess.run(
            [tool, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi failed: {exc}"
    rows = [line.strip() for line in out.splitlines() if line.strip()]
    bad = next((row for row in rows if not SMI_ROW.fullmatch(row)), None)
    if bad is not None:
        return None, f"nvidia-smi output unreadable: {bad[:80]!r} is not a row 'name, memory MiB, driver version'"
    return rows, ""


def device_file_gpus() -> int | None:
    """GPUs the NVIDIA driver exposes here as ``/dev/nvidia<N>`` device files (a container sees those of
    its GPUs only); ``None`` where :data:`DEVICE_DIR` cannot be read (not Linux)."""
    try:
        names = os.listdir(DEVICE_DIR)
    except OSError:
        return None
    return sum(1 for name in names if re.fullmatch(r"nvidia\d+", name))


def gpu_count(gpus: Sequence[str] | None, why: str = "") -> tuple[int | None, str]:
    """The GPUs of this machine: ``len(gpus)`` for :func:`nvidia_smi_gpus` rows; without them (``None``,
    ``why`` says why) the ``/dev/nvidia<N>`` device files; ``(None, reason)`` when neither can tell."""
    if gpus is not None:
        return len(gpus), "nvidia-smi"
    files = device_file_gpus()
    if files is None:
        return None, f"{why or 'no nvidia-smi'}, and {DEVICE_DIR} cannot be read: no GPU could be checked"
    return files, f"{why or 'no nvidia-smi'}; {files} {DEVICE_DIR}/nvidia<N> device file(s)"


def check_gpus_present(physical: Sequence[int], gpus: Sequence[str] | None, why: str = "") -> str:
    """ValueError when a GPU of ``physical`` is not on this machine (:func:`gpu_count` of ``gpus``, the
    :func:`nvidia_smi_gpus` rows or ``None`` with its ``why``). Returns ``""``, or the warning (also logged)
    that no GPU could be checked."""
    count, source = gpu_count(gpus, why)
    if count is None:
        warning = f"gpu_ids place workers on GPU(s) {sorted(set(physical))}: {source}"
        logger.warning(warning)
        return warning
    missing = sorted({p for p in physical if p >= count})
    if missing:
        raise ValueError(f"gpu_ids place workers on GPU(s) {missing}, but this machine has {count} GPU(s) "
                         f"({source})")
    return ""


# --- the NVIDIA driver and the Isaac Sim versions known not to run on it --------------------------------------
#: The Python module of NVIDIA's NVML bindings (PyPI ``nvidia-ml-py``; ``pip install behavior1k_fast[nvml]``).
NVML_MODULE = "pynvml"


@dataclass(frozen=True)
class KnownBadDriver:
    """An Isaac Sim release (``isaac_sim``: ``major.minor``) that fails on a driver branch (its major version)."""

    isaac_sim: str
    driver_branch: int
    problem: str
    source: str

    def matches(self, isaac_sim: str, driver: str) -> bool:
        """Whether Isaac Sim ``isaac_sim`` (any ``X.Y...`` version) on driver ``driver`` (``NNN.x.y``) is this pair."""
        release = ".".join(isaac_sim.split(".")[:2])
        branch = driver.split(".", 1)[0]
        return release == self.isaac_sim and branch.isdigit() and int(branch) == self.driver_branch


KNOWN_BAD_DRIVERS = (
    KnownBadDriver("5.1", 595, "Isaac Sim 5.1 crashes on the 595.x driver branch",
                   "StanfordVL/BEHAVIOR-1K PR #2316"),
)


def nvml_driver_version(nvml: Any = None) -> tuple[str | None, str]:
    """``(driver version, "NVML")`` read through NVML (``nvml``: the ``pynvml`` module, imported when ``None``),
    or ``(None, why)`` when the bindings are not installed or NVML cannot start (no driver, no library)."""
    if nvml is None:
        try:
            nvml = importlib.import_module(NVML_MODULE)
        except ImportError:
            return None, "the NVML bindings are not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
        try:
            version = nvml.nvmlSystemGetDriverVersion()
        finally:
            nvml.nvmlShutdown()
    except Exception as exc:  # pynvml raises its NVMLError subclasses (driver or library not found, ...)
        return None, f"NVML: {type(exc).__name__}: {exc}"
    return (version.decode() if isinstance(version, bytes) else str(version)), "NVML"


def driver_version(smi_rows: Sequence[str] | None = None, nvml: Any = None) -> tuple[str | None, str]:
    """The NVIDIA driver version and where it was read: NVML (:func:`nvml_driver_version`), else the driver
    column of :func:`nvidia_smi_gpus` rows ``smi_rows``; ``(None, why)`` with both reasons when neither can tell."""
    version, source = nvml_driver_version(nvml)
    if version is not None:
        return version, source
    drivers = sorted({row.rsplit(",", 1)[-1].strip() for row in smi_rows or ()})
    if drivers:
        return drivers[0], "nvidia-smi"
    return None, f"{source}; no nvidia-smi rows"


def known_bad_driver(isaac_sim: str | None, driver: str | None) -> list[KnownBadDriver]:
    """The :data:`KNOWN_BAD_DRIVERS` entries Isaac Sim ``isaac_sim`` on driver ``driver`` is (none when either
    is unknown)."""
    if not isaac_sim or not driver:
        return []
    return [bad for bad in KNOWN_BAD_DRIVERS if bad.matches(isaac_sim, driver)]
