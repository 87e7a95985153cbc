"""Supervision: deadlines per command, hang detection inside a chunk, bounded restarts with their accounting."""

import logging
import re

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError, WorkerHungError
from behavior1k_fast.rollout import supervision
from behavior1k_fast.rollout.chunk import ChunkResult
from behavior1k_fast.rollout.errors import ClosedError
from behavior1k_fast.rollout.supervision import (
    RestartBudget,
    RestartPolicy,
    ReplyWatch,
    StepTimes,
    Supervision,
)

from .faulty import FaultyFactory
from .helpers import CHUNK, assert_gone, our_segments, policy

PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2)
ZEROS = np.zeros((2, CHUNK, 2), np.float32)
FAST_RESTARTS = RestartPolicy(max_restarts=3, window_s=600.0, backoff_s=0.0)


def assert_clean(pids):
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.deadline(60)  # with stall detection off the hang would block for ever
def test_a_worker_stuck_inside_a_chunk_is_caught_by_its_progress_without_any_deadline():
    engine = RolloutEngine(FaultyFactory(where="chunk", how="hang", after_steps=2), PROFILE,
                           timeout_s=None, stall_timeout_s=1.0)
    pids = engine.worker_pids
    engine.reset()
    with pytest.raises(WorkerHungError) as info:
        engine.step(0, ZEROS)
    message = str(info.value)
    assert message.startswith("worker 1 (envs [2, 3]) hung in 'chunk': no step finished for")
    assert "(stall_timeout_s=1); last step finished: 2 of 4 of its chunk" in message
    assert info.value.worker == 1 and info.value.env_ids == [2, 3] and info.value.command == "chunk"
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(ClosedError):
        engine.reset()
    assert_clean(pids)


@pytest.mark.parametrize(
    "where, kwargs, setting",
    [("init", dict(startup_timeout_s=1.0), "startup_timeout_s=1 s"),
     ("reset", dict(reset_timeout_s=1.0), "reset_timeout_s=1 s")],
)
def test_each_command_has_its_own_deadline(where, kwargs, setting):
    # one worker: a healthy worker's start-up on a loaded machine must not race the short deadline
    profile = PROFILE.replace(num_env_processes=1, total_num_envs=2)
    with pytest.raises(WorkerHungError, match=rf"worker 0 \(envs \[0, 1\]\) hung in '{where}': pid \d+ gave no "
                                              rf"reply within {setting}") as info:
        engine = RolloutEngine(FaultyFactory(where=where, seeds=(0,)), profile, timeout_s=None, **kwargs)
        engine.reset()
    assert info.value.command == where
    assert our_segments() == []


def test_a_worker_that_crashes_on_every_chunk_is_restarted_within_its_budget_then_reported(caplog):
    engine = RolloutEngine(FaultyFactory(how="segv"), PROFILE, restart_workers=FAST_RESTARTS)
    with caplog.at_level(logging.WARNING, logger="behavior1k_fast.rollout"):
        stats = engine.rollout(policy, 2)
    # worker 1 died in each round's first chunk; its pending chunks came back as placeholders
    assert stats.own_actions.tolist() == [2 * CHUNK, 2 * CHUNK, 0, 0]
    assert stats.envs_never_stepped.tolist() == [2, 3]
    assert [r.worker for r in stats.restarts] == [1, 1] and engine.restarts == 2
    assert stats.lost_actions.tolist() == [0, 0, 2 * CHUNK, 2 * CHUNK]
    assert all("SIGSEGV" in r.cause for r in stats.restarts)
    restarts = [re.search(r"restarted, (\d+ of \d+) within 600 s", r.getMessage()) for r in caplog.records]
    assert [m.group(1) for m in restarts if m] == ["1 of 3", "2 of 3"]
    assert any("envs [2, 3] took no own action" in r.getMessage() for r in caplog.records)
    assert stats.to_dict()["envs_never_stepped"] == [2, 3]
    pids = engine.worker_pids
    with pytest.raises(WorkerDiedError) as info:
        engine.rollout(policy, 4)
    err = info.value
    assert "restart budget spent (3 restarts within 600 s, max_restarts=3)" in str(err)
    assert len(err.history) == 3 and "Restarts so far:\n  restart 1: at " in str(err)
    assert isinstance(err.__cause__, WorkerDiedError) and "SIGSEGV" in str(err.__cause__)
    assert_clean(pids)


@pytest.mark.deadline(60)  # with stall detection off the hang would block for ever
def test_a_hung_worker_is_killed_and_restarted_like_a_dead_one():
    with RolloutEngine(FaultyFactory(how="hang", after_steps=1), PROFILE, stall_timeout_s=1.0,
                       restart_workers=RestartPolicy(max_restarts=1, backoff_s=0.0)) as engine:
        engine.reset()
        first = engine.worker_pids[1]
        result = engine.step(0, ZEROS)
        assert engine.restarts == 1 and engine.worker_pids[1] != first
        assert result.infos[1]["worker_restarted"] and not result.applied[1].any()
        assert_gone([first])
        with pytest.raises(WorkerDiedError, match="restart budget spent") as info:
            engine.step(1, ZEROS)
        assert "no step finished for" in str(info.value) and isinstance(info.value.__cause__, WorkerHungError)


