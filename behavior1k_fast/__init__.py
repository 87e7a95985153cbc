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

from typing import Any

from .core import __version__
from .core.profile import RolloutProfile
from .patching.registry import PatchError, PatchReport

#: The OmniGibson patch set's calls, imported on first use (``behavior1k_fast.patching.omnigibson``), so that
#: importing the package (or its rollout layer) imports no simulator-specific patch module.
_PATCH_SET_CALLS = ("apply", "revert", "status")


def __getattr__(name: str) -> Any:
    if name in _PATCH_SET_CALLS:
        from .patching import omnigibson

        return getattr(omnigibson, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PATCH_SET_CALLS))


__all__ = ["apply", "revert", "status", "RolloutProfile", "PatchReport", "PatchError", "__version__"]
