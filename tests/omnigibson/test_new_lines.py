"""The runtime patch set on the two upstream lines that move today's targets: the render/physics-backend
refactor (``backend``) and the Isaac Sim 6.0 work (``isaac6``), each line's real texts at the ``og.sim`` seam.

Which files each line is made of: ``LINE_SETS`` in ``tests/upstream_lines.py`` and this folder's README (the
sets hold a few files each; everything else is main's). On ``backend`` Kit is launched by the kit render
backend's ``launch_kit_app()`` (``simulator._launch_app`` only hands off to ``PhysicsBackend.create_app()``):
every launch patch must bind there, never on ``_launch_app``. Every runtime patch has one expected outcome per
line (:data:`OUTCOMES`): "installed on <target>" or a skip with its reason ("not applicable on this layout:
..." where the target is gone), the table ``doctor --upstream`` prints for the line."""

from __future__ import annotations

import gc
import inspect
import sys

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.patching import APPLIED, SKIPPED, PatchRegistry
from behavior1k_fast.patching.omnigibson import PATCHES
from behavior1k_fast.patching.omnigibson.layout import NOT_APPLICABLE, is_render_backend_layout, kit_launcher
from behavior1k_fast.patching.omnigibson.runtime import headless_render_args

from ..upstream_lines import activate_line
from .test_runtime import kit_start_argv

NEW_LINES = ("backend", "isaac6")
KIT_BACKEND = "omnigibson.render_backends.kit_backend"
#: Where each line builds the Kit app.
LAUNCHER = {"backend": f"{KIT_BACKEND}.launch_kit_app", "isaac6": "omnigibson.simulator._launch_app"}
#: Patches that work around the Kit app launch.
LAUNCH_PATCHES = ("viewer_camera_off", "kit_thread_caps", "rtx_descriptor_sets", "kit_headless_render_settings",
                  "kit_renderer_gpu", "gc_after_launch", "texture_streaming_budget")


def _outcomes(line: str) -> dict[str, tuple]:
    """Patch -> (state, reason substring) for :func:`profile` on ``line``, in a process that runs OmniGibson:
    what ``doctor --upstream`` reports for that line (``upstream_check.RUNTIME_ON_LINE``)."""
    from behavior1k_fast.tools.upstream_check import RUNTIME_ON_LINE

    return RUNTIME_ON_LINE[line]


def profile(tmp_path, **knobs) -> RolloutProfile:
    """The fast profile with every runtime patch asked for (GPU binding, texture budget, render quality, the
    headless render settings)."""
    return RolloutProfile(**{"numba_cache_dir": str(tmp_path / "numba"), "gpu_ids": [0],
                             "texture_streaming_budget": 0.2, "rtx_reflections": False,
                             "headless_render_settings": True, **knobs})


@pytest.fixture(params=NEW_LINES)
def line(request, og, monkeypatch):
    """This module's lines (over conftest's: ``registry`` and the seams take it), with a process bound to GPU 3."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    return activate_line(request.param, monkeypatch)


def test_line_is_detected_by_its_launch_layout(line):
    from omnigibson import simulator

    assert simulator is line.module("omnigibson.simulator")
    assert is_render_backend_layout(simulator) is (line.name == "backend")
    assert kit_launcher(simulator).qualname == LAUNCHER[line.name]
    if line.name == "backend":  # _launch_app only hands off; launch_kit_app builds the app
        assert "SimulationApp(" not in inspect.getsource(simulator._launch_app)
        assert "SimulationApp(" in inspect.getsource(sys.modules[KIT_BACKEND].launch_kit_app)


def test_every_runtime_patch_is_installed_on_its_target_or_says_why_not(line, registry, tmp_path):
    report = registry.apply(profile(tmp_path))
    expected = _outcomes(line.name)
    assert sorted(expected) == sorted(p.name for p in PATCHES)  # every runtime patch has its expected outcome
    for name, (state, reason) in expected.items():
        outcome = report[name]
        assert outcome.state == state and reason in outcome.reason, f"{name} on {line.name}: {outcome}"
        print(f"{line.name:<8} {name:<29} {outcome.reason}")


def test_no_patch_is_installed_on_a_method_the_line_no_longer_calls(line, registry, tmp_path):
    """On the backend line ``_launch_app`` stays upstream's (it builds no app), ``launch_kit_app`` is wrapped."""
    from omnigibson import simulator

    launch_app = simulator.__dict__["_launch_app"]
    kit = sys.modules.get(KIT_BACKEND)
    launch_kit_app = kit.__dict__["launch_kit_app"] if kit is not None else None
    report = registry.apply(profile(tmp_path))
    bound = {target for name in LAUNCH_PATCHES for target in report[name].targets}
    assert bound == {LAUNCHER[line.name]}
    if line.name == "backend":
        assert simulator.__dict__["_launch_app"] is launch_app
        assert kit.__dict__["launch_kit_app"] is not launch_kit_app
    else:
        assert simulator.__dict__["_launch_app"] is not launch_app
    registry.revert()
    assert simulator.__dict__["_launch_app"] is launch_app
    if kit is not None:
        assert kit.__dict__["launch_kit_app"] is launch_kit_app


