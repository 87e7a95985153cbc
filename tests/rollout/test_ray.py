"""The same engine on Ray actors gives the same trajectories as on local processes."""

import os

import pytest

from behavior1k_fast.rollout import RolloutEngine, WorkerError

from .helpers import CHUNK, assert_same_trajectories, record
from .pointmass import PointMassFactory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = {"num_env_subprocess": 2, "total_num_envs": 4, "pipeline_stage_num": 2, "num_action_chunks": CHUNK}


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    yield ray
    ray.shutdown()


def test_ray_executor_matches_process_executor(ray_runtime):
    factory = PointMassFactory(episode_lengths=(5, 9))
    with RolloutEngine(factory, PROFILE, timeout_s=60) as local:
        expected, _ = record(local, rounds=3)
    with RolloutEngine(factory, PROFILE, executor="ray", timeout_s=60) as remote:
        assert remote.worker_pids == []
        got, stats = record(remote, rounds=3)
    assert stats.own_actions.sum() > 0
    assert_same_trajectories(expected, got)
    with pytest.raises(WorkerError, match="factory failed on purpose"):
        RolloutEngine(PointMassFactory(fail_in_factory=True), PROFILE, executor="ray", timeout_s=60)
