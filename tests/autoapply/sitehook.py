"""A throw-away virtual environment whose site-packages holds the auto-apply hook as ``pip install`` leaves it.

Its site-packages first lists this interpreter's site directories (a path-only ``.pth`` that sorts before the
hook), so the venv's interpreter imports the packages installed here; then Python's own ``site`` runs the
hook at start-up, after them, as in a real install. Children run with ``PYTHONPATH`` set to the tree under
test, so they import the ``behavior1k_fast`` these tests import.
"""

from __future__ import annotations

import os
import shutil
import site
import sysconfig
import venv
from pathlib import Path

from behavior1k_fast.patching import autoapply

#: Root of the source tree under test (the folder holding ``behavior1k_fast``).
ROOT = Path(autoapply.__file__).resolve().parents[2]


def make_venv(path: Path, hook: bool = True) -> Path:
    """Create the venv at ``path`` (with the hook unless ``hook`` is False); returns its ``python``."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(path)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    (site_packages / "00_base_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if hook:
        shutil.copyfile(autoapply.PTH_SOURCE, site_packages / autoapply.PTH_NAME)
    return path / "bin" / "python"


def child_env(**variables: str | None) -> dict[str, str]:
    """This process's environment for a child: the tree under test on ``PYTHONPATH``, no auto-apply
    variable unless given, and ``variables`` set (``None`` removes one)."""
    env = {k: v for k, v in os.environ.items() if k not in (autoapply.ENV_VAR, autoapply.REPORTED_VAR)}
    env["PYTHONPATH"] = str(ROOT)
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
