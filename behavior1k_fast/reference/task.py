"""The task: BDDL-like predicates over the scene, a dense reward and success.

Goal (BDDL ``(inside target bin)`` with the target released): put object 0, the red can, into the bin
and let go of it. Predicates follow BEHAVIOR's object states, decided from geometry and contacts:

- ``ontop(obj, table)``: the object's bottom is within ``ONTOP_GAP`` of the table top (a little
  penetration allowed) and its centre lies over the table top, outside the bin.
- ``inside(obj, bin)``: the object's centre lies within the bin's inner volume (between its floor and
  the top of its walls).
- ``grasped(obj, arm)``: both fingers of that arm are in contact with the object.

Reward per own action (dense, in [0, 1] plus ``SUCCESS_BONUS``): reaching (nearest grip point to the
target), grasping, and placing (target to the point above the bin floor), plus the bonus on success.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from .scene import (
    ARMS,
    BIN_CENTER,
    BIN_INNER_HALF,
    BIN_WALL,
    BIN_WALL_HEIGHT,
    TABLE_CENTER,
    TABLE_HALF,
    TABLE_TOP,
    SceneIndex,
)

TARGET = 0
ONTOP_GAP = 0.005
ONTOP_PENETRATION = 0.01
SUCCESS_BONUS = 10.0
#: Where the place term pulls the target: the bin's centre, a can's half height above its floor (env frame).
PLACE_POINT = np.array([BIN_CENTER[0], BIN_CENTER[1], TABLE_TOP + BIN_WALL + 0.05])


@dataclass(frozen=True)
class Predicates:
    """Predicate values for the selected envs: leading axis = selected env, then arm, then object."""

    ontop_table: np.ndarray  # bool [e, n]
    inside_bin: np.ndarray  # bool [e, n]
    grasped: np.ndarray  # bool [e, arms, n]

    def for_env(self, row: int) -> dict[str, bool]:
        """The goal's predicates of one selected env as BDDL-style names."""
        out = {
            f"ontop(obj{TARGET}, table)": bool(self.ontop_table[row, TARGET]),
            f"inside(obj{TARGET}, bin)": bool(self.inside_bin[row, TARGET]),
        }
        for a, arm in enumerate(ARMS):
            out[f"grasped(obj{TARGET}, {arm})"] = bool(self.grasped[row, a, TARGET])
        return out


def object_boxes(model: mujoco.MjModel, data: mujoco.MjData, index: SceneIndex, envs: np.ndarray):
    """World-axis-aligned bounding boxes of the objects of ``envs``: centre in the env frame and half size."""
    geoms = index.obj_geom[envs]
    local_center = model.geom_aabb[geoms, :3]
    local_half = model.geom_aabb[geoms, 3:]
    rot = data.geom_xmat[geoms].reshape(*geoms.shape, 3, 3)
    center = data.geom_xpos[geoms] + np.einsum("enij,enj->eni", rot, local_center)
    center[..., 0] -= index.origin_x[envs][:, None]
    half = np.einsum("enij,enj->eni", np.abs(rot), local_half)
    return center, half


def finger_contacts(data: mujoco.MjData, index: SceneIndex) -> np.ndarray:
    """bool [E, arms * 2, n]: finger slot (arm * 2 + finger) of env e touches object j."""
    touch = np.zeros((index.num_envs, 2 * len(ARMS), index.obj_geom.shape[1]), bool)
    if data.ncon:
        pairs = data.contact.geom[: data.ncon]
        for f_col, o_col in ((0, 1), (1, 0)):
            finger = index.geom_finger[pairs[:, f_col]]
            obj = index.geom_object[pairs[:, o_col]]
            hit = (finger >= 0) & (obj >= 0)
            if hit.any():
                touch[index.geom_env[pairs[hit, o_col]], finger[hit], obj[hit]] = True
    return touch


def evaluate_predicates(model: mujoco.MjModel, data: mujoco.MjData, index: SceneIndex, envs: np.ndarray):
    """Predicates of the selected envs, and their object boxes (centre in env frame, half size)."""
    center, half = object_boxes(model, data, index, envs)
    bottom = center[..., 2] - half[..., 2]
    over_table = (np.abs(center[..., 0] - TABLE_CENTER[0]) <= TABLE_HALF[0]) & (
        np.abs(center[..., 1] - TABLE_CENTER[1]) <= TABLE_HALF[1]
    )
    in_bin_xy = (np.abs(center[..., 0] - BIN_CENTER[0]) <= BIN_INNER_HALF) & (
        np.abs(center[..., 1] - BIN_CENTER[1]) <= BIN_INNER_HALF
    )
    at_table_top = (bottom <= TABLE_TOP + ONTOP_GAP) & (bottom >= TABLE_TOP - ONTOP_PENETRATION)
    ontop = over_table & ~in_bin_xy & at_table_top
    floor_top = TABLE_TOP + BIN_WALL
    inside = in_bin_xy & (center[..., 2] >= floor_top) & (center[..., 2] <= floor_top + BIN_WALL_HEIGHT)
    touch = finger_contacts(data, index)[envs]
    grasped = touch[:, 0::2] & touch[:, 1::2]
    return Predicates(ontop_table=ontop, inside_bin=inside, grasped=grasped), center


def grip_points(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray) -> np.ndarray:
    """Grip point of each arm in the env frame [e, arms, 3]."""
    pts = data.site_xpos[index.grip_site[envs]].copy()
    pts[..., 0] -= index.origin_x[envs][:, None]
    return pts


def reward_and_success(preds: Predicates, center: np.ndarray, grips: np.ndarray):
    """Dense reward float64 [e], success bool [e] and the reward terms (dict of [e] arrays)."""
    target = center[:, TARGET]
    reach = np.min(np.linalg.norm(grips - target[:, None], axis=-1), axis=1)
    grasped = preds.grasped[:, :, TARGET].any(axis=1)
    place = np.linalg.norm(target - PLACE_POINT, axis=-1)
    success = preds.inside_bin[:, TARGET] & ~grasped
    terms = {
        "reach": 0.25 * (1.0 - np.tanh(5.0 * reach)),
        "grasp": 0.25 * grasped.astype(np.float64),
        "place": 0.5 * (1.0 - np.tanh(5.0 * place)),
        "success": SUCCESS_BONUS * success.astype(np.float64),
    }
    reward = terms["reach"] + terms["grasp"] + terms["place"] + terms["success"]
    return reward.astype(np.float64), success, terms
