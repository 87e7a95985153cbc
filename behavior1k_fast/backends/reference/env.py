"""ReferenceVectorEnv: E envs in one MjModel/MjData, driven through the backend contract.

One ``mj_step`` call advances every env of the process by one global sim step (``physics_substeps``
physics steps): the shared-physics structure of an OmniGibson vector env. See ``behavior1k_fast.core.contract``
for the semantics of ``step``, ``reset`` and ``observe``.

Actions (per env, ``Box(-1, 1, (11,), float32)``; values outside [-1, 1] are clipped, NaN/inf is an
error): 0-2 base velocity in the robot frame (x, y scaled to ``BASE_SPEED`` m/s, yaw to rad/s); then
per arm (left, right) the lift, extension and wrist-yaw joint targets and the gripper (each mapped
linearly from [-1, 1] onto the joint range; gripper -1 closed, +1 open). The base command is turned
into world-frame joint velocity targets when the action is applied, and an env that takes no new action
keeps its actuator targets (``ctrl``) unchanged: it holds its last action.

Rendering (``step(render=True)``, ``observe``, ``reset(get_obs=True)``) renders the cameras of the selected
envs only; images read without a render are those of the env's last render (zeros before its first).

Stock costs. Each switch reproduces one default cost of the BEHAVIOR stack and follows the profile
knob the OmniGibson patches use for the same cost (``STOCK_COSTS``; ``env.stock_costs`` says which are
on):

- ``all_modalities`` (``obs_modalities=None``): stock BEHAVIOR task configs enable every modality of
  every camera; each extra modality costs a render pass and annotator work here as it does in Isaac Sim
  (depth, normals and segmentation are separate passes).
- ``viewport_render_targets`` (``remove_headless_viewports=False``): stock OmniGibson creates an Isaac
  Sim viewport per camera even when headless, and the viewport is rendered with every frame although
  nothing reads it; here each camera renders one extra RGB frame, discarded.
- ``render_every_step`` (``skip_intermediate_obs=False``): stock rollouts render and read observations
  after every sim step. This one is the caller's: the engine passes ``render``/``get_obs``, and the env
  renders exactly when asked.

BEHAVIOR-like costs, off by default (``ReferenceConfig.reset_settle_steps`` and ``contact_iterations``,
sources in ``config``): resets that settle their re-sampled objects with physics steps, and solver work per
physics step that grows with the active contacts.

``intra_op_threads`` has no effect here: MuJoCo stepping and rendering are single-threaded.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import gymnasium as gym
import mujoco
import numpy as np

from ...core.checks import check_int, check_positive_int
from ...core.contract import check_actions, check_env_indices
from ...core.profile import RolloutProfile
from ...core.tracing import ACTION_APPLY, OBS_READ, PHYSICS, RENDER, REWARD, TERMINATION, get_profiler
from ...core.frequencies import Frequencies, StageTiming, rescale_for_stages
from . import scene, task
from .config import SETTLE_DROP, SUPPORTED_VISION_MODALITIES, ReferenceConfig
from .sensors import PROPRIO_DIM, CameraRig, image_spec, proprioception

ACTION_DIM = 3 + 4 * len(scene.ARMS)
#: Stock cost switch -> the RolloutProfile knob it follows (what each models: module docstring).
STOCK_COSTS = {
    "all_modalities": "obs_modalities",
    "viewport_render_targets": "remove_headless_viewports",
    "render_every_step": "skip_intermediate_obs",
}
#: Per arm joint ranges in action order: lift, extension, wrist yaw, gripper (one finger's opening).
_ARM_RANGES = np.array([scene.LIFT_RANGE, scene.EXTEND_RANGE, scene.WRIST_RANGE, scene.FINGER_RANGE])
_ARM_LOW, _ARM_SPAN = _ARM_RANGES[:, 0], _ARM_RANGES[:, 1] - _ARM_RANGES[:, 0]
_BASE_SPEED = np.asarray(scene.BASE_SPEED)
#: Reset pose per arm: lift, extension, wrist yaw, finger opening.
_ARM_HOME = np.array([0.2, 0.0, 0.0, 0.05])


def resolve_modalities(obs_modalities: Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
    """(vision modalities, proprio on) for a profile's ``obs_modalities`` (``None``: every modality)."""
    if obs_modalities is None:
        return SUPPORTED_VISION_MODALITIES, True
    vision = []
    for m in obs_modalities:
        if m != "proprio" and m not in SUPPORTED_VISION_MODALITIES:
            raise ValueError(
                f"modality {m!r} in obs_modalities is not supported by the reference simulator; supported: "
                f"{SUPPORTED_VISION_MODALITIES + ('proprio',)}"
            )
        if m != "proprio" and m not in vision:
            vision.append(m)
    return tuple(vision), "proprio" in obs_modalities


