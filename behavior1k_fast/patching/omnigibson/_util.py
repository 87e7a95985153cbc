"""Small helpers shared by the OmniGibson patch modules: call binding, per-call instance overrides, and the base
of the patches around the Kit app launch. Feature detection lives in :mod:`.layout`."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Any, Callable, Iterator

from ..registry import Knobs, Patch, PatchContext
from .layout import KitLauncher, kit_launch_reason, kit_launcher, rtx_reason


def simulator() -> Any:
    """``omnigibson.sim``, the loaded simulator (a patched method runs only once OmniGibson is imported)."""
    return sys.modules["omnigibson"].sim


@functools.lru_cache(maxsize=None)
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def bind(adapter: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Arguments of a call bound to ``adapter``'s signature (without ``self``), defaults filled in."""
    bound = _signature(adapter).bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(arguments)))
    return arguments


@contextlib.contextmanager
def instance_override(obj: Any, attr: str, value: Any) -> Iterator[None]:
    """Shadow ``obj.attr`` with ``value`` in the instance ``__dict__`` for the duration of the block."""
    had = attr in obj.__dict__
    previous = obj.__dict__.get(attr)
    obj.__dict__[attr] = value
    try:
        yield
    finally:
        if had:
            obj.__dict__[attr] = previous
        else:
            del obj.__dict__[attr]


class LaunchAppPatch(Patch):
    """A change around the Kit app launch: ``omnigibson.simulator._launch_app``, or on the render/physics-backend
    layout ``launch_kit_app`` of the kit render backend's module (:func:`~.layout.kit_launcher`; the simulator
    module is what the registry waits for, as it imports the render backends). Where the layout launches no
    Kit app, or (``rtx``) cameras do not render through Kit, the patch is not applicable there.

    Subclasses implement :meth:`launch`, which must call ``start()`` once and return its app."""

    module = "omnigibson.simulator"
    targets = ("_launch_app",)
    upstream_file = "omnigibson/simulator.py"
    #: Whether the change is to Kit's RTX renderer (not applicable where cameras render through another backend).
    rtx: bool = False

    def skip_reason(self, module: Any) -> str | None:
        launcher = kit_launcher(module)
        reason = kit_launch_reason(module) or (rtx_reason(module) if self.rtx else None)
        return reason or self.upstream_has_it(launcher)

    def bound_targets(self, module: Any) -> tuple[str, ...]:
        return (kit_launcher(module).qualname,)

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        """Why upstream's launch (``launcher``) already does this (feature detection), or ``None``."""
        return None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        launcher = kit_launcher(module)

        def launch_app(wrapped, instance, args, kwargs):
            return self.launch(launcher, profile, lambda: wrapped(*args, **kwargs))

        ctx.wrap(launcher.module, launcher.function, launch_app)

    def launch(self, launcher: KitLauncher, profile: Knobs, start: Callable[[], Any]) -> Any:
        raise NotImplementedError
