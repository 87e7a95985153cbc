"""A before-import hook: run a callback once, when a module is about to execute, before any of its code runs.

wrapt's post-import hooks run after a module has executed; process settings of a simulator (thread pools,
the numba cache directory, the GPU binding) must be in place before the simulator package's own code runs
(it imports torch and numba, and its submodules' post-import patches rely on them). :class:`BeforeImport` is
a ``sys.meta_path`` finder that asks the other finders for the module's spec and wraps its loader: the
callback runs at the start of ``exec_module``, so a mere ``importlib.util.find_spec`` (an "is it installed"
check) does not fire it. After firing, the module's ``__loader__`` and ``__spec__.loader`` are upstream's
own again and the finder has left ``sys.meta_path``.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any, Callable

_lock = threading.Lock()


class _CallbackLoader:
    """Runs the callback, then hands the module to the real loader (and puts the real loader back on it)."""

    def __init__(self, loader: Any, fire: Callable[[], None]) -> None:
        self._loader = loader
        self._fire = fire

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._fire()
        self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_source ...
        return getattr(self._loader, name)


class BeforeImport(importlib.abc.MetaPathFinder):
    """Calls ``callback()`` once, right before the first execution of module ``name`` in this process.

    :meth:`install` puts the finder first on ``sys.meta_path``; :meth:`remove` takes it off unfired. A module
    already imported is not executed again: the caller checks ``sys.modules`` first."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self._callback = callback
        self._fired = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._fired:
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CallbackLoader(spec.loader, self._fire)
                return spec
        return None

    def _fire(self) -> None:
        with _lock:
            if self._fired:
                return
            self._fired = True
        self.remove()
        self._callback()

    def install(self) -> None:
        with _lock:
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def remove(self) -> None:
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
