"""A scripted expert for the reference task: pick the target with the left arm and drop it into the bin.

Stateless: each call reads the current state and returns the next action, so it can drive any subset of
envs at any step. It keeps the base's yaw at zero, moves the base and the arm extension to put the grip
point over the target, descends, closes, lifts, carries the target over the bin, lowers and releases.
Used by tests (success termination) and benchmarks (a policy that finishes episodes).
"""

from __future__ import annotations

import numpy as np

from . import scene, task
from .env import ReferenceVectorEnv, arm_targets_to_actions
from ...core.contract import check_env_indices

#: Grip-point heights (env frame, m): carrying, and releasing over the bin.
CARRY_Z = scene.TABLE_TOP + 0.25
RELEASE_Z = scene.TABLE_TOP + 0.16
#: Horizontal tolerance before descending / releasing (m).
XY_TOL = 0.01
Z_TOL = 0.01
#: Holding test: grip point within HOLD_DIST of the target centre with a finger opening below HOLD_OPENING (m).
HOLD_DIST = 0.03
HOLD_OPENING = 0.035


def expert_actions(env: ReferenceVectorEnv, env_indices=None) -> np.ndarray:
    """float32 [n, ACTION_DIM]: the expert's next action for the selected envs."""
    idx = check_env_indices(env_indices, env.num_envs)
    data, ix = env.data, env.index
    preds, center = task.evaluate_predicates(data, ix, idx)
    grips = task.grip_points(data, ix, idx)[:, 0]  # left arm
    base = data.qpos[ix.base_qpos[idx]]
    out = np.zeros((len(idx), env.action_space.shape[0]), np.float32)
    out[:, 7:11] = env.last_actions[idx, 7:11]  # the right arm holds its action
    for row in range(len(idx)):
        target = center[row, task.TARGET]
        # Holding: the closed fingers are around the target (finger contacts flicker while lifting).
        opening = data.qpos[ix.arm_qpos[idx[row], 0, 3]]
        grasped = preds.grasped[row, 0, task.TARGET] or (
            np.linalg.norm(grips[row] - target) < HOLD_DIST and opening < HOLD_OPENING
        )
        goal_xy = np.array(scene.BIN_CENTER) if grasped else target[:2]
        xy_err = np.linalg.norm(grips[row, :2] - goal_xy)
        gz = grips[row, 2]
        gripper, move = 1.0, True
        if not grasped:
            grasp_z = target[2]
            if xy_err > XY_TOL:
                z = CARRY_Z
            elif gz > grasp_z + Z_TOL:
                z = grasp_z
            else:
                z, gripper = grasp_z, -1.0
        else:
            gripper = -1.0
            if xy_err > XY_TOL:
                z = CARRY_Z
                move = gz > CARRY_Z - 0.03  # lift first, then carry
            elif gz > RELEASE_Z + Z_TOL:
                z = RELEASE_Z
            else:
                z, gripper = RELEASE_Z, 1.0
        base_x_goal = np.clip(goal_xy[0] - scene.WRIST_X0 - 0.35, -0.5, 0.3)
        base_y_goal = goal_xy[1] - scene.ARM_Y["left"]
        if move:
            cmd = 3.0 * np.array([base_x_goal - base[row, 0], base_y_goal - base[row, 1]]) / scene.BASE_SPEED[0]
        else:
            cmd = np.zeros(2)
        out[row, :2] = np.clip(cmd, -1.0, 1.0)
        out[row, 2] = np.clip(-2.0 * base[row, 2] / scene.BASE_SPEED[2], -1.0, 1.0)
        extend = goal_xy[0] - base[row, 0] - scene.WRIST_X0 if move else data.qpos[ix.arm_qpos[idx[row], 0, 1]]
        lift = z - scene.GRIP_DZ - scene.LIFT_Z0
        left = arm_targets_to_actions(np.array([lift, extend, 0.0, 0.0]))
        left[3] = gripper
        out[row, 3:7] = np.clip(left, -1.0, 1.0)
    return out
