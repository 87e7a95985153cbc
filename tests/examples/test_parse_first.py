"""The example scripts parse their arguments before they import anything heavy: a usage error is one line in
a fraction of a second, not after Ray, torch, MuJoCo or OmniGibson loaded (``train_ppo_reference.py`` is
tested in its own file)."""

import json
import subprocess
import sys

import pytest

from .scripts import ROOT

#: Modules a usage error must not wait for.
HEAVY = ("ray", "torch", "mujoco", "omnigibson")
SCRIPTS = sorted(p.name for p in (ROOT / "examples").glob("*.py")
                 if "parse_args" in p.read_text() and p.name != "train_ppo_reference.py")
PROBE = (
    "import json, runpy, sys\n"
    "sys.argv = [sys.argv[1], '--no-such-option']\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "print(json.dumps({'code': code, 'heavy': [m for m in %r if m in sys.modules]}))\n" % (HEAVY,)
)


def test_the_check_covers_the_examples_with_options():
    assert {"omnigibson_rollout.py", "two_engines_ray.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_usage_error_comes_before_any_heavy_import(name):
    done = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "examples" / name)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"code": 2, "heavy": []}, done.stderr
    (line,) = done.stderr.splitlines()
    assert "unrecognized arguments: --no-such-option" in line
