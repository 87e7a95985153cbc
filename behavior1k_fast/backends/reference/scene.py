"""The BEHAVIOR-shaped scene in MJCF, generated in code, and the index tables into the compiled model.

Every env is one room (floor, four walls) holding a table with a container (bin) and ``num_objects``
movable objects on it, and a two-armed mobile manipulator: a holonomic base (x, y, yaw), and per arm a
lift (vertical slide), a telescoping extension (horizontal slide), a wrist yaw and a two-finger gripper.
All envs of a process live in one MjModel, ``ENV_SPACING`` metres apart along x; the walls keep every
camera inside its own room. Lengths in metres, angles in radians, masses in kg.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from .config import ReferenceConfig

ENV_SPACING = 8.0
#: Geom groups the envs' geoms cycle through (MuJoCo has six groups).
ENV_GROUPS = (0, 1, 2, 3, 4, 5)
ROOM_HALF = 2.5
ARMS = ("left", "right")
#: Arm mount offset along the robot's y axis (left = +y).
ARM_Y = {"left": 0.2, "right": -0.2}
#: Wrist x in the robot frame at zero extension, and the lift's z at mid range.
WRIST_X0 = 0.55
LIFT_Z0 = 0.95
#: Joint ranges: lift (relative to LIFT_Z0), extension, wrist yaw, one finger's opening.
LIFT_RANGE = (-0.35, 0.35)
EXTEND_RANGE = (0.0, 0.7)
WRIST_RANGE = (-1.57, 1.57)
FINGER_RANGE = (0.0, 0.06)
#: Grip point below the wrist body (between the finger pads).
GRIP_DZ = -0.16
#: Base speed limits: m/s for x and y, rad/s for yaw.
BASE_SPEED = (0.5, 0.5, 1.0)

TABLE_CENTER = (1.0, 0.0)
TABLE_HALF = (0.4, 0.6)
TABLE_TOP = 0.75
BIN_CENTER = (1.0, -0.4)
BIN_INNER_HALF = 0.12
BIN_WALL_HEIGHT = 0.12
BIN_WALL = 0.01

#: Object categories: (name, MJCF geom type, size attribute, rgba). Object 0 is the task's target.
CATEGORIES = (
    ("can", "cylinder", "0.03 0.05", "0.85 0.1 0.1 1"),
    ("carton", "box", "0.03 0.035 0.05", "0.9 0.8 0.3 1"),
    ("cube", "box", "0.03 0.03 0.03", "0.2 0.5 0.9 1"),
    ("jar", "cylinder", "0.025 0.04", "0.3 0.8 0.4 1"),
    ("block", "box", "0.035 0.02 0.025", "0.6 0.4 0.8 1"),
)
#: Semantic class names; the index is the ``seg_semantic`` id (0: nothing rendered).
SEMANTIC_CLASSES = ("background", "floor", "wall", "table", "container", "robot") + tuple(c[0] for c in CATEGORIES)
#: Instance ids shared by every env (``seg_instance``); movable object j has id ``FIRST_OBJECT_INSTANCE + j``.
INSTANCE_BACKGROUND, INSTANCE_ROOM, INSTANCE_TABLE, INSTANCE_CONTAINER, INSTANCE_ROBOT = range(5)
FIRST_OBJECT_INSTANCE = 5

# Collision filtering: objects and furniture collide with everything; the robot collides with objects and
# furniture but not with itself or the floor (its base is kinematically held at floor height).
_WORLD = 'contype="1" conaffinity="3"'
_ROBOT = 'contype="2" conaffinity="0"'
_GRIP = 'friction="1.5 0.02 0.001" condim="4"'


def render_group(env: int) -> int:
    """MuJoCo geom group of env ``env``'s geoms. Rendering a camera of env e shows only e's group, so a
    render draws the geoms of about E / 6 envs instead of all E (the walls hide the other rooms anyway;
    this only saves draw calls)."""
    return ENV_GROUPS[env % len(ENV_GROUPS)]


def object_category(j: int) -> int:
    """Category index of movable object ``j`` (object 0, the target, is a can)."""
    return j % len(CATEGORIES)


def placement_cells() -> np.ndarray:
    """Table cells (x, y in the env frame) where objects may be placed: a 0.15 m grid off the bin."""
    xs = TABLE_CENTER[0] + np.arange(-2, 3) * 0.15
    ys = TABLE_CENTER[1] + (np.arange(8) - 3.5) * 0.15
    cells = np.array([(x, y) for x in xs for y in ys])
    near_bin = (np.abs(cells[:, 0] - BIN_CENTER[0]) < 0.2) & (np.abs(cells[:, 1] - BIN_CENTER[1]) < 0.2)
    return cells[~near_bin]


def _room_xml(p: str, ox: float, group: int) -> str:
    walls = []
    for k, (x, y, hx, hy) in enumerate(
        ((ROOM_HALF, 0, 0.05, ROOM_HALF), (-ROOM_HALF, 0, 0.05, ROOM_HALF),
         (0, ROOM_HALF, ROOM_HALF, 0.05), (0, -ROOM_HALF, ROOM_HALF, 0.05))
    ):
        walls.append(
            f'<geom name="{p}wall{k}" type="box" pos="{x} {y} 1.25" size="{hx} {hy} 1.25" '
            f'material="wall" {_WORLD}/>'
        )
    tx, ty = TABLE_CENTER
    legs = "".join(
        f'<geom name="{p}table_leg{k}" type="box" pos="{tx + sx * 0.36} {ty + sy * 0.56} 0.36" '
        f'size="0.025 0.025 0.36" material="wood" {_WORLD}/>'
        for k, (sx, sy) in enumerate(((1, 1), (1, -1), (-1, 1), (-1, -1)))
    )
    bx, by = BIN_CENTER
    h, w, hh = BIN_INNER_HALF, BIN_WALL, BIN_WALL_HEIGHT / 2
    z0 = TABLE_TOP + w
    bin_geoms = [f'<geom name="{p}bin_floor" type="box" pos="{bx} {by} {TABLE_TOP + w / 2}" '
                 f'size="{h + w} {h + w} {w / 2}" material="bin" {_WORLD}/>']
    for k, (dx, dy, sx, sy) in enumerate(((h + w / 2, 0, w / 2, h + w), (-h - w / 2, 0, w / 2, h + w),
                                          (0, h + w / 2, h, w / 2), (0, -h - w / 2, h, w / 2))):
        bin_geoms.append(f'<geom name="{p}bin_wall{k}" type="box" pos="{bx + dx} {by + dy} {z0 + hh}" '
                         f'size="{sx} {sy} {hh}" material="bin" {_WORLD}/>')
    return (
        f'<body name="{p}room" pos="{ox} 0 0" childclass="group{group}">'
        f'<geom name="{p}floor" type="box" pos="0 0 -0.05" size="{ROOM_HALF} {ROOM_HALF} 0.05" material="floor" '
        f'{_WORLD}/>'
        f'{"".join(walls)}'
        f'<geom name="{p}table_top" type="box" pos="{tx} {ty} {TABLE_TOP - 0.025}" '
        f'size="{TABLE_HALF[0]} {TABLE_HALF[1]} 0.025" material="wood" {_WORLD}/>{legs}'
        f'{"".join(bin_geoms)}</body>'
    )


def _arm_xml(p: str, arm: str, cameras: tuple[str, ...]) -> str:
    a = f"{p}{arm}_"
    cam = ""
    if f"{arm}_wrist" in cameras:
        cam = f'<camera name="{p}{arm}_wrist" pos="0.09 0 -0.04" xyaxes="0 -1 0 1 0 0" fovy="75"/>'
    fingers = "".join(
        f'<body name="{a}finger{k}" pos="0 {s * 0.01} {GRIP_DZ + 0.01}">'
        f'<joint name="{a}finger{k}" type="slide" axis="0 {s} 0" range="{FINGER_RANGE[0]} {FINGER_RANGE[1]}" '
        f'damping="10" armature="0.05"/>'
        f'<geom name="{a}finger{k}" type="box" size="0.008 0.01 0.04" mass="0.1" material="finger" '
        f'{_ROBOT} {_GRIP} margin="0.004" gap="0.004"/></body>'
        for k, s in ((0, 1), (1, -1))
    )
    return (
        f'<body name="{a}lift" pos="0 {ARM_Y[arm]} {LIFT_Z0}">'
        f'<joint name="{a}lift" type="slide" axis="0 0 1" range="{LIFT_RANGE[0]} {LIFT_RANGE[1]}" damping="300"/>'
        f'<geom type="box" pos="0 0 0" size="0.04 0.04 0.04" mass="1" material="robot" {_ROBOT}/>'
        f'<body name="{a}arm" pos="0.1 0 0">'
        f'<joint name="{a}extend" type="slide" axis="1 0 0" range="{EXTEND_RANGE[0]} {EXTEND_RANGE[1]}" '
        f'damping="150"/>'
        f'<geom type="box" pos="0.2 0 0" size="0.25 0.015 0.015" mass="0.5" material="robot" {_ROBOT}/>'
        f'<body name="{a}wrist" pos="{WRIST_X0 - 0.1} 0 0">'
        f'<joint name="{a}wrist_yaw" type="hinge" axis="0 0 1" range="{WRIST_RANGE[0]} {WRIST_RANGE[1]}" '
        f'damping="2" armature="0.01"/>'
        f'<geom type="box" pos="0 0 -0.06" size="0.03 0.05 0.06" mass="0.3" material="robot" {_ROBOT}/>'
        f'<site name="{a}grip" pos="0 0 {GRIP_DZ}" size="0.005" group="5"/>'
        f'{cam}{fingers}</body></body></body>'
    )


def _robot_xml(p: str, ox: float, group: int, cameras: tuple[str, ...]) -> str:
    head = ""
    if "head" in cameras:
        head = f'<camera name="{p}head" pos="0.05 0 1.6" xyaxes="0 -1 0 0.667 0 0.745" fovy="70"/>'
    return (
        f'<body name="{p}base" pos="{ox} 0 0" childclass="group{group}">'
        f'<joint name="{p}base_x" type="slide" axis="1 0 0" damping="10"/>'
        f'<joint name="{p}base_y" type="slide" axis="0 1 0" damping="10"/>'
        f'<joint name="{p}base_yaw" type="hinge" axis="0 0 1" damping="10"/>'
        f'<geom type="box" pos="0 0 0.15" size="0.25 0.25 0.12" mass="40" material="robot" {_ROBOT}/>'
        f'<geom type="box" pos="-0.12 0 0.8" size="0.06 0.12 0.55" mass="10" material="robot" {_ROBOT}/>'
        f'<geom type="box" pos="-0.05 0 1.45" size="0.06 0.08 0.06" mass="1" material="robot" {_ROBOT}/>'
        f'{head}{"".join(_arm_xml(p, arm, cameras) for arm in ARMS)}</body>'
    )


def _objects_xml(p: str, ox: float, group: int, num_objects: int) -> str:
    out = []
    for j in range(num_objects):
        name, gtype, size, rgba = CATEGORIES[object_category(j)]
        out.append(
            f'<body name="{p}obj{j}" pos="{ox} {j} 2" childclass="group{group}"><freejoint name="{p}obj{j}"/>'
            f'<geom name="{p}obj{j}" type="{gtype}" size="{size}" rgba="{rgba}" mass="0.15" '
            f'{_WORLD} {_GRIP}/></body>'
        )
    return "".join(out)


def _actuators_xml(p: str) -> str:
    base = "".join(
        f'<velocity name="{p}base_{ax}" joint="{p}base_{ax}" kv="{kv}" forcerange="-{f} {f}" ctrlrange="{-v} {v}"/>'
        for ax, kv, f, v in zip(("x", "y", "yaw"), (2000, 2000, 500), (200, 200, 100), BASE_SPEED)
    )
    arms = []
    for arm in ARMS:
        a = f"{p}{arm}_"
        arms.append(
            f'<position name="{a}lift" joint="{a}lift" kp="4000" forcerange="-80 80" '
            f'ctrlrange="{LIFT_RANGE[0]} {LIFT_RANGE[1]}"/>'
            f'<position name="{a}extend" joint="{a}extend" kp="1500" forcerange="-40 40" '
            f'ctrlrange="{EXTEND_RANGE[0]} {EXTEND_RANGE[1]}"/>'
            f'<position name="{a}wrist_yaw" joint="{a}wrist_yaw" kp="50" '
            f'ctrlrange="{WRIST_RANGE[0]} {WRIST_RANGE[1]}"/>'
            + "".join(
                f'<position name="{a}finger{k}" joint="{a}finger{k}" kp="200" forcerange="-20 20" '
                f'ctrlrange="{FINGER_RANGE[0]} {FINGER_RANGE[1]}"/>'
                for k in (0, 1)
            )
        )
    return base + "".join(arms)


def build_mjcf(config: ReferenceConfig, num_envs: int, physics_dt: float) -> str:
    """MJCF text of ``num_envs`` copies of the scene, env ``i`` at x = ``i * ENV_SPACING``; ``physics_dt`` in s.
    The offscreen framebuffer is the cameras' image size (MuJoCo's default is 640 x 480)."""
    bodies, actuators = [], []
    for i in range(num_envs):
        p, ox, g = f"e{i}/", i * ENV_SPACING, render_group(i)
        bodies.append(
            _room_xml(p, ox, g) + _robot_xml(p, ox, g, config.cameras) + _objects_xml(p, ox, g, config.num_objects)
        )
        actuators.append(_actuators_xml(p))
    extent = ENV_SPACING * max(num_envs, 1)
    return f"""<mujoco model="behavior1k_fast_reference">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{physics_dt!r}" integrator="implicitfast" cone="elliptic" impratio="5"
          noslip_iterations="{config.contact_iterations}" noslip_tolerance="0">
    <flag island="enable"/>
  </option>
  <statistic extent="{extent}" center="{extent / 2} 0 1"/>
  <visual>
    <global offwidth="{config.resolution[1]}" offheight="{config.resolution[0]}"/>
    <quality shadowsize="0" offsamples="0"/>
    <map znear="{0.02 / extent}" zfar="{12.0 / extent}"/>
    <headlight ambient="0.35 0.35 0.35" diffuse="0.6 0.6 0.6" specular="0 0 0"/>
  </visual>
  <default>{"".join(f'<default class="group{g}"><geom group="{g}"/></default>' for g in ENV_GROUPS)}</default>
  <asset>
    <material name="floor" rgba="0.55 0.5 0.45 1" reflectance="0"/>
    <material name="wall" rgba="0.85 0.85 0.8 1" reflectance="0"/>
    <material name="wood" rgba="0.6 0.42 0.25 1" reflectance="0"/>
    <material name="bin" rgba="0.3 0.3 0.35 1" reflectance="0"/>
    <material name="robot" rgba="0.75 0.75 0.78 1" reflectance="0"/>
    <material name="finger" rgba="0.15 0.15 0.15 1" reflectance="0"/>
  </asset>
  <worldbody>
    {"".join(bodies)}
  </worldbody>
  <actuator>{"".join(actuators)}</actuator>
