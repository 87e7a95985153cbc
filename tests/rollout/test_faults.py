"""Faults and bad input: clear errors, never a hang, no orphan processes, no leaked shared memory."""

import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError, WorkerError

from .helpers import CHUNK, assert_gone, make_policy, our_segments, policy
from .pointmass import PointMassFactory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2)


def assert_clean(pids):
    assert_gone(pids)
    assert not {c.pid for c in psutil.Process().children(recursive=True)} & set(pids)
    assert our_segments() == []


def test_worker_exception_is_reraised_with_traceback_and_env_ids():
    engine = RolloutEngine(PointMassFactory(fail_at_step=3), PROFILE, timeout_s=30)
    pids = engine.worker_pids
    engine.reset()
    with pytest.raises(WorkerError) as info:
        engine.step(1, np.zeros((2, CHUNK, 2), np.float32))
    err = info.value
    assert err.command == "chunk" and err.exc_type == "ValueError" and err.worker == 0
    assert err.env_ids == [1]  # stage 1 of worker 0 is its local env 1 = global env 1
    assert "point mass exploded at global step 3" in str(err)
    assert "in step" in err.remote_traceback and "pointmass.py" in err.remote_traceback
    assert_clean(pids)


def test_factory_that_raises_gives_worker_error_and_no_leftovers():
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(WorkerError, match="factory failed on purpose") as info:
        RolloutEngine(PointMassFactory(fail_in_factory=True), PROFILE, timeout_s=30)
    assert info.value.command == "init" and info.value.env_ids == [0, 1]
    assert_clean([c.pid for c in psutil.Process().children(recursive=True) if c.pid not in before])


def test_sigkilled_worker_is_detected_not_waited_for():
    # timeout_s=5: a missed death would surface as TimeoutError, a detected one as WorkerDiedError
    engine = RolloutEngine(PointMassFactory(), PROFILE, timeout_s=5)
    pids = engine.worker_pids
    engine.reset()
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(envs \[2, 3\]\) died .*SIGKILL") as info:
        engine.step(0, np.zeros((2, CHUNK, 2), np.float32))
    assert info.value.env_ids == [2, 3]
    assert_clean(pids)


def test_restart_workers_respawns_and_resets_its_envs():
    engine = RolloutEngine(PointMassFactory(), PROFILE, timeout_s=5, restart_workers=True)
    engine.reset()
    old = engine.worker_pids
    os.kill(old[0], signal.SIGKILL)
    psutil.Process(old[0]).wait(timeout=5)
    result = engine.step(0, np.full((2, CHUNK, 2), 0.5, np.float32))
    assert engine.restarts == 1 and engine.worker_pids[0] != old[0]
    # row 0 = env 0 of the dead worker: placeholder; row 1 = env 2 of worker 1: stepped normally
    assert result.infos[0]["worker_restarted"] and result.truncated[0, 0] and not result.applied[0].any()
    assert result.applied[1].all()
    stats = engine.rollout(policy, 2, reset=False)
    assert stats.own_actions.tolist() == [2 * CHUNK] * 4
    pids = engine.worker_pids
    engine.close()
    assert_clean(pids + old)


def test_bad_actions_are_rejected_and_engine_stays_usable():
    with RolloutEngine(PointMassFactory(), PROFILE, timeout_s=30) as engine:
        engine.reset()
        good = np.zeros((2, CHUNK, 2), np.float32)
        with pytest.raises(ValueError, match=r"actions must have shape \(2, 4, 2\), got \(3, 4, 2\)"):
            engine.submit(0, np.zeros((3, CHUNK, 2), np.float32))
        with pytest.raises(ValueError, match=r"shape \(2, 4, 2\), got \(2, 5, 2\)"):
            engine.submit(0, np.zeros((2, CHUNK + 1, 2), np.float32))
        with pytest.raises(TypeError, match="float dtype, got int32"):
            engine.submit(0, good.astype(np.int32))
        nan = good.copy()
        nan[1, 2, 1] = np.nan
        with pytest.raises(ValueError, match=r"NaN or inf \(first at \[env, step, dim\] = \[1, 2, 1\]\)"):
            engine.submit(0, nan)
        with pytest.raises(ValueError, match=r"stage must be an int in \[0, 1\], got 2"):
            engine.submit(2, good)
        assert engine.step(0, good).applied.all()


