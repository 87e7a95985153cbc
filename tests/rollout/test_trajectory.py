"""Policy extras travel with their chunk; TrajectoryRecorder batches hold exactly what the engine did."""

import dataclasses

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import ClosedError, PolicyProcess, RolloutEngine, TrajectoryRecorder

from .helpers import CHUNK, policy, record
from .pointmass import PointMassFactory

#: Episode lengths of local envs 0 and 1 of every worker: they end inside chunks of 4 (steps 7 and 10).
LENGTHS = (7, 10)


def engine(partition="hybrid", stages=2, **kw):
    profile = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=stages,
                             partition=partition, gc_enable=False)
    return RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile, executor="inline", **kw)


def value_of(obs):
    """A made-up critic: any deterministic function of each env's observation."""
    return obs["proprio"][..., 0] * 2.0 + obs["proprio"][..., 1]


def policy_with_extras(obs):
    return policy(obs), {"value": value_of(obs), "logprob": np.stack([obs["proprio"][:, 2]] * 3, axis=1)}


def make_policy_with_extras():
    return policy_with_extras


class SeenObs:
    """A policy that keeps a copy of every observation batch it was called on."""

    def __init__(self):
        self.calls = []

    def __call__(self, obs):
        self.calls.append({k: v.copy() for k, v in obs.items()})
        return policy_with_extras(obs)


def test_extras_stay_with_the_chunk_that_produced_them():
    seen = []
    with engine() as e:
        e.rollout(policy_with_extras, 3, on_chunk=lambda stage, result: seen.append(result))
    assert len(seen) == 6
    for result in seen:
        np.testing.assert_array_equal(result.extras["value"], value_of(result.policy_obs))
        np.testing.assert_array_equal(result.actions, policy(result.policy_obs))
        assert result.extras["logprob"].shape == (2, 3)


def test_a_torch_module_returns_tensor_extras_as_numpy_arrays():
    torch = pytest.importorskip("torch")

    class Module(torch.nn.Module):
        def forward(self, obs):
            p = obs["proprio"]
            return torch.zeros(p.shape[0], CHUNK, 2), {"value": p[:, 0] * 3, "logprob": p.sum(dim=1)}

    seen = []
    with engine() as e:
        e.rollout(Module(), 1, on_chunk=lambda stage, result: seen.append(result))
    for result in seen:
        assert isinstance(result.extras["value"], np.ndarray) and isinstance(result.extras["logprob"], np.ndarray)
        np.testing.assert_allclose(result.extras["value"], result.policy_obs["proprio"][:, 0] * 3, rtol=1e-6)


@pytest.mark.parametrize(
    "extras, error, match",
    [
        ({"value": np.zeros(3)}, ValueError, r"extras\['value'\] must have a leading batch dimension of 2, got shape \(3,\)"),
        ({"value": np.float32(1.0)}, TypeError, r"extras\['value'\] must be an array or tensor, got float32"),
        ({"value": [1.0, 2.0]}, TypeError, r"extras\['value'\] must be an array or tensor, got list"),
        ({3: np.zeros(2)}, TypeError, "extras keys must be str, got 3"),
    ],
)
def test_bad_extras_raise_naming_the_key_and_close_the_engine(extras, error, match):
    e = engine()
    with pytest.raises(error, match=match):
        e.rollout(lambda obs: (policy(obs), extras), 1)
    with pytest.raises(ClosedError):
        e.reset()


def test_a_tuple_that_is_not_an_actions_extras_pair_is_a_type_error():
    with engine() as e, pytest.raises(TypeError, match=r"policy output for stage 0 must be actions or an \(actions, extras dict\) pair"):
        e.rollout(lambda obs: (policy(obs), policy(obs), {}), 1)


@pytest.mark.slow
def test_a_policy_process_carries_extras():
    with PolicyProcess(make_policy_with_extras) as remote, engine() as e:
        recorded = TrajectoryRecorder(e).rollout(remote, 2)[1]
    np.testing.assert_array_equal(recorded.extras["value"], value_of(recorded.obs))
    assert recorded.extras["logprob"].shape == (2, 4, 3)


