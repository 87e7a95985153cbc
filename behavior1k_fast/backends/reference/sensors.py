"""Cameras and proprioception: what each env observes, rendered with one ``mujoco.Renderer`` per process.

Per camera, the active vision modalities decide the render passes: ``rgb`` one colour pass; ``depth``,
``depth_linear`` and ``normal`` share one depth pass; ``seg_semantic`` and ``seg_instance`` share one
segmentation pass. The annotator work (depth along the ray, normals, id remapping) runs at render time,
so an observation read only copies finished frames, as on OmniGibson.

Image conventions: ``rgb`` uint8 [H, W, 3]; ``depth`` float32 [H, W], metres from the camera centre
(OmniGibson ``distance_to_camera``); ``depth_linear`` float32 [H, W], metres to the image plane
(``distance_to_image_plane``); ``normal`` float32 [H, W, 3], unit world-frame surface normals from the
depth image (zero where nothing is rendered); ``seg_semantic`` / ``seg_instance`` int32 [H, W], ids from
``scene.SEMANTIC_CLASSES`` / the scene's instance ids (0 where nothing is rendered).
"""

from __future__ import annotations

import os

import mujoco
import numpy as np

from .scene import ARMS, ENV_GROUPS, SceneIndex, render_group

#: Pass that produces each vision modality.
PASS_OF_MODALITY = {
    "rgb": "rgb",
    "depth": "depth",
    "depth_linear": "depth",
    "normal": "depth",
    "seg_semantic": "seg",
    "seg_instance": "seg",
}
#: Length of the proprioception vector (layout in ``proprioception``).
PROPRIO_DIM = 2 + 2 + 3 + 6 + 6 + 2 + 6


