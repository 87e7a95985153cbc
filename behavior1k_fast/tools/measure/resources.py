"""Process accounting for a benchmark row: CPU seconds, peak RSS and GPU memory of driver + env workers.

A background thread samples the driver and every descendant process (psutil) every ``interval_s``. CPU
seconds are counted from ``start()`` (processes seen then are counted from that point, later ones from
their birth) to ``stop()``. GPU memory per process comes from NVML when ``pynvml`` (nvidia-ml-py) is
importable and a GPU is present; otherwise it is ``None``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class ResourceUsage:
    """What a row cost. CPU in seconds of user + system time; memory in MiB."""

    cpu_seconds: float
    #: Peak RSS of each process other than the driver (env workers), by pid.
    worker_peak_rss_mib: dict[int, float]
    driver_peak_rss_mib: float
    #: GPU memory per pid (MiB) as NVML reports it, peak over the row; empty when unknown.
    gpu_mib_by_pid: dict[int, float]


def _cpu(times: Any) -> float:
    return times.user + times.system


class _Nvml:
    """Per-process GPU memory through NVML, or nothing."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no NVML, no driver or no GPU: GPU memory is unknown
            self.handles = []

    def used_by_pid(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for handle in self.handles:
            for query in (
                self._nvml.nvmlDeviceGetComputeRunningProcesses,
                self._nvml.nvmlDeviceGetGraphicsRunningProcesses,
            ):
                try:
                    procs = query(handle)
                except Exception:
                    continue
                for p in procs:
                    if p.usedGpuMemory is not None:
                        out[p.pid] = max(out.get(p.pid, 0.0), p.usedGpuMemory / 2**20)
        return out


class ResourceMonitor:
    """Samples the process tree of this process in a thread between ``start()`` and ``stop()``."""

    def __init__(self, interval_s: float = 0.1) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self._root = psutil.Process(os.getpid())
        self._nvml = _Nvml()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._rss_peak: dict[int, float] = {}
        self._gpu_peak: dict[int, float] = {}

    def _tree(self) -> list[psutil.Process]:
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:
            children = []
        return [self._root, *children]

    def _sample(self, first: bool = False) -> None:
        for proc in self._tree():
            pid = proc.pid
            proc = self._procs.setdefault(pid, proc)
            try:
                with proc.oneshot():
                    cpu = _cpu(proc.cpu_times())
                    rss = proc.memory_info().rss / 2**20
            except psutil.Error:
                continue
            if pid not in self._cpu_start:
                self._cpu_start[pid] = cpu if first else 0.0
            self._cpu_last[pid] = cpu
            self._rss_peak[pid] = max(self._rss_peak.get(pid, 0.0), rss)
        for pid, mib in self._nvml.used_by_pid().items():
            if pid in self._procs:
                self._gpu_peak[pid] = max(self._gpu_peak.get(pid, 0.0), mib)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> "ResourceMonitor":
        if self._thread is not None:
            raise RuntimeError("ResourceMonitor.start() called twice")
        self._sample(first=True)
        self._thread = threading.Thread(target=self._loop, name="bench-resources", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ResourceUsage:
        """Stop sampling (one last sample first) and return the usage since ``start()``."""
        if self._thread is None:
            raise RuntimeError("ResourceMonitor.stop() called before start()")
        self._stop.set()
        self._thread.join()
        self._sample()
        root = self._root.pid
        cpu = sum(self._cpu_last[pid] - self._cpu_start[pid] for pid in self._cpu_last)
        return ResourceUsage(
            cpu_seconds=cpu,
            worker_peak_rss_mib={pid: rss for pid, rss in self._rss_peak.items() if pid != root},
            driver_peak_rss_mib=self._rss_peak.get(root, 0.0),
            gpu_mib_by_pid=dict(self._gpu_peak),
        )