def test_policy_with_wrong_batch_size_closes_the_engine():
    engine = RolloutEngine(PointMassFactory(), PROFILE, timeout_s=30)
    pids = engine.worker_pids
    with pytest.raises(ValueError, match=r"policy output for stage 0 must have shape \(2, 4, 2\), got \(3, 4, 2\)"):
        engine.rollout(lambda obs: np.zeros((3, CHUNK, 2), np.float32), 2)
    assert_clean(pids)


def test_torch_policy_module():
    torch = pytest.importorskip("torch")

    class Hold(torch.nn.Module):
        def forward(self, obs):
            p = obs["proprio"]
            assert isinstance(p, torch.Tensor)
            return (-p[:, None, :2]).repeat(1, CHUNK, 1)

    with RolloutEngine(PointMassFactory(), PROFILE, timeout_s=30) as engine:
        stats = engine.rollout(Hold(), 2)
    assert stats.own_actions.tolist() == [2 * CHUNK] * 4


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(profile={"num_env_subprocess": 2, "total_num_envs": 6, "pipeline_stage_num": 2}), ValueError,
         ["pipeline_stages=2", "envs_per_process=3"]),
        (dict(profile={"num_env_subprocess": 3, "total_num_envs": 6, "pipeline_stage_num": 2, "partition": "process"}),
         ValueError, ["pipeline_stages=2", "num_env_processes=3"]),
        (dict(executor="threads"), ValueError, ["executor", "threads"]),
        (dict(timeout_s=0), ValueError, ["timeout_s", "0"]),
        (dict(factory=lambda n, s, p: None), TypeError, ["factory must be picklable"]),
        (dict(profile={"num_env_subprocess": 100000, "total_num_envs": 100000}), ValueError,
         ["num_env_processes must be an int in [1, ", "on this machine", "got 100000"]),
        (dict(profile={"total_num_envs": 10**8}, executor="inline"), ValueError,
         ["total_num_envs must be an int in [1, ", "got 100000000"]),
        (dict(profile={"total_num_envs": 4, "num_action_chunks": 10**10}), ValueError,
         ["chunk_size must be an int in [1, ", "got 10000000000"]),
    ],
)
def test_bad_configuration_fails_before_any_worker_starts(kwargs, error, words):
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    factory = kwargs.pop("factory", PointMassFactory())
    with pytest.raises(error) as info:
        RolloutEngine(factory, **kwargs)
    for word in words:
        assert word in str(info.value)
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before


OWNER_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from behavior1k_fast.rollout import RolloutEngine
    from tests.rollout.pointmass import PointMassFactory
    if __name__ == "__main__":
        engine = RolloutEngine(PointMassFactory(), {{"num_env_subprocess": 2, "total_num_envs": 2}}, timeout_s=30)
        engine.reset()
        print(os.getpid(), " ".join(map(str, engine.worker_pids)), flush=True)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_workers_never_outlive_their_owner(how, tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT.format(root=ROOT))
    proc = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=60)
    owner, *pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    assert_gone(pids)  # "exit": interpreter-exit finalizer; "kill": the workers' owner watchdog
    if how == "exit":
        assert proc.returncode == 0, proc.stderr
        assert our_segments(owner) == []
        assert "leaked" not in proc.stderr, proc.stderr


def test_policy_process_runs_the_policy_and_carries_its_errors_back():
    from behavior1k_fast.rollout import PolicyProcess

    with PolicyProcess(make_policy) as remote, RolloutEngine(PointMassFactory(), PROFILE, timeout_s=30) as engine:
        assert remote.pid not in engine.worker_pids
        stats = engine.rollout(remote, 2)
        assert stats.own_actions.tolist() == [2 * CHUNK] * 4
        np.testing.assert_array_equal(remote(engine.stage_obs(0)), policy(engine.stage_obs(0)))
        with pytest.raises(WorkerError, match="policy process failed in 'forward'.*KeyError") as info:
            remote({"nothing": np.zeros(2)})
        assert "proprio" in info.value.remote_traceback
        pid = remote.pid
    assert_gone([pid])