@pytest.mark.parametrize("partition", ["hybrid", "process"])
def test_a_batch_holds_the_observations_actions_and_extras_the_policy_saw_and_gave(partition):
    seen = SeenObs()
    with engine(partition) as e:
        stats, batch = TrajectoryRecorder(e).rollout(seen, 5)
        stage_envs = [e.plan.stage_envs(k) for k in range(e.pipeline_stages)]
    assert batch.actions.shape == (5, 4, CHUNK, 2) and batch.rewards.shape == (5, 4, CHUNK)
    assert batch.obs["head::rgb"].shape == (5, 4, 3, 8, 8) and batch.extras["logprob"].shape == (5, 4, 3)
    # forwards alternate stages round by round; each batch row is the env's row of its stage's forward
    for i, obs in enumerate(seen.calls):
        r, ids = i // 2, stage_envs[i % 2]
        for key in obs:
            np.testing.assert_array_equal(batch.obs[key][r, ids], obs[key])
        np.testing.assert_array_equal(batch.actions[r, ids], policy(obs))
        np.testing.assert_array_equal(batch.extras["value"][r, ids], value_of(obs))
    assert batch.applied.sum() == stats.own_actions.sum()
    np.testing.assert_allclose(batch.rewards.sum(axis=(0, 2)), stats.total_reward)


def test_per_step_arrays_match_the_chunks_and_masked_steps_carry_no_reward():
    with engine() as e:
        traj, _ = record(e, 5, policy=policy_with_extras)
    with engine() as e:
        batch = TrajectoryRecorder(e).rollout(policy_with_extras, 5)[1]
    for env in range(4):
        for name in ("rewards", "terminated", "truncated"):
            np.testing.assert_array_equal(batch.__dict__[name][:, env], traj[env][name])
    assert (~batch.applied).any()  # episodes of 7 and 10 steps end inside chunks of 4
    assert (batch.rewards[~batch.applied] == 0).all()
    # an applied step after the end of an episode exists only after its reset, at the next round
    done = batch.terminated | batch.truncated
    r, env, t = np.nonzero(done)
    assert len(r) >= 4
    for ri, ei, ti in zip(r, env, t):
        assert not batch.applied[ri, ei, ti + 1 :].any()


