"""Small helpers shared by the OmniGibson patch modules: call binding, per-call instance overrides, and the base
of the patches around the Kit app launch. Feature detection lives in :mod:`.layout`."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Any, Callable, Iterator

from ..registry import Knobs, Patch, PatchContext, UpstreamLayoutError
from .layout import source_of


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
    """A change around ``omnigibson.simulator._launch_app`` (the Isaac Sim / Kit app start).

    Subclasses implement :meth:`launch`, which must call ``start()`` once and return its app."""

    module = "omnigibson.simulator"
    targets = ("_launch_app",)
    upstream_file = "omnigibson/simulator.py"

    def skip_reason(self, module: Any) -> str | None:
        launch = getattr(module, "_launch_app", None)
        if not callable(launch):
            raise UpstreamLayoutError(f"{module.__name__}._launch_app is missing: unsupported OmniGibson layout")
        return self.upstream_has_it(module, source_of(launch))

    def upstream_has_it(self, module: Any, launch_source: str) -> str | None:
        """Why upstream's launch already does this (feature detection), or ``None``."""
        return None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        def launch_app(wrapped, instance, args, kwargs):
            return self.launch(module, profile, lambda: wrapped(*args, **kwargs))

        ctx.wrap(module, "_launch_app", launch_app)

    def launch(self, module: Any, profile: Knobs, start: Callable[[], Any]) -> Any:
        raise NotImplementedError
