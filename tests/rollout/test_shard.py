"""Engines that split one job's env workers (one per policy device) give the one engine's trajectories."""

import dataclasses

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, RolloutStats, engine_shard, merge_stats
from behavior1k_fast.rollout.supervision import RestartRecord

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
    for name in ("own_actions", "episodes", "total_reward", "hold_steps_per_round", "chunks_per_worker",
                 "lost_actions"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name), err_msg=name)
    assert merged.episodes.sum() > 0
    assert merged.slice_wait_seconds.shape == (8,) and merged.schedule == whole.schedule


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


def engine_stats(num_envs, workers, **changes):
    """Stats of an engine with ``num_envs`` envs over ``workers`` workers: every field filled, distinct values."""
    base = np.arange(num_envs, dtype=np.int64)
    stats = RolloutStats(
        rounds=2, pipeline_stages=2, chunk_size=CHUNK, num_envs=num_envs, wall_seconds=1.0, model_seconds=0.5,
        wait_seconds=0.25, own_actions=base + 10, episodes=base % 2, total_reward=base * 0.5,
        sim_seconds_per_own_action=base * 0.01, hold_steps_per_round=base * 1.0,
        env_wall_seconds_per_worker=np.arange(workers) + 0.5, chunks_per_worker=np.arange(workers) + 4,
        lost_actions=base % 3, slice_wait_seconds=base * 0.1, schedule="async", sat_out_chunks=base % 2,
        stall_seconds_per_worker=np.arange(workers) * 0.2,
    )
    return dataclasses.replace(stats, **changes)


def test_merge_stats_joins_every_field_of_the_stats_with_global_ids():
    first = engine_stats(4, 2, wall_seconds=2.0, restarts=[RestartRecord(1, 0.5, "step", "died", {3: 4})])
    second = engine_stats(4, 2, model_seconds=0.75, restarts=[RestartRecord(0, 0.7, "step", "hung", {1: 2})])
    merged = merge_stats([first, second])
    per_env = ("own_actions", "episodes", "total_reward", "sim_seconds_per_own_action", "hold_steps_per_round",
               "lost_actions", "slice_wait_seconds", "sat_out_chunks")
    per_worker = ("env_wall_seconds_per_worker", "chunks_per_worker", "stall_seconds_per_worker")
    for name in per_env + per_worker:
        np.testing.assert_array_equal(getattr(merged, name),
                                      np.concatenate([getattr(first, name), getattr(second, name)]), err_msg=name)
    assert (merged.num_envs, merged.wall_seconds, merged.model_seconds, merged.wait_seconds) == (8, 2.0, 0.75, 0.25)
    assert (merged.rounds, merged.pipeline_stages, merged.chunk_size, merged.schedule) == (2, 2, CHUNK, "async")
    # engine 1's worker 0 is the job's worker 2, its env 1 the job's env 5
    assert [(r.worker, dict(r.lost_actions)) for r in merged.restarts] == [(1, {3: 4}), (2, {5: 2})]
    assert merged.stage_timings == {} and merged.lookahead_steps is None
    scalar = ("rounds", "pipeline_stages", "chunk_size", "schedule", "num_envs", "wall_seconds", "model_seconds",
              "wait_seconds", "stage_timings", "restarts", "lookahead_steps")
    # a field added to RolloutStats must get a merge rule (and a line here)
    assert {f.name for f in dataclasses.fields(RolloutStats)} == set(per_env + per_worker + scalar)


def test_merge_stats_refuses_engines_that_ran_different_schedules():
    with pytest.raises(ValueError, match=r"agree on schedule, got \['async', 'barrier'\]"):
        merge_stats([engine_stats(2, 1), engine_stats(2, 1, schedule="barrier")])


def test_merged_lookahead_steps_are_the_lead_of_most_chunks():
    # 'auto' leads are measured per engine: two engines lead 3 over 9 chunks each, one leads 5 over 22 chunks
    parts = [engine_stats(4, 2, lookahead_steps=3), engine_stats(4, 2, lookahead_steps=3),
             engine_stats(8, 4, lookahead_steps=5)]
    assert merge_stats(parts).lookahead_steps == 5
    assert merge_stats(parts[:2]).lookahead_steps == 3
