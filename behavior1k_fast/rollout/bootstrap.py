"""The one start-up step of every process this package starts (env workers, Ray actors, the policy
process, benchmark side processes): apply the owner's profile before anything imports the simulator, and
switch tracing on or off.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..core.profile import RolloutProfile
from ..core.tracing import get_profiler
from ..patching import omnigibson as omnigibson_patches


def bootstrap_process(profile: RolloutProfile | Mapping[str, Any] | None, tracing: bool = False) -> None:
    """Apply ``profile`` (a profile, ``RolloutProfile.to_dict()`` output, or ``None``: apply nothing) to this
    process, then set the tracer on or off. Must run before the simulator is imported (before a backend
    factory is unpickled: unpickling imports the factory's module)."""
    if profile is not None:
        omnigibson_patches.apply(RolloutProfile.coerce(profile))
    get_profiler().enabled = tracing


def call_with_profile(isolated: bool, fn: Callable[..., Any], profile: RolloutProfile, *args: Any) -> Any:
    """``fn(profile, *args)``: here, or (``isolated``) in a spawned process that runs
    :func:`bootstrap_process` first, as an engine worker does, and is gone when this returns."""
    if not isolated:
        return fn(profile, *args)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_bootstrap_and_call, fn, profile, *args).result()


def _bootstrap_and_call(fn: Callable[..., Any], profile: RolloutProfile, *args: Any) -> Any:
    bootstrap_process(profile)
    return fn(profile, *args)
