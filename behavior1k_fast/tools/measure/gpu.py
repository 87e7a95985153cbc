"""How busy the GPU was: NVML's utilization samples over a window, as seconds of kernel time.

NVML samples the share of each period (about 1/6 s on data-centre GPUs) during which one or more kernels ran
on the device, whatever process or stream launched them. :class:`GPUBusy` polls those samples from a daemon
thread (the driver keeps a short ring of them) and :meth:`GPUBusy.seconds` integrates them over a wall-clock
window: busy seconds = mean utilization of the samples inside the window x the window's length. Two streams
whose kernels overlap count once, which is what the bound max(GPU busy, busiest env worker) needs: the GPU is
the binding resource when this is close to the wall.

Needs ``nvidia-ml-py`` (``pip install nvidia-ml-py``) and a CUDA device; :func:`gpu_busy_missing` says why not
where either is absent. Imported lazily: nothing here loads NVML until a :class:`GPUBusy` starts.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: Seconds between two reads of NVML's sample ring (it holds several seconds of samples).
POLL_S = 0.5


def gpu_busy_missing(device: str) -> str | None:
    """Why GPU busy time cannot be measured for ``device`` (``None``: it can)."""
    if not device.startswith("cuda"):
        return f"the policy runs on {device}, not a GPU"
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py is not installed ({exc}): pip install nvidia-ml-py"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML does not start: {exc}"
    pynvml.nvmlShutdown()
    return None


def nvml_handle(device: str) -> Any:
    """NVML's handle of the GPU that torch calls ``device``: by UUID (CUDA_VISIBLE_DEVICES renumbers devices),
    by index where NVML does not know the UUID. NVML must be initialised."""
    import pynvml
    import torch

    index = torch.device(device).index or 0
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))
    if uuid:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except pynvml.NVMLError:  # a UUID NVML does not know: fall back to the index
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)


class GPUBusy:
    """Utilization samples of the GPU behind torch device ``device`` (``"cuda"`` or ``"cuda:i"``) while started.

    ``with GPUBusy("cuda") as busy: ...; busy.seconds(t0, t1)``: busy seconds in ``[t0, t1]`` (``time.time()``
    seconds), ``None`` where no sample falls inside. :func:`gpu_busy_missing` must be ``None`` first.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self.samples: list[tuple[float, float]] = []  # (time.time() seconds, utilization 0..1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._last_us = 0

    def __enter__(self) -> "GPUBusy":
        import pynvml

        pynvml.nvmlInit()  # reference-counted: each start is paired with the exit's shutdown
        self._handle = nvml_handle(self.device)
        self._last_us = int(time.time() * 1e6)
        self._thread = threading.Thread(target=self._poll, name="gpu-busy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()
        import pynvml

        pynvml.nvmlShutdown()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._read()

    def _read(self) -> None:
        import pynvml

        try:
            _, samples = pynvml.nvmlDeviceGetSamples(self._handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                     self._last_us)
        except pynvml.NVMLError_NotFound:  # no sample since the last read
            return
        for sample in samples:
            if sample.timeStamp > self._last_us:
                self.samples.append((sample.timeStamp / 1e6, sample.sampleValue.uiVal / 100.0))
                self._last_us = sample.timeStamp

    def seconds(self, start: float, end: float) -> float | None:
        """Busy seconds of the GPU in the window ``[start, end]`` (``time.time()`` seconds)."""
        inside = [u for t, u in self.samples if start <= t <= end]
        return sum(inside) / len(inside) * (end - start) if inside else None
