"""Import OmniGibson on a machine without CUDA: a narrow ``sys.meta_path`` hook for ``vision_utils``.

``omnigibson.sensors.vision_sensor`` builds ``Remapper()`` objects in its class body, and upstream's
``Remapper.__init__`` allocates its key array with ``device="cuda"``; CPU torch raises at class-definition
time, so ``import omnigibson`` fails. The finder installed here answers only for
``omnigibson.utils.vision_utils``: it takes the normal spec from :class:`importlib.machinery.PathFinder`,
runs the module, then gives ``Remapper`` an ``__init__`` that builds the key array on CPU. Nothing else is
touched (patching ``torch.empty`` globally would break ``torch.jit.script`` elsewhere in OmniGibson).

Used by the integration tests and by ``behavior1k-fast doctor`` on machines without CUDA. A machine with
CUDA does not need it (:func:`needed` says so).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading

TARGET = "omnigibson.utils.vision_utils"

_lock = threading.Lock()


def _cpu_remapper_init(self) -> None:
    """``Remapper.__init__`` with the key array on CPU: empty key array, no known ids, no warnings yet."""
    import torch

    self.key_array = torch.empty(0, dtype=torch.int32, device="cpu")
    self.known_ids = set()
    self.warning_printed = set()


class _RemapperOnCpuLoader(importlib.abc.Loader):
    """Delegates to the real loader, then moves ``Remapper``'s construction to CPU."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        remapper = getattr(module, "Remapper", None)
        if remapper is None:
            raise ImportError(f"{TARGET} has no Remapper class; the CPU import hook does not know this layout")
        remapper.__init__ = _cpu_remapper_init


class RemapperOnCpuFinder(importlib.abc.MetaPathFinder):
    """Answers only for ``omnigibson.utils.vision_utils``; every other import is left to the normal finders."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RemapperOnCpuLoader(spec.loader)
        return spec


def needed() -> bool:
    """True when torch has no usable CUDA device, so ``import omnigibson`` needs the hook."""
    import torch

    return not torch.cuda.is_available()


def installed() -> bool:
    return any(isinstance(f, RemapperOnCpuFinder) for f in sys.meta_path)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once). It acts on the next import of ``vision_utils``; an
    already imported ``vision_utils`` is left as it is."""
    with _lock:
        if not installed():
            sys.meta_path.insert(0, RemapperOnCpuFinder())


def import_omnigibson():
    """``import omnigibson`` on this machine: installs the hook first when CUDA is absent. Returns the module."""
    if needed():
        install()
    import omnigibson

    return omnigibson
