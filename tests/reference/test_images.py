"""Rendered images are real: plausible depth, segmentation ids that match the objects in view, varied RGB."""

import numpy as np
import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, scene

from .conftest import make_env

H, W = 96, 128


@pytest.fixture(scope="module")
def seen():
    env = make_env(1, seed=2, profile=RolloutProfile.stock(), config=ReferenceConfig(resolution=(H, W)))
    return env, env.observe()[0]


def project(env, cam, point_world):
    """(row, col) of a world point in camera ``cam`` of env 0, or None when behind the camera."""
    cid = env.index.camera[0, env.config.cameras.index(cam)]
    rot = env.data.cam_xmat[cid].reshape(3, 3)
    x, y, z = rot.T @ (point_world - env.data.cam_xpos[cid])
    if z >= 0:
        return None
    f = 0.5 * H / np.tan(np.deg2rad(env.model.cam_fovy[cid]) / 2)
    return int(H / 2 - f * y / -z), int(W / 2 + f * x / -z)


def test_rgb_is_not_constant(seen):
    _, obs = seen
    for cam in ("head", "left_wrist", "right_wrist"):
        rgb = obs[f"{cam}::rgb"]
        assert rgb.std() > 10, cam
        assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 5, cam  # several surfaces, not one colour


def test_depth_is_plausible(seen):
    _, obs = seen
    depth, linear = obs["head::depth"], obs["head::depth_linear"]
    # The head camera is 1.6 m up inside a 5 m room: nothing nearer than the arms, nothing beyond a corner.
    assert 0.2 < linear.min() and depth.max() < 2 * scene.ROOM_HALF * np.sqrt(2) + 1
    assert np.all(depth >= linear - 1e-5)  # the ray is never shorter than its image-plane depth
    centre = (H // 2, W // 2)
    assert depth[centre] == pytest.approx(linear[centre], rel=0.01)  # they agree on the optical axis


def test_segmentation_ids_match_the_objects_in_view(seen):
    env, obs = seen
    inst, sem = obs["head::seg_instance"], obs["head::seg_semantic"]
    hits = total = 0
    for j in range(env.config.num_objects):
        g = env.index.obj_geom[0, j]
        top = env.data.geom_xpos[g] + [0, 0, env.model.geom_aabb[g, 5] - 0.005]
        px = project(env, "head", top)
        if px is None or not (0 <= px[0] < H and 0 <= px[1] < W):
            continue
        total += 1
        if inst[px] == scene.FIRST_OBJECT_INSTANCE + j:
            hits += 1
            category = scene.CATEGORIES[scene.object_category(j)][0]
            assert scene.SEMANTIC_CLASSES[sem[px]] == category
    assert total >= 10 and hits >= 0.7 * total, (hits, total)
    present = set(np.unique(inst).tolist())
    assert {scene.INSTANCE_ROOM, scene.INSTANCE_TABLE, scene.INSTANCE_ROBOT} <= present
    assert set(np.unique(sem).tolist()) >= {scene.SEMANTIC_CLASSES.index(c) for c in ("floor", "wall", "table")}


def test_table_normals_point_up(seen):
    _, obs = seen
    table = obs["head::seg_semantic"] == scene.SEMANTIC_CLASSES.index("table")
    normals = obs["head::normal"][table]
    assert len(normals) > 100
    assert np.median(normals[:, 2]) > 0.95
    assert np.allclose(np.linalg.norm(obs["head::normal"][table], axis=-1), 1, atol=1e-3)
