"""The one start-up step of every process this package starts (env workers, Ray actors, the policy
process, benchmark side processes): apply the patch set the backend names with the owner's profile before
anything imports the simulator, and switch tracing on or off.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from ..core.contract import patch_set_of
from ..core.profile import RolloutProfile
from ..core.tracing import get_profiler


def bootstrap_process(
    profile: RolloutProfile | Mapping[str, Any] | None, tracing: bool = False, patch_set: str | None = None
) -> None:
    """Apply ``profile`` (a profile, ``RolloutProfile.to_dict()`` output, or ``None``: apply nothing) with the
    patch set ``patch_set`` (the module a backend factory names, ``core.contract.patch_set_of``; ``None``:
    the backend needs none) to this process as one that runs the simulator (``process="simulator"``: its
    process settings apply now), then set the tracer on or off. Must run before the simulator is imported
    (before a backend factory is unpickled: unpickling imports the factory's module)."""
    if profile is not None and patch_set is not None:
        importlib.import_module(patch_set).apply(RolloutProfile.coerce(profile), process="simulator")
    get_profiler().enabled = tracing


def call_with_profile(isolated: bool, fn: Callable[..., Any], profile: RolloutProfile, factory: Any, *args: Any) -> Any:
    """``fn(profile, factory, *args)``: here, or (``isolated``) in a spawned process that runs
    :func:`bootstrap_process` with the patch set ``factory`` names first, as an engine worker does, and is
    gone when this returns."""
    if not isolated:
        return fn(profile, factory, *args)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_bootstrap_and_call, fn, profile, factory, *args).result()


def _bootstrap_and_call(fn: Callable[..., Any], profile: RolloutProfile, factory: Any, *args: Any) -> Any:
    bootstrap_process(profile, patch_set=patch_set_of(factory))
    return fn(profile, factory, *args)
