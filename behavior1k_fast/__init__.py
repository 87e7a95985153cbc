"""behavior1k_fast: fast RL rollouts on BEHAVIOR-1K (OmniGibson on Isaac Sim).

``import behavior1k_fast; behavior1k_fast.apply()`` before creating OmniGibson envs installs the runtime
patch set chosen by a :class:`RolloutProfile` (the fast path by default); ``status()`` and ``revert()``
return the same :class:`PatchReport`. Process-wide settings (thread caps, numba cache, GPU binding) apply
only in a process that runs the simulator: when it imports OmniGibson, or at once with
``apply(process="simulator")``; a trainer that only calls ``apply()`` keeps its own. Importing this package
is light: it imports no simulator, no torch, no Ray and no MuJoCo.

Layers, each importing only those below it (``docs/ARCHITECTURE.md``): ``core`` (profile, frequencies,
tracing, backend contract, argument checks) < ``patching`` < ``backends`` < ``rollout`` < ``tools``.
``behavior1k_fast.reference`` and ``behavior1k_fast.omnigibson`` are the public faces of code that lives in
those layers.
"""

from .core import __version__
from .core.profile import RolloutProfile
from .patching.omnigibson import apply, revert, status
from .patching.registry import PatchError, PatchReport

__all__ = ["apply", "revert", "status", "RolloutProfile", "PatchReport", "PatchError", "__version__"]