</mujoco>"""


@dataclass(frozen=True)
class SceneIndex:
    """Addresses of each env's parts in the compiled model; leading axis = env."""

    num_envs: int
    #: Env origin x in world coordinates [E].
    origin_x: np.ndarray
    #: qpos / dof addresses of base x, y, yaw [E, 3].
    base_qpos: np.ndarray
    base_dof: np.ndarray
    #: qpos / dof addresses of (lift, extend, wrist_yaw, finger0, finger1) per arm [E, 2, 5].
    arm_qpos: np.ndarray
    arm_dof: np.ndarray
    #: qpos address of each object's free joint (7 values from there) and its first dof [E, n].
    obj_qpos: np.ndarray
    obj_dof: np.ndarray
    #: Geom id of each movable object [E, n].
    obj_geom: np.ndarray
    #: Half size of each object geom's bounding box in its own frame (``MjModel.geom_aabb``; primitives:
    #: centred on the geom frame) [E, n, 3].
    obj_aabb_half: np.ndarray
    #: Site id of each arm's grip point [E, 2].
    grip_site: np.ndarray
    #: Actuators per env (contiguous from ``ctrl_start[e]``): base x, y, yaw then per arm lift, extend,
    #: wrist_yaw, finger0, finger1.
    ctrl_start: np.ndarray
    #: Camera ids [E, C] in ``config.cameras`` order.
    camera: np.ndarray
    #: geom id -> env, finger slot (arm * 2 + finger, -1 otherwise), object j (-1).
    geom_env: np.ndarray
    geom_finger: np.ndarray
    geom_object: np.ndarray
    #: geom id -> ``ROLE_FINGER``, ``ROLE_OBJECT`` or 0 (int8): a contact is finger-object where the two sum
    #: to ``ROLE_FINGER + ROLE_OBJECT``.
    geom_role: np.ndarray
    #: geom id + 1 -> semantic class / instance id (row 0: nothing rendered).
    semantic_of_geom: np.ndarray
    instance_of_geom: np.ndarray


