"""Chunk stepping in-process against the point-mass backend (no worker processes)."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import step_chunk

from .pointmass import PointMassFactory

N = 6


def make(episode_lengths=(1000,), num_envs=3):
    return PointMassFactory(episode_lengths=episode_lengths)(num_envs, 7, RolloutProfile())


def actions(n, steps=N, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, steps, 2)).astype(np.float32)


def run(backend, chunks, skip, auto_reset=True, env_indices=None):
    return [step_chunk(backend, a, env_indices, skip_intermediate_obs=skip, auto_reset=auto_reset) for a in chunks]


@pytest.mark.parametrize("lengths", [(1000,), (4, 6, 11)])
def test_on_demand_obs_matches_full_obs(lengths):
    chunks = [actions(3, seed=s) for s in range(3)]
    full_backend, fast_backend = make(lengths), make(lengths)
    full = run(full_backend, chunks, skip=False)
    fast = run(fast_backend, chunks, skip=True)
    for a, b in zip(full, fast):
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminated, b.terminated)
        np.testing.assert_array_equal(a.truncated, b.truncated)
        np.testing.assert_array_equal(a.applied, b.applied)
        for key in a.obs:
            np.testing.assert_array_equal(a.obs[key], b.obs[key])
        assert a.rewards.shape == (3, N)
    # on-demand: one render per chunk boundary (+ terminal and reset renders), not one per step
    assert fast_backend.renders < full_backend.renders


def test_episode_end_masks_remaining_actions_and_renders_terminal_obs():
    backend = make((4, 1000, 1000))
    reference = make((4, 1000, 1000))
    chunk = actions(3)
    result = step_chunk(backend, chunk, skip_intermediate_obs=True, auto_reset=False)
    assert result.applied[0].tolist() == [True] * 4 + [False] * 2
    assert result.applied[1:].all()
    assert result.terminated[0].tolist() == [False, False, False, True, False, False]
    assert np.all(result.rewards[0, 4:] == 0)
    assert result.episode_ended.tolist() == [True, False, False]
    # env 0 held its 4th action for the rest of the chunk: the stock path with that action repeated
    held = chunk.copy()
    held[0, 4:] = chunk[0, 3]
    for t in range(4):
        obs, *_ = reference.step(held[:, t], get_obs=True, render=True)
        terminal = obs[0]
    # terminal observation is the one rendered at the terminal step, not at the boundary
    np.testing.assert_array_equal(result.obs["proprio"][0], terminal["proprio"])
    np.testing.assert_array_equal(result.obs["head::rgb"][0], terminal["head::rgb"])
    assert backend.resets.tolist() == [1, 1, 1]
    np.testing.assert_array_equal(backend.held[0], chunk[0, 3])


def test_auto_reset_once_with_final_observation():
    backend = make((2, 1000, 3))
    result = step_chunk(backend, actions(3), skip_intermediate_obs=True, auto_reset=True)
    assert backend.resets.tolist() == [2, 1, 2]  # construction reset + exactly one auto-reset
    for row in (0, 2):
        info = result.infos[row]
        assert set(info) >= {"final_observation", "final_info", "episode"}
        assert info["final_info"]["episode_step"] == (2 if row == 0 else 3)
        assert info["episode"] == 2
        # boundary obs is the reset obs; the terminal one is in final_observation
        assert result.obs["head::rgb"][row, 2, 0, 0] == 2
        assert info["final_observation"]["head::rgb"][2, 0, 0] == 1
    assert "final_observation" not in result.infos[1]


def test_chunk_stops_when_every_selected_env_ended():
    backend = make((2, 3, 1000))
    result = step_chunk(backend, actions(2), env_indices=[0, 1], skip_intermediate_obs=True)
    assert result.global_steps.tolist() == [3, 3]
    assert backend.global_steps == 3
    assert result.sim_seconds[0] == pytest.approx(3 * backend.sim_step_dt)
    assert result.env_wall_seconds[0] > 0 and result.env_wall_seconds[0] == result.env_wall_seconds[1]  # one backend, one time


def test_env_indices_leave_other_envs_alone():
    backend = make()
    before = backend.episode_step.copy()
    result = step_chunk(backend, actions(1), env_indices=[2])
    assert result.env_ids.tolist() == [2]
    assert backend.episode_step.tolist() == [before[0], before[1], before[2] + N]


@pytest.mark.parametrize(
    "bad, error, words",
    [
        (np.zeros((2, N, 2), np.float32), ValueError, ["actions", "(3, N, 2)", "(2, 6, 2)"]),
        (np.zeros((3, N), np.float32), ValueError, ["actions", "(3, 6)"]),
        (np.zeros((3, N, 2), np.int64), TypeError, ["float dtype", "int64"]),
        ([[0.0, 0.0]], TypeError, ["numpy array", "list"]),
    ],
)
def test_bad_actions_name_argument_and_value(bad, error, words):
    backend = make()
    with pytest.raises(error) as info:
        step_chunk(backend, bad)
    for word in words:
        assert word in str(info.value)
    assert backend.global_steps == 0


def test_nan_actions_rejected_before_stepping():
    backend = make()
    bad = actions(3)
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        step_chunk(backend, bad)
    assert backend.global_steps == 0
