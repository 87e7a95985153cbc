"""Public face of the embedded reference simulator; the code lives in ``behavior1k_fast.backends.reference``.

Importing this package imports MuJoCo.
"""

from ..backends.reference import (
    ACTION_DIM,
    CAMERAS,
    STOCK_COSTS,
    SUPPORTED_VISION_MODALITIES,
    ReferenceConfig,
    ReferenceFactory,
    ReferenceVectorEnv,
    ReachFactory,
    ReachVectorEnv,
)

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
]