def image_spec(modality: str, height: int, width: int) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one frame of ``modality``."""
    if modality == "rgb":
        return (height, width, 3), np.dtype(np.uint8)
    if modality == "normal":
        return (height, width, 3), np.dtype(np.float32)
    if modality in ("depth", "depth_linear"):
        return (height, width), np.dtype(np.float32)
    return (height, width), np.dtype(np.int32)


class CameraRig:
    """Renders the cameras of selected envs into per-modality frame buffers ``frames[modality][env, cam]``.

    ``viewport_targets``: also render one extra RGB frame per camera and discard it (the Isaac Sim
    viewport that stock OmniGibson attaches to every camera). ``render_count`` counts camera renders
    (viewport frames excluded), ``viewport_count`` the discarded viewport frames.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        index: SceneIndex,
        cameras: tuple[str, ...],
        modalities: tuple[str, ...],
        resolution: tuple[int, int],
        viewport_targets: bool,
    ) -> None:
        self._model = model
        self._index = index
        self.cameras = cameras
        self.viewport_targets = viewport_targets
        self.height, self.width = resolution
        self._passes = {PASS_OF_MODALITY[m] for m in modalities}
        self.frames = {}
        for m in modalities:
            shape, dtype = image_spec(m, *resolution)
            self.frames[m] = np.zeros((index.num_envs, len(cameras)) + shape, dtype)
        self._renderer: mujoco.Renderer | None = None
        self._gl_pid: int | None = None
        self._depth = np.empty(resolution, np.float32)
        self._seg = np.empty(resolution + (2,), np.int32)
        self._viewport = np.empty(resolution + (3,), np.uint8)
        # Per camera: pixel ray directions in the MuJoCo camera frame (x right, y up, looking down -z) at
        # unit image-plane distance, and their lengths.
        self._rays = []
        for c in range(len(cameras)):
            fovy = float(model.cam_fovy[index.camera[0, c]])
            f = 0.5 * self.height / np.tan(np.deg2rad(fovy) / 2)
            u = (np.arange(self.width) + 0.5 - self.width / 2) / f
            v = (np.arange(self.height) + 0.5 - self.height / 2) / f
            ray = np.stack(np.broadcast_arrays(u[None, :], -v[:, None], -np.ones((self.height, 1))), axis=-1)
            self._rays.append((ray.astype(np.float32), np.linalg.norm(ray, axis=-1).astype(np.float32)))
        # One visibility option per env geom group: that group only.
        self._options = {}
        for g in ENV_GROUPS:
            opt = mujoco.MjvOption()
            opt.geomgroup[:] = [1 if k == g else 0 for k in range(len(opt.geomgroup))]
            self._options[g] = opt
        self.render_count = 0
        self.viewport_count = 0

    def _get_renderer(self) -> mujoco.Renderer:
        pid = os.getpid()
        if self._renderer is None:
            try:
                renderer = mujoco.Renderer(self._model, self.height, self.width)
            except Exception as exc:  # the GL backend is chosen at mujoco import from MUJOCO_GL
                raise RuntimeError(
                    f"cannot create a MuJoCo offscreen renderer with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: "
                    f"{exc}. Set MUJOCO_GL=egl (Mesa or NVIDIA EGL) or MUJOCO_GL=osmesa before mujoco is first "
                    "imported (importing behavior1k_fast.reference first defaults it to egl)."
                ) from exc
            flags = renderer.scene.flags
            for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION,
                         mujoco.mjtRndFlag.mjRND_SKYBOX, mujoco.mjtRndFlag.mjRND_FOG):
                flags[flag] = False
            self._renderer, self._gl_pid = renderer, pid
        elif pid != self._gl_pid:
            raise RuntimeError(
                f"this env's GL context was created in process {self._gl_pid} and cannot be used in process "
                f"{pid}: never fork after rendering; build envs in spawned workers (ReferenceFactory)"
            )
        return self._renderer

    def render(self, data: mujoco.MjData, envs: np.ndarray) -> None:
        """Render every camera of ``envs`` with the passes the active modalities need."""
        renderer = self._get_renderer()
        frames = self.frames
        for e in envs:
            for c in range(len(self.cameras)):
                renderer.update_scene(data, int(self._index.camera[e, c]), self._options[render_group(int(e))])
                if "rgb" in self._passes:
                    renderer.render(out=frames["rgb"][e, c])
                if self.viewport_targets:
                    renderer.render(out=self._viewport)
                    self.viewport_count += 1
                if "depth" in self._passes:
                    renderer.enable_depth_rendering()
                    renderer.render(out=self._depth)
                    renderer.disable_depth_rendering()
                    self._store_depth(data, e, c)
                if "seg" in self._passes:
                    renderer.enable_segmentation_rendering()
                    renderer.render(out=self._seg)
                    renderer.disable_segmentation_rendering()
                    self._store_seg(e, c)
                self.render_count += 1

    def _store_depth(self, data: mujoco.MjData, e: int, c: int) -> None:
        z = self._depth
        ray, ray_len = self._rays[c]
        if "depth_linear" in self.frames:
            self.frames["depth_linear"][e, c] = z
        if "depth" in self.frames:
            np.multiply(z, ray_len, out=self.frames["depth"][e, c])
        if "normal" in self.frames:
            points = ray * z[..., None]
            du = np.gradient(points, axis=1)
            dv = np.gradient(points, axis=0)
            n = np.cross(dv, du)
            norm = np.linalg.norm(n, axis=-1, keepdims=True)
            far = z >= 0.999 * self._model.vis.map.zfar * self._model.stat.extent
            n = np.divide(n, norm, out=np.zeros_like(n), where=(norm > 0) & ~far[..., None])
            rot = data.cam_xmat[self._index.camera[e, c]].reshape(3, 3)
            np.clip(n @ rot.T.astype(np.float32), -1.0, 1.0, out=self.frames["normal"][e, c])

    def _store_seg(self, e: int, c: int) -> None:
        geom = np.where(self._seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), self._seg[..., 0], -1)
        if "seg_semantic" in self.frames:
            self.frames["seg_semantic"][e, c] = self._index.semantic_of_geom[geom + 1]
        if "seg_instance" in self.frames:
            self.frames["seg_instance"][e, c] = self._index.instance_of_geom[geom + 1]

    def close(self) -> None:
        if self._renderer is not None and os.getpid() == self._gl_pid:
            self._renderer.close()
        self._renderer = None


def proprioception(data: mujoco.MjData, index: SceneIndex, envs: np.ndarray) -> np.ndarray:
    """float32 [e, PROPRIO_DIM]: base x, y (env frame); sin, cos yaw; base velocity (x, y, yaw; world axes);
    per arm lift, extension, wrist yaw positions then velocities; per arm gripper opening (sum of the
    fingers); per arm grip point relative to the base (env axes)."""
    base = data.qpos[index.base_qpos[envs]]
    base_vel = data.qvel[index.base_dof[envs]]
    arm_q = data.qpos[index.arm_qpos[envs]]
    arm_v = data.qvel[index.arm_dof[envs]]
    grips = data.site_xpos[index.grip_site[envs]]
    base_world = np.stack([base[:, 0] + index.origin_x[envs], base[:, 1], np.zeros(len(envs))], axis=-1)
    rel = grips - base_world[:, None]
    e = len(envs)
    return np.concatenate(
        [
            base[:, :2],
            np.sin(base[:, 2:3]),
            np.cos(base[:, 2:3]),
            base_vel,
            arm_q[:, :, :3].reshape(e, -1),
            arm_v[:, :, :3].reshape(e, -1),
            arm_q[:, :, 3:5].sum(axis=-1).reshape(e, len(ARMS)),
            rel.reshape(e, -1),
        ],
        axis=1,
    ).astype(np.float32)
