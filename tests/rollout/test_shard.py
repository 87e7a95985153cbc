"""Engines that split one job's env workers (one per policy device) give the one engine's trajectories."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, engine_shard, merge_stats

from .helpers import CHUNK, assert_same_trajectories, record
from .pointmass import PointMassFactory

JOB = RolloutProfile(num_env_processes=4, total_num_envs=8, pipeline_stages=2, partition="process", chunk_size=CHUNK)
FACTORY = PointMassFactory(episode_lengths=(5, 9, 7))


def test_two_sharded_engines_give_the_one_engine_trajectories_and_stats():
    with RolloutEngine(FACTORY, JOB, executor="inline", seed=3) as one:
        expected, whole = record(one, rounds=3)
    got, parts = {}, []
    for index in range(2):
        shard = engine_shard(JOB, index, 2, seed=3)
        assert shard.profile.num_env_processes == 2 and shard.profile.total_num_envs == 4
        with RolloutEngine(FACTORY, shard.profile, executor="inline", seed=shard.seed) as engine:
            local, stats = record(engine, rounds=3)
        got.update({int(shard.env_ids[env]): traj for env, traj in local.items()})
        parts.append(stats)
    assert_same_trajectories(expected, got)
    merged = merge_stats(parts)
    assert merged.num_envs == 8 and merged.wall_seconds == max(p.wall_seconds for p in parts)
    for name in ("own_actions", "episodes", "total_reward", "hold_steps_per_round", "chunks_per_worker"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name), err_msg=name)
    assert merged.episodes.sum() > 0


@pytest.mark.parametrize(
    "profile, index, count, error, words",
    [
        (JOB, 0, 3, ValueError, ["num_engines=3", "num_env_processes=4"]),
        (JOB, 2, 2, ValueError, ["engine_index", "[0, 1]", "got 2"]),
        (JOB, 0, 0, ValueError, ["num_engines", "got 0"]),
        (JOB, 0, 2.0, TypeError, ["num_engines", "got 2.0"]),
        (JOB.replace(pipeline_stages=4), 0, 2, ValueError, ["pipeline_stages=4", "num_env_processes=2",
                                                            "in each of num_engines=2"]),
    ],
)
def test_engine_shard_rejects_splits_that_do_not_fit_in_one_line(profile, index, count, error, words):
    with pytest.raises(error) as info:
        engine_shard(profile, index, count)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_merge_stats_refuses_engines_that_ran_different_rounds():
    with RolloutEngine(FACTORY, engine_shard(JOB, 0, 2).profile, executor="inline") as engine:
        two = engine.rollout(lambda obs: np.zeros((obs["proprio"].shape[0], CHUNK, 2), np.float32), 2)
        one = engine.rollout(lambda obs: np.zeros((obs["proprio"].shape[0], CHUNK, 2), np.float32), 1)
    with pytest.raises(ValueError, match=r"agree on rounds, got \[2, 1\]"):
        merge_stats([two, one])
    with pytest.raises(ValueError, match="at least one engine"):
        merge_stats([])
