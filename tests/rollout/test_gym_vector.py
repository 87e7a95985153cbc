"""EngineVectorEnv: the engine behind gymnasium's vector API, checked with gymnasium's own checkers and wrappers."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils import env_checker, passive_env_checker
from gymnasium.vector import AutoresetMode, VectorEnv

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import ClosedError, EngineState, EngineVectorEnv, RolloutEngine, TrajectoryRecorder

from .helpers import CHUNK, policy
from .pointmass import PointMassFactory

LENGTHS = (7, 10)
FACTORY = PointMassFactory(episode_lengths=LENGTHS)


def profile(envs=4, processes=2, stages=2):
    return RolloutProfile(num_env_processes=processes, total_num_envs=envs, chunk_size=CHUNK,
                          pipeline_stages=stages, gc_enable=False)


def vector_env(**kw):
    """Same-step autoreset unless ``autoreset_mode`` is given (next-step: test_gym_vector_autoreset.py)."""
    kw.setdefault("autoreset_mode", AutoresetMode.SAME_STEP)
    return EngineVectorEnv(FACTORY, profile(), executor="inline", **kw)


@pytest.fixture
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's checkers warn on what they find
        venv = vector_env()
        yield venv
        venv.close()


def test_spaces_are_one_chunk_per_env(env):
    assert isinstance(env, VectorEnv) and env.num_envs == 4
    assert env.single_action_space.shape == (CHUNK, 2) and env.action_space.shape == (4, CHUNK, 2)
    assert env.observation_space["proprio"].shape == (4, 4) and env.observation_space["head::rgb"].shape == (4, 3, 8, 8)
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    env_checker.check_space_limit(env.single_action_space, "action")


def test_gymnasium_reset_checks_pass(env):
    env_checker.check_reset_return_type(env)
    env_checker.check_reset_options(env)
    env_checker.check_reset_seed_determinism(env)
    obs, info = env.reset(seed=5)
    passive_env_checker.check_obs(obs, env.observation_space, "reset")
    obs, *_ = env.step(env.action_space.sample())
    passive_env_checker.check_obs(obs, env.observation_space, "step")


def test_gymnasium_returned_data_check_passes_on_one_env():
    # the checker tests `terminated or truncated` as a scalar, so it applies to a single env
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with EngineVectorEnv(FACTORY, profile(envs=1, processes=1, stages=1), executor="inline") as one:
            env_checker.check_returned_data_not_reused(one)


def test_seeded_resets_are_reproducible_and_unseeded_ones_start_new_episodes(env):
    first, _ = env.reset(seed=11)
    again, _ = env.reset(seed=11)
    np.testing.assert_array_equal(first["proprio"], again["proprio"])
    other, _ = env.reset(seed=12)
    assert not np.array_equal(first["proprio"], other["proprio"])
    fresh, _ = env.reset()
    assert not np.array_equal(other["proprio"], fresh["proprio"])


def test_a_step_is_one_chunk_with_the_engine_rollout_semantics():
    with RolloutEngine(FACTORY, profile(), executor="inline", seed=3) as engine:
        batch = TrajectoryRecorder(engine).rollout(policy, 5, overlap=False)[1]
    with vector_env(seed=3) as env:
        obs, _ = env.reset()
        for r in range(5):
            np.testing.assert_array_equal(obs["proprio"], batch.obs["proprio"][r])
            obs, rewards, terminated, truncated, info = env.step(policy(obs))
            np.testing.assert_allclose(rewards, batch.rewards[r].sum(axis=1))
            assert terminated.tolist() == batch.terminated[r].any(axis=1).tolist()
            assert truncated.tolist() == batch.truncated[r].any(axis=1).tolist()
            np.testing.assert_array_equal(info["step_rewards"], batch.rewards[r])
            np.testing.assert_array_equal(info["applied"], batch.applied[r])


def test_same_step_autoreset_returns_the_reset_obs_and_the_final_obs_in_info(env):
    obs, _ = env.reset(seed=0)
    for _ in range(2):  # local env 0 of each worker ends at its 7th step: in the second chunk
        obs, rewards, terminated, truncated, info = env.step(policy(obs))
    assert terminated.tolist() == [True, False, True, False]
    assert info["_final_obs"].tolist() == info["_final_info"].tolist() == [True, False, True, False]
    assert info["final_info"]["episode_step"][[0, 2]].tolist() == [7, 7]
    # the backend's reset info has an "episode" counter: renamed, so that gymnasium's "episode" stays free
    assert "episode" not in info and info["_backend_episode"].tolist() == [True, False, True, False]
    for env_id in (0, 2):
        final = info["final_obs"][env_id]
        assert final["proprio"].shape == (4,) and not np.array_equal(final["proprio"], obs["proprio"][env_id])
    assert info["final_obs"][1] is None


def test_without_auto_reset_ended_envs_must_be_reset_by_mask():
    with vector_env(autoreset_mode=AutoresetMode.DISABLED) as env:
        assert env.metadata["autoreset_mode"] is AutoresetMode.DISABLED
        obs, _ = env.reset(seed=0)
        for _ in range(2):
            obs, _, terminated, _, info = env.step(policy(obs))
        assert terminated.tolist() == [True, False, True, False] and "final_obs" not in info
        with pytest.raises(RuntimeError, match=r"envs \[0, 2\] ended and auto-reset is off"):
            env.step(policy(obs))
        reset_obs, _ = env.reset(options={"reset_mask": terminated})
        np.testing.assert_array_equal(reset_obs["proprio"][[1, 3]], obs["proprio"][[1, 3]])
        assert not np.array_equal(reset_obs["proprio"][[0, 2]], obs["proprio"][[0, 2]])
        assert env.step(policy(reset_obs))[1].shape == (4,)


def test_code_written_for_gymnasium_vector_envs_runs_on_it():
    """A CleanRL-style loop behind gymnasium's own vector wrappers (same-step autoreset)."""
    env = gym.wrappers.vector.RecordEpisodeStatistics(gym.wrappers.vector.ClipAction(vector_env()))
    obs, _ = env.reset(seed=1)
    env.action_space.seed(1)
    returns = []
    for _ in range(8):
        assert obs in env.observation_space
        obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample() * 3.0)  # clipped
        done = terminated | truncated
        if "episode" in infos:
            assert infos["_episode"].tolist() == done.tolist()
            returns += infos["episode"]["r"][done].tolist()
            # episodes of 7 and 10 steps last 2 and 3 chunks
            assert infos["episode"]["l"][done].tolist() == [2 if i % 2 == 0 else 3 for i in np.flatnonzero(done)]
    assert len(returns) == len(env.return_queue) >= 6
    np.testing.assert_allclose(returns, list(env.return_queue))
    env.close()
    assert env.unwrapped.closed
    with pytest.raises(ClosedError):
        env.unwrapped.engine.reset()


