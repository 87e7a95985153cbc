"""Backends layer: simulators behind the backend contract (``behavior1k_fast.core.contract``).

- ``reference/``: the embedded MuJoCo reference simulator (runs anywhere).
- ``omnigibson/``: a real BEHAVIOR-1K install through the runtime patches (needs Isaac Sim).

A new backend is a sibling package with a picklable factory ``factory(num_envs, seed, profile)`` and an
entry in :func:`make_factory`. Importing this package imports no simulator.
"""

from __future__ import annotations

from typing import Any

BACKENDS = ("reference", "omnigibson")


def make_factory(backend: str, **options: Any) -> Any:
    """A picklable ``factory(num_envs, seed, profile) -> VectorBackend`` for ``backend``.

    reference: ``options`` are :class:`ReferenceConfig` fields (``resolution`` may be one int for a square
    image; ``frequencies`` a mapping of :class:`~behavior1k_fast.core.frequencies.Frequencies` fields).
    omnigibson: ``config`` (the OmniGibson env config mapping, required) and ``headless``.
    """
    if backend == "reference":
        from ..core.frequencies import Frequencies
        from .reference import ReferenceConfig, ReferenceFactory

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
