"""A script without ``if __name__ == "__main__":``: the spawned workers re-import it, it starts the engine again
there, and the driver says to add the guard (not to restart). Restart advice only where a restart can help."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError
from behavior1k_fast.rollout.errors import MAIN_GUARD_EXIT_CODE, exit_detail

from .faulty import FaultyFactory
from .helpers import CHUNK

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine
from tests.rollout.pointmass import PointMassFactory

engine = RolloutEngine(PointMassFactory(), RolloutProfile(num_env_processes=1, total_num_envs=1, chunk_size=4),
                       {executor})
engine.close()
print("engine ran")
"""
PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2)


def run_script(tmp_path, executor: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent(SCRIPT.format(executor=executor)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


def test_a_script_without_the_main_guard_is_told_to_add_it_not_to_restart(tmp_path):
    done = run_script(tmp_path)
    assert done.returncode == 1 and "engine ran" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("behavior1k_fast.rollout.errors.WorkerDiedError: worker 0 (envs [0]) died while running "
                           f"'init': pid ") and f"exit code {MAIN_GUARD_EXIT_CODE}: it re-imported " in last
    assert str(tmp_path / "no_guard.py") in last and 'if __name__ == "__main__":' in last
    assert "restart_workers" not in done.stderr
    # the worker says it in one line, without multiprocessing's bootstrapping traceback
    assert "bootstrapping phase" not in done.stderr
    child = [line for line in done.stderr.splitlines() if line.startswith("behavior1k_fast: this spawned process")]
    assert len(child) == 1 and "__main__" in child[0]


def test_the_same_script_runs_where_nothing_is_spawned(tmp_path):
    done = run_script(tmp_path, executor="executor='inline'")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "engine ran"


def test_a_worker_that_dies_while_starting_gets_no_restart_advice():
    with pytest.raises(WorkerDiedError, match=r"died while running 'init': pid \d+ exit code 3$") as info:
        RolloutEngine(FaultyFactory(where="init", how="exit", seeds=(1,)), PROFILE, timeout_s=30)
    assert "restart_workers" not in str(info.value)


def test_a_worker_that_dies_in_a_chunk_gets_the_restart_advice():
    engine = RolloutEngine(FaultyFactory(where="chunk", how="exit", seeds=(1,)), PROFILE, timeout_s=30)
    engine.reset()
    with pytest.raises(WorkerDiedError, match=r"died while running 'chunk': .*pass restart_workers=True"):
        engine.step(0, np.zeros((2, CHUNK, 2), np.float32))


def test_exit_details_name_the_signal_or_the_guard():
    assert exit_detail(7, -9) == "pid 7 exit code -9 (SIGKILL)"
    assert exit_detail(7, 1) == "pid 7 exit code 1"
    assert "it re-imported" in exit_detail(7, MAIN_GUARD_EXIT_CODE)
