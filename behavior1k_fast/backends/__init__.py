"""Backends layer: simulators behind the backend contract (``behavior1k_fast.core.contract``).

- ``reference/``: the embedded MuJoCo reference simulator (runs anywhere).
- ``omnigibson/``: a real BEHAVIOR-1K install through the runtime patches (needs Isaac Sim).

A new backend is a sibling package with a picklable factory ``factory(num_envs, seed, profile)`` and an
entry in :func:`make_factory`. Importing this package imports no simulator.
"""

from __future__ import annotations

import difflib
import importlib.util
from typing import Any

BACKENDS = ("reference", "omnigibson")
#: The modules each backend needs importable (checked before anything starts), with what each one is:
#: OmniGibson launches Isaac Sim with ``import isaacsim`` (every upstream line), so OmniGibson alone
#: imports but cannot build an env.
BACKEND_MODULES = {
    "reference": (("mujoco", "mujoco"),),
    "omnigibson": (("omnigibson", "OmniGibson (a BEHAVIOR-1K install)"), ("isaacsim", "Isaac Sim")),
}


def check_installed(backend: str) -> None:
    """ValueError when a module ``backend``'s simulator needs is not installed in this Python (found, not
    imported)."""
    for module, what in BACKEND_MODULES[backend]:
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"backend {backend!r} needs {what}, but this Python has no module {module!r}")


def make_factory(backend: str, **options: Any) -> Any:
    """A picklable ``factory(num_envs, seed, profile) -> VectorBackend`` for ``backend``.

    reference: ``options`` are :class:`ReferenceConfig` fields (``resolution`` may be one int for a square
    image; ``frequencies`` a mapping of :class:`~behavior1k_fast.core.frequencies.Frequencies` fields).
    omnigibson: ``config`` (the OmniGibson env config mapping, required) and ``headless``.
    """
    if backend == "reference":
        from dataclasses import fields

        from ..core.frequencies import Frequencies
        from .reference import ReferenceConfig, ReferenceFactory

        known = sorted(f.name for f in fields(ReferenceConfig))
        for key in options:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known keys: {known}"
                raise ValueError(f"unknown reference config key {key!r}; {hint}")
        if isinstance(options.get("resolution"), int):
            options["resolution"] = (options["resolution"], options["resolution"])
        if isinstance(options.get("frequencies"), dict):
            options["frequencies"] = Frequencies(**options["frequencies"])
        return ReferenceFactory(ReferenceConfig(**options))
    if backend == "omnigibson":
        from .omnigibson.backend import OmniGibsonBackendFactory

        if "config" not in options:
            raise ValueError(
                "backend='omnigibson' needs an OmniGibson env config: pass --backend-config PATH (a YAML env "
                "config, e.g. a BEHAVIOR task config)"
            )
        if "resolution" in options:
            raise ValueError("--resolution applies to the reference simulator; set the camera size in the "
                             "OmniGibson env config instead")
        return OmniGibsonBackendFactory(**options)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def isolate_sides(backend: str) -> bool:
    """True where two profiles cannot share one process (one Isaac Sim app per process, global patches)."""
    return backend == "omnigibson"


__all__ = ["BACKENDS", "BACKEND_MODULES", "check_installed", "isolate_sides", "make_factory"]
