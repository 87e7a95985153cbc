"""The contract checks of the seam tests, against a real BEHAVIOR-1K install on Isaac Sim (RTX GPU).

Skipped when Isaac Sim is absent (and the tiled-rendering check where the install is not main). Run with
``python3 -m pytest -m isaacsim tests/omnigibson``; the OmniGibson assets (``gm.ASSET_PATH``) must be
downloaded. After applying the fast profile, builds headless empty scenes with a Turtlebot each (rgb +
proprio) in the installed layout: on 1.1.1 / v3.7 one ``VectorEnvironment`` of two (checked by ``Checks``),
on main one multi-scene ``Environment`` of three with tiled rendering on (``gm.ENABLE_TILED_RENDERING``;
checked by ``MultiSceneChecks``).
"""

from __future__ import annotations

import os
import types

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
def real(tmp_path_factory, recording):
    """The installed layout's harness over real, patched envs: ``.harness``, ``.registry``, ``.checks`` (the
    layout's contract checks) and ``.multi_scene``; reverted and shut down at the end of the module."""
    require_isaac_sim()
    os.environ.setdefault("OMNIGIBSON_HEADLESS", "1")
    from behavior1k_fast.patching.omnigibson import PATCHES
    from behavior1k_fast.patching.omnigibson.cpu_import import import_omnigibson
    from behavior1k_fast.patching.omnigibson.layout import is_multi_scene
    from behavior1k_fast.patching import PatchRegistry
    from behavior1k_fast.core.profile import RolloutProfile

    registry = PatchRegistry(PATCHES)
    registry.apply(RolloutProfile(numba_cache_dir=str(tmp_path_factory.mktemp("numba"))))
    og = import_omnigibson()
    multi_scene = is_multi_scene(og.Environment)
    if multi_scene:
        from omnigibson.macros import gm

        gm.ENABLE_TILED_RENDERING = True  # read when the env loads
        env = og.Environment(configs={**CONFIG, "env": {**CONFIG["env"], "num_envs": 3, "flatten_action_space": True}})
        assert env._tiled_sensor is not None
        dim = int(np.prod(env.action_space.shape))
        harness = recording.MultiSceneHarness(env, og.sim, action=lambda i: np.zeros(dim, dtype=np.float32))
        recording.instrument_multi_scene(harness)
    else:
        from omnigibson.envs.vec_env_base import VectorEnvironment

        venv = VectorEnvironment(2, CONFIG)
        dims = [int(np.prod(env.action_space.shape)) for env in venv.envs]  # 1.1.1 flattens to (1, n)
        harness = recording.Harness(venv, og.sim, action=lambda i: np.zeros(dims[i], dtype=np.float32))
        recording.instrument(harness)
    checks = recording.MultiSceneChecks if multi_scene else recording.Checks
    yield types.SimpleNamespace(harness=harness, registry=registry, checks=checks, multi_scene=multi_scene)
    registry.revert()
    og.shutdown()


def robots(real) -> list:
    if real.multi_scene:
        return [robot for scene in real.harness.env.scenes for robot in scene.robots]
    return [robot for env in real.harness.venv.envs for robot in env.robots]


def test_cameras_have_no_viewport(real, recording):
    from omnigibson.sensors.vision_sensor import VisionSensor

    cameras = [s for r in robots(real) for s in r.sensors.values() if isinstance(s, VisionSensor)]
    assert cameras
    for camera in cameras:
        if real.multi_scene:  # main's own #2117 (headless_viewport skips there)
            assert camera._viewport is None
        else:
            recording.Checks.headless_camera_has_no_viewport(camera)


def test_render_false_is_physics_only(real):
    real.checks.render_false_steps_physics_only(real.harness)


def test_get_obs_false_reads_no_sensor(real):
    real.checks.no_obs_reads_no_sensor_but_steps_task(real.harness)


def test_env_indices_steps_only_selected(real):
    real.checks.env_indices_steps_only_selected(real.harness, selected=1)


def test_reset_resets_only_selected(real):
    real.checks.reset_resets_only_selected(real.harness, selected=1)


def test_tiled_subset_equals_rows_of_full(real):
    if not real.multi_scene:
        pytest.skip("tiled rendering is main's multi-scene Environment's; the install is 1.1.1 / v3.7")
    real.checks.tiled_subset_equals_rows_of_full(real.harness, selected=(0, 2))


def test_simulated_time_per_step_is_sim_step_dt(real):
    h = real.harness
    t0 = h.sim.current_time
    if real.multi_scene:
        h.env.step(h.rows([1]), env_indices=[1], render=False, get_obs=False)
    else:
        h.venv.step(h.actions([0, 1]), render=False)
    assert h.sim.current_time - t0 == pytest.approx(1 / 30)


def test_a_chunk_on_the_fast_path_renders_once(real, monkeypatch):
    """One chunk of 4 steps through the backend's chunk runner: Kit renders once, at the boundary step, where the
    observation is read; the camera read itself renders nothing more (on a ``VisionSensor`` with the
    stale-observation retry it would, where the boundary frame came back in the wrong shape). Counted at the
    simulator's ``SimulationContext`` where it composes one (main, the backend line, Isaac 6), else at
    ``og.sim`` (1.1.1, v3.7, whose simulator is a ``SimulationContext``)."""
    from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackend
    from behavior1k_fast.rollout.chunk import run_chunk

    h = real.harness
    env = h.env if real.multi_scene else h.venv
    context = getattr(h.sim, "_sim_context", None)
    if context is None and getattr(h.sim, "physics_backend", None) is not None:
        context = getattr(h.sim.physics_backend, "_sim_context", None)
    renders: list = []
    if context is not None:
        step, render = context.step, context.render

        def recorded_step(render=True, **kwargs):
            renders.append(render)
            return step(render=render, **kwargs)

        def recorded_render():
            renders.append(True)
            return render()

        monkeypatch.setattr(context, "step", recorded_step, raising=False)
        monkeypatch.setattr(context, "render", recorded_render, raising=False)
    backend = OmniGibsonBackend(env)
    actions = np.zeros((backend.num_envs, 4, int(np.prod(backend.action_space.shape))))
    h.log.clear()
    run_chunk(backend, actions, np.arange(backend.num_envs), auto_reset=False)
    if context is None:
        renders = [detail if not isinstance(detail, tuple) else detail[0] for detail in h.events("sim.step")]
        renders += [True for _ in h.events("sim.render")]
    assert renders.count(True) == 1 and renders[-1] is True


def test_revert_restores_upstream(real):
    real.registry.revert()
    real.checks.reverted_to_upstream(real.harness)