@pytest.mark.parametrize("executor", ["process", "inline"])
@pytest.mark.parametrize("key, value, text", [
    ("proprio", 1e300, "observation 'proprio' holds 1e+300, which its space's dtype float32 cannot hold"),
    ("head::rgb", 300.0, "observation 'head::rgb' holds 300.0, which its space's dtype uint8 cannot hold"),
])
def test_an_observation_its_space_dtype_cannot_hold_is_an_error_naming_the_key(executor, key, value, text):
    from .faulty import LoudFactory

    engine = RolloutEngine(LoudFactory(key, value), PROFILE, executor=executor)
    pids = engine.worker_pids
    engine.reset()
    with pytest.raises(WorkerError, match=re.escape(text)) as info:
        engine.step(0, np.zeros((2, CHUNK, 2), np.float32))
    assert info.value.command == "chunk" and info.value.exc_type == "ValueError"
    assert_clean(pids)


def _reference_factory_class():
    from behavior1k_fast.backends.reference import ReferenceFactory

    return RolloutEngine(ReferenceFactory, PROFILE)


def _recorder_of_a_string():
    from behavior1k_fast.rollout import TrajectoryRecorder

    return TrajectoryRecorder("engine")


def _unpicklable_policy_factory():
    from behavior1k_fast.rollout import PolicyProcess

    return PolicyProcess(lambda: policy)


@pytest.mark.parametrize("make, text", [
    (_reference_factory_class, "factory must be a factory instance, got the class ReferenceFactory: pass "
                               "ReferenceFactory(...)"),
    (_recorder_of_a_string, "engine must be a RolloutEngine, got 'engine'"),
    (_unpicklable_policy_factory, "policy_factory must be picklable to reach the policy process, got <function"),
])
def test_a_wrong_kind_of_argument_is_a_type_error_naming_it_before_anything_starts(make, text):
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError, match=re.escape(text)):
        make()
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before


def test_masked_array_actions_are_a_type_error_and_the_engine_stays_usable():
    with RolloutEngine(PointMassFactory(), PROFILE, executor="inline") as engine:
        engine.reset()
        masked = np.ma.masked_array(np.zeros((2, CHUNK, 2), np.float32), mask=False)
        with pytest.raises(TypeError, match=r"actions must be a plain numpy array \[envs, steps, action_dim\], got a "
                                            r"masked array: .* actions.filled\(0.0\)"):
            engine.submit(0, masked)
        assert engine.step(0, masked.filled(0.0)).applied.all()


# --- S1: the kept actions and extras are the ones applied ---------------------------------------------
class ReusingPolicy:
    """Writes every output into the same two buffers (actions, extras) and returns them, as a
    policy with preallocated outputs does; each call's output differs. ``returned``: a copy of each output
    as it was returned, in call order."""

    def __init__(self):
        self.actions = self.value = None
        self.returned = []

    def __call__(self, obs):
        n = len(obs["proprio"])
        if self.actions is None or len(self.actions) != n:
            self.actions, self.value = np.zeros((n, CHUNK, 2), np.float32), np.zeros(n)  # the action dtype
        call = len(self.returned)
        self.actions[...] = np.sin(call + np.arange(n * CHUNK * 2)).reshape(n, CHUNK, 2) * 0.9
        self.value[...] = call
        self.returned.append((self.actions.astype(np.float32), self.value.copy()))
        return self.actions, {"value": self.value}


def assert_kept_as_applied(result, returned):
    """Per row: the kept actions at its last applied step are the ones the backend got (``info["action"]``),
    and its kept extras are those the policy returned with those actions (not a later call's overwrite)."""
    assert result.actions.dtype == np.float32
    for row, info in enumerate(result.infos):
        last = np.flatnonzero(result.applied[row])[-1]
        np.testing.assert_array_equal(result.actions[row, last], info["action"])
        call = next(c for c, (actions, _) in enumerate(returned) if (actions == result.actions[row]).all(axis=(1, 2)).any())
        assert result.extras["value"][row] == call


@pytest.mark.parametrize("schedule", ["barrier", "async"])
@pytest.mark.parametrize("partition", ["hybrid", "process"])
def test_kept_actions_and_extras_are_the_applied_ones_whatever_the_policy_does_with_its_buffers(partition, schedule):
    from .faulty import EchoFactory

    profile = PROFILE.replace(partition=partition, schedule=schedule)
    reusing, results = ReusingPolicy(), []
    with RolloutEngine(EchoFactory(), profile) as engine:
        engine.rollout(reusing, 3, on_chunk=lambda stage, result: results.append(result))
    assert sum(len(r.env_ids) for r in results) == 3 * 4 and len(reusing.returned) >= 6  # 3 rounds of 4 envs
    for result in results:
        assert_kept_as_applied(result, reusing.returned)


