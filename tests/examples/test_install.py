"""``.ci/install`` (the README's test install) says what it is doing, and keeps away from a BEHAVIOR-1K env."""

import os
import re
import subprocess

from .scripts import ROOT

INSTALL = ROOT / ".ci" / "install"


def test_every_install_step_says_what_it_does_before_it_runs():
    lines = [line.strip() for line in INSTALL.read_text().splitlines()]
    commands = [i for i, line in enumerate(lines) if re.match(r"(python3 -m pip install|apt-get update)", line)]
    assert len(commands) == 4
    for i in commands:
        announced = [line for line in lines[:i] if line.startswith("step ")]
        assert announced, lines[i]
        # the last announcement before a command is its own: no other command lies between them
        last = max(j for j in range(i) if lines[j].startswith("step "))
        assert not [j for j in commands if last < j < i], lines[i]
    assert re.findall(r'step "(\d)/4', INSTALL.read_text()) == ["1", "1", "2", "3", "4"]


def test_the_install_refuses_an_environment_with_another_omnigibson_before_installing_anything(tmp_path):
    info = tmp_path / "omnigibson-3.7.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: omnigibson\nVersion: 3.7.2\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(".ci/install: error: this environment has omnigibson 3.7.2")
    assert "its own venv" in done.stderr