def arm_targets_to_actions(targets: np.ndarray) -> np.ndarray:
    """Joint targets (lift, extension, wrist yaw, finger opening) -> normalized actions in [-1, 1]."""
    return 2.0 * (targets - _ARM_LOW) / _ARM_SPAN - 1.0


#: Reset state: the arm joints (lift, extension, wrist yaw, both fingers) and the action that holds it.
_ARM_HOME_QPOS = np.concatenate([_ARM_HOME, _ARM_HOME[3:]])
_HOME_ACTION = np.concatenate([np.zeros(3), np.tile(arm_targets_to_actions(_ARM_HOME), len(scene.ARMS))]).astype(
    np.float32
)


class ReferenceVectorEnv:
    """``num_envs`` BEHAVIOR-shaped pick-and-place envs sharing one MuJoCo model (a ``VectorBackend``).

    ``seed`` with the env id and the env's reset count decides every reset; ``profile`` (default: the
    fast-path ``RolloutProfile()``) decides the modalities, the stock costs and the K-stage physics
    rescale; ``config`` the scene. ``timing`` and ``frequencies`` are the rescaled ones in use.
    """

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        profile: RolloutProfile | None = None,
        config: ReferenceConfig | None = None,
    ) -> None:
        num_envs = check_positive_int("num_envs", num_envs)
        seed = check_int("seed", seed, 0)
        profile = RolloutProfile() if profile is None else profile
        config = ReferenceConfig() if config is None else config
        if not isinstance(profile, RolloutProfile):
            raise TypeError(f"profile must be a RolloutProfile or None, got {type(profile).__name__}")
        if not isinstance(config, ReferenceConfig):
            raise TypeError(f"config must be a ReferenceConfig or None, got {type(config).__name__}")
        self.num_envs = num_envs
        self.seed = int(seed)
        self.profile = profile
        self.config = config
        self.timing: StageTiming = rescale_for_stages(
            config.frequencies, profile.stages_sharing_physics, profile.physics_rescale
        )
        self.frequencies: Frequencies = self.timing.frequencies
        self.vision_modalities, self.proprio = resolve_modalities(profile.obs_modalities)
        self.stock_costs = {
            "all_modalities": profile.obs_modalities is None,
            "viewport_render_targets": not profile.remove_headless_viewports,
            "render_every_step": not profile.skip_intermediate_obs,
        }

        self.model = mujoco.MjModel.from_xml_string(
            scene.build_mjcf(config, num_envs, self.frequencies.physics_dt)
        )
        self.data = mujoco.MjData(self.model)
        self.index = scene.index_scene(self.model, config, num_envs)
        self._substeps = self.frequencies.physics_substeps
        self._rig = CameraRig(
            self.model,
            self.index,
            config.cameras,
            self.vision_modalities,
            config.resolution,
            viewport_targets=self.stock_costs["viewport_render_targets"] and bool(self.vision_modalities),
        )
        self._cells = scene.placement_cells()
        self._obj_half_z = self.index.obj_aabb_half[0, :, 2]
        self._env_dofs = np.concatenate(
            [
                self.index.base_dof,
                self.index.arm_dof.reshape(num_envs, -1),
                (self.index.obj_dof[..., None] + np.arange(6)).reshape(num_envs, -1),
            ],
            axis=1,
        )
        # Actuator columns of each env [E, CTRL_PER_ENV] and qpos address of each base's yaw [E].
        self._ctrl_cols = self.index.ctrl_start[:, None] + np.arange(scene.CTRL_PER_ENV)
        self._yaw_qpos = self.index.base_qpos[:, 2]
        # Where resets settle their objects (``config.reset_settle_steps``): a one-env copy of the scene at the
        # unscaled physics dt, so settling advances neither the other envs nor ``sim_time``.
        self._settle: tuple[mujoco.MjModel, mujoco.MjData, scene.SceneIndex] | None = None
        if config.reset_settle_steps:
            settle_model = mujoco.MjModel.from_xml_string(scene.build_mjcf(config, 1, config.frequencies.physics_dt))
            self._settle = (settle_model, mujoco.MjData(settle_model), scene.index_scene(settle_model, config, 1))
        #: Physics steps spent settling objects after resets, since construction.
        self.settle_steps = 0
        self._reset_count = np.zeros(num_envs, np.int64)
        self._episode_step = np.zeros(num_envs, np.int64)
        self._last_action = np.zeros((num_envs, ACTION_DIM), np.float32)
        self._closed = False

        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.observation_space = self._make_observation_space()
        self._set_initial_state(np.arange(num_envs))
        self._reset_count[:] = 0  # the state after construction is episode 0 of every env

    # --- spaces -------------------------------------------------------------------------------------
    def _make_observation_space(self) -> gym.spaces.Dict:
        h, w = self.config.resolution
        n_sem = len(scene.SEMANTIC_CLASSES) - 1
        n_inst = scene.FIRST_OBJECT_INSTANCE + self.config.num_objects - 1
        bounds = {
            "rgb": (0, 255),
            "depth": (0.0, np.inf),
            "depth_linear": (0.0, np.inf),
            "normal": (-1.0, 1.0),
            "seg_semantic": (0, n_sem),
            "seg_instance": (0, n_inst),
        }
        spaces = {}
        for cam in self.config.cameras:
            for m in self.vision_modalities:
                shape, dtype = image_spec(m, h, w)
                spaces[f"{cam}::{m}"] = gym.spaces.Box(*bounds[m], shape, dtype)
        if self.proprio:
            spaces["proprio"] = gym.spaces.Box(-np.inf, np.inf, (PROPRIO_DIM,), np.float32)
        return gym.spaces.Dict(spaces)

    # --- contract -----------------------------------------------------------------------------------
    def step(self, actions, env_indices=None, get_obs=True, render=True):
        self._check_open()
        idx = check_env_indices(env_indices, self.num_envs)
        actions = check_actions(actions, len(idx), ACTION_DIM)
        prof = get_profiler()
        with prof.section(ACTION_APPLY):
            clipped = actions.astype(np.float32)  # cast, then clip: the same as the other way round
            self._apply_actions(idx, np.minimum(np.maximum(clipped, -1.0, out=clipped), 1.0, out=clipped))
        with prof.section(PHYSICS):
            mujoco.mj_step(self.model, self.data, nstep=self._substeps)
        with prof.section(REWARD):
            rewards, success, goals, terms = task.goal_and_reward(self.data, self.index, idx)
        with prof.section(TERMINATION):
            episode_step = self._episode_step[idx] + 1
            self._episode_step[idx] = episode_step
            terminated = success
            truncated = episode_step >= self.config.horizon
        if render:
            self._render(idx)
        obs = self._read_obs(idx) if get_obs else [None] * len(idx)
        infos = [
            {"episode_step": n, "success": ok, "predicates": goal, "reward_terms": row}
            for n, ok, goal, row in zip(episode_step.tolist(), success.tolist(), goals, terms)
        ]
        return obs, rewards, terminated, truncated, infos

    def reset(self, env_indices=None, get_obs=True):
        self._check_open()
        idx = check_env_indices(env_indices, self.num_envs)
        self._set_initial_state(idx)
        obs = self.observe(idx) if get_obs else [None] * len(idx)
        infos = [{"episode": int(self._reset_count[e]) - 1, "episode_step": 0} for e in idx]
        return obs, infos

    def observe(self, env_indices=None, render=True):
        self._check_open()
        idx = check_env_indices(env_indices, self.num_envs)
        if render:
            self._render(idx)
        return self._read_obs(idx)

    @property
    def sim_time(self) -> float:
        """Simulated seconds since construction (``MjData.time``), shared by all envs."""
        return float(self.data.time)

    def close(self) -> None:
        if not self._closed:
            self._rig.close()
            self._closed = True

    # --- introspection for tests, expert and benchmarks -------------------------------------------
    @property
    def render_count(self) -> int:
        """Camera frames rendered since construction (discarded viewport frames not included)."""
        return self._rig.render_count

    @property
    def viewport_count(self) -> int:
        """Discarded viewport frames rendered since construction (stock ``viewport_render_targets``)."""
        return self._rig.viewport_count

    @property
    def last_actions(self) -> np.ndarray:
        """The clipped action each env holds [E, ACTION_DIM] (a copy)."""
        return self._last_action.copy()

    def predicates(self, env_indices=None) -> task.Predicates:
        """Predicate values of the current state (no stepping)."""
        idx = check_env_indices(env_indices, self.num_envs)
        return task.evaluate_predicates(self.data, self.index, idx)[0]

    def set_object_pose(self, env: int, obj: int, pos_env_frame, quat=(1.0, 0.0, 0.0, 0.0)) -> None:
        """Place object ``obj`` of ``env`` at rest (position in the env frame, m; quaternion wxyz), then
        recompute the derived state (``mj_forward``): constructs states for predicate checks."""
        self._check_open()
        env = int(check_env_indices([env], self.num_envs)[0])
        n = self.config.num_objects
        obj = check_int("obj", obj, 0, n - 1)
        pos = np.asarray(pos_env_frame, dtype=np.float64)
        if pos.shape != (3,) or not np.all(np.isfinite(pos)):
            raise ValueError(f"pos_env_frame must be 3 finite numbers, got {pos_env_frame!r}")
        adr, dof = self.index.obj_qpos[env, obj], self.index.obj_dof[env, obj]
        self.data.qpos[adr : adr + 3] = pos + (self.index.origin_x[env], 0.0, 0.0)
        self.data.qpos[adr + 3 : adr + 7] = quat
        self.data.qvel[dof : dof + 6] = 0.0
        mujoco.mj_forward(self.model, self.data)

    # --- internals ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ReferenceVectorEnv is closed")

    def _apply_actions(self, idx: np.ndarray, actions: np.ndarray) -> None:
        n = len(idx)
        self._last_action[idx] = actions
        ctrl = np.empty((n, scene.CTRL_PER_ENV))
        # Base: the x, y command turned from the robot frame into world axes; the yaw rate as is (Python floats:
        # a few envs per call).
        yaw = self.data.qpos[self._yaw_qpos[idx]]
        ctrl[:, :3] = [(c * x - s * y, s * x + c * y, rate) for c, s, (x, y, rate)
                       in zip(np.cos(yaw).tolist(), np.sin(yaw).tolist(), (actions[:, :3] * _BASE_SPEED).tolist())]
        # Arms: each action mapped onto its joint range; both fingers of a gripper follow its one target.
        arm_ctrl = ctrl[:, 3:].reshape(n, len(scene.ARMS), 5)  # a view of ctrl
        np.add(_ARM_LOW, (actions[:, 3:].reshape(n, len(scene.ARMS), 4) + 1.0) * 0.5 * _ARM_SPAN,
               out=arm_ctrl[..., :4])
        arm_ctrl[..., 4] = arm_ctrl[..., 3]
        self.data.ctrl[self._ctrl_cols[idx]] = ctrl

    def _set_initial_state(self, idx: np.ndarray) -> None:
        """Episode start of the selected envs: robot at home, objects on random table cells (at rest, or
        settled by physics with ``config.reset_settle_steps``)."""
        d, ix = self.data, self.index
        for e in idx:
            rng = np.random.default_rng([self.seed, int(e), int(self._reset_count[e])])
            d.qpos[ix.base_qpos[e]] = rng.uniform([-0.05, -0.05, -0.1], [0.05, 0.05, 0.1])
            d.qpos[ix.arm_qpos[e]] = _ARM_HOME_QPOS
            cells = self._cells[rng.choice(len(self._cells), self.config.num_objects, replace=False)]
            xy = cells + rng.uniform(-0.01, 0.01, cells.shape)
            yaw = rng.uniform(-np.pi, np.pi, len(cells))
            for j, adr in enumerate(ix.obj_qpos[e]):
                d.qpos[adr : adr + 3] = (xy[j, 0] + ix.origin_x[e], xy[j, 1], scene.TABLE_TOP + self._obj_half_z[j])
                d.qpos[adr + 3 : adr + 7] = (np.cos(yaw[j] / 2), 0.0, 0.0, np.sin(yaw[j] / 2))
            d.qvel[self._env_dofs[e]] = 0.0
            d.qacc_warmstart[self._env_dofs[e]] = 0.0
            self._reset_count[e] += 1
        self._episode_step[idx] = 0
        self._apply_actions(idx, np.tile(_HOME_ACTION, (len(idx), 1)))
        if self._settle is not None:
            for e in idx:
                self._settle_objects(int(e))
        mujoco.mj_forward(self.model, self.data)

    def _settle_objects(self, e: int) -> None:
        """Drop env ``e``'s placed objects from ``SETTLE_DROP`` above their poses and let them fall into place:
        ``reset_settle_steps`` physics steps of the one-env settle scene, with the robot in env ``e``'s pose
        holding its actuator targets; the objects' settled poses and velocities are copied back."""
        model, data, six = self._settle
        d, ix = self.data, self.index
        obj_q = ix.obj_qpos[e][:, None] + np.arange(7)  # free joints: position, then quaternion
        settle_q = six.obj_qpos[0][:, None] + np.arange(7)
        mujoco.mj_resetData(model, data)
        data.qpos[six.base_qpos[0]] = d.qpos[ix.base_qpos[e]]
        data.qpos[six.arm_qpos[0]] = d.qpos[ix.arm_qpos[e]]
        data.ctrl[six.ctrl_start[0] + np.arange(scene.CTRL_PER_ENV)] = d.ctrl[self._ctrl_cols[e]]
        placed = d.qpos[obj_q]
        placed[:, 0] -= ix.origin_x[e]
        placed[:, 2] += SETTLE_DROP
        data.qpos[settle_q] = placed
        with get_profiler().section(PHYSICS, settle=True):
            mujoco.mj_step(model, data, nstep=self.config.reset_settle_steps)
        settled = data.qpos[settle_q]
        settled[:, 0] += ix.origin_x[e]
        d.qpos[obj_q] = settled
        d.qvel[ix.obj_dof[e][:, None] + np.arange(6)] = data.qvel[six.obj_dof[0][:, None] + np.arange(6)]
        self.settle_steps += self.config.reset_settle_steps

    def _render(self, idx: np.ndarray) -> None:
        if not self.vision_modalities:
            return
        with get_profiler().section(RENDER):
            self._rig.render(self.data, idx)

    def _read_obs(self, idx: np.ndarray) -> list[dict[str, np.ndarray]]:
        with get_profiler().section(OBS_READ):
            frames = self._rig.frames
            proprio = proprioception(self.data, self.index, idx) if self.proprio else None
            out = []
            for row, e in enumerate(idx):
                obs = {
                    f"{cam}::{m}": frames[m][e, c].copy()
                    for c, cam in enumerate(self.config.cameras)
                    for m in self.vision_modalities
                }
                if proprio is not None:
                    obs["proprio"] = proprio[row]
                out.append(obs)
            return out


@dataclasses.dataclass(frozen=True)
class ReferenceFactory:
    """Picklable ``BackendFactory``: builds a ``ReferenceVectorEnv`` inside a (spawned) worker process."""

    config: ReferenceConfig = dataclasses.field(default_factory=ReferenceConfig)

    def __call__(self, num_envs: int, seed: int, profile: RolloutProfile | None) -> ReferenceVectorEnv:
        return ReferenceVectorEnv(num_envs, seed=seed, profile=profile, config=self.config)

    def check(self, num_envs: int, seed: int, profile: RolloutProfile) -> None:
        """Raise what building with these arguments would (seed, modalities, stage count), building nothing."""
        check_positive_int("num_envs", num_envs)
        check_int("seed", seed, 0)
        resolve_modalities(profile.obs_modalities)
        rescale_for_stages(self.config.frequencies, profile.stages_sharing_physics, profile.physics_rescale)
