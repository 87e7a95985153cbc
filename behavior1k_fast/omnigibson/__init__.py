"""Public face of everything OmniGibson-specific; the code lives in two layers:

- ``behavior1k_fast.patching.omnigibson``: the runtime patches (``PATCHES``) and the CPU import hook;
- ``behavior1k_fast.backends.omnigibson``: the backend adapter and its factory, ``slim_config``,
  ``audit_annotators`` and ``rescale_env_config``.

Importing this package imports no simulator.
"""

from ..backends.omnigibson.backend import OmniGibsonBackend, OmniGibsonBackendFactory
from ..backends.omnigibson.config import (
    AttachedAnnotator,
    SlimConfig,
    audit_annotators,
    env_frequencies,
    rescale_env_config,
    slim_config,
)
from ..patching.omnigibson import PATCHES, cpu_import

__all__ = [
    "PATCHES",
    "cpu_import",
    "OmniGibsonBackend",
    "OmniGibsonBackendFactory",
    "SlimConfig",
    "slim_config",
    "AttachedAnnotator",
    "audit_annotators",
    "env_frequencies",
    "rescale_env_config",
]
