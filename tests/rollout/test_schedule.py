"""The schedules over the engine's surface; the asynchronous one: no barrier across processes, the same
trajectories as the barrier schedule."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.core.profile import SCHEDULES
from behavior1k_fast.core.tracing import SLICE_WAIT
from behavior1k_fast.rollout import EngineState, NoChunkInFlightError, RolloutEngine, WorkerHungError
from behavior1k_fast.rollout.schedules import SCHEDULE_CLASSES, Schedule, schedule_class

from .faulty import FaultyFactory
from .helpers import CHUNK, assert_gone, assert_same_trajectories, our_segments, policy, record, traced
from .pointmass import PointMassFactory

LENGTHS = (7, 10, 5, 9, 6, 8, 11, 4)


def profile(**kw):
    base = dict(num_env_processes=4, total_num_envs=8, chunk_size=CHUNK, pipeline_stages=2, gc_enable=False)
    base.update(kw)
    return RolloutProfile.from_dict(base)


@pytest.mark.parametrize("partition", ["process", "hybrid"])
def test_async_schedule_gives_the_trajectories_of_the_barrier_schedule(partition):
    runs = {}
    for schedule in ("barrier", "async"):
        with RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile(partition=partition),
                           timeout_s=60) as e:
            runs[schedule] = record(e, 4, schedule=schedule)
            final_obs = e.stage_obs(1)["proprio"].copy()
        runs[schedule] += (final_obs,)
    (traj_b, stats_b, obs_b), (traj_a, stats_a, obs_a) = runs["barrier"], runs["async"]
    assert_same_trajectories(traj_b, traj_a)
    np.testing.assert_array_equal(obs_a, obs_b)  # stage_obs() after the run: the last boundary observations
    assert stats_a.schedule == "async" and stats_b.schedule == "barrier"
    np.testing.assert_array_equal(stats_a.own_actions, stats_b.own_actions)
    np.testing.assert_array_equal(stats_a.chunks_per_worker, stats_b.chunks_per_worker)
    assert stats_a.episodes.tolist() == stats_b.episodes.tolist()
    for stats in (stats_a, stats_b):
        assert stats.slice_wait_seconds.shape == (8,) and np.all(stats.slice_wait_seconds > 0)


def test_async_batches_of_ready_slices_respect_the_minimum_batch():
    batches = []

    def counting(obs):
        batches.append(len(obs["proprio"]))
        return policy(obs)

    with RolloutEngine(PointMassFactory(), profile(schedule="async", async_min_batch=2, async_max_wait_s=60.0),
                       executor="inline") as e:
        stats = e.rollout(counting, 3)
    assert stats.schedule == "async" and stats.own_actions.tolist() == [3 * CHUNK] * 8
    # slices of one env (4 workers x 2 envs, 2 stages); inline, every slice is back before the next forward,
    # so each forward takes the two oldest: 8 slices x 3 rounds in 12 forwards of 2 envs
    assert set(batches) == {2} and len(batches) == 12


def test_async_waiting_is_traced_per_slice():
    with traced() as profiler:
        with RolloutEngine(PointMassFactory(), profile(), executor="inline") as e:
            e.rollout(policy, 2, schedule="async")
        waits = [s for s in profiler.spans if s[0] == SLICE_WAIT]
    assert len(waits) == 4 * 2 * 2  # one per slice chunk: 4 workers x 2 stages x 2 rounds
    assert {(s[5]["worker"], s[5]["stage"]) for s in waits} == {(w, k) for w in range(4) for k in range(2)}


def test_schedule_settings_are_checked_before_anything_runs():
    with pytest.raises(ValueError, match=r"schedule must be one of \('barrier', 'async', 'lookahead'\), got 'eager'"):
        RolloutProfile(schedule="eager")
    with pytest.raises(ValueError, match="async_max_wait_s must be a finite number"):
        RolloutProfile(async_max_wait_s=-1)
    with RolloutEngine(PointMassFactory(), profile(), executor="inline") as e:
        with pytest.raises(ValueError, match="schedule must be one of"):
            e.rollout(policy, 1, schedule="eager")
        with pytest.raises(ValueError, match="overlap=False is the barrier schedule's serial baseline"):
            e.rollout(policy, 1, schedule="async", overlap=False)
        assert e.rollout(policy, 1, schedule="async").own_actions.sum() == 8 * CHUNK  # still usable


@pytest.mark.deadline(60)  # with stall detection off the hang would block for ever
def test_a_worker_stuck_in_an_async_rollout_is_caught_by_its_progress():
    engine = RolloutEngine(FaultyFactory(where="chunk", how="hang", after_steps=2), profile(),
                           timeout_s=None, stall_timeout_s=1.0)
    pids = engine.worker_pids
    with pytest.raises(WorkerHungError, match=r"worker 1 \(envs \[2, 3\]\) hung in 'chunk'.*stall_timeout_s=1"):
        engine.rollout(policy, 3, schedule="async")
    assert_gone(pids)
    assert our_segments() == []


def test_each_schedule_of_the_profile_has_one_driver_module_registered_under_its_name():
    assert sorted(SCHEDULE_CLASSES) == sorted(SCHEDULES)
    for name, cls in SCHEDULE_CLASSES.items():
        assert cls.name == name and cls.__module__.startswith("behavior1k_fast.rollout.schedules.")
    with pytest.raises(ValueError, match="schedule='eager' has no driver"):
        schedule_class("eager")


class HandDriven(Schedule):
    """A schedule whose round is the test's own calls on the driver face (:attr:`body`)."""

    name = "barrier"
    body = None

    def run(self) -> None:
        type(self).body(self.driver)


def test_collect_takes_the_oldest_chunk_of_each_worker_as_it_was_sent_and_settles_the_state(monkeypatch):
    sent, results = [], []

    def body(driver):
        assert driver.state is EngineState.IDLE
        for k in range(2):
            obs = driver.stage_obs(k)
            actions, extras = driver.forward(policy, obs)
            driver.send(driver.plan.stage_slices(k), actions, obs, extras)
            sent.append((obs, actions))
        assert driver.state is EngineState.STEPPING
        first, second = driver.plan.stage_slices(0), driver.plan.stage_slices(1)
        with pytest.raises(NoChunkInFlightError, match="not the oldest chunk in flight on its worker"):
            driver.collect(second)  # stage 0's chunks are older on every worker
        with pytest.raises(ValueError, match="slices sent together by one send"):
            driver.collect(first[::-1])
        results.extend([driver.collect(first), driver.collect(second)])
        assert driver.state is EngineState.IDLE and driver.accounting.own.sum() == 8 * CHUNK

    monkeypatch.setattr(HandDriven, "body", staticmethod(body))
    monkeypatch.setitem(SCHEDULE_CLASSES, "barrier", HandDriven)
    with RolloutEngine(PointMassFactory(), profile(), executor="inline") as e:
        assert e.rollout(policy, 1).own_actions.sum() == 8 * CHUNK
        assert e.state is EngineState.IDLE
    assert len(results) == 2
    for (obs, actions), result in zip(sent, results):  # each result carries the inputs of its chunk
        np.testing.assert_array_equal(result.actions, actions)
        np.testing.assert_array_equal(result.policy_obs["proprio"], obs["proprio"])
