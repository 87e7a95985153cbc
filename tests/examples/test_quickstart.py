"""The README's quickstart (``examples/quickstart.py``) runs as a user runs it: a script with spawned workers."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quickstart_script_rolls_out_4_envs_for_4_rounds(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    # 4 envs x 4 rounds x 8 actions: random actions end no episode of the 500-action horizon
    assert re.fullmatch(r"\d+ env steps/s, 128 actions taken", done.stdout.strip()), done.stdout

