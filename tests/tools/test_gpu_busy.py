"""GPU busy seconds from NVML's utilization samples (``tools/measure/gpu.py``), with a stand-in NVML."""

import sys
import time
import types

import pytest

from behavior1k_fast.tools.measure import gpu


class Sample:
    def __init__(self, time_us: int, percent: int) -> None:
        self.timeStamp = time_us
        self.sampleValue = types.SimpleNamespace(uiVal=percent)


class StandInNVML(types.ModuleType):
    """Records each ``nvmlDeviceGetSamples`` call's (handle, type, since) and answers from a ring of samples."""

    NVML_GPU_UTILIZATION_SAMPLES = 1

    class NVMLError(Exception):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    def __init__(self, ring: list[Sample]) -> None:
        super().__init__("pynvml")
        self.ring, self.calls = ring, []

    def nvmlInit(self) -> None:
        self.calls.append(("init",))

    def nvmlShutdown(self) -> None:
        self.calls.append(("shutdown",))

    def nvmlDeviceGetSamples(self, handle, kind, since_us):
        self.calls.append(("samples", handle, kind, since_us))
        newer = [s for s in self.ring if s.timeStamp > since_us]
        if not newer:
            raise self.NVMLError_NotFound()
        return 0, newer


@pytest.fixture
def nvml(monkeypatch):
    stand_in = StandInNVML([])
    monkeypatch.setitem(sys.modules, "pynvml", stand_in)
    monkeypatch.setattr(gpu, "nvml_handle", lambda device: ("handle", device))
    return stand_in


def test_busy_seconds_are_the_mean_utilization_inside_the_window_times_its_length(nvml):
    busy = gpu.GPUBusy("cuda:0")
    busy.samples = [(10.0, 1.0), (10.5, 0.5), (11.0, 0.0), (20.0, 1.0)]
    assert busy.seconds(10.0, 12.0) == pytest.approx(0.5 * 2.0)
    assert busy.seconds(19.0, 21.0) == pytest.approx(2.0)
    assert busy.seconds(12.0, 19.0) is None  # no sample inside: unknown, not idle


def test_each_read_asks_for_the_samples_after_the_last_one_seen_and_keeps_each_once(nvml):
    with gpu.GPUBusy("cuda:1") as busy:
        start = busy.samples[:]
        first = [c for c in nvml.calls if c[0] == "samples"]
        later = int(time.time() * 1e6) + 10**6  # samples from before the start are not the window's
        nvml.ring += [Sample(later - 2 * 10**6, 90), Sample(later + 1, 40), Sample(later + 2, 60)]
    assert start == []
    # the exit's read sees the two samples; none read twice, each since the newest seen before it
    assert busy.samples == [((later + 1) / 1e6, 0.4), ((later + 2) / 1e6, 0.6)]
    handles = {c[1] for c in nvml.calls if c[0] == "samples"}
    assert handles == {("handle", "cuda:1")} and all(c[2] == 1 for c in nvml.calls if c[0] == "samples")
    since = [c[3] for c in nvml.calls if c[0] == "samples"]
    assert since == sorted(since) and len(since) >= 1 + len(first)
    # NVML is started before the first read and shut down after the last one
    assert nvml.calls[0] == ("init",) and nvml.calls[-1] == ("shutdown",)
    assert [c for c in nvml.calls if c[0] in ("init", "shutdown")] == [("init",), ("shutdown",)]


def test_busy_time_is_not_measured_for_a_cpu_policy_and_says_why():
    assert "runs on cpu, not a GPU" in gpu.gpu_busy_missing("cpu")


def test_the_check_for_a_gpu_starts_nvml_and_shuts_it_down_again(nvml):
    assert gpu.gpu_busy_missing("cuda") is None
    assert nvml.calls == [("init",), ("shutdown",)]


def test_without_nvidia_ml_py_the_reason_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert "pip install nvidia-ml-py" in gpu.gpu_busy_missing("cuda")
