"""The machine a command measures on: what it is (:func:`describe_machine`, :func:`machine_tag`) and how busy.

Timings on a shared machine move by tens of percent with other work (a 2-core box at load 4.8 printed
6.85x and a minute later 16.6x for the same ratio). :func:`sample_load` records what else ran, before and
after a command's runs, into its JSON; :func:`busy_warning` is the one line printed when it was busy.
:func:`describe_machine` (CPU, cores, memory, GPU, library versions) goes into every result file, and
:func:`machine_tag` names the files (``bench_cpu2.json``).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

#: Other processes may use this share of the cores before the machine counts as busy.
BUSY_SHARE = 0.25
#: The heaviest other processes recorded in a sample.
TOP_PROCESSES = 5


@dataclass(frozen=True)
class LoadSample:
    """The machine's load over a short window.

    Args:
        cores: logical cores of the machine.
        load_average: 1, 5 and 15 minute load averages (``os.getloadavg``), or ``None`` where the OS has none.
        other_cpu_cores: cores that processes outside this command's process tree kept busy over the window
            (psutil: the system's CPU use minus this tree's), at least 0.
        window_s: the window, seconds.
        top_other: the heaviest other processes over the window: ``{"pid", "name", "cpu_cores"}``.
    """

    cores: int
    load_average: tuple[float, float, float] | None
    other_cpu_cores: float
    window_s: float
    top_other: tuple[dict, ...] = ()

    @property
    def busy(self) -> bool:
        """Other processes used more than :data:`BUSY_SHARE` of the cores."""
        return self.other_cpu_cores > BUSY_SHARE * self.cores

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"busy": self.busy}


def _tree_pids() -> set[int]:
    import psutil

    me = psutil.Process(os.getpid())
    try:
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def sample_load(window_s: float = 0.5) -> LoadSample:
    """What other processes did over ``window_s`` seconds (this call waits that long)."""
    import psutil

    ours = _tree_pids()
    procs = {}
    for proc in psutil.process_iter(["name"]):
        try:
            proc.cpu_percent(None)  # the first call starts the process's window
            procs[proc.pid] = proc
        except psutil.Error:
            continue
    psutil.cpu_percent(None)
    time.sleep(window_s)
    total = psutil.cpu_percent(None) / 100.0 * (os.cpu_count() or 1)
    ours_cores, others = 0.0, []
    for pid, proc in procs.items():
        try:
            cores = proc.cpu_percent(None) / 100.0
        except psutil.Error:
            continue
        if pid in ours:
            ours_cores += cores
        elif cores > 0:
            others.append({"pid": pid, "name": proc.info.get("name") or "?", "cpu_cores": round(cores, 3)})
    others.sort(key=lambda p: -p["cpu_cores"])
    load = tuple(round(x, 2) for x in os.getloadavg()) if hasattr(os, "getloadavg") else None
    return LoadSample(cores=os.cpu_count() or 1, load_average=load, other_cpu_cores=max(0.0, total - ours_cores),
                      window_s=window_s, top_other=tuple(others[:TOP_PROCESSES]))


def busy_warning(samples: Sequence[LoadSample]) -> str | None:
    """One line when any of ``samples`` was busy (what ran, how much), else ``None``."""
    busy = [s for s in samples if s.busy]
    if not busy:
        return None
    worst = max(busy, key=lambda s: s.other_cpu_cores)
    load = f"load average {worst.load_average[0]:.1f}, " if worst.load_average else ""
    names = ", ".join(f"{p['name']} ({p['cpu_cores']:.1f})" for p in worst.top_other[:3])
    return (f"warning: the machine was busy ({load}other processes used {worst.other_cpu_cores:.1f} of "
            f"{worst.cores} cores: {names}); these timings may be off by tens of percent")


def describe_machine(device: str) -> dict[str, Any]:
    """CPU model, cores, memory, GPU and library versions of this machine."""
    import psutil

    cpu_model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "logical_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "policy_device": device,
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
        "gpu": None,
    }
    for module in ("torch", "mujoco", "gymnasium", "numpy"):
        try:  # from package metadata: importing mujoco here would fix its GL backend before MUJOCO_GL is set
            info[f"{module}_version"] = importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:  # a missing library is recorded as missing
            info[f"{module}_version"] = None
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                           "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    except Exception:  # torch absent: no GPU description
        pass
    return info


def machine_tag(machine: dict[str, Any]) -> str:
    """Short file-name tag: ``cpu2`` on a CPU machine, ``h200-cpu16`` with a GPU."""
    cores = f"cpu{machine.get('logical_cores')}"
    gpu = machine.get("gpu")
    if not gpu:
        return cores
    name = gpu["name"].replace("NVIDIA", "").strip().split()[0].lower()
    return f"{name}-{cores}"
