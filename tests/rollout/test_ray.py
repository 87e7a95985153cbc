"""The same engine on Ray actors gives the same trajectories as on local processes."""

import os
import time

import numpy as np
import pytest

from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError, WorkerError

from .helpers import CHUNK, assert_same_trajectories, record
from .pointmass import PointMassFactory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = {"num_env_subprocess": 2, "total_num_envs": 4, "pipeline_stage_num": 2, "num_action_chunks": CHUNK}


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip("ray")
    # address="local": a Ray cluster this machine already runs is not joined (its env and code are not ours)
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
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


def kill_actor(ray, actor, timeout=30.0):
    """Kill ``actor`` and return once Ray reports it dead (the kill itself is asynchronous)."""
    from ray.exceptions import RayActorError

    ray.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=timeout)
        except RayActorError:
            return
    raise AssertionError(f"Ray actor {actor} still alive {timeout} s after ray.kill")


def test_dead_ray_actor_is_reported_or_restarted(ray_runtime):
    factory = PointMassFactory()
    zeros = np.zeros((2, CHUNK, 2), np.float32)
    with RolloutEngine(factory, PROFILE, executor="ray", timeout_s=30, restart_workers=True) as engine:
        engine.reset()
        kill_actor(ray_runtime, engine._executor.transport.actors[1])
        result = engine.step(0, zeros)  # rows: env 0 (worker 0), env 2 (worker 1, dead)
        assert engine.restarts == 1
        assert result.applied[0].all() and not result.applied[1].any() and result.infos[1]["worker_restarted"]
        assert engine.step(1, zeros).applied.all()
    engine = RolloutEngine(factory, PROFILE, executor="ray", timeout_s=30)
    engine.reset()
    kill_actor(ray_runtime, engine._executor.transport.actors[0])
    with pytest.raises(WorkerDiedError, match=r"worker 0 \(envs \[0, 1\]\) died .*Ray actor died"):
        engine.step(1, zeros)
    with pytest.raises(RuntimeError, match="closed"):
        engine.reset()


def test_actor_options_the_cluster_cannot_meet_fail_at_once_with_the_reason(ray_runtime):
    # the default placement ("spread") checks every node's capacity for one worker's bundle
    with pytest.raises(ValueError, match=r"placement='spread' needs 2 workers of \{'CPU': 1.0, 'GPU': 1.0\}; "
                                         r"the live nodes hold 0"):
        RolloutEngine(PointMassFactory(), PROFILE, executor="ray", timeout_s=60, ray_actor_options={"num_gpus": 1})
    # a scheduling strategy of the caller's own: the actors' total demand against the cluster's total
    own = {"scheduling_strategy": "DEFAULT"}
    with pytest.raises(ValueError, match=r"cannot place 2 actors with ray_actor_options=.*'num_gpus': 1.*they need "
                                         r"GPU 2 \(cluster total 0\)"):
        RolloutEngine(PointMassFactory(), PROFILE, executor="ray", timeout_s=60,
                      ray_actor_options={"num_gpus": 1, **own})
    with pytest.raises(ValueError, match=r"they need CPU 6 \(cluster total 2\), accel 2 \(cluster total 0\)"):
        RolloutEngine(PointMassFactory(), PROFILE, executor="ray", timeout_s=60,
                      ray_actor_options={"num_cpus": 3, "resources": {"accel": 1}, **own})


@pytest.mark.parametrize("stages", [1, 2])
def test_ray_actors_serve_the_lookahead_schedule_as_local_processes_do(ray_runtime, stages):
    """A lead chunk is two actor calls (its LEAD, then its END): the trajectories are the processes', also
    with stages of whole processes."""
    from .test_lookahead import LENGTHS, run_engine

    factory = PointMassFactory(episode_lengths=LENGTHS)
    expected, _ = run_engine(factory, 4, 4, stages=stages)
    got, stats = run_engine(factory, 4, 4, executor="ray", stages=stages)
    assert stats.lookahead_steps == 4 and stats.sat_out_chunks.sum() > 0
    assert_same_trajectories(expected, got)
