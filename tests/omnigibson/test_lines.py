"""The multi-line harness itself: a line's verbatim modules are active during a test and gone after it, and
stand-ins exist only for names a line imports that omnigibson 1.1.1 lacks (and are listed in the README)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from ..upstream_lines import LINE_SETS, MODULES, PYPI, STAND_INS, get_line, line_sources, missing_reason, set_folder

README = Path(__file__).with_name("README.md")


def in_pypi(module: str) -> bool:
    """Whether the installed omnigibson 1.1.1 has ``module`` (its parent package may be absent too)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_active_line_modules_are_its_verbatim_texts(line):
    for name in MODULES:
        active = sys.modules.get(name)
        own = line.path_of(name)
        if own.exists():
            assert Path(active.__file__) == own and Path(active.__spec__.origin) == own
            relpath = str(own.relative_to(line.package))
            if not line.is_pypi:  # the line's tree links each file to the verbatim text of the set it comes from
                assert line.source(relpath) == line_sources(line.name)[f"OmniGibson/omnigibson/{relpath}"].resolve()
            assert inspect.getsource(active) == line.text(relpath) == line.source(relpath).read_text()
        elif get_line(PYPI).path_of(name).exists():  # the line's folder lacks it: 1.1.1's module stays
            assert Path(active.__file__).resolve() == get_line(PYPI).path_of(name).resolve()
        else:  # a module of another line only (the render-backend modules)
            assert name not in sys.modules


@pytest.mark.parametrize("name", ["v3.7", "main", "backend", "isaac6"])
def test_activation_is_undone_after_the_block(og, name):
    if missing_reason(name):
        pytest.skip(missing_reason(name))
    before = {module: sys.modules.get(module) for module in MODULES}
    with pytest.MonkeyPatch.context() as mp:
        get_line(name).activate(mp)
        assert any(sys.modules.get(module) is not before[module] for module in MODULES)
    assert all(sys.modules.get(module) is before[module] for module in MODULES)
    assert not any(
        name is not None and hasattr(importlib.import_module(module), name)
        for (module, name) in STAND_INS
        if in_pypi(module)
    )


@pytest.mark.parametrize("key", sorted(STAND_INS, key=str), ids=lambda key: f"{key[0]}.{key[1] or '*'}")
def test_stand_ins_are_for_names_1_1_1_lacks_and_a_line_imports(og, key):
    module, name = key
    lines, _ = STAND_INS[key]
    if name is None or (module, None) in STAND_INS:  # a module 1.1.1 lacks, or a name in one
        assert not in_pypi(module), f"1.1.1 has {module}"
    else:
        assert not hasattr(importlib.import_module(module), name), f"1.1.1 has {module}.{name}"
    imported = name or module.rsplit(".", 1)[-1]
    for line in lines:
        if missing_reason(line):
            continue
        paths = [get_line(line).path_of(m) for m in MODULES]
        texts = "".join(path.read_text() for path in paths if path.exists())
        assert imported in texts, f"no {line} text imports {imported}"


def test_readme_lists_every_stand_in():
    text = README.read_text()
    for module, name in STAND_INS:
        assert f"`{module}.{name}`" in text if name else f"`{module}`" in text, (module, name)


#: main's files that come from a newer set than ``main/`` (the reasons: tests/omnigibson/README.md).
MAIN_FROM = {"macros.py": "main-00c69a80", "simulator.py": "main-vector-cbd13c78"}


def test_a_line_takes_each_file_from_the_newest_set_holding_it():
    if missing_reason("main"):
        pytest.skip(missing_reason("main"))
    sources = line_sources("main")
    for relpath, path in sources.items():
        name = MAIN_FROM.get(relpath.removeprefix("OmniGibson/omnigibson/"), "main")
        assert path == set_folder(name) / relpath, relpath
    assert set(MAIN_FROM) <= {relpath.rsplit("/", 1)[-1] for relpath in sources}
    assert LINE_SETS["main"][-1] == "main" and LINE_SETS["v3.7"] == ("v3.7",)


def test_main_line_texts_are_one_consistent_layout(og):
    """The reasons the main line is made of three sets, checked on the texts: main-era macros (the viewer camera
    on by default, no flatcache macro), and a simulator whose import_scene takes the scene list main's
    multi-scene Environment passes."""
    if missing_reason("main"):
        pytest.skip(missing_reason("main"))
    with pytest.MonkeyPatch.context() as mp:
        main = get_line("main")
        main.activate(mp)
        gm = main.module("omnigibson.macros").gm
        assert gm["RENDER_VIEWER_CAMERA"] is True and "ENABLE_FLATCACHE" not in gm
        assert "import_scene(self, scenes)" in main.text("simulator.py")
        assert "og.sim.import_scene(self._scenes)" in main.text("envs/env_base.py")
