"""The upstream OmniGibson lines the tests run on, and how a line's verbatim texts are loaded.

Lines (:data:`LINES`, also the pytest ids):

- ``1.1.1``: the installed PyPI ``omnigibson==1.1.1`` package as it is;
- ``v3.7`` and ``main``: verbatim upstream files from the folder named by ``BEHAVIOR1K_FAST_UPSTREAM``
  (default: ``../shared/upstream`` next to the repository, when it exists). A set's files are
  ``<folder>/<set>/OmniGibson/omnigibson/<path>``, the layout of a BEHAVIOR-1K checkout, so
  ``<folder>/v3.7`` may be a real checkout of that line. A line is made of the sets :data:`LINE_SETS` names,
  newest first: each file comes from the first set that holds it, and the last set (the line's own name) must
  exist. Where it is absent, the tests of that line skip with a reason saying so (the only skip of these
  tests). :func:`line_tree` lays a line's files out as one BEHAVIOR-1K tree (symbolic links to the verbatim
  files), which is what the tests load, ``git am`` and ``doctor --upstream`` see.

A line's module is its upstream file executed under the real module name (``omnigibson.envs.env_base``, ...)
on top of the installed 1.1.1 package: everything it imports that the line's folder does not hold comes
from 1.1.1. Names a line imports that 1.1.1 lacks get a stand-in (:data:`STAND_INS`, listed with the reason
in ``tests/omnigibson/README.md``); a stand-in does nothing the tests rely on and raises if it is called at
run time, except the few that run at import time (decorators, registrations). While a line is active
(:meth:`Line.activate`), ``sys.modules`` and the parent packages hold its modules and stand-ins.

To extend the harness to a new module, add it to :data:`MODULES` (in import order) and any name it needs
that 1.1.1 lacks to :data:`STAND_INS`.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: Environment variable naming the folder of upstream sets.
UPSTREAM_ENV = "BEHAVIOR1K_FAST_UPSTREAM"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_UPSTREAM = REPO.parent / "shared" / "upstream"
PYPI = "1.1.1"
LINES = (PYPI, "v3.7", "main")
#: Line -> the sets it is made of, newest first; a file comes from the first set holding it, and the last set
#: (the line's own name) must exist. ``"set:relpath"`` takes only that file (relative to ``omnigibson/``) of a set. Why each main file comes from its set: ``tests/omnigibson/README.md``.
LINE_SETS = {
    "v3.7": ("v3.7",),
    # main-era macros.py (00c69a80) and the simulator whose import_scene takes main's scene list (cbd13c78)
    "main": ("main-vector-cbd13c78", "main-00c69a80", "main"),
    # not a pytest line: main/'s simulator, which predates PR #2178 (it clears sys.argv; otherwise it equals
    # 00c69a80's), with the macros of 00c69a80; for the tests of patches only that text needs
    "main-pre2178": ("main-00c69a80:macros.py", "main"),
    # not pytest lines (tests/omnigibson/test_new_lines.py): the render/physics-backend refactor (its simulator,
    # macros and backend modules) and the Isaac Sim 6.0 work (simulator, 6.0 kit file, setup.py); every file
    # those sets lack (env_base, vision_sensor, env_wrapper, controllers; the isaac6 macros) is main's
    # (its Isaac Sim 6.0 kit backend and VisionSensor of 9fa68a72, PhysX backend of bdc01a23, PhysX-only physics
    # registry of 5f47267b, null and Newton render backends of dc91670f; the simulator of 7423c692, whose
    # m.KIT_FILES lists 6.0 as 9fa68a72's kit backend does)
    "backend": ("isaac6-9fa68a72", "backend-bdc01a23", "backend-5f47267b", "backend-dc91670f", "backend-7423c692",
                "backend-1b618dc0", "main-vector-cbd13c78", "main-00c69a80", "main"),
    "isaac6": ("isaac6-2af465a2", "main-00c69a80", "main"),
}
#: Sets a line needs besides its base (the last of :data:`LINE_SETS`): the sets that make it that line.
LINE_REQUIRES = {"backend": ("isaac6-9fa68a72", "backend-bdc01a23", "backend-5f47267b", "backend-dc91670f",
                             "backend-7423c692", "backend-1b618dc0"),
                 "isaac6": ("isaac6-2af465a2",)}
#: Lines loaded with the stand-ins of other lines as well as their own (:data:`STAND_INS`).
STAND_INS_OF = {"main-pre2178": ("main",), "isaac6": ("main",), "backend": ("main", "backend")}
#: Modules a line's folder can replace, in load order (each after the modules it imports).
MODULES = (
    "omnigibson.macros",
    "omnigibson.sensors.vision_sensor",
    "omnigibson.envs.env_base",
    "omnigibson.envs.vec_env_base",
    "omnigibson.envs.env_wrapper",
    "omnigibson.render_backends.base",
    "omnigibson.render_backends.kit_backend",
    "omnigibson.render_backends.null_backend",
    "omnigibson.render_backends.newton_backend",
    "omnigibson.render_backends",
    "omnigibson.physics_backends.base",
    "omnigibson.physics_backends.physx_backend",
    "omnigibson.physics_backends",
    "omnigibson.simulator",
    "omnigibson.controllers.joint_controller",
    "omnigibson.controllers.ik_controller",
    "omnigibson.controllers.osc_controller",
)


def upstream_root() -> Path | None:
    """The folder of upstream sets: ``$BEHAVIOR1K_FAST_UPSTREAM``, else ``../shared/upstream`` if it exists."""
    value = os.environ.get(UPSTREAM_ENV)
    if value:
        return Path(value)
    return DEFAULT_UPSTREAM if DEFAULT_UPSTREAM.is_dir() else None


def set_folder(name: str) -> Path | None:
    """``<upstream folder>/<name>`` (a BEHAVIOR-1K tree: holds ``OmniGibson/``), or ``None`` where absent."""
    root = upstream_root()
    folder = root / name if root is not None else None
    return folder if folder is not None and (folder / "OmniGibson" / "omnigibson").is_dir() else None


def missing_reason(line: str) -> str | None:
    """Why ``line``'s texts cannot be used here (the skip reason), or ``None``."""
    if line == PYPI:
        return None if importlib.util.find_spec("omnigibson") else "omnigibson 1.1.1 is not installed"
    needed = (LINE_SETS.get(line, (line,))[-1], *LINE_REQUIRES.get(line, ()))
    absent = [name for name in needed if set_folder(name) is None]
    if not absent:
        return None
    root = upstream_root()
    where = f"{UPSTREAM_ENV}={os.environ[UPSTREAM_ENV]!r}" if os.environ.get(UPSTREAM_ENV) else str(DEFAULT_UPSTREAM)
    if root is None:
        return f"no upstream texts: set {UPSTREAM_ENV} to a folder of upstream sets ({DEFAULT_UPSTREAM} is absent)"
    return f"no {line} texts: {where} has no {absent[0]}/OmniGibson/omnigibson folder"


