"""The reach-and-touch variant: its observation, reward, success and truncation, alone and through the engine."""

import numpy as np
import pytest

from behavior1k_fast.backends.reference import ReachFactory, ReferenceConfig, task
from behavior1k_fast.backends.reference.reach import SUCCESS_BONUS, TARGET_KEY, TOUCH_RADIUS
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, TrajectoryRecorder

from .conftest import hold_actions

PROPRIO_ONLY = RolloutProfile(obs_modalities=("proprio",), chunk_size=4)
CONFIG = ReferenceConfig(resolution=(16, 16), num_objects=2, cameras=("head",), horizon=3)


@pytest.fixture
def reach():
    env = ReachFactory(CONFIG)(2, 0, PROPRIO_ONLY)
    yield env
    env.close()


def offsets(env, envs=(0, 1)):
    """Target centre minus each grip point [e, 2 arms, 3], from the simulator state."""
    idx = np.array(envs)
    data, index = env.env.data, env.env.index
    center = data.geom_xpos[index.obj_geom[idx, task.TARGET]].copy()  # world frame: x shifted by each env's origin
    center[:, 0] -= index.origin_x[idx]
    return center[:, None] - task.grip_points(data, index, idx)


def test_the_observation_adds_the_target_offset_from_each_grip_point(reach):
    assert reach.observation_space[TARGET_KEY].shape == (6,) and "proprio" in reach.observation_space.spaces
    obs, _ = reach.reset()
    np.testing.assert_allclose([o[TARGET_KEY] for o in obs], offsets(reach).reshape(2, 6), rtol=1e-6)
    obs, *_ = reach.step(hold_actions(reach.env, [1]), [1])
    np.testing.assert_allclose(obs[0][TARGET_KEY], offsets(reach, [1]).reshape(6), rtol=1e-6)
    obs, *_ = reach.step(hold_actions(reach.env), get_obs=False, render=False)
    assert obs == [None, None]
    np.testing.assert_allclose(reach.observe([0])[0][TARGET_KEY], offsets(reach, [0]).reshape(6), rtol=1e-6)


def test_reward_is_minus_the_nearest_grip_distance_until_a_touch_ends_the_episode(reach):
    reach.reset()
    _, rewards, terminated, truncated, infos = reach.step(hold_actions(reach.env))
    distance = np.linalg.norm(offsets(reach), axis=-1).min(axis=1)
    assert (distance > TOUCH_RADIUS).all() and not terminated.any() and not truncated.any()
    np.testing.assert_allclose(rewards, -distance)
    assert [i["success"] for i in infos] == [False, False]
    # the can put right under env 1's left grip point: a touch, with the bonus, and the episode ends
    grip = task.grip_points(reach.env.data, reach.env.index, np.array([1]))[0, 0]
    reach.env.set_object_pose(1, task.TARGET, grip)
    _, rewards, terminated, _, infos = reach.step(hold_actions(reach.env))
    assert terminated.tolist() == [False, True] and [i["success"] for i in infos] == [False, True]
    touch_distance = np.linalg.norm(offsets(reach, [1]), axis=-1).min()
    assert rewards[1] == pytest.approx(SUCCESS_BONUS - touch_distance)


def test_episodes_are_truncated_at_the_wrapped_envs_horizon(reach):
    reach.reset()
    truncated = [reach.step(hold_actions(reach.env))[3].tolist() for _ in range(CONFIG.horizon)]
    assert truncated == [[False, False], [False, False], [True, True]]


def test_the_engine_records_reach_episodes_with_success():
    profile = PROPRIO_ONLY.replace(num_env_processes=2, total_num_envs=4, pipeline_stages=2,
                                   physics_rescale="preserve_sim_time")
    with RolloutEngine(ReachFactory(CONFIG), profile, executor="inline") as engine:
        batch = TrajectoryRecorder(engine).rollout(lambda obs: np.zeros((2, 4, 11), np.float32), 2)[1]
    assert batch.obs[TARGET_KEY].shape == (2, 4, 6)
    eps = batch.episodes
    assert eps.lengths.tolist() == [3] * 8 and eps.truncated.all()  # horizon 3: one episode per chunk of 4
    assert eps.success.dtype == bool and not eps.success.any()
