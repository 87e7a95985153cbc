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

import math
from dataclasses import dataclass
from typing import Sequence

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


def object_boxes(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray,
                 num_objects: int | None = None) -> tuple[list, list]:
    """Per selected env and object (the first ``num_objects``, all by default), its world-axis-aligned box:
    the centre in the env frame ``[x, y, z]`` and the height of the bottom face (m), as nested lists of
    floats (a step looks at a few objects of a few envs: Python floats beat numpy calls on arrays this
    small). The object geoms are MuJoCo primitives, whose box is centred on the geom frame."""
    geoms = index.obj_geom[envs, :num_objects]
    centers = data.geom_xpos[geoms].tolist()
    # Half height of the rotated box: |row z of the rotation| . local half sizes.
    half_z = np.einsum("enj,enj->en", np.abs(data.geom_xmat[geoms, 6:9]), index.obj_aabb_half[envs, :num_objects])
    bottoms = []
    for origin, env_centers, env_half_z in zip(index.origin_x[envs].tolist(), centers, half_z.tolist()):
        for center in env_centers:
            center[0] -= origin
        bottoms.append([center[2] - h for center, h in zip(env_centers, env_half_z)])
    return centers, bottoms


def region_predicates(center: Sequence[float], bottom: float) -> tuple[bool, bool]:
    """``ontop(obj, table)`` and ``inside(obj, bin)`` of one object from its box (module docs)."""
    x, y, z = center
    in_bin_xy = abs(x - BIN_CENTER[0]) <= BIN_INNER_HALF and abs(y - BIN_CENTER[1]) <= BIN_INNER_HALF
    over_table = abs(x - TABLE_CENTER[0]) <= TABLE_HALF[0] and abs(y - TABLE_CENTER[1]) <= TABLE_HALF[1]
    return (over_table and not in_bin_xy and _ONTOP_LOW <= bottom <= _ONTOP_HIGH,
            in_bin_xy and _BIN_FLOOR_TOP <= z <= _BIN_TOP)


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
    centers, bottoms = object_boxes(data, index, envs)
    regions = np.array([[region_predicates(c, b) for c, b in zip(*env)] for env in zip(centers, bottoms)], bool)
    touch = finger_contacts(data, index)[envs]
    grasped = touch[:, 0::2] & touch[:, 1::2]
    return Predicates(ontop_table=regions[..., 0], inside_bin=regions[..., 1], grasped=grasped), np.array(centers)


def grip_points(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray) -> np.ndarray:
    """Grip point of each arm in the env frame [e, arms, 3]."""
    pts = data.site_xpos[index.grip_site[envs]]  # a gather: a new array
    pts[..., 0] -= index.origin_x[envs][:, None]
    return pts


def _length(dx: float, dy: float, dz: float) -> float:
    """Euclidean length: the squares summed left to right, then the square root (numpy's sum over a last
    axis of 3 does the same, so the two agree to the bit)."""
    return math.sqrt(dx * dx + dy * dy + dz * dz)


def _reward_rows(targets: Sequence, grips: Sequence, grasped: Sequence[bool], inside: Sequence[bool]) -> list:
    """Per env ``(reach, grasp, place, success, reward)`` terms (floats) and success, from the target's centre
    ``[x, y, z]``, each arm's grip point, whether any arm grasps the target and whether it is inside the bin
    (all in the env frame, per env)."""
    px, py, pz = PLACE_POINT.tolist()
    scaled = []  # 5 x the reach and place distances of every env, for one tanh call
    for (tx, ty, tz), env_grips in zip(targets, grips):
        reach = min(_length(gx - tx, gy - ty, gz - tz) for gx, gy, gz in env_grips)
        scaled += (5.0 * reach, 5.0 * _length(tx - px, ty - py, tz - pz))
    squashed = np.tanh(scaled).tolist()
    rows = []
    for k, (held, in_bin) in enumerate(zip(grasped, inside)):
        ok = in_bin and not held
        row = (0.25 * (1.0 - squashed[2 * k]), 0.25 * held, 0.5 * (1.0 - squashed[2 * k + 1]), SUCCESS_BONUS * ok)
        rows.append((row + (row[0] + row[1] + row[2] + row[3],), ok))
    return rows


def reward_and_success(preds: Predicates, center: np.ndarray, grips: np.ndarray):
    """Dense reward float64 [e], success bool [e] and the reward terms (dict of [e] arrays, ``REWARD_TERMS``)."""
    rows = _reward_rows(center[:, TARGET].tolist(), grips.tolist(), preds.grasped[:, :, TARGET].any(axis=1).tolist(),
                        preds.inside_bin[:, TARGET].tolist())
    table = np.array([terms for terms, _ in rows], dtype=np.float64)
    return table[:, -1], np.array([ok for _, ok in rows]), dict(zip(REWARD_TERMS, table[:, :-1].T))


def goal_and_reward(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray):
    """What a step reports for the selected envs, from the target only: reward float64 [e], success bool [e],
    and per env the goal's predicates (``GOAL_PREDICATES`` -> bool) and the reward terms (``REWARD_TERMS``
    -> float). Values equal :func:`evaluate_predicates` + :func:`reward_and_success`; Python floats keep
    the per-step cost to a few numpy calls."""
    centers, bottoms = object_boxes(data, index, envs, num_objects=TARGET + 1)
    touch = finger_contacts(data, index)[envs, :, TARGET].tolist()  # per env: finger slots
    goals, held, inside = [], [], []
    for env_centers, env_bottoms, fingers in zip(centers, bottoms, touch):
        ontop, in_bin = region_predicates(env_centers[TARGET], env_bottoms[TARGET])
        grasped = [fingers[2 * a] and fingers[2 * a + 1] for a in range(len(ARMS))]
        goals.append(dict(zip(GOAL_PREDICATES, (ontop, in_bin, *grasped))))
        held.append(any(grasped))
        inside.append(in_bin)
    rows = _reward_rows([c[TARGET] for c in centers], grip_points(data, index, envs).tolist(), held, inside)
    terms = [dict(zip(REWARD_TERMS, row[:-1])) for row, _ in rows]
    return np.array([row[-1] for row, _ in rows]), np.array([ok for _, ok in rows]), goals, terms
