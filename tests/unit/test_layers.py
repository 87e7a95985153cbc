"""The package is layered: every import (module level or inside a function) points down a layer or stays in
its own layer, and no two modules import each other, directly or through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "behavior1k_fast"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
#: Layer of each sub-package, lowest first. The package root and the public faces sit on top of everything.
LAYERS = {"core": 0, "patching": 1, "backends": 2, "rollout": 3, "tools": 4}
FACES = {PACKAGE, f"{PACKAGE}.reference", f"{PACKAGE}.omnigibson"}
TOP = max(LAYERS.values()) + 1


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> int:
    if module in FACES:
        return TOP
    sub = module.split(".")[1]
    if sub not in LAYERS:
        raise AssertionError(f"{module} is in no layer: put it under one of {sorted(LAYERS)} or make it a face")
    return LAYERS[sub]


def imports_of(module: str) -> set[str]:
    """Package modules ``module`` imports anywhere in its text (``from pkg import submodule`` counts as the
    submodule)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != module:
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_layer_map_covers_every_module():
    assert len(MODULES) > 30 and f"{PACKAGE}.core.profile" in MODULES
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_goes_up_a_layer(module):
    up = sorted(t for t in GRAPH[module] if layer_of(t) > layer_of(module))
    assert not up, f"{module} (layer {layer_of(module)}) imports a higher layer: {up}"


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_the_checker_sees_function_local_and_relative_imports():
    """The checker itself: a function-local relative import is an edge (the 0.1.0 cycle went through one)."""
    tools = GRAPH[f"{PACKAGE}.tools.validate"]
    assert f"{PACKAGE}.rollout.bootstrap" in tools and f"{PACKAGE}.backends" in tools
    assert f"{PACKAGE}.core.contract" in GRAPH[f"{PACKAGE}.rollout.bootstrap"]


def test_importing_the_rollout_layer_imports_no_simulator_patch_set():
    """The engine never imports a backend, nor a simulator's patch set: the inline transport restores the
    patch set its workers' factories name, found by name (issue 29), and the package root imports the
    OmniGibson set's ``apply`` / ``revert`` / ``status`` on first use."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "BEHAVIOR1K_FAST"}  # no start-up hook
    env["PYTHONPATH"] = str(ROOT.parent)
    probe = ("import sys, behavior1k_fast.rollout, behavior1k_fast.rollout.transports; "
             "print([m for m in sys.modules if 'patching.omnigibson' in m])")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    late = subprocess.run([sys.executable, "-c", "import behavior1k_fast, sys; print(behavior1k_fast.apply.__module__)"],
                          env=env, capture_output=True, text=True, check=True)
    assert late.stdout.strip() == f"{PACKAGE}.patching.omnigibson"


@pytest.mark.parametrize("module, names", [
    ("executors", ["Supervisor", "make_executor", "ProcessTransport", "InlineTransport", "EXECUTORS", "placeholder"]),
    ("transport", ["Transport", "RESTART_HINT"]),
])
def test_the_moved_rollout_modules_still_import_with_a_deprecation_warning(module, names):
    """Issue 29 moved them (``supervision``, ``transports/``); the old paths keep working, and say where."""
    import importlib
    import sys

    from behavior1k_fast.rollout import supervision, transports

    sys.modules.pop(f"{PACKAGE}.rollout.{module}", None)
    with pytest.warns(DeprecationWarning, match=f"{PACKAGE}.rollout.{module} is deprecated"):
        old = importlib.import_module(f"{PACKAGE}.rollout.{module}")
    for name in names:
        assert getattr(old, name) is getattr(supervision, name, None) or getattr(old, name) is getattr(transports, name)


def test_the_schedules_old_surface_name_is_the_driver_with_a_warning():
    from behavior1k_fast.rollout import schedules
    from behavior1k_fast.rollout.driver import EngineDriver

    with pytest.warns(DeprecationWarning, match="EngineDriver"):
        assert schedules.EngineSurface is EngineDriver


# --- the scripts of benchmarks/ and examples/ (issue 41) -------------------------------------------------
SCRIPT_FOLDERS = ("benchmarks", "examples")
SCRIPTS = sorted(p for folder in SCRIPT_FOLDERS for p in (ROOT.parent / folder).rglob("*.py"))


def _top_level_names(module: str) -> set[str]:
    """Names ``module`` binds at its top level (defs, classes, assignments, imports), its ``__all__`` and, for a
    package, its sub-modules: what can be imported from it without its module ``__getattr__``."""
    tree = ast.parse(MODULES[module].read_text())
    names = {m.rsplit(".", 1)[1] for m in MODULES if m.rsplit(".", 1)[0] == module}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _public_names(module: str, package_only: bool = True) -> set[str] | None:
    """``module``'s ``__all__`` where it is a package that declares one (or re-exports another module's, as
    ``behavior1k_fast.reference`` does), else ``None``."""
    if package_only and MODULES[module].name != "__init__.py":
        return None
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
        if isinstance(node, ast.ImportFrom) and any(a.name == "__all__" for a in node.names):
            base = module.split(".")[: len(module.split(".")) - node.level + 1] if node.level else []
            return _public_names(".".join(base + [node.module]), package_only=False)
    return None


def warns_deprecation(source: str) -> bool:
    """The module ``source`` warns ``DeprecationWarning`` when imported (a top-level ``warnings.warn``)."""
    for node in ast.parse(source).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("warn"):
            if "DeprecationWarning" in ast.unparse(call):
                return True
    return False


def _deprecated(module: str) -> bool:
    return warns_deprecation(MODULES[module].read_text())


def script_import_problems(source: str) -> list[str]:
    """What ``source`` (a script of ``benchmarks/`` or ``examples/``) does that a script must not: import a
    private module or name (``_x``), a module that does not exist, a deprecated module, a name a package's
    ``__all__`` leaves out, a name a module only hands out through its ``__getattr__`` (a deprecated alias), or
    touch ``sys.path``."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
            problems.append(f"line {node.lineno}: sys.path")
        if isinstance(node, ast.Import):
            pairs = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            pairs = [(node.module or "", a.name) for a in node.names]
        else:
            continue
        for module, name in pairs:
            if module != PACKAGE and not module.startswith(PACKAGE + "."):
                continue
            where = f"line {node.lineno}: {module}" + (f".{name}" if name else "")
            if any(part.startswith("_") for part in module.split(".")) or (name or "").startswith("_"):
                problems.append(f"{where} is private")
            elif module not in MODULES:
                problems.append(f"{where}: no such module")
            elif _deprecated(module):
                problems.append(f"{where}: a deprecated module")
            elif name is not None and f"{module}.{name}" not in MODULES:
                public = _public_names(module)
                if public is not None and name not in public:
                    problems.append(f"{where} is not in the package's __all__")
                elif public is None and name not in _top_level_names(module):
                    problems.append(f"{where} is no top-level name of the module (a __getattr__ alias)")
    return problems


