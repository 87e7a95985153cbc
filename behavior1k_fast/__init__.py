"""behavior1k_fast: fast RL rollouts on BEHAVIOR-1K (OmniGibson on Isaac Sim).

``import behavior1k_fast; behavior1k_fast.apply()`` before creating OmniGibson envs installs the runtime
patch set chosen by a :class:`RolloutProfile` (the fast path by default). Importing this package is light:
it imports no simulator, no torch, no Ray and no MuJoCo.
"""

from .patching import PatchError, PatchReport, apply, revert, status
from .profile import RolloutProfile

__version__ = "0.1.0"

__all__ = ["apply", "revert", "status", "RolloutProfile", "PatchReport", "PatchError", "__version__"]
