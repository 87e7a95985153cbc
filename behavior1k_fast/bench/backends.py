"""Which simulator the benchmark and the validator drive: a picklable backend factory by name.

``reference``: the embedded MuJoCo reference simulator (default, runs anywhere).
``omnigibson``: a real BEHAVIOR-1K install through the runtime patches (needs Isaac Sim).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

BACKENDS = ("reference", "omnigibson")


def make_factory(backend: str, **options: Any) -> Any:
    """A picklable ``factory(num_envs, seed, profile) -> VectorBackend`` for ``backend``.

    reference: ``options`` are :class:`ReferenceConfig` fields (``resolution`` may be one int for a square
    image; ``frequencies`` a mapping of :class:`~behavior1k_fast.timing.Frequencies` fields).
    omnigibson: ``config`` (the OmniGibson env config mapping, required) and ``headless``.
    """
    if backend == "reference":
        from ..reference import ReferenceConfig, ReferenceFactory
        from ..timing import Frequencies

        if isinstance(options.get("resolution"), int):
            options["resolution"] = (options["resolution"], options["resolution"])
        if isinstance(options.get("frequencies"), dict):
            options["frequencies"] = Frequencies(**options["frequencies"])
        return ReferenceFactory(ReferenceConfig(**options))
    if backend == "omnigibson":
        from ..omnigibson.backend import OmniGibsonBackendFactory

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


def run_with_profile(isolated: bool, fn: Callable[..., Any], profile: Any, *args: Any) -> Any:
    """``fn(profile, *args)``: here, or (``isolated``) in a spawned process that applies ``profile``'s
    patches first, as an engine worker does, and is gone when this returns."""
    if not isolated:
        return fn(profile, *args)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_bootstrap_and_call, fn, profile, *args).result()


def _bootstrap_and_call(fn: Callable[..., Any], profile: Any, *args: Any) -> Any:
    from ..patching import worker_bootstrap

    worker_bootstrap(profile.to_dict())
    return fn(profile, *args)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Backend options shared by ``bench`` and ``validate``."""
    parser.add_argument("--resolution", type=int, default=None,
                        help="camera resolution in pixels, square (default: the backend's own)")
    parser.add_argument("--backend-config", default=None,
                        help="YAML file: ReferenceConfig fields (reference) or the OmniGibson env config "
                             "(omnigibson, required there)")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``make_factory`` keyword arguments from parsed ``add_backend_arguments`` options (and ``--backend``)."""
    options: dict[str, Any] = {}
    if args.backend_config:
        import yaml

        with open(args.backend_config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"--backend-config {args.backend_config!r} must hold a mapping, got {type(data).__name__}")
        if args.backend == "omnigibson":
            options["config"] = data
        else:
            options.update(data)
    if args.resolution is not None:
        if args.resolution < 1:
            raise ValueError(f"--resolution must be >= 1 pixel, got {args.resolution}")
        options["resolution"] = args.resolution
    return options