def test_the_script_check_covers_both_folders():
    names = {p.relative_to(ROOT.parent).as_posix() for p in SCRIPTS}
    assert {"benchmarks/time_to_train.py", "examples/train_ppo_reference.py", "examples/quickstart.py"} <= names


@pytest.mark.parametrize("source, expected", [
    ("import sys\nsys.path.insert(0, 'x')", ["line 2: sys.path"]),
    ("from behavior1k_fast.tools.bench import _private", ["line 1: behavior1k_fast.tools.bench._private is private"]),
    ("from behavior1k_fast.tools.bench import report", []),
    ("from behavior1k_fast import bench", ["line 1: behavior1k_fast.bench is not in the package's __all__"]),
    ("from behavior1k_fast import RolloutProfile, apply", []),
    ("from behavior1k_fast.rollout import COMMITTED_KEY, Nothing",
     ["line 1: behavior1k_fast.rollout.Nothing is not in the package's __all__"]),
    ("from behavior1k_fast.tools.measure.files import write_json\nimport numpy", []),
    ("from behavior1k_fast.tools.measure.files import nothing",
     ["line 1: behavior1k_fast.tools.measure.files.nothing is no top-level name of the module (a __getattr__ alias)"]),
    ("import behavior1k_fast.nowhere", ["line 1: behavior1k_fast.nowhere: no such module"]),
])
def test_the_script_check_flags_private_deprecated_and_hidden_names_and_path_changes(source, expected):
    assert script_import_problems(source) == expected


def test_a_module_that_warns_on_import_is_deprecated_and_one_that_filters_warnings_is_not():
    assert warns_deprecation('import warnings\nwarnings.warn("x moved", DeprecationWarning, stacklevel=2)')
    assert not warns_deprecation('import warnings\nwarnings.filterwarnings("ignore", category=DeprecationWarning)')
    assert not warns_deprecation('def f():\n    warnings.warn("old", DeprecationWarning)')


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(ROOT.parent).as_posix())
def test_a_script_imports_public_names_only_and_leaves_sys_path_alone(path):
    problems = script_import_problems(path.read_text())
    assert not problems, f"{path.relative_to(ROOT.parent)}: {problems}"
