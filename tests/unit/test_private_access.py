"""No module under ``behavior1k_fast/rollout/`` reads a ``_``-prefixed attribute of anything but ``self`` /
``cls``: the schedules, transports and supervisor talk through public surfaces (issue 19), so a private can
change without breaking another module, and a dependency through an ``Any``-typed attribute is visible."""

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


def test_the_check_covers_the_rollout_layer_and_its_schedules():
    names = {p.relative_to(ROLLOUT).as_posix() for p in MODULES}
    assert {"engine.py", "executors.py", "schedules/barrier.py", "schedules/asynchronous.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROLLOUT).as_posix())
def test_no_rollout_module_reads_another_objects_private_attribute(path):
    reads = private_reads(path.read_text())
    assert not reads, f"{path.name} reads private attributes of other objects: {reads}"


@pytest.mark.parametrize("source, expected", [
    ("engine._stage_obs[0] = 1", [(1, "engine._stage_obs")]),
    ("self._x.y; cls._z; self.a._b", [(1, "self.a._b")]),
    ("x.__class__; os._exit(1); o._exit", [(1, "o._exit")]),
    ("def f(run):\n    return run.engine._forward(1)", [(2, "run.engine._forward")]),
])
def test_the_checker_flags_private_reads_through_any_receiver_but_self_and_cls(source, expected):
    assert private_reads(source) == expected
