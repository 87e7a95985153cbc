"""Throw-away virtual environments whose site-packages hold the auto-apply hook as ``pip install`` leaves it,
for measuring (``benchmarks/autoapply_startup.py``) and testing (``tests/autoapply/``) what the hook does to
a fresh interpreter.

Such a venv's site-packages first lists this interpreter's site directories (a path-only ``.pth`` that sorts
before the hook), so its interpreter imports the packages installed here; then Python's own ``site`` runs
the hook at start-up, after them, as in a real install. Children run with ``PYTHONPATH`` set to
:data:`SOURCE_ROOT`, so they import this ``behavior1k_fast``, whichever tree it is.
"""

from __future__ import annotations

import os
import shutil
import site
import sysconfig
import venv
from pathlib import Path

from ...patching.autoapply import PTH_NAME, PTH_SOURCE, REPORTED_VAR
from ...patching.startup_env import ENV_VAR

#: The folder holding this ``behavior1k_fast`` package (a source checkout's root).
SOURCE_ROOT = Path(__file__).resolve().parents[3]


def make_venv(path: Path, hook: bool = True) -> Path:
    """Create the venv at ``path`` (with the hook unless ``hook`` is False); returns its ``python``."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(path)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    (site_packages / "00_base_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if hook:
        shutil.copyfile(PTH_SOURCE, site_packages / PTH_NAME)
    return path / "bin" / "python"


def child_env(**variables: str | None) -> dict[str, str]:
    """This process's environment for a child: :data:`SOURCE_ROOT` on ``PYTHONPATH``, no auto-apply variable
    unless given, and ``variables`` set (``None`` removes one)."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, REPORTED_VAR)}
    env["PYTHONPATH"] = str(SOURCE_ROOT)
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


__all__ = ["SOURCE_ROOT", "child_env", "make_venv"]
