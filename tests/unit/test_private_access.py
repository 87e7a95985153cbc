"""No module under ``behavior1k_fast/rollout/`` (nor of the tools layer, ``benchmarks/`` or ``examples/``) reads a
``_``-prefixed attribute of anything but ``self`` / ``cls``: the schedules, transports and supervisor talk through public surfaces (issue 19), so a private can
change without breaking another module, and a dependency through an ``Any``-typed attribute is visible.
A schedule imports nothing of the rollout layer but the driver face (``rollout/driver.py``, issue 29), and
the engine's own public names are the user's face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROLLOUT = Path(__file__).resolve().parents[2] / "behavior1k_fast" / "rollout"
#: Receivers whose private attributes a module may read: its own object.
OWN = {"self", "cls"}
#: Documented standard-library functions whose names start with ``_`` (not another object's private state).
STDLIB = {"os._exit"}


def private_reads(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every ``x._name`` in ``source`` where ``x`` is not ``self`` / ``cls`` and
    ``_name`` is not a dunder."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in OWN or ast.unparse(node) in STDLIB:
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


MODULES = sorted(ROLLOUT.rglob("*.py"))
ROOT = ROLLOUT.parents[1]
#: The tools layer and the scripts (issue 41): what carries the published numbers reads public names only.
TOOLS_AND_SCRIPTS = sorted(p for folder in ("behavior1k_fast/tools", "benchmarks", "examples")
                           for p in (ROOT / folder).rglob("*.py"))


def test_the_check_covers_the_rollout_layer_and_its_schedules():
    names = {p.relative_to(ROLLOUT).as_posix() for p in MODULES}
    assert {"engine.py", "driver.py", "supervision.py", "transports/process.py", "schedules/barrier.py",
            "schedules/asynchronous.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROLLOUT).as_posix())
def test_no_rollout_module_reads_another_objects_private_attribute(path):
    reads = private_reads(path.read_text())
    assert not reads, f"{path.name} reads private attributes of other objects: {reads}"


@pytest.mark.parametrize("path", TOOLS_AND_SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_tool_or_script_reads_another_objects_private_attribute(path):
    reads = private_reads(path.read_text())
    assert not reads, f"{path.relative_to(ROOT)} reads private attributes of other objects: {reads}"


def test_the_check_covers_the_judge_the_peers_and_the_scripts():
    names = {p.relative_to(ROOT).as_posix() for p in TOOLS_AND_SCRIPTS}
    assert {"behavior1k_fast/tools/train/judge.py", "behavior1k_fast/tools/peers/torchrl.py",
            "benchmarks/time_to_train.py", "examples/train_ppo_reference.py"} <= names


@pytest.mark.parametrize("source, expected", [
    ("engine._stage_obs[0] = 1", [(1, "engine._stage_obs")]),
    ("self._x.y; cls._z; self.a._b", [(1, "self.a._b")]),
    ("x.__class__; os._exit(1); o._exit", [(1, "o._exit")]),
    ("def f(run):\n    return run.engine._forward(1)", [(2, "run.engine._forward")]),
])
def test_the_checker_flags_private_reads_through_any_receiver_but_self_and_cls(source, expected):
    assert private_reads(source) == expected


SCHEDULES = sorted((ROLLOUT / "schedules").glob("*.py"))


def rollout_imports(source: str, package: str) -> set[str]:
    """The ``behavior1k_fast.rollout`` modules ``source`` (a module of ``package``) imports, anywhere in its
    text, by their dotted names relative to the rollout layer (``"driver"``, ``"schedules.base"``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            target = ".".join((base[: len(base) - node.level + 1] if node.level else []) + [node.module or ""])
            targets = [target.strip(".")]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            if target.startswith("behavior1k_fast.rollout."):
                found.add(target[len("behavior1k_fast.rollout."):])
    return found


def test_the_import_reader_resolves_relative_imports_of_a_schedule():
    source = "from ..driver import EngineDriver\nfrom .base import Schedule\nfrom ...core.profile import X\n"
    assert rollout_imports(source, "behavior1k_fast.rollout.schedules") == {"driver", "schedules.base"}
    assert rollout_imports("from ..engine import RolloutEngine", "behavior1k_fast.rollout.schedules") == {"engine"}


@pytest.mark.parametrize("path", SCHEDULES, ids=lambda p: p.name)
def test_a_schedule_imports_only_the_driver_face_of_the_rollout_layer(path):
    imported = rollout_imports(path.read_text(), "behavior1k_fast.rollout.schedules")
    others = sorted(m for m in imported if m != "driver" and not m.startswith("schedules"))
    assert not others, f"schedules/{path.name} imports {others}; a schedule is built on rollout/driver.py only"

