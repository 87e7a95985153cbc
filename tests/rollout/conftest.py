"""Engine tests: the repo root must be importable so spawned workers can unpickle test backends.

``@pytest.mark.deadline(seconds)``: the test fails once it ran that long, wherever it waits (a SIGALRM in the
main thread interrupts the wait), so a test of hang detection fails instead of hanging when the detection
it tests does not fire.
"""

import os
import signal
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(autouse=True)
def _deadline(request):
    marker = request.node.get_closest_marker("deadline")
    if marker is None:
        yield
        return
    seconds = float(marker.args[0])

    def expire(signum, frame):
        pytest.fail(f"test deadline of {seconds:g} s passed (what the test waits for did not happen in time)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