def test_restart_budget_backs_off_and_forgets_restarts_outside_its_window(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(supervision.time, "monotonic", lambda: clock[0])
    budget = RestartBudget(RestartPolicy(max_restarts=3, window_s=100.0, backoff_s=2.0))
    died = WorkerDiedError(0, [0, 1], "chunk", "pid 9 exit code -11 (SIGSEGV)")
    assert [budget.charge(0, [0, 1], [], died) for _ in range(3)] == [0.0, 2.0, 4.0]
    with pytest.raises(WorkerDiedError, match="restart budget spent") as info:
        budget.charge(0, [0, 1], [], died)
    assert [line.split(":")[0] for line in info.value.history] == ["at 0.0 s in 'chunk'"] * 3
    assert budget.charge(1, [2, 3], [], died) == 0.0  # the budget is per worker
    clock[0] = 100.0  # the three restarts of worker 0 left the window
    assert budget.charge(0, [0, 1], [], died) == 0.0


def test_restart_backoff_is_capped_at_max_backoff_s(monkeypatch):
    monkeypatch.setattr(supervision.time, "monotonic", lambda: 0.0)
    budget = RestartBudget(RestartPolicy(max_restarts=10**6, window_s=600.0, backoff_s=0.05, max_backoff_s=1.0))
    died = WorkerDiedError(0, [0, 1], "chunk", "pid 9 exit code -9 (SIGKILL)")
    waits = [budget.charge(0, [0, 1], [], died) for _ in range(40)]
    assert waits[:7] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0]  # doubling until the cap ...
    assert set(waits[6:]) == {1.0}  # ... then the cap, however many restarts the window holds
    assert [r.backoff_s for r in budget.records] == waits  # each restart records what it waited
    assert RestartPolicy(backoff_s=1.0).backoff(40) == 60.0  # the default cap
    assert RestartPolicy(window_s=5.0, backoff_s=1.0).backoff(10) == 5.0  # never longer than the window


def test_auto_stall_limit_follows_the_median_step_time_above_a_floor():
    times = StepTimes()
    assert times.stall_limit("auto") == supervision.STALL_FLOOR_S
    assert times.stall_limit(None) is None and times.stall_limit(2.5) == 2.5
    for seconds in (4.0, 8.0, 400.0):  # 4 steps per chunk: 1, 2 and 100 s per step
        times.add(ChunkResult(np.arange(1), None, *[np.zeros((1, 4))] * 4, global_steps=np.array([4]),
                              env_wall_seconds=np.array([seconds])))
    assert supervision.STALL_FACTOR * 2.0 > supervision.STALL_FLOOR_S  # the median (2 s) decides here
    assert times.stall_limit("auto") == supervision.STALL_FACTOR * 2.0


def test_reply_watch_restarts_its_stall_clock_whenever_the_worker_finishes_a_step(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(supervision.time, "monotonic", lambda: clock[0])
    progress = supervision.ChunkProgress.create()
    try:
        progress.begin(4)
        watch = ReplyWatch(0, [0], "chunk", None, progress=progress, stall_s=5.0)
        for t in range(1, 4):
            clock[0] += 4.0
            progress.step(t)
            watch.check()  # a step finished within the limit each time: no stall
        clock[0] += 5.0
        with pytest.raises(WorkerHungError, match="last step finished: 3 of 4 of its chunk"):
            watch.check()
    finally:
        progress.buffers.close()
        progress.buffers.unlink()


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(timeout_s=float("inf")), ValueError, "timeout_s must be a finite number of seconds in (0, "),
        (dict(timeout_s=1e12), ValueError, "timeout_s must be a finite number of seconds in (0, "),
        (dict(reset_timeout_s=0), ValueError, "reset_timeout_s must be"),
        (dict(startup_timeout_s="long"), TypeError, "startup_timeout_s must be"),
        (dict(stall_timeout_s="fast"), TypeError, "stall_timeout_s must be"),
        (dict(restart_workers="yes"), TypeError, "restart_workers must be a bool, a RestartPolicy"),
        (dict(restart_workers={"max_restarts": -1}), ValueError, "max_restarts must be an int >= 0, got -1"),
        (dict(restart_workers={"max_backoff_s": -1.0}), ValueError,
         "max_backoff_s must be a finite number of seconds >= 0, got -1.0"),
        (dict(restart_workers={"max_backoff_s": float("inf")}), ValueError, "max_backoff_s must be a finite number"),
        (dict(restart_workers={"max_backoff_s": "1s"}), TypeError, "max_backoff_s must be a finite number"),
    ],
)
def test_bad_supervision_settings_fail_before_any_worker_starts(kwargs, error, text):
    with pytest.raises(error) as info:
        RolloutEngine(FaultyFactory(seeds=()), PROFILE, **kwargs)
    assert text in str(info.value)
    assert our_segments() == []


def test_no_limit_anywhere_is_a_valid_configuration():
    settings = Supervision(None, None, None, None)
    assert [settings.deadline(c)[0] for c in ("init", "reset", "chunk")] == [None, None, None]
    with RolloutEngine(FaultyFactory(seeds=()), PROFILE, timeout_s=None, reset_timeout_s=None,
                       startup_timeout_s=None, stall_timeout_s=None) as engine:
        assert engine.rollout(policy, 1).own_actions.tolist() == [CHUNK] * 4
