"""What the README and ``docs/`` tell a user to run or to expect, run or checked as written."""

import inspect
import os
import re
import subprocess
import sys

import pytest

from .scripts import ROOT


def python_blocks(path):
    """The fenced ``python`` code blocks of the Markdown file ``path``."""
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), flags=re.M | re.S)


def run_snippet(code, tmp_path):
    """``code`` as the script a user pastes it into, run from an empty folder."""
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)


def test_the_training_docs_normalize_observation_snippet_runs_as_written(tmp_path):
    (code,) = [block for block in python_blocks(ROOT / "docs" / "training.md") if "NormalizeObservation" in block]
    assert 'if __name__ == "__main__":' in code  # the workers are spawned: they import the script
    done = run_snippet(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(4, 33) float32"


def test_normalize_observation_on_the_env_as_it_comes_fails_as_the_docs_say():
    import numpy as np
    from gymnasium.wrappers.vector import NormalizeObservation

    from behavior1k_fast import RolloutProfile
    from behavior1k_fast.reference import ReachFactory, ReferenceConfig
    from behavior1k_fast.rollout import EngineVectorEnv

    profile = RolloutProfile(total_num_envs=2, num_env_processes=1, pipeline_stages=1, chunk_size=2)
    factory = ReachFactory(ReferenceConfig(num_objects=1, cameras=("head",), resolution=(16, 16)))
    env = EngineVectorEnv(factory, profile, executor="inline")
    try:
        with pytest.raises(np.exceptions.AxisError):
            NormalizeObservation(env).reset(seed=0)
    finally:
        env.close()
    assert "fails (`AxisError`)" in (ROOT / "docs" / "training.md").read_text()


def test_the_training_docs_give_the_autoreset_mode_the_code_has_and_not_its_deprecated_spelling():
    from gymnasium.vector import AutoresetMode

    from behavior1k_fast.rollout import EngineVectorEnv

    assert inspect.signature(EngineVectorEnv.__init__).parameters["autoreset_mode"].default is AutoresetMode.NEXT_STEP
    text = (ROOT / "docs" / "training.md").read_text()
    section = text[text.index("**gymnasium.**"):text.index("## Reference simulator")]
    assert "`NEXT_STEP` by default" in section and "auto_reset" not in section


def test_a_test_run_ends_with_one_line_counting_its_skips_and_how_to_run_the_upstream_ones(tmp_path):
    env = {**os.environ, "BEHAVIOR1K_FAST_UPSTREAM": str(tmp_path / "no-upstream"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/omnigibson/test_lines.py", "-k", "v3 or main"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    *_, summary, stats = done.stdout.strip().splitlines()
    skipped = int(re.search(r"(\d+) skipped", stats).group(1))
    assert skipped > 0
    assert summary.startswith(f"{skipped} skipped: {skipped} need upstream OmniGibson texts that are not here")
    assert "BEHAVIOR1K_FAST_UPSTREAM=<folder>" in summary and "docs/testing.md" in summary
    readme = (ROOT / "README.md").read_text()
    assert "BEHAVIOR1K_FAST_UPSTREAM=~/b1k-lines python3 -m pytest -q" in readme


def test_the_training_docs_collector_snippet_runs_as_written(tmp_path):
    """docs/training.md's collect-while-train loop, complete with the learner it names (issue 45, item 8)."""
    (code,) = [block for block in python_blocks(ROOT / "docs" / "training.md") if "ppo_update(" in block]
    done = run_snippet(code, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:3]
    # three batches of 4 rounds x 4 envs x 8 steps x 11 actions; collected one update behind at most
    assert [line.split(") ")[0] + ")" for line in lines] == ["(4, 4, 8, 11)"] * 3
    assert all(int(line.split()[-1]) <= 1 for line in lines)
