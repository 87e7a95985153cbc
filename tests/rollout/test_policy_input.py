"""A policy cannot change the observations the engine handed out (reset() returns, on_chunk results)."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import PolicyProcess, RolloutEngine, WorkerDiedError
from behavior1k_fast.rollout.policy import call_policy

from .helpers import CHUNK, assert_gone, make_policy, policy
from .pointmass import PointMassFactory

PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2, gc_enable=False)


def snapshot(batches):
    return [{k: v.copy() for k, v in batch.items()} for batch in batches]


def assert_unchanged(handed_out, copies):
    for batch, copy in zip(handed_out, copies):
        for key in copy:
            np.testing.assert_array_equal(batch[key], copy[key], err_msg=key)


def test_a_numpy_policy_gets_views_it_cannot_write():
    def scribbler(obs):
        obs["proprio"][:] = 0.0
        return policy(obs)

    with RolloutEngine(PointMassFactory(), PROFILE, executor="inline") as engine:
        first = engine.reset()
        copies = snapshot(first)
        with pytest.raises(ValueError, match="read-only"):
            engine.rollout(scribbler, 1, reset=False)
    assert_unchanged(first, copies)


def test_a_torch_module_that_edits_its_input_in_place_changes_nothing_handed_out():
    torch = pytest.importorskip("torch")

    class InPlace(torch.nn.Module):
        def forward(self, obs):
            p = obs["proprio"].mul_(0.0)  # in place, on the tensor it was given
            return p[:, None, :2].repeat(1, CHUNK, 1)

    handed_out = []
    with RolloutEngine(PointMassFactory(), PROFILE, executor="inline") as engine:
        first = engine.reset()
        handed_out += first
        seen = []
        engine.rollout(InPlace(), 2, reset=False, on_chunk=lambda stage, result: seen.append(result.obs))
        handed_out += seen
        copies = snapshot(handed_out)
        engine.rollout(InPlace(), 1, reset=False)
    assert_unchanged(handed_out, copies)
    assert any(np.abs(batch["proprio"]).sum() > 0 for batch in handed_out)  # the zeros never reached them


def test_call_policy_leaves_the_caller_arrays_writable():
    obs = {"proprio": np.ones((2, 4), np.float32)}
    seen = []
    call_policy(lambda o: seen.append(o["proprio"].flags.writeable), obs)
    assert seen == [False] and obs["proprio"].flags.writeable


def test_a_killed_policy_process_is_reported_like_a_dead_worker():
    import os
    import signal

    remote = PolicyProcess(make_policy, timeout_s=30)
    pid = remote.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=r"policy process \(envs \[\]\) died while running 'forward': pid \d+ "
                                              r"exit code -9 \(SIGKILL\)"):
        remote({"proprio": np.zeros((2, 4), np.float32)})
    remote.close()  # idempotent after the failure closed it
    assert_gone([pid])


def test_bfloat16_tensors_from_a_policy_become_float32_and_the_engine_runs_on():
    torch = pytest.importorskip("torch")

    def bf16_policy(obs):
        actions = torch.tensor(policy(obs), dtype=torch.bfloat16)
        return actions, {"logprob": torch.full((actions.shape[0],), 0.5, dtype=torch.bfloat16)}

    results = []
    with RolloutEngine(PointMassFactory(), PROFILE, executor="inline") as engine:
        stats = engine.rollout(bf16_policy, 2, on_chunk=lambda stage, result: results.append(result))
        assert stats.own_actions.sum() == 2 * 4 * CHUNK
        assert engine.rollout(policy, 1).own_actions.sum() == 4 * CHUNK  # still usable
    assert results[0].extras["logprob"].dtype == np.float32 and results[0].extras["logprob"].tolist() == [0.5, 0.5]
    np.testing.assert_array_equal(results[0].actions, results[0].actions.astype(np.float32))


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_a_tensor_dtype_numpy_cannot_hold_is_a_type_error_naming_it():
    torch = pytest.importorskip("torch")

    def complex_policy(obs):
        return torch.tensor(policy(obs)), {"value": torch.zeros(2, dtype=torch.complex32)}

    with pytest.raises(TypeError, match=r"the policy's extras\['value'\] is a tensor of dtype torch.complex32, which "
                                        r"numpy cannot hold"):
        call_policy(complex_policy, {"proprio": np.zeros((2, 4), np.float32)})
