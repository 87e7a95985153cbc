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
    ROLE_FINGER,
    ROLE_OBJECT,
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


#: BDDL-style names of the goal's predicates, in ``Predicates.goal_values`` order.
GOAL_PREDICATES = (f"ontop(obj{TARGET}, table)", f"inside(obj{TARGET}, bin)") + tuple(
    f"grasped(obj{TARGET}, {arm})" for arm in ARMS
)
#: Names of the dense reward's terms, in ``reward_and_success`` order.
REWARD_TERMS = ("reach", "grasp", "place", "success")
#: Horizontal regions an object centre is tested against: rows table top, bin inner square; columns x, y
#: (env frame, m).
_REGION_CENTER = np.array([TABLE_CENTER, BIN_CENTER])
_REGION_HALF = np.array([TABLE_HALF, (BIN_INNER_HALF, BIN_INNER_HALF)])
_BIN_FLOOR_TOP = TABLE_TOP + BIN_WALL
_BIN_TOP = _BIN_FLOOR_TOP + BIN_WALL_HEIGHT
#: Heights (m) between which an object's bottom counts as resting on the table top.
_ONTOP_LOW, _ONTOP_HIGH = TABLE_TOP - ONTOP_PENETRATION, TABLE_TOP + ONTOP_GAP


@dataclass(frozen=True)
class Predicates:
    """Predicate values for the selected envs: leading axis = selected env, then arm, then object."""

    ontop_table: np.ndarray  # bool [e, n]
    inside_bin: np.ndarray  # bool [e, n]
    grasped: np.ndarray  # bool [e, arms, n]

    def goal_values(self) -> list[dict[str, bool]]:
        """Per selected env, the goal's predicates by their ``GOAL_PREDICATES`` names."""
        values = np.concatenate(
            [self.ontop_table[:, TARGET, None], self.inside_bin[:, TARGET, None], self.grasped[:, :, TARGET]], axis=1
        )
        return [dict(zip(GOAL_PREDICATES, row)) for row in values.tolist()]


def object_boxes(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The objects of ``envs`` as world-axis-aligned boxes: centre in the env frame [e, n, 3] and the height
    of the bottom face [e, n] (m). The object geoms are MuJoCo primitives, whose bounding box is centred on
    the geom frame, so the centre is the geom position."""
    geoms = index.obj_geom[envs]
    center = data.geom_xpos[geoms]  # a gather: a new array
    center[..., 0] -= index.origin_x[envs][:, None]
    # Half height of the rotated box: |row z of the rotation| . local half sizes.
    half_z = np.einsum("enj,enj->en", np.abs(data.geom_xmat[geoms, 6:9]), index.obj_aabb_half[envs])
    return center, center[..., 2] - half_z


def finger_contacts(data: mujoco.MjData, index: SceneIndex) -> np.ndarray:
    """bool [E, arms * 2, n]: finger slot (arm * 2 + finger) of env e touches object j."""
    touch = np.zeros((index.num_envs, 2 * len(ARMS), index.obj_geom.shape[1]), bool)
    ncon = data.ncon
    if ncon:
        pairs = data.contact.geom[:ncon]
        role = index.geom_role[pairs]
        pairs = pairs[role[:, 0] + role[:, 1] == ROLE_FINGER + ROLE_OBJECT]  # finger-object contacts (few)
        if len(pairs):
            # Each side's finger slot / object index; the other side has -1.
            finger = index.geom_finger[pairs].max(axis=1)
            obj = index.geom_object[pairs].max(axis=1)
            touch[index.geom_env[pairs[:, 0]], finger, obj] = True
    return touch


def evaluate_predicates(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray):
    """Predicates of the selected envs, and their object centres in the env frame [e, n, 3]."""
    center, bottom = object_boxes(data, index, envs)
    # [e, n, region, axis]: the centre lies within the table top / the bin's inner square along x, y.
    within = np.abs(center[..., None, :2] - _REGION_CENTER) <= _REGION_HALF
    over = within[..., 0] & within[..., 1]  # [e, n, region]
    in_bin_xy = over[..., 1]
    ontop = over[..., 0] & ~in_bin_xy & (bottom <= _ONTOP_HIGH) & (bottom >= _ONTOP_LOW)
    z = center[..., 2]
    inside = in_bin_xy & (z >= _BIN_FLOOR_TOP) & (z <= _BIN_TOP)
    touch = finger_contacts(data, index)[envs]
    grasped = touch[:, 0::2] & touch[:, 1::2]
    return Predicates(ontop_table=ontop, inside_bin=inside, grasped=grasped), center


def grip_points(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray) -> np.ndarray:
    """Grip point of each arm in the env frame [e, arms, 3]."""
    pts = data.site_xpos[index.grip_site[envs]]  # a gather: a new array
    pts[..., 0] -= index.origin_x[envs][:, None]
    return pts


def _distance(offset: np.ndarray) -> np.ndarray:
    """Euclidean length over the last axis (the same operations as ``np.linalg.norm(offset, axis=-1)``)."""
    return np.sqrt(np.add.reduce(offset * offset, axis=-1))


def reward_and_success(preds: Predicates, center: np.ndarray, grips: np.ndarray):
    """Dense reward float64 [e], success bool [e] and the reward terms (dict of [e] arrays, ``REWARD_TERMS``)."""
    target = center[:, TARGET]
    reach = np.minimum.reduce(_distance(grips - target[:, None]), axis=1)
    grasped = np.logical_or.reduce(preds.grasped[:, :, TARGET], axis=1)
    place = _distance(target - PLACE_POINT)
    success = preds.inside_bin[:, TARGET] & ~grasped
    terms = {
        "reach": 0.25 * (1.0 - np.tanh(5.0 * reach)),
        "grasp": 0.25 * grasped.astype(np.float64),
        "place": 0.5 * (1.0 - np.tanh(5.0 * place)),
        "success": SUCCESS_BONUS * success.astype(np.float64),
    }
    reward = terms["reach"] + terms["grasp"] + terms["place"] + terms["success"]
    return reward, success, terms
