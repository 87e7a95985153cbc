"""``pip install`` and ``pip install -e`` both put the auto-apply ``.pth`` into site-packages: the wheel and the
editable wheel that setuptools builds from ``setup.py`` (PEP 517 / PEP 660 hooks, as pip calls them) carry
it at their root, listed in ``RECORD`` so that ``pip uninstall`` removes it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from behavior1k_fast.patching import autoapply

from behavior1k_fast.tools.measure.venvs import SOURCE_ROOT as ROOT


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["build_wheel", "build_editable"])
def test_wheel_carries_the_hook_at_the_site_packages_root(tmp_path, hook):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "behavior1k_fast", project / "behavior1k_fast", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.{hook}({str(dist)!r}))"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = dist / built.stdout.split()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert archive.read(autoapply.PTH_NAME).decode() == autoapply.PTH_SOURCE.read_text()
        (record,) = [name for name in names if name.endswith(".dist-info/RECORD")]
        assert any(line.startswith(autoapply.PTH_NAME + ",") for line in archive.read(record).decode().splitlines())
    if hook == "build_editable":  # the package stays in the source tree; only the hooks sit at the root
        assert not any(name.startswith("behavior1k_fast/") for name in names)
        assert sorted(n for n in names if n.endswith(".pth"))[0].startswith("__editable__")
