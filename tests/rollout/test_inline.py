"""The inline executor (same engine, no subprocess), the engine's typed state errors and the wire protocol."""

import pickle

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.patching import omnigibson as omnigibson_patches
from behavior1k_fast.rollout import (
    ChunkInFlightError,
    ClosedError,
    NoChunkInFlightError,
    NotResetError,
    RolloutEngine,
    WorkerError,
)
from behavior1k_fast.rollout.protocol import Command, Failure, unwrap

from .helpers import CHUNK, assert_same_trajectories, policy, record
from .pointmass import PointMassFactory

LENGTHS = (7, 10, 5, 9)


def profile(**kw):
    base = dict(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2, gc_enable=False)
    base.update(kw)
    return RolloutProfile.from_dict(base)


def inline_engine(factory=None, **kw):
    return RolloutEngine(factory or PointMassFactory(episode_lengths=LENGTHS), profile(**kw), executor="inline")


@pytest.mark.parametrize("partition", ["hybrid", "process"])
def test_inline_executor_gives_the_trajectories_of_worker_processes(partition):
    runs = []
    for executor in ("inline", "process"):
        with RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile(partition=partition),
                           executor=executor) as e:
            runs.append(record(e, 5))
    (traj_inline, stats_inline), (traj_process, stats_process) = runs
    assert_same_trajectories(traj_inline, traj_process)
    assert stats_inline.episodes.tolist() == stats_process.episodes.tolist() == [2, 1, 2, 1]


class PatchedPointMassFactory(PointMassFactory):
    """Names the OmniGibson patch set, as the OmniGibson backend's factory does."""

    patch_set = "behavior1k_fast.patching.omnigibson"


def test_inline_executor_starts_no_process_and_applies_then_restores_the_profile():
    assert omnigibson_patches.active_profile() is None
    with inline_engine(PatchedPointMassFactory(episode_lengths=LENGTHS)) as e:
        assert e.worker_pids == []
        assert omnigibson_patches.active_profile() == e.profile.replace(pipeline_stages=2)
        assert e.rollout(policy, 1).own_actions.sum() == 4 * CHUNK
    assert omnigibson_patches.active_profile() is None


def test_inline_worker_error_is_chained_to_the_original_exception():
    e = inline_engine(PointMassFactory(fail_at_step=3))
    e.reset()
    with pytest.raises(WorkerError, match="point mass exploded at global step 3") as info:
        e.step(1, np.zeros((2, CHUNK, 2), np.float32))
    assert isinstance(info.value.__cause__, ValueError)  # pdb's post-mortem reaches the failing frame
    assert info.value.env_ids == [1] and info.value.command == "chunk"
    with pytest.raises(ClosedError):
        e.reset()


def test_inline_factory_error_is_a_worker_error_naming_init():
    with pytest.raises(WorkerError, match="factory failed on purpose") as info:
        inline_engine(PointMassFactory(fail_in_factory=True))
    assert info.value.command == "init" and info.value.env_ids == [0, 1]
    assert omnigibson_patches.active_profile() is None


def test_state_errors_are_typed_runtime_errors_and_leave_the_engine_usable():
    chunk = np.zeros((2, CHUNK, 2), np.float32)
    with inline_engine() as e:
        with pytest.raises(NotResetError, match="call reset"):
            e.stage_obs(0)
        with pytest.raises(NotResetError, match="every env once"):
            e.reset(env_ids=[1])
        e.reset()
        with pytest.raises(NoChunkInFlightError, match="stage 1 has no chunk in flight"):
            e.collect(1)
        e.submit(0, chunk)
        with pytest.raises(ChunkInFlightError, match="stage 0 already has a chunk in flight"):
            e.submit(0, chunk)
        with pytest.raises(ChunkInFlightError, match="cannot reset with chunks in flight for stages \\[0\\]"):
            e.reset()
        with pytest.raises(ChunkInFlightError, match="cannot start a rollout with chunks in flight for stages \\[0\\]"):
            e.rollout(policy, 1)
        assert e.collect(0).applied.all()
    with pytest.raises(ClosedError, match="closed"):
        e.reset()
    for error in (NotResetError, NoChunkInFlightError, ChunkInFlightError, ClosedError):
        assert issubclass(error, RuntimeError)  # existing `except RuntimeError` code keeps working


def test_a_failure_crosses_a_pickle_without_its_exception_object():
    try:
        raise KeyError("proprio")
    except KeyError as exc:
        failure = Failure.from_exception(exc, Command.FORWARD, [3])
    assert failure.cause is not None
    copy = pickle.loads(pickle.dumps(failure))
    assert copy.cause is None and copy == failure  # the cause is not compared, the rest is kept
    with pytest.raises(WorkerError, match="worker 2 failed in 'forward' for envs \\[3\\]: KeyError") as info:
        unwrap(copy, 2)
    assert "raise KeyError" in info.value.remote_traceback and info.value.__cause__ is None
