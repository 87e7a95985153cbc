"""How busy the machine is while a command measures: load average and other processes' CPU use.

Timings on a shared machine move by tens of percent with other work (a 2-core box at load 4.8 printed
6.85x and a minute later 16.6x for the same ratio). :func:`sample_load` records what else ran, before and
after a command's runs, into its JSON; :func:`busy_warning` is the one line printed when it was busy.
"""

from __future__ import annotations

import os
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
