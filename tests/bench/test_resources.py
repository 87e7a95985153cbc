"""Process accounting: CPU seconds and peak RSS of the driver and its child processes."""

import subprocess
import sys

import pytest

from behavior1k_fast.tools.measure.resources import ResourceMonitor

# Burns CPU, reports, then stays alive until its stdin closes (so it is sampled while alive).
CHILD = "s = 0\nfor i in range(3_000_000): s += i\nprint('done', flush=True)\nimport sys; sys.stdin.read()"


def test_monitor_counts_child_cpu_and_rss():
    monitor = ResourceMonitor(interval_s=0.05).start()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        usage = monitor.stop()
    finally:
        child.stdin.close()
        child.wait()
    assert child.pid in usage.worker_peak_rss_mib
    assert usage.worker_peak_rss_mib[child.pid] > 0
    assert usage.driver_peak_rss_mib > 0
    assert usage.cpu_seconds > 0


def test_monitor_misuse_is_an_error():
    monitor = ResourceMonitor()
    with pytest.raises(RuntimeError, match="before start"):
        monitor.stop()
    monitor.start()
    with pytest.raises(RuntimeError, match="twice"):
        monitor.start()
    monitor.stop()
    with pytest.raises(ValueError, match="interval_s"):
        ResourceMonitor(interval_s=0)
