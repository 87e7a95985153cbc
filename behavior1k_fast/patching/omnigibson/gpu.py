"""GPU binding of a process (the profile's ``gpu_ids``, see :mod:`behavior1k_fast.core.gpus`).

- ``gpu_binding`` (a process setting, applied before the simulator is imported): ``CUDA_VISIBLE_DEVICES``
  and ``MUJOCO_EGL_DEVICE_ID`` name the one GPU of this process, ``gpu_ids[0]`` as CUDA numbered it before.
  It fails when CUDA is already initialised here (torch): the variable could no longer take effect.
- ``kit_renderer_gpu`` (the Kit app launch): ``CUDA_VISIBLE_DEVICES`` does not reach Kit's renderer, which
  picks its device from ``/renderer/activeGpu``, an index into the graphics device list that the mask never
  filters, so every bound Isaac Sim would land on GPU 0. The launch gets the renderer's CUDA device
  (``/renderer/multiGpu/activeCudaGpus``, an index after the mask: 0), the graphics device (the physical
  index), one renderer GPU (``/renderer/multiGpu/enabled=false``) and the PhysX CUDA device (0), on the
  command line, where they win over what ``SimulationApp`` derives from OmniGibson's ``OMNIGIBSON_GPU_ID``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from ...core.gpus import CUDA_VISIBLE_DEVICES, MUJOCO_EGL_DEVICE_ID, binding_env, physical_gpu
from ..registry import Knobs, Patch, PatchContext
from .layout import KitLauncher
from .runtime import KitArgsPatch, launch_with_kit_args

#: Kit setting paths of the renderer and physics device.
KIT_ACTIVE_GPU = "/renderer/activeGpu"
KIT_MULTI_GPU = "/renderer/multiGpu/enabled"
KIT_ACTIVE_CUDA_GPUS = "/renderer/multiGpu/activeCudaGpus"
KIT_PHYSICS_CUDA_DEVICE = "/physics/cudaDevice"


def kit_gpu_settings(physical: int) -> dict[str, Any]:
    """Kit setting path -> value for a process bound to the physical GPU ``physical`` (module docs)."""
    return {KIT_ACTIVE_GPU: physical, KIT_MULTI_GPU: "false", KIT_ACTIVE_CUDA_GPUS: 0, KIT_PHYSICS_CUDA_DEVICE: 0}


class GpuBindingPatch(Patch):
    """``CUDA_VISIBLE_DEVICES`` and ``MUJOCO_EGL_DEVICE_ID`` of this process name ``gpu_ids[0]``."""

    name = "gpu_binding"
    module = None
    knobs = ("gpu_ids",)
    targets = (CUDA_VISIBLE_DEVICES, MUJOCO_EGL_DEVICE_ID)

    def wanted(self, profile: Knobs) -> bool:
        return profile.gpu_ids is not None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            raise RuntimeError(
                "CUDA is already initialised in this process, so CUDA_VISIBLE_DEVICES can no longer bind it: "
                "apply a profile with gpu_ids before the first CUDA call"
            )
        for name, value in binding_env(physical_gpu(profile.gpu_ids[0], os.environ)).items():
            ctx.set_env(name, value)


class KitRendererGpuPatch(KitArgsPatch):
    """The Kit renderer and PhysX on the process's one GPU (module docs)."""

    name = "kit_renderer_gpu"
    knobs = ("gpu_ids",)

    def wanted(self, profile: Knobs) -> bool:
        return profile.gpu_ids is not None

    def launch(self, launcher: KitLauncher, profile: Knobs, start: Callable[[], Any]) -> Any:
        settings = kit_gpu_settings(physical_gpu(0, os.environ))  # gpu_binding left one visible GPU
        args = [f"--{path}={value}" for path, value in settings.items()]
        return launch_with_kit_args(launcher, args, settings, start)
