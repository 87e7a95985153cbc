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


@pytest.mark.parametrize("module", ["executors", "transport", "ray_executor"])
def test_the_rollout_modules_issue_29_moved_are_gone_from_their_old_paths(module):
    """Nothing was released, so nothing keeps a deprecated path: the supervisor is in ``supervision``, the
    transports in ``transports/``."""
    import importlib.util

    assert importlib.util.find_spec(f"{PACKAGE}.rollout.{module}") is None