def test_observation_wrappers_run_on_it_with_autoreset_disabled():
    """gymnasium's observation wrappers refuse same-step autoreset (they would not see ``final_obs``)."""
    env = gym.wrappers.vector.FilterObservation(vector_env(autoreset_mode=AutoresetMode.DISABLED), ["proprio"])
    env = gym.wrappers.vector.FlattenObservation(env)
    obs, _ = env.reset(seed=2)
    for _ in range(5):
        assert obs.shape == (4, 4) and obs in env.observation_space
        obs, rewards, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated | truncated
        if done.any():
            obs, _ = env.reset(options={"reset_mask": done})
    env.close()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda e: e.step(np.zeros((4, CHUNK + 1, 2), np.float32)), ValueError, r"actions must have shape \(4, 4, 2\)"),
        (lambda e: e.step(np.full((4, CHUNK, 2), np.nan, np.float32)), ValueError, "NaN or inf"),
        (lambda e: e.reset(options={"mask": 1}), ValueError, r"options may only hold 'reset_mask', got keys \['mask'\]"),
        (lambda e: e.reset(seed=-1), ValueError, "seed must be an int >= 0, got -1"),
        (lambda e: e.reset(seed=1, options={"reset_mask": np.ones(4, bool)}), ValueError, "either seed or"),
        (lambda e: e.reset(options={"reset_mask": [1, 0, 0, 0]}), ValueError, r"reset_mask'\] must be a bool array"),
        (lambda e: e.reset(options=[1]), TypeError,
         r"options must be a dict such as \{'reset_mask': mask\}, or None, got \[1\]"),
    ],
)
def test_bad_input_is_a_one_line_error_and_leaves_the_env_usable(env, call, error, match):
    obs, _ = env.reset(seed=0)
    with pytest.raises(error, match=match):
        call(env)
    assert env.step(policy(obs))[0]["proprio"].shape == (4, 4)


def test_a_closed_vector_env_starts_no_new_engine(env):
    env.reset(seed=1)
    env.close()
    engines = []
    for call in (lambda: env.reset(seed=7), lambda: env.reset(), lambda: env.step(np.zeros((4, CHUNK, 2), np.float32)),
                 lambda: env.reset(options={"reset_mask": np.ones(4, bool)})):
        with pytest.raises(ClosedError):
            call()
        engines.append(env.engine)
    assert all(e is engines[0] for e in engines) and env.engine.state is EngineState.CLOSED


def test_a_masked_array_of_actions_is_refused_as_the_engine_refuses_it(env):
    obs, _ = env.reset(seed=0)
    actions = np.ma.masked_array(policy(obs), mask=np.zeros((4, CHUNK, 2), bool))
    actions.mask[0, 0, 0] = True
    with pytest.raises(TypeError, match="actions must be a plain numpy array .*got a masked array"):
        env.step(actions)
    assert env.step(actions.filled(0.0))[0]["proprio"].shape == (4, 4)  # still usable


def test_bfloat16_torch_actions_step_as_their_float32_values_as_a_policy_output_does(env):
    torch = pytest.importorskip("torch")
    obs, _ = env.reset(seed=0)
    actions = torch.tensor(policy(obs)).to(torch.bfloat16)
    obs_t, rewards_t, *_ = env.step(actions)
    env.reset(seed=0)
    obs_a, rewards_a, *_ = env.step(actions.float().numpy())
    np.testing.assert_array_equal(obs_t["proprio"], obs_a["proprio"])
    np.testing.assert_array_equal(rewards_t, rewards_a)


def test_a_lookahead_profile_is_refused_before_any_worker_starts():
    lookahead = profile(stages=1).replace(schedule="lookahead", lookahead_steps=1)
    with pytest.raises(ValueError, match="EngineVectorEnv steps one whole chunk per step.*schedule='lookahead'"):
        EngineVectorEnv(FACTORY, lookahead, executor="process")
