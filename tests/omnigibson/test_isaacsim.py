"""The contract checks of the seam tests, against a real BEHAVIOR-1K install on Isaac Sim (RTX GPU).

Skipped when Isaac Sim is absent, and each layout's tests where the install has the other layout. Run with
``python3 -m pytest -m isaacsim tests/omnigibson``; the OmniGibson assets (``gm.ASSET_PATH``) must be
downloaded. After applying the fast profile, builds headless empty scenes with a Turtlebot each (rgb +
proprio): on 1.1.1 / v3.7 one ``VectorEnvironment`` of two, on main one multi-scene ``Environment`` of three
with tiled rendering on (``gm.ENABLE_TILED_RENDERING``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.isaacsim

CONFIG = {
    "env": {"action_frequency": 30, "rendering_frequency": 30, "physics_frequency": 120, "automatic_reset": False},
    "scene": {"type": "Scene"},
    "robots": [{"type": "Turtlebot", "obs_modalities": ["rgb", "proprio"]}],
    "task": {"type": "DummyTask"},
}


def require_isaac_sim() -> None:
    isaacsim = pytest.importorskip("isaacsim", reason="Isaac Sim is not installed")
    if not (hasattr(isaacsim, "SimulationApp") or "ISAAC_PATH" in os.environ):
        pytest.skip("the installed 'isaacsim' is not Isaac Sim (no SimulationApp, no ISAAC_PATH)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(og, registry)``: the installed BEHAVIOR-1K with the fast profile applied; reverted and shut down at
    the end of the module."""
    require_isaac_sim()
    os.environ.setdefault("OMNIGIBSON_HEADLESS", "1")
    from behavior1k_fast.patching.omnigibson import PATCHES
    from behavior1k_fast.patching.omnigibson.cpu_import import import_omnigibson
    from behavior1k_fast.patching import PatchRegistry
    from behavior1k_fast.core.profile import RolloutProfile

    registry = PatchRegistry(PATCHES)
    registry.apply(RolloutProfile(numba_cache_dir=str(tmp_path_factory.mktemp("numba"))))
    og = import_omnigibson()
    yield og, registry
    registry.revert()
    og.shutdown()


def installed_is_multi_scene(og) -> bool:
    from behavior1k_fast.patching.omnigibson.stepping import is_multi_scene

    return is_multi_scene(og.Environment)


@pytest.fixture(scope="module")
def real(installed, recording):
    """``(harness, registry)`` over a real, patched ``VectorEnvironment`` (1.1.1 / v3.7 install)."""
    og, registry = installed
    if installed_is_multi_scene(og):
        pytest.skip("the installed OmniGibson has main's multi-scene Environment: see the *_multi_scene tests")
    from omnigibson.envs.vec_env_base import VectorEnvironment

    venv = VectorEnvironment(2, CONFIG)
    dims = [int(np.prod(env.action_space.shape)) for env in venv.envs]  # 1.1.1 flattens to (1, n)
    harness = recording.Harness(venv, og.sim, action=lambda i: np.zeros(dims[i], dtype=np.float32))
    recording.instrument(harness)
    yield harness, registry


def test_cameras_have_no_viewport(real, checks):
    harness, _ = real
    from omnigibson.sensors.vision_sensor import VisionSensor

    cameras = [s for env in harness.venv.envs for r in env.robots for s in r.sensors.values()]
    cameras = [c for c in cameras if isinstance(c, VisionSensor)]
    assert cameras
    for camera in cameras:
        checks.headless_camera_has_no_viewport(camera)


def test_render_false_is_physics_only(real, checks):
    checks.render_false_steps_physics_only(real[0])


def test_get_obs_false_reads_no_sensor(real, checks):
    checks.no_obs_reads_no_sensor_but_steps_task(real[0])


def test_env_indices_steps_only_selected(real, checks):
    checks.env_indices_steps_only_selected(real[0], selected=1)


def test_reset_resets_only_selected(real, checks):
    checks.reset_resets_only_selected(real[0], selected=1)


def test_simulated_time_per_step_is_sim_step_dt(real):
    harness, _ = real
    t0 = harness.sim.current_time
    harness.venv.step(harness.actions([0, 1]), render=False)
    assert harness.sim.current_time - t0 == pytest.approx(1 / 30)


def test_revert_restores_upstream(real, checks):
    harness, registry = real
    registry.revert()
    checks.reverted_to_upstream(harness)


# --- main's multi-scene Environment ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_multi_scene(installed, recording):
    """``(harness, registry)`` over a real, patched multi-scene ``Environment`` of three scenes with tiled
    rendering on (main install)."""
    og, registry = installed
    if not installed_is_multi_scene(og):
        pytest.skip("the installed OmniGibson has the single-scene Environment (1.1.1 / v3.7): see the tests above")
    from omnigibson.macros import gm

    gm.ENABLE_TILED_RENDERING = True  # read when the env loads
    config = {**CONFIG, "env": {**CONFIG["env"], "num_envs": 3, "flatten_action_space": True}}
    env = og.Environment(configs=config)
    assert env._tiled_sensor is not None
    dim = int(np.prod(env.action_space.shape))
    harness = recording.MultiSceneHarness(env, og.sim, action=lambda i: np.zeros(dim, dtype=np.float32))
    recording.instrument_multi_scene(harness)
    yield harness, registry


def test_render_false_is_physics_only_multi_scene(real_multi_scene, multi_checks):
    multi_checks.render_false_steps_physics_only(real_multi_scene[0])


def test_get_obs_false_reads_no_tile_multi_scene(real_multi_scene, multi_checks):
    multi_checks.no_obs_reads_no_sensor_but_steps_task(real_multi_scene[0])


def test_env_indices_steps_only_selected_multi_scene(real_multi_scene, multi_checks):
    multi_checks.env_indices_steps_only_selected(real_multi_scene[0], selected=1)


def test_reset_resets_only_selected_multi_scene(real_multi_scene, multi_checks):
    multi_checks.reset_resets_only_selected(real_multi_scene[0], selected=1)


def test_tiled_subset_equals_rows_of_full_multi_scene(real_multi_scene, multi_checks):
    multi_checks.tiled_subset_equals_rows_of_full(real_multi_scene[0], selected=(0, 2))


def test_simulated_time_per_step_is_sim_step_dt_multi_scene(real_multi_scene):
    harness, _ = real_multi_scene
    t0 = harness.sim.current_time
    harness.env.step(harness.rows([1]), env_indices=[1], render=False, get_obs=False)
    assert harness.sim.current_time - t0 == pytest.approx(1 / 30)


def test_revert_restores_upstream_multi_scene(real_multi_scene, multi_checks):
    harness, registry = real_multi_scene
    registry.revert()
    multi_checks.reverted_to_upstream(harness)
