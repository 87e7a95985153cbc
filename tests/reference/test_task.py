"""Predicates on constructed states, success termination by the scripted expert, timeout truncation."""

import numpy as np

from behavior1k_fast.profile import RolloutProfile
from behavior1k_fast.reference import ReferenceConfig, scene, task
from behavior1k_fast.reference.expert import expert_actions

from .conftest import hold_actions, make_env

PROPRIO_ONLY = RolloutProfile(obs_modalities=("proprio",))
ONE_OBJECT = ReferenceConfig(resolution=(32, 32), num_objects=1)
CAN_HALF_HEIGHT = 0.05
BIN_FLOOR_TOP = scene.TABLE_TOP + scene.BIN_WALL


def target_predicates(env):
    p = env.predicates([0])
    return bool(p.ontop_table[0, 0]), bool(p.inside_bin[0, 0]), bool(p.grasped[0, 0, 0]), bool(p.grasped[0, 1, 0])


def test_predicates_on_constructed_states():
    env = make_env(1, profile=PROPRIO_ONLY, config=ONE_OBJECT)
    env.set_object_pose(0, 0, (0.75, 0.3, scene.TABLE_TOP + CAN_HALF_HEIGHT))
    assert target_predicates(env) == (True, False, False, False)
    env.set_object_pose(0, 0, (0.75, 0.3, scene.TABLE_TOP + CAN_HALF_HEIGHT + 0.2))  # floating above it
    assert target_predicates(env) == (False, False, False, False)
    env.set_object_pose(0, 0, (0.0, 1.5, CAN_HALF_HEIGHT))  # on the floor
    assert target_predicates(env) == (False, False, False, False)
    env.set_object_pose(0, 0, (*scene.BIN_CENTER, BIN_FLOOR_TOP + CAN_HALF_HEIGHT))
    assert target_predicates(env) == (False, True, False, False)
    env.set_object_pose(0, 0, (scene.BIN_CENTER[0] + 0.2, scene.BIN_CENTER[1], BIN_FLOOR_TOP + CAN_HALF_HEIGHT))
    assert target_predicates(env)[1] is False  # beside the bin


def test_grasped_needs_both_fingers_of_that_arm():
    env = make_env(1, profile=PROPRIO_ONLY, config=ONE_OBJECT)
    fingers = env.index.arm_qpos[0, 0, 3:5]
    grip = task.grip_points(env.data, env.index, np.array([0]))[0, 0]
    env.data.qpos[fingers] = 0.028  # closed 2 mm into a can of radius 0.03
    env.set_object_pose(0, 0, grip)
    assert target_predicates(env) == (False, False, True, False)
    env.data.qpos[fingers[1]] = 0.06  # one finger open: not a grasp
    env.set_object_pose(0, 0, grip)
    assert target_predicates(env)[2] is False


def test_reward_prefers_progress():
    env = make_env(1, profile=PROPRIO_ONLY, config=ONE_OBJECT)
    rewards = []
    for pos in ((0.75, 0.3, scene.TABLE_TOP + CAN_HALF_HEIGHT), (*scene.BIN_CENTER, BIN_FLOOR_TOP + 0.2)):
        env.set_object_pose(0, 0, pos)
        preds, center = task.evaluate_predicates(env.data, env.index, np.array([0]))
        grips = task.grip_points(env.data, env.index, np.array([0]))
        reward, success, _ = task.reward_and_success(preds, center, grips)
        assert not success[0]
        rewards.append(reward[0])
    assert rewards[1] > rewards[0]


def test_expert_finishes_the_task_and_success_terminates():
    env = make_env(1, seed=3, profile=PROPRIO_ONLY, config=ReferenceConfig(resolution=(32, 32), num_objects=6))
    for step in range(400):
        _, rewards, terminated, truncated, infos = env.step(expert_actions(env), get_obs=False, render=False)
        if terminated[0]:
            break
    assert terminated[0] and not truncated[0]
    assert infos[0]["success"] and infos[0]["predicates"]["inside(obj0, bin)"]
    assert rewards[0] >= task.SUCCESS_BONUS
    assert infos[0]["episode_step"] == step + 1


def test_timeout_truncates_at_the_horizon():
    env = make_env(2, profile=PROPRIO_ONLY, config=ReferenceConfig(resolution=(32, 32), horizon=3))
    flags = [env.step(hold_actions(env), get_obs=False, render=False)[3].tolist() for _ in range(3)]
    assert flags == [[False, False], [False, False], [True, True]]
    env.reset([1])
    assert env.step(hold_actions(env), get_obs=False, render=False)[3].tolist() == [True, False]
