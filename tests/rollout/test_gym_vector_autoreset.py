"""EngineVectorEnv's next-step autoreset (gymnasium's default), against its same-step runs, and under gymnasium's
wrappers that need it (NormalizeObservation) or count episodes by it (RecordEpisodeStatistics)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from behavior1k_fast.rollout import EngineVectorEnv

from .helpers import policy
from .test_gym_vector import FACTORY, profile

#: Local env 0 of each worker (global 0 and 2) ends at its 7th step (chunk 2), local env 1 at its 10th (chunk 3).
ENDS_IN_CHUNK_2 = [True, False, True, False]
ENDS_IN_CHUNK_3 = [False, True, False, True]


def vector_env(mode=AutoresetMode.NEXT_STEP, stages=2):
    return EngineVectorEnv(FACTORY, profile(stages=stages), executor="inline", autoreset_mode=mode)


def test_next_step_is_the_default_as_in_gymnasium():
    with EngineVectorEnv(FACTORY, profile(), executor="inline") as env:
        assert env.autoreset_mode is env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")]).metadata["autoreset_mode"] is \
        AutoresetMode.NEXT_STEP


def test_next_step_returns_the_terminal_obs_then_resets_in_the_next_step_ignoring_its_actions():
    """K = 1, so the envs of a worker do not hold while others step (a hybrid stage whose envs all reset
    takes fewer physics steps than one whose envs act, which moves the holding envs less)."""
    with vector_env(AutoresetMode.SAME_STEP, stages=1) as same, vector_env(stages=1) as nxt:
        obs_s, _ = same.reset(seed=0)
        obs_n, _ = nxt.reset(seed=0)
        for _ in range(2):
            obs_s, rew_s, term_s, _, info_s = same.step(policy(obs_s))
            obs_n, rew_n, term_n, trunc_n, info_n = nxt.step(policy(obs_n))
        assert term_s.tolist() == term_n.tolist() == ENDS_IN_CHUNK_2
        np.testing.assert_array_equal(rew_n, rew_s)
        assert "final_obs" not in info_n
        for env in (0, 2):  # the terminal observation, where same-step puts it into info
            np.testing.assert_array_equal(obs_n["proprio"][env], info_s["final_obs"][env]["proprio"])
        np.testing.assert_array_equal(obs_n["proprio"][[1, 3]], obs_s["proprio"][[1, 3]])
        reset_obs = obs_s["proprio"][[0, 2]]  # same-step: the reset observations of envs 0 and 2

        # next step: envs 0 and 2 reset (their actions ignored), envs 1 and 3 step and end
        obs_s, rew_s, term_s, _, _ = same.step(policy(obs_s))
        obs_n, rew_n, term_n, trunc_n, info_n = nxt.step(policy(obs_n))
        assert term_n.tolist() == ENDS_IN_CHUNK_3 and not trunc_n.any()
        assert rew_n[[0, 2]].tolist() == [0.0, 0.0] and rew_n[[0, 2]].tolist() != rew_s[[0, 2]].tolist()
        assert not info_n["applied"][[0, 2]].any() and not info_n["step_rewards"][[0, 2]].any()
        assert "episode_step" not in info_n or not info_n["_episode_step"][[0, 2]].any()
        np.testing.assert_array_equal(obs_n["proprio"][[0, 2]], reset_obs)
        np.testing.assert_array_equal(rew_n[[1, 3]], rew_s[[1, 3]])
        step3_s = rew_s[[0, 2]], obs_s["proprio"][[0, 2]]

        # the step after: envs 0 and 2 act from their reset state, as same-step's did one step earlier
        obs_n, rew_n, term_n, _, _ = nxt.step(policy(obs_n))
        np.testing.assert_array_equal(rew_n[[0, 2]], step3_s[0])
        np.testing.assert_array_equal(obs_n["proprio"][[0, 2]], step3_s[1])
        assert rew_n[[1, 3]].tolist() == [0.0, 0.0] and not term_n.any()


def test_normalize_observation_and_episode_statistics_run_on_next_step(request):
    inner = gym.wrappers.vector.FlattenObservation(gym.wrappers.vector.FilterObservation(vector_env(), ["proprio"]))
    normalized = gym.wrappers.vector.NormalizeObservation(inner)
    env = gym.wrappers.vector.RecordEpisodeStatistics(normalized)
    request.addfinalizer(env.close)
    obs, _ = env.reset(seed=1)
    returns, lengths = np.zeros(4), np.zeros(4, dtype=int)
    was_done = np.zeros(4, dtype=bool)
    seen = []
    for _ in range(9):
        assert obs.shape == (4, 4) and obs.dtype == np.float32 and np.isfinite(obs).all()
        obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())
        returns[was_done], lengths[was_done] = 0.0, 0  # the reset step belongs to no episode
        returns[~was_done] += rewards[~was_done]
        lengths[~was_done] += 1
        done = terminated | truncated
        if done.any():
            assert infos["_episode"].tolist() == done.tolist()
            np.testing.assert_allclose(infos["episode"]["r"][done], returns[done])
            assert infos["episode"]["l"][done].tolist() == lengths[done].tolist()
            seen += [(int(env_id), int(length)) for env_id, length in zip(np.flatnonzero(done), lengths[done])]
        was_done = done
    env.close()
    # episodes of 7 and 10 steps are 2 and 3 chunks, each followed by one reset step: in 9 steps 3 and 2 of them
    assert sorted(set(seen)) == [(0, 2), (1, 3), (2, 2), (3, 3)] and len(seen) == len(env.return_queue) == 10
    assert normalized.obs_rms.count > 9 * 4  # every observation went into the running statistics


def test_observation_wrappers_refuse_same_step_so_the_mode_is_reported_truly():
    with vector_env(AutoresetMode.SAME_STEP) as env:
        with pytest.raises(ValueError, match="NEXT_STEP"):
            gym.wrappers.vector.FilterObservation(env, ["proprio"])


def test_a_bad_mode_is_a_one_line_error_and_the_engines_auto_reset_is_refused_for_the_mode():
    with pytest.raises(ValueError, match=r"autoreset_mode must be one of \['NextStep', 'SameStep', 'Disabled'\].*"
                                         r"got 'next'"):
        EngineVectorEnv(FACTORY, profile(), executor="inline", autoreset_mode="next")
    with pytest.raises(TypeError, match=r"^auto_reset=False: EngineVectorEnv resets as autoreset_mode says"):
        EngineVectorEnv(FACTORY, profile(), executor="inline", auto_reset=False)
    with EngineVectorEnv(FACTORY, profile(), executor="inline", autoreset_mode="SameStep") as env:
        assert env.autoreset_mode is AutoresetMode.SAME_STEP
