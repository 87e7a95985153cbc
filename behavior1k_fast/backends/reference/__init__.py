"""The embedded reference simulator: a BEHAVIOR-shaped pick-and-place scene on MuJoCo.

``ReferenceVectorEnv`` implements the backend contract (``behavior1k_fast.core.contract``) for E envs that share
one MjModel/MjData; ``ReferenceFactory`` builds it in worker processes; ``ReferenceConfig`` describes the
scene. ``ReachFactory`` builds the easy reach-and-touch variant of its task (``reach``) for quick RL runs. Importing this package imports MuJoCo: ``MUJOCO_GL`` is respected, and defaults to ``egl`` (Mesa's
software EGL on CPU machines, NVIDIA's on GPU machines) or to ``osmesa`` where no EGL library exists.
"""

import ctypes.util
import os
import sys


def _default_gl_backend() -> str:
    if ctypes.util.find_library("EGL") is None and ctypes.util.find_library("OSMesa") is not None:
        return "osmesa"
    return "egl"


if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules:
    os.environ["MUJOCO_GL"] = _default_gl_backend()

from .config import CAMERAS, SUPPORTED_VISION_MODALITIES, ReferenceConfig  # noqa: E402
from .env import ACTION_DIM, STOCK_COSTS, ReferenceFactory, ReferenceVectorEnv  # noqa: E402
from .expert import expert_actions  # noqa: E402
from .reach import ReachFactory, ReachVectorEnv  # noqa: E402

__all__ = [
    "ReferenceConfig",
    "ReferenceVectorEnv",
    "ReferenceFactory",
    "ReachFactory",
    "ReachVectorEnv",
    "CAMERAS",
    "SUPPORTED_VISION_MODALITIES",
    "ACTION_DIM",
    "STOCK_COSTS",
    "expert_actions",
]