def test_kit_gets_the_launch_settings_from_the_lines_own_launch_function(line, registry, monkeypatch,
                                                                       tmp_path):
    """The line's real launch function, run up to the Kit start: the thread caps, descriptor sets and renderer
    GPU are on the command line Kit reads (after upstream's own arguments), and ``sys.argv`` is the caller's after."""
    from omnigibson import simulator

    launcher = kit_launcher(simulator)
    kit_launch = kit_start_argv(launcher.module, monkeypatch, tmp_path, launcher.function)
    argv = list(sys.argv)
    stock = kit_launch()
    assert sys.argv == argv and "--portable-root" in stock  # upstream's own arguments
    registry.apply(profile(tmp_path, carb_tasking_threads=6))
    patched = kit_launch()
    assert patched[:len(stock)] == stock and sys.argv == argv
    assert patched[len(stock):] == [  # hooks nest: the first patch's arguments first
        "--/plugins/carb.tasking.plugin/threadCount=6", "--/plugins/omni.tbb.globalcontrol/maxThreadCount=4",
        "--/persistent/physics/numThreads=4",
        "--/rtx/descriptorSets=36000",
        *headless_render_args(False),
        "--/renderer/activeGpu=3", "--/renderer/multiGpu/enabled=false", "--/renderer/multiGpu/activeCudaGpus=0",
        "--/physics/cudaDevice=0",
    ]
    registry.revert()
    assert kit_launch() == stock


def test_after_launch_knobs_and_the_viewer_camera_follow_the_launch_function(line, registry, monkeypatch,
                                                                           tmp_path):
    """GC and the texture budget right after the line's launch function returns; the viewer camera is off when
    the app starts headless (the macro upstream reads during the launch and when it builds the simulator)."""
    import types

    from omnigibson import simulator
    from omnigibson.macros import gm

    from behavior1k_fast.patching.omnigibson.runtime import TEXTURE_BUDGET_SETTING

    launcher = kit_launcher(simulator)
    values: dict = {}
    settings = types.SimpleNamespace(get=values.get, set_float=values.__setitem__)
    monkeypatch.setattr(launcher.module, "lazy", types.SimpleNamespace(
        carb=types.SimpleNamespace(settings=types.SimpleNamespace(get_settings=lambda: settings))))
    seen: dict = {}

    def start():  # the Kit start: disables GC, as Kit does
        seen["viewer_camera"] = gm["RENDER_VIEWER_CAMERA"]
        gc.disable()
        return "app"

    monkeypatch.setattr(launcher.module, launcher.function, start)
    monkeypatch.setitem(gm, "HEADLESS", True)
    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", True)
    try:  # the Kit-argument patches off: the stand-in start builds no SimulationApp to put them on
        registry.apply(profile(tmp_path, gpu_ids=None, carb_tasking_threads=None, tbb_max_threads=None,
                                   physx_worker_threads=None, rtx_descriptor_sets=None,
                                   headless_render_settings=False))
        assert getattr(launcher.module, launcher.function)() == "app"
        assert gc.isenabled() and values[TEXTURE_BUDGET_SETTING] == 0.2 and seen["viewer_camera"] is False
        registry.revert()
        assert gm["RENDER_VIEWER_CAMERA"] is True
    finally:
        gc.enable()


