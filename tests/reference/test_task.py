"""Predicates on constructed states, success termination by the scripted expert, timeout truncation."""

import mujoco
import numpy as np

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, scene, task
from behavior1k_fast.backends.reference.expert import expert_actions

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


def scalar_predicates(env, e):
    """Oracle for one env: per-object scalar checks of the documented rules, geoms found by name."""
    model, data = env.model, env.data
    geom = mujoco.mjtObj.mjOBJ_GEOM
    n = env.config.num_objects
    touching = set()  # (finger geom name, object index)
    for g1, g2 in data.contact.geom[: data.ncon].tolist():
        for gf, go in ((g1, g2), (g2, g1)):
            fname, oname = mujoco.mj_id2name(model, geom, gf) or "", mujoco.mj_id2name(model, geom, go) or ""
            if fname.startswith(f"e{e}/") and "_finger" in fname and oname.startswith(f"e{e}/obj"):
                touching.add((fname, int(oname.split("obj")[1])))
    ontop, inside, grasped = np.zeros(n, bool), np.zeros(n, bool), np.zeros((len(scene.ARMS), n), bool)
    for j in range(n):
        g = mujoco.mj_name2id(model, geom, f"e{e}/obj{j}")
        rot = data.geom_xmat[g].reshape(3, 3)
        x, y, z = data.geom_xpos[g] + rot @ model.geom_aabb[g, :3] - (e * scene.ENV_SPACING, 0.0, 0.0)
        bottom = z - (np.abs(rot) @ model.geom_aabb[g, 3:])[2]
        over_table = all(abs(v - c) <= h for v, c, h in zip((x, y), scene.TABLE_CENTER, scene.TABLE_HALF))
        in_bin = max(abs(x - scene.BIN_CENTER[0]), abs(y - scene.BIN_CENTER[1])) <= scene.BIN_INNER_HALF
        at_top = scene.TABLE_TOP - task.ONTOP_PENETRATION <= bottom <= scene.TABLE_TOP + task.ONTOP_GAP
        ontop[j] = over_table and not in_bin and at_top
        inside[j] = in_bin and BIN_FLOOR_TOP <= z <= BIN_FLOOR_TOP + scene.BIN_WALL_HEIGHT
        for a, arm in enumerate(scene.ARMS):
            grasped[a, j] = all((f"e{e}/{arm}_finger{k}", j) in touching for k in (0, 1))
    return ontop, inside, grasped


def test_vectorised_predicates_match_a_per_env_oracle_on_any_env_selection():
    env = make_env(3, profile=PROPRIO_ONLY, config=ReferenceConfig(resolution=(32, 32), num_objects=4))
    table = scene.TABLE_TOP + CAN_HALF_HEIGHT
    poses = {  # (env, obj): position in the env frame; the other objects stay where the reset put them
        (0, 0): (0.75, 0.3, table),
        (0, 1): (*scene.BIN_CENTER, BIN_FLOOR_TOP + CAN_HALF_HEIGHT),
        (0, 2): (0.75, -0.3, table + 0.2),
        (1, 1): (0.0, 1.5, CAN_HALF_HEIGHT),
        (2, 3): (scene.BIN_CENTER[0] + 0.05, scene.BIN_CENTER[1] - 0.05, BIN_FLOOR_TOP + 0.04),
        (2, 2): (*scene.BIN_CENTER, scene.TABLE_TOP + 0.03),  # a cube sunk into the bin floor: not ontop
    }
    for (e, j), pos in poses.items():
        env.set_object_pose(e, j, pos)
    for e, arm in ((1, 0), (2, 1)):  # env 1 grasps its target with the left arm, env 2 with the right
        fingers = env.index.arm_qpos[e, arm, 3:5]
        env.data.qpos[fingers] = 0.028
        env.set_object_pose(e, 0, task.grip_points(env.data, env.index, np.array([e]))[0, arm])
    oracle = [scalar_predicates(env, e) for e in range(3)]
    assert oracle[0][0][0] and oracle[0][1][1] and oracle[1][2][0, 0] and oracle[2][2][1, 0] and oracle[2][1][3]
    for envs in ([0, 1, 2], [2, 0], [1]):
        preds, center = task.evaluate_predicates(env.data, env.index, np.array(envs))
        for row, e in enumerate(envs):
            ontop, inside, grasped = oracle[e]
            np.testing.assert_array_equal(preds.ontop_table[row], ontop)
            np.testing.assert_array_equal(preds.inside_bin[row], inside)
            np.testing.assert_array_equal(preds.grasped[row], grasped)
            assert preds.goal_values()[row] == dict(
                zip(task.GOAL_PREDICATES, [ontop[0], inside[0], *grasped[:, task.TARGET]])
            )
        grips = task.grip_points(env.data, env.index, np.array(envs))
        reward, success, terms = task.reward_and_success(preds, center, grips)
        reach = [min(np.linalg.norm(g - c) for g in grip) for grip, c in zip(grips, center[:, task.TARGET])]
        np.testing.assert_allclose(terms["reach"], 0.25 * (1 - np.tanh(5 * np.array(reach))))
        np.testing.assert_array_equal(terms["grasp"], [0.25 * (e > 0) for e in envs])
        np.testing.assert_allclose(reward, sum(terms[k] for k in task.REWARD_TERMS))
        # what a step reports (target only, Python floats) is the same, to the bit
        step_reward, step_success, goals, step_terms = task.goal_and_reward(env.data, env.index, np.array(envs))
        np.testing.assert_array_equal(step_reward, reward)
        np.testing.assert_array_equal(step_success, success)
        assert goals == preds.goal_values()
        assert step_terms == [{k: terms[k][row] for k in task.REWARD_TERMS} for row in range(len(envs))]