def test_episode_statistics_count_whole_episodes_across_rollouts():
    with engine() as e:
        recorder = TrajectoryRecorder(e)
        batches = [recorder.rollout(policy, 3, reset=i == 0)[1] for i in range(3)]
    rewards = np.concatenate([b.rewards for b in batches])  # [9 rounds, E, N]
    applied = np.concatenate([b.applied for b in batches])
    done = np.concatenate([b.terminated | b.truncated for b in batches])
    for env in range(4):
        ends = [(r * CHUNK + t) for r, t in zip(*np.nonzero(done[:, env]))]
        flat_r, flat_a = rewards[:, env].reshape(-1), applied[:, env].reshape(-1)
        expected, start = [], 0
        for end in ends:
            expected.append((flat_r[start : end + 1].sum(), flat_a[start : end + 1].sum()))
            start = (end // CHUNK + 1) * CHUNK  # the next episode starts at the next chunk
        got = [(ret, length) for b in batches for ret, length, ev in zip(b.episodes.returns, b.episodes.lengths,
                                                                         b.episodes.env) if ev == env]
        assert len(got) == len(expected) >= 2
        np.testing.assert_allclose([g[0] for g in got], [x[0] for x in expected])
        assert [g[1] for g in got] == [x[1] for x in expected] == [LENGTHS[env % 2]] * len(got)
    # an episode of 10 steps started in the first rollout (3 rounds x 4 steps) and ended in the second
    assert 10 in batches[1].episodes.lengths.tolist()
    assert batches[0].episodes.success is None  # the point masses report no "success"


def test_final_observations_are_the_terminal_ones_and_last_obs_is_the_next_boundary():
    finals = {}

    def on_chunk(stage, result):
        for row, info in enumerate(result.infos):
            if "final_observation" in info:
                finals[len(finals)] = (int(result.env_ids[row]), info["final_observation"])

    with engine() as e:
        recorder = TrajectoryRecorder(e)
        first = recorder.rollout(policy, 4, on_chunk=on_chunk)[1]
        second = recorder.rollout(policy, 1, reset=False)[1]
    eps = first.episodes
    assert eps.env.tolist() == [env for env, _ in finals.values()]
    for m, (_, obs) in finals.items():
        for key in obs:
            np.testing.assert_array_equal(eps.final_obs[key][m], obs[key])
    assert eps.terminated.all() and not eps.truncated.any() and not eps.worker_restarted.any()
    for key in first.last_obs:
        np.testing.assert_array_equal(first.last_obs[key], second.obs[key][0])


def test_without_auto_reset_the_final_observation_is_the_boundary_observation():
    with engine(auto_reset=False) as e:
        batch = TrajectoryRecorder(e).rollout(policy, 2)[1]
    eps = batch.episodes
    assert eps.env.tolist() == [0, 2] and eps.lengths.tolist() == [7, 7]
    for m, env in enumerate(eps.env):
        np.testing.assert_array_equal(eps.final_obs["proprio"][m], batch.last_obs["proprio"][env])


def test_a_reset_outside_the_recorder_is_detected_before_sums_go_wrong():
    with engine() as e:
        recorder = TrajectoryRecorder(e)
        recorder.rollout(policy, 2)
        e.reset()
        with pytest.raises(RuntimeError, match=r"stages \[0, 1\] were reset or stepped outside this recorder"):
            recorder.rollout(policy, 1, reset=False)
        recorder.reset_episodes()
        assert recorder.rollout(policy, 1, reset=False)[1].rewards.shape == (1, 4, CHUNK)


def test_tensor_batches_hold_the_numpy_batch_values():
    torch = pytest.importorskip("torch")
    batches = []
    for tensors in (False, True):
        with engine() as e:
            batches.append(TrajectoryRecorder(e, tensors=tensors).rollout(policy_with_extras, 3)[1])
    arrays, tensors = batches
    assert isinstance(tensors.rewards, torch.Tensor) and tensors.applied.dtype == torch.bool
    assert isinstance(tensors.episodes.final_obs["proprio"], torch.Tensor)
    for name in ("actions", "rewards", "terminated", "truncated", "applied"):
        np.testing.assert_array_equal(getattr(tensors, name).numpy(), getattr(arrays, name))
    for key in arrays.obs:
        np.testing.assert_array_equal(tensors.obs[key].numpy(), arrays.obs[key])
    np.testing.assert_array_equal(tensors.extras["value"].numpy(), arrays.extras["value"])
    np.testing.assert_array_equal(tensors.episodes.returns.numpy(), arrays.episodes.returns)
    assert tensors.nbytes == arrays.nbytes > 0


def test_pinned_batches_need_cuda_and_tensors():
    torch = pytest.importorskip("torch")
    with engine() as e:
        with pytest.raises(ValueError, match="pin_memory=True needs tensors=True"):
            TrajectoryRecorder(e, pin_memory=True)
        with pytest.raises(TypeError, match="tensors must be a bool, got 'torch'"):
            TrajectoryRecorder(e, tensors="torch")
        if torch.cuda.is_available():
            batch = TrajectoryRecorder(e, tensors=True, pin_memory=True).rollout(policy, 1)[1]
            assert batch.rewards.is_pinned() and batch.obs["proprio"].is_pinned()
        else:
            with pytest.raises(ValueError, match="pin_memory=True needs a CUDA device"):
                TrajectoryRecorder(e, tensors=True, pin_memory=True)


def test_memory_per_round_matches_the_documented_formula():
    with engine() as e:
        batch = TrajectoryRecorder(e).rollout(policy_with_extras, 4)[1]
    obs_bytes = 3 * 8 * 8 + 4 * 4  # one env: uint8 rgb [3, 8, 8] + float32 proprio [4]
    extras_bytes = 4 + 3 * 4  # float32 value + float32 logprob [3] (the dtypes the policy returned)
    per_round = 4 * (obs_bytes + CHUNK * 2 * 4 + extras_bytes + 11 * CHUNK)
    m = len(batch.episodes.env)
    assert m > 0 and batch.episodes.success is None  # 43 bytes per episode row without a success column
    assert batch.nbytes == 4 * per_round + m * (obs_bytes + 43) + 4 * obs_bytes


def test_extras_whose_keys_change_within_a_rollout_are_an_error():
    calls = []

    def changing(obs):
        calls.append(1)
        return policy(obs), ({"value": value_of(obs)} if len(calls) < 3 else {"v": value_of(obs)})

    with engine() as e, pytest.raises(ValueError, match=r"extras keys changed within a rollout: \['value'\] then \['v'\]"):
        TrajectoryRecorder(e).rollout(changing, 3)


def _rows(result, rows):
    """The chunk result of some of ``result``'s envs (as a schedule that collects slice by slice gives it)."""
    def part(value):
        if isinstance(value, dict):
            return {k: v[rows] for k, v in value.items()}
        return [value[i] for i in rows] if isinstance(value, list) else value[rows]
    return dataclasses.replace(result, **{f.name: part(getattr(result, f.name)) for f in dataclasses.fields(result)})


def test_results_that_arrive_env_by_env_fill_the_same_batch(monkeypatch):
    with engine() as e:
        whole = TrajectoryRecorder(e).rollout(policy_with_extras, 4)[1]
    with engine() as e:
        rollout = e.rollout

        def env_by_env(policy, num_rounds, *, on_chunk, **kw):
            def split(stage, result):
                for row in reversed(range(len(result.env_ids))):
                    on_chunk(stage, _rows(result, [row]))
            return rollout(policy, num_rounds, on_chunk=split, **kw)

        monkeypatch.setattr(e, "rollout", env_by_env)
        split = TrajectoryRecorder(e).rollout(policy_with_extras, 4)[1]
    for name in ("actions", "rewards", "terminated", "truncated", "applied"):
        np.testing.assert_array_equal(getattr(split, name), getattr(whole, name))
    np.testing.assert_array_equal(split.obs["proprio"], whole.obs["proprio"])
    np.testing.assert_array_equal(split.extras["value"], whole.extras["value"])
    assert sorted(zip(split.episodes.env.tolist(), split.episodes.round.tolist())) == sorted(
        zip(whole.episodes.env.tolist(), whole.episodes.round.tolist()))


class StepClock:
    """A stand-in for the recorder's ``time`` module: ``perf_counter`` moves on only when told to, or by
    ``tick`` seconds after each reading."""

    def __init__(self):
        self.now, self.tick = 0.0, 0.0

    def perf_counter(self):
        self.now += self.tick
        return self.now - self.tick


def test_the_recorder_counts_its_own_seconds_and_not_the_callers_on_chunk(monkeypatch):
    from behavior1k_fast.rollout import trajectory

    clock = StepClock()
    monkeypatch.setattr(trajectory, "time", clock)

    def slow_caller(stage, result):
        clock.now += 100.0  # the caller's own work: not the recorder's

    with engine() as e:
        recorder = TrajectoryRecorder(e)
        recorder.rollout(policy_with_extras, 3, on_chunk=slow_caller)
        assert recorder.recording_s == 0.0 and clock.now == 600.0
        clock.tick = 1.0  # now each span the recorder times takes one second
        recorder.rollout(policy_with_extras, 3, reset=False)
    assert recorder.recording_s == 7.0  # 3 rounds x 2 stages of chunks written, and the batch built