@pytest.mark.parametrize("backends, not_applicable", [
    (("physx", "none"), ("viewer_camera_off", "rtx_descriptor_sets", "kit_headless_render_settings",
                         "texture_streaming_budget", "render_quality")),
    (("newton", "none"), LAUNCH_PATCHES + ("render_quality",)),
])
def test_backend_choices_that_launch_no_kit_or_render_without_rtx_are_not_applicable(og, monkeypatch, tmp_path,
                                                                                    backends, not_applicable):
    """``gm.PHYSICS_BACKEND`` / ``gm.RENDER_BACKEND``: with no Kit app (newton physics, no kit renderer) no launch
    patch binds; with PhysX but no kit renderer the RTX ones do not. Each says so; the others still install."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    activate_line("backend", monkeypatch)
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "PHYSICS_BACKEND", backends[0])
    monkeypatch.setitem(gm, "RENDER_BACKEND", backends[1])
    registry = PatchRegistry(PATCHES)
    try:
        report = registry.apply(profile(tmp_path))
        for name in LAUNCH_PATCHES + ("render_quality",):
            outcome = report[name]
            if name in not_applicable:
                assert outcome.state == SKIPPED and outcome.reason.startswith(f"{NOT_APPLICABLE}: "), outcome
                assert repr(backends[1]) in outcome.reason
            else:
                assert outcome.state == APPLIED and outcome.reason == f"installed on {LAUNCHER['backend']}", outcome
    finally:
        registry.revert()


def test_a_pre_2117_vision_sensor_on_the_backend_layout_is_not_patched(og, monkeypatch, tmp_path):
    """1.1.1's ``VisionSensor`` (it builds a viewport per camera) under the backend line's simulator: the viewport
    patch would build a Replicator render product itself, past ``og.sim.render_backend``: not applicable."""
    pypi = sys.modules["omnigibson.sensors.vision_sensor"]  # 1.1.1's, before the line is active
    activate_line("backend", monkeypatch)
    assert "HEADLESS" not in inspect.getsource(pypi.VisionSensor._post_load)
    monkeypatch.setitem(sys.modules, "omnigibson.sensors.vision_sensor", pypi)
    registry = PatchRegistry(PATCHES)
    try:
        outcome = registry.apply(profile(tmp_path))["headless_viewport"]
    finally:
        registry.revert()
    assert outcome.state == SKIPPED and outcome.reason.startswith(f"{NOT_APPLICABLE}: cameras capture through "
                                                                  "og.sim.render_backend"), outcome


def test_the_lines_simulator_keeps_what_the_stepping_patches_rely_on(line):
    """The seam's ``og.sim`` stands in for these: ``render_on_step(value)`` sets and restores ``_render_on_step``,
    and ``step()`` reads it (on the backend line it hands it to ``PhysicsBackend.step(render=...)``)."""
    from omnigibson import simulator

    text = inspect.getsource(simulator._launch_simulator)
    assert "def render_on_step(self, value):" in text and "render = self._render_on_step" in text
    if line.name == "backend":
        assert "self._physics_backend.step(render=True)" in text
        base = line.module("omnigibson.physics_backends.base").PhysicsBackend
        assert list(inspect.signature(base.step).parameters) == ["self", "render"]


def test_env_indices_and_on_demand_observation_step_only_the_selected_envs(registry, multi_seam, multi_checks,
                                                                         tmp_path):
    """``Environment.step`` (main's text on both lines) with the stepping patches, at the ``og.sim`` seam."""
    report = registry.apply(profile(tmp_path))
    assert report["multi_scene_step"].state == report["env_step_obs"].state == APPLIED
    h = multi_seam(num_envs=3)
    multi_checks.render_false_steps_physics_only(h)
    h.log.clear()
    obs, *_ = h.env.step(h.rows([0, 2]), env_indices=[0, 2])
    assert sorted(h.events("apply")) == [0, 2] and len(obs) == 2
    multi_checks.observed(h, [0, 2])


def test_readmes_patch_table_says_what_each_patch_does_on_the_line(line):
    """README's backend and Isaac 6 columns, in its words, match the outcomes (a patch the fast profile leaves off
    until a knob asks for it is "on request")."""
    from .test_doctor import ALREADY, APPLIED_CELL, NOT_NEEDED, OFF_BY_DEFAULT, ON_REQUEST, readme_table

    table = readme_table()
    for name, (state, reason) in _outcomes(line.name).items():
        if state == APPLIED:
            word = ON_REQUEST if name in OFF_BY_DEFAULT else APPLIED_CELL
        else:
            word = ALREADY if "already" in reason else NOT_NEEDED
        assert table[name][line.name] == word, name