CTRL_PER_ENV = 3 + 5 * len(ARMS)
#: ``SceneIndex.geom_role`` values: a gripper finger, a movable object (no pair of other roles sums to 3).
ROLE_FINGER, ROLE_OBJECT = 1, 2


def index_scene(model: "mujoco.MjModel", config: ReferenceConfig, num_envs: int) -> SceneIndex:
    """Look up every address the env needs by name."""
    def oid(kind: "mujoco.mjtObj", name: str) -> int:
        i = mujoco.mj_name2id(model, kind, name)
        if i < 0:
            raise KeyError(f"scene has no {kind.name} named {name!r}")
        return i

    def jid(name: str) -> int:
        return oid(mujoco.mjtObj.mjOBJ_JOINT, name)

    n = config.num_objects
    arm_joints = ("lift", "extend", "wrist_yaw", "finger0", "finger1")
    base_j = np.array([[jid(f"e{i}/base_{ax}") for ax in ("x", "y", "yaw")] for i in range(num_envs)])
    arm_j = np.array([[[jid(f"e{i}/{arm}_{j}") for j in arm_joints] for arm in ARMS] for i in range(num_envs)])
    obj_j = np.array([[jid(f"e{i}/obj{j}") for j in range(n)] for i in range(num_envs)])
    geom = mujoco.mjtObj.mjOBJ_GEOM
    obj_geom = np.array([[oid(geom, f"e{i}/obj{j}") for j in range(n)] for i in range(num_envs)])

    geom_env = np.full(model.ngeom, -1)
    geom_finger = np.full(model.ngeom, -1)
    geom_object = np.full(model.ngeom, -1)
    semantic = np.zeros(model.ngeom + 1, np.int32)
    instance = np.zeros(model.ngeom + 1, np.int32)
    base_bodies = {oid(mujoco.mjtObj.mjOBJ_BODY, f"e{i}/base"): i for i in range(num_envs)}
    room_bodies = {oid(mujoco.mjtObj.mjOBJ_BODY, f"e{i}/room"): i for i in range(num_envs)}
    for g in range(model.ngeom):
        name = mujoco.mj_id2name(model, geom, g) or ""
        body = int(model.geom_bodyid[g])
        root = int(model.body_rootid[body])
        if root in base_bodies:
            geom_env[g] = base_bodies[root]
            semantic[g + 1], instance[g + 1] = SEMANTIC_CLASSES.index("robot"), INSTANCE_ROBOT
        elif root in room_bodies:
            geom_env[g] = room_bodies[root]
            part = name.split("/", 1)[1]
            if part == "floor":
                semantic[g + 1], instance[g + 1] = SEMANTIC_CLASSES.index("floor"), INSTANCE_ROOM
            elif part.startswith("wall"):
                semantic[g + 1], instance[g + 1] = SEMANTIC_CLASSES.index("wall"), INSTANCE_ROOM
            elif part.startswith("table"):
                semantic[g + 1], instance[g + 1] = SEMANTIC_CLASSES.index("table"), INSTANCE_TABLE
            else:
                semantic[g + 1], instance[g + 1] = SEMANTIC_CLASSES.index("container"), INSTANCE_CONTAINER
    for i in range(num_envs):
        for j in range(n):
            g = obj_geom[i, j]
            geom_env[g], geom_object[g] = i, j
            semantic[g + 1] = SEMANTIC_CLASSES.index(CATEGORIES[object_category(j)][0])
            instance[g + 1] = FIRST_OBJECT_INSTANCE + j
        for a, arm in enumerate(ARMS):
            for k in (0, 1):
                geom_finger[oid(geom, f"e{i}/{arm}_finger{k}")] = 2 * a + k

    cam_ids = np.array(
        [[oid(mujoco.mjtObj.mjOBJ_CAMERA, f"e{i}/{c}") for c in config.cameras] for i in range(num_envs)]
    ).reshape(num_envs, len(config.cameras))
    return SceneIndex(
        num_envs=num_envs,
        origin_x=np.arange(num_envs) * ENV_SPACING,
        base_qpos=model.jnt_qposadr[base_j],
        base_dof=model.jnt_dofadr[base_j],
        arm_qpos=model.jnt_qposadr[arm_j],
        arm_dof=model.jnt_dofadr[arm_j],
        obj_qpos=model.jnt_qposadr[obj_j],
        obj_dof=model.jnt_dofadr[obj_j],
        obj_geom=obj_geom,
        obj_aabb_half=model.geom_aabb[obj_geom, 3:],
        grip_site=np.array([[oid(mujoco.mjtObj.mjOBJ_SITE, f"e{i}/{arm}_grip") for arm in ARMS]
                            for i in range(num_envs)]),
        ctrl_start=np.array([oid(mujoco.mjtObj.mjOBJ_ACTUATOR, f"e{i}/base_x") for i in range(num_envs)]),
        camera=cam_ids,
        geom_env=geom_env,
        geom_finger=geom_finger,
        geom_object=geom_object,
        geom_role=np.select([geom_finger >= 0, geom_object >= 0], [ROLE_FINGER, ROLE_OBJECT]).astype(np.int8),
        semantic_of_geom=semantic,
        instance_of_geom=instance,
    )