def line_sources(line: str) -> dict[str, Path]:
    """Path relative to the BEHAVIOR-1K root (``OmniGibson/...``) -> the verbatim file ``line`` takes it from
    (the first of :data:`LINE_SETS` holding it)."""
    if missing_reason(line):
        raise FileNotFoundError(missing_reason(line))
    sources: dict[str, Path] = {}
    for entry in reversed(LINE_SETS.get(line, (line,))):  # base set first; newer sets replace its files
        name, _, only = entry.partition(":")
        folder = set_folder(name)
        if folder is None:
            continue
        for path in sorted((folder / "OmniGibson").rglob("*")):
            relpath = path.relative_to(folder).as_posix()
            if path.is_file() and (not only or relpath == f"OmniGibson/omnigibson/{only}"):
                sources[relpath] = path
    return sources


_TREES: dict[str, Path] = {}


def line_tree(line: str) -> Path:
    """A BEHAVIOR-1K tree (``<tree>/OmniGibson/omnigibson/...``) of ``line``'s files, each a symbolic link to
    its verbatim text (:func:`line_sources`); made once per session in a temporary folder."""
    if line not in _TREES:
        tree = Path(tempfile.mkdtemp(prefix=f"b1k-line-{line}-")) / line
        for relpath, source in line_sources(line).items():
            (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
            (tree / relpath).symlink_to(source)
        atexit.register(shutil.rmtree, tree.parent, True)
        _TREES[line] = tree
    return _TREES[line]


def package_folder(line: str) -> Path:
    """The ``omnigibson`` package folder of ``line`` (for 1.1.1 the installed package, else in :func:`line_tree`)."""
    if line == PYPI:
        return Path(importlib.util.find_spec("omnigibson").submodule_search_locations[0])
    return line_tree(line) / "OmniGibson" / "omnigibson"


# --- stand-ins for names a line adds that 1.1.1 lacks -------------------------------------------------------
def _unavailable(qualname: str) -> Callable[..., Any]:
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{qualname} is a test stand-in: omnigibson 1.1.1 has no such name")

    stand_in.__qualname__ = stand_in.__name__ = qualname.rsplit(".", 1)[-1]
    return stand_in


def _placeholder_class(qualname: str) -> type:
    return type(qualname.rsplit(".", 1)[-1], (), {"__doc__": f"Test stand-in for {qualname} (absent in 1.1.1)."})


def _identity_decorator(qualname: str) -> Callable[[Callable], Callable]:
    def decorator(fn: Callable) -> Callable:
        return fn

    return decorator


def _scripted_unavailable(n_tensors: int) -> Callable[[str], Callable]:
    """A TorchScript function of ``n_tensors`` tensors that raises (upstream's ``th.jit.script`` functions
    that call it are compiled at import time, so it must compile)."""

    def factory(qualname: str) -> Callable:
        import torch

        def one(a: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("test stand-in: omnigibson 1.1.1 has no such function")

        def two(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("test stand-in: omnigibson 1.1.1 has no such function")

        return torch.jit.script({1: one, 2: two}[n_tensors])

    return factory


def _ignore(qualname: str) -> Callable[..., None]:
    def stand_in(*args: Any, **kwargs: Any) -> None:
        return None

    return stand_in


#: ``(module, name) -> (lines that import it, factory)``; ``name`` None is a module 1.1.1 lacks.
STAND_INS: dict[tuple[str, str | None], tuple[tuple[str, ...], Callable[[str], Any]]] = {
    # v3.7 and main: the controllers' compute-backend registry and their numpy kernels' helpers
    ("omnigibson.utils.backend_utils", None): (("v3.7", "main"), lambda q: types.ModuleType(q)),
    ("omnigibson.utils.backend_utils", "_compute_backend"): (("v3.7", "main"), _placeholder_class),
    ("omnigibson.utils.backend_utils", "add_compute_function"): (("v3.7", "main"), _ignore),
    ("omnigibson.utils.transform_utils_np", None): (("v3.7", "main"), lambda q: types.ModuleType(q)),
    ("omnigibson.utils.transform_utils", "orientation_error"): (("v3.7", "main"), _scripted_unavailable(2)),
    ("omnigibson.utils.python_utils", "torch_compile"): (("v3.7", "main"), _identity_decorator),
    ("omnigibson.utils.geometry_utils", "wrap_angle"): (("v3.7", "main"), _scripted_unavailable(1)),
    # v3.7 and main: the simulator
    ("omnigibson.utils.asset_utils", "get_dataset_path"): (("v3.7", "main"), _unavailable),
    ("omnigibson.utils.usd_utils", "triangularize_mesh"): (("v3.7", "main"), _unavailable),
    # main: the multi-scene Environment and the Isaac Sim 5.1 simulator
    ("omnigibson.robots", "Robot"): (("main",), _placeholder_class),
    ("omnigibson.sensors", "TiledVisionSensor"): (("main",), _placeholder_class),
    ("omnigibson.utils.vision_utils", "change_pcd_frame"): (("main",), _unavailable),
    ("omnigibson.utils.vision_utils", "add_semantic_label"): (("main",), _unavailable),
    ("omnigibson.utils.profiling_utils", "Profiler"): (("main",), _placeholder_class),
    ("omnigibson.utils.asset_utils", "ensure_omnigibson_robot_assets_version"): (("main",), _unavailable),
    ("omnigibson.controllers", "ControllerView"): (("main",), _placeholder_class),
    # main: cbd13c78's simulator (tensorized states on Warp, tiled sensors, view APIs)
    ("warp", None): (("main",), lambda q: types.ModuleType(q)),
    ("omnigibson.object_states.tensorized_state", None): (("main",), lambda q: types.ModuleType(q)),
    ("omnigibson.object_states.tensorized_state", "TensorizedState"): (("main",), _placeholder_class),
    ("omnigibson.sensors.tiled_sensor", None): (("main",), lambda q: types.ModuleType(q)),
    ("omnigibson.sensors.tiled_sensor", "TiledVisionSensor"): (("main",), _placeholder_class),
    ("omnigibson.utils.usd_utils", "ArticulatedObjectViewAPI"): (("main",), _placeholder_class),
    ("omnigibson.utils.usd_utils", "RigidBodyViewAPI"): (("main",), _placeholder_class),
    # backend: names its simulator and backend modules import that 1.1.1 lacks
    ("omnigibson.utils.usd_utils", "get_prim_at_path"): (("backend",), _unavailable),
    ("omnigibson.utils.usd_utils", "ensure_usd_api"): (("backend",), _unavailable),
    ("omnigibson.utils.usd_utils", "get_world_pose"): (("backend",), _unavailable),
}


def _set_module(monkeypatch: Any, name: str, module: types.ModuleType) -> None:
    """``name`` is ``module`` in ``sys.modules`` and as an attribute of its parent package (where that is loaded:
    a package of the line's own is set before its submodules, :meth:`Line.activate`)."""
    monkeypatch.setitem(sys.modules, name, module)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        monkeypatch.setattr(sys.modules[parent], child, module, raising=False)


@dataclass
class Line:
    """One upstream line: its name, the ``omnigibson`` package folder its texts come from (``None`` for the
    installed 1.1.1), its loaded modules (once per session) and the stand-ins it needs (those of
    lines ``stand_ins_of``, by default its own name's)."""

    name: str
    folder: Path | None = None
    stand_ins_of: tuple[str, ...] = ()
    modules: dict[str, types.ModuleType] = field(default_factory=dict, repr=False)
    stand_ins: dict[tuple[str, str | None], Any] = field(default_factory=dict, repr=False)
    _loaded: bool = field(default=False, repr=False)

    @property
    def is_pypi(self) -> bool:
        return self.folder is None

    @property
    def package(self) -> Path:
        """The ``omnigibson`` package folder of this line's texts."""
        return self.folder if self.folder is not None else package_folder(PYPI)

    def path_of(self, module: str) -> Path:
        """Where this line's text of ``module`` (dotted name) is, whether or not it exists (a package's is its
        ``__init__.py``)."""
        base = self.package.joinpath(*module.split(".")[1:])
        return base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")

    def text(self, relpath: str) -> str:
        """The verbatim text of ``relpath`` (relative to the ``omnigibson`` package, e.g. ``envs/env_base.py``)."""
        return (self.package / relpath).read_text()

    def source(self, relpath: str) -> Path:
        """The verbatim file ``relpath`` (relative to the ``omnigibson`` package) is, in the set it comes from."""
        return (self.package / relpath).resolve()

    def _activate_stand_ins(self, monkeypatch: Any) -> None:
        for (module, name), obj in self.stand_ins.items():
            if name is None:
                _set_module(monkeypatch, module, obj)
            else:
                monkeypatch.setattr(importlib.import_module(module), name, obj, raising=False)

    def _load(self) -> None:
        """Execute the line's texts as the real modules (once), with the stand-ins and earlier modules active."""
        import pytest

        for (module, name), (lines, factory) in STAND_INS.items():
            if any(name in lines for name in (self.stand_ins_of or (self.name,))):
                self.stand_ins[(module, name)] = factory(module if name is None else f"{module}.{name}")
        macros_text = self.path_of("omnigibson.macros")
        with pytest.MonkeyPatch.context() as mp:
            self._activate_stand_ins(mp)
            # the line's macros.py checks that its data folder exists (nothing here reads it)
            mp.setenv("OMNIGIBSON_DATA_PATH", tempfile.gettempdir())
            if not macros_text.exists():
                # 1.1.1's create_module_macros names a module's macros by its path below macros.py's folder
                mp.setattr(sys.modules["omnigibson.macros"], "__file__", str(macros_text))
            for module in MODULES:
                path = self.path_of(module)
                if not path.exists():
                    continue
                parent = module.rpartition(".")[0]
                if parent not in sys.modules:  # a package of this line that 1.1.1 lacks: made before its modules
                    self.modules[parent] = self._module(mp, parent)
                loaded = self.modules.get(module) or self._module(mp, module)
                loaded.__spec__.loader.exec_module(loaded)
                self.modules[module] = loaded
        self._loaded = True

    def _module(self, monkeypatch: Any, name: str) -> types.ModuleType:
        """The line's module ``name`` created (a package with its search path), in ``sys.modules``, not run yet."""
        path = self.path_of(name)
        locations = [str(path.parent)] if path.name == "__init__.py" else None
        spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
        module = importlib.util.module_from_spec(spec)
        _set_module(monkeypatch, name, module)
        return module

    def activate(self, monkeypatch: Any) -> None:
        """Make this line's modules and stand-ins the ones ``import omnigibson...`` finds, until ``monkeypatch``
        is undone. 1.1.1 needs nothing."""
        if self.is_pypi:
            return
        if not self._loaded:
            self._load()
        self._activate_stand_ins(monkeypatch)
        for module, loaded in self.modules.items():
            _set_module(monkeypatch, module, loaded)

    def module(self, name: str) -> types.ModuleType:
        """The module ``name`` as this line has it (its own text, or 1.1.1's where the line has none)."""
        return self.modules.get(name) or importlib.import_module(name)


_LINES: dict[str, Line] = {}


def get_line(name: str) -> Line:
    """The session's :class:`Line` for ``name`` (modules loaded at its first activation)."""
    if name not in _LINES:
        _LINES[name] = Line(name, None if name == PYPI else package_folder(name), STAND_INS_OF.get(name, ()))
    return _LINES[name]


def activate_line(name: str, monkeypatch: Any) -> Line:
    """The :class:`Line` ``name``, active until ``monkeypatch`` undoes it (a test's ``line`` fixture); the
    test skips with the reason where the line's texts are absent."""
    import pytest

    reason = missing_reason(name)
    if reason:
        pytest.skip(reason)
    current = get_line(name)
    current.activate(monkeypatch)
    return current