def test_a_trajectory_batch_holds_the_applied_actions_of_a_buffer_reusing_policy():
    from behavior1k_fast.rollout import TrajectoryRecorder

    from .faulty import EchoFactory

    reusing, results = ReusingPolicy(), []
    with RolloutEngine(EchoFactory(), PROFILE) as engine:
        batch = TrajectoryRecorder(engine).rollout(reusing, 3, on_chunk=lambda stage, r: results.append(r))[1]
    for result in results:  # the batch row of each chunk is the chunk as applied
        assert_kept_as_applied(result, reusing.returned)
    sent = {tuple(a.ravel().tolist()) for actions, _ in reusing.returned for a in actions}
    assert all(tuple(batch.actions[r, e].ravel().tolist()) in sent for r in range(3) for e in range(4))
    assert batch.actions.dtype == np.float32


def test_the_vector_env_applies_the_actions_given_to_step_even_when_the_caller_reuses_its_buffer():
    from behavior1k_fast.rollout import EngineVectorEnv

    from .faulty import EchoFactory

    buffer = np.zeros((4, CHUNK, 2))
    with EngineVectorEnv(EchoFactory(), PROFILE, executor="inline") as env:
        env.reset(seed=0)
        for call in range(3):
            buffer[...] = 0.1 * call
            applied = buffer.astype(np.float32)
            _, _, _, _, infos = env.step(buffer)
            buffer[...] = -1.0  # the caller reuses its buffer at once
            np.testing.assert_array_equal(np.stack(infos["action"]), applied[:, -1])


# --- S2: the check sees the values the backend will get -------------------------------------------------
def test_actions_the_action_dtype_cannot_hold_are_a_value_error_and_the_engine_stays_usable():
    with RolloutEngine(PointMassFactory(), PROFILE, executor="inline") as engine:
        engine.reset()
        loud = np.zeros((2, CHUNK, 2))
        loud[1, 2, 0] = 1e300
        with pytest.raises(ValueError, match=re.escape("actions holds 1e+300 at [env, step, dim] = [1, 2, 0], which "
                                                       "the action dtype float32 cannot hold")):
            engine.submit(0, loud)
        assert engine.step(0, np.zeros((2, CHUNK, 2))).applied.all()  # usable, and nothing was sent before


def test_a_policy_output_the_action_dtype_cannot_hold_is_a_value_error_in_the_driver():
    def loud(obs):
        return np.full((len(obs["proprio"]), CHUNK, 2), 1e300)

    with pytest.raises(ValueError, match=r"policy output for stage 0 holds 1e\+300 .* float32 cannot hold"):
        with RolloutEngine(PointMassFactory(), PROFILE) as engine:
            engine.rollout(loud, 1)


# --- H1 and D10: what the constructor refuses, by name ----------------------------------------------------
INLINE = "executor='inline' runs the workers in this thread, where nothing can stop a hung one, so it has no deadlines: "


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(executor="inline", timeout_s=5), ValueError, INLINE + "timeout_s=5 would never fire"),
    (dict(executor="inline", stall_timeout_s=2), ValueError, INLINE + "stall_timeout_s=2 would never fire"),
    (dict(executor="inline", startup_timeout_s=1200.0), ValueError, INLINE + "startup_timeout_s=1200.0 would never"),
    (dict(timeout_s=-1), ValueError, "timeout_s must be a finite number of seconds in (0, "),
    (dict(stall_timeout_s="fast"), TypeError,
     "stall_timeout_s must be 'auto' (from measured step times), None (no limit) or a finite number of seconds"),
])
def test_deadline_arguments_are_checked_by_their_names(kwargs, error, text):
    with pytest.raises(error) as info:
        RolloutEngine(PointMassFactory(), PROFILE, **kwargs)
    assert str(info.value).startswith(text), str(info.value)  # the engine's own name: timeout_s, not chunk_...


def test_the_inline_executor_takes_the_default_deadlines_and_none():
    for kwargs in ({}, dict(timeout_s=None, reset_timeout_s=None, startup_timeout_s=None, stall_timeout_s=None)):
        with RolloutEngine(PointMassFactory(), PROFILE, executor="inline", **kwargs) as engine:
            assert engine.rollout(policy, 1).own_actions.sum() == 4 * CHUNK
