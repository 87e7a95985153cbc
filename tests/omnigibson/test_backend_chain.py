"""The launch and stepping chains end to end on the render/physics-backend line, and the renders a chunk costs on
every line, at the seam where Kit renders.

Launch (backend line): ``_launch_simulator()`` -> ``_launch_app()`` (7423c692) -> ``PhysXBackend.create_app()``
(bdc01a23, from the PhysX-only registry of 5f47267b) -> ``launch_kit_app()`` (9fa68a72) -> ``SimulationApp``,
every hand-off upstream's own code; the stand-ins are Kit's ``SimulationApp`` (records the command line, then
stops the run) and the Isaac Sim install folders (``test_runtime.kit_start_argv``).

Stepping: the line's real ``Simulator.step()`` / ``render()`` / ``render_on_step()`` over a recording
``SimulationContext`` (``simulator_seam``): on the backend line through ``PhysXBackend.step(render=...)`` and
``PhysXBackend.render()`` of bdc01a23. No set of the backend line or of the Isaac Sim 6.0 work (2af465a2) holds
``envs/env_base.py``, and bdc01a23 no ``simulator.py``: the env is main's multi-scene ``Environment``
(006d10e5) on those lines, the backend simulator 7423c692's, as ``tests/upstream_lines.py`` composes them.
1.1.1's and v3.7's ``Simulator`` subclasses Isaac Sim's ``SimulationContext`` and cannot be built without it:
there the renders are counted at ``og.sim`` (its ``step()`` with the render flag, and ``render()``)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackend
from behavior1k_fast.patching import APPLIED, SKIPPED, PatchRegistry
from behavior1k_fast.patching.omnigibson import PATCHES
from behavior1k_fast.rollout.chunk import run_chunk

from ..upstream_lines import activate_line
from .conftest import build_multi_seam, multi_scene_environment_class, record
from .simulator_seam import recording_simulator
from .test_new_lines import KIT_BACKEND, LAUNCH_PATCHES, profile
from .test_runtime import kit_start_argv

#: Steps per chunk; 30/30/120 Hz: 4 physics steps per unrendered step.
CHUNK = 4
PHYSICS_PER_STEP = 4
#: Lines whose ``Simulator`` composes a ``SimulationContext`` (renders counted there).
COMPOSING_LINES = ("main", "backend", "isaac6")


@pytest.fixture
def patch_set(tmp_path):
    """``apply(**knobs) -> report``: the fast profile on a fresh registry, reverted after the test."""
    registry = PatchRegistry(PATCHES)
    yield lambda **knobs: registry.apply(profile(tmp_path, **knobs))
    registry.revert()


def test_launch_runs_from_the_simulator_through_physx_create_app_to_launch_kit_app_with_every_launch_patch(
        og, monkeypatch, tmp_path, patch_set):
    """The whole chain, from ``_launch_simulator()`` to the ``Simulator`` constructor's first Isaac Sim call, with
    every launch patch installed on ``launch_kit_app`` (none on ``_launch_app``, which only hands off): the thread
    caps, descriptor sets, headless render settings and renderer GPU are on the command line Kit reads, the viewer
    camera is off when Kit starts headless, GC is back on and the texture budget set once Kit has started, the app
    reaches ``og.app``, and ``sys.argv`` is the caller's after. Kit, Isaac Sim and carb are one recording
    stand-in (``unittest.mock``: every call recorded, in order); upstream's own code runs between the calls."""
    from unittest import mock

    from behavior1k_fast.patching.omnigibson.runtime import TEXTURE_BUDGET_SETTING

    from .simulator_seam import SimulatorInitStarted, isaac_sim_unavailable

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    activate_line("backend", monkeypatch)
    from omnigibson import simulator
    from omnigibson.macros import gm

    physx = sys.modules["omnigibson.physics_backends.physx_backend"]
    kit = sys.modules[KIT_BACKEND]
    assert simulator.PHYSICS_BACKENDS == {"physx": physx.PhysXBackend}  # 5f47267b's registry: the real class
    monkeypatch.setitem(gm, "HEADLESS", True)
    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", True)
    report = patch_set()
    for name in LAUNCH_PATCHES:
        assert report[name].state == APPLIED and report[name].targets == (f"{KIT_BACKEND}.launch_kit_app",), name
    argv0 = report["kit_launch_argv"]
    assert argv0.state == SKIPPED and "already keeps sys.argv[0]" in argv0.reason
    kit_start_argv(kit, monkeypatch, tmp_path, "launch_kit_app")  # Isaac Sim's folders, the kit-file copy, logs
    kit_apis = mock.MagicMock(name="kit")
    seen: dict = {}

    def simulation_app(config, experience=None):  # Kit starts: reads sys.argv, disables Python's GC
        seen.update(argv=list(sys.argv), viewer_camera=gm["RENDER_VIEWER_CAMERA"], config=config)
        gc.disable()
        return kit_apis.app

    kit_apis.isaacsim.SimulationApp.side_effect = simulation_app
    calls: list = []
    argv = list(sys.argv)
    try:
        with monkeypatch.context() as mp:  # recorders at each hand-off, each calling what upstream calls
            for name in ("isaacsim", "omni", "carb"):
                mp.setattr(sys.modules["omnigibson.lazy"], name, getattr(kit_apis, name), raising=False)
            mp.setattr(kit, "signal", kit_apis.signal)  # upstream re-installs its SIGINT handler
            backend_utils = sys.modules["omnigibson.utils.backend_utils"]
            mp.setattr(backend_utils, "_compute_backend", kit_apis.compute_backend)
            for name in ("_ComputeNumpyBackend", "_ComputeTorchBackend"):
                mp.setattr(backend_utils, name, name, raising=False)
            mp.setattr(physx, "lazy", isaac_sim_unavailable())  # Simulator.__init__'s first Isaac Sim call stops
            mp.setattr(og, "app", None)
            mp.setattr(og, "sim", None)
            mp.setattr(simulator, "ensure_omnigibson_robot_assets_version", lambda: None)
            mp.setattr(simulator, "_launch_app", record(calls, "_launch_app", simulator._launch_app))
            create_app = physx.PhysXBackend.__dict__["create_app"].__func__
            mp.setattr(physx.PhysXBackend, "create_app",
                       classmethod(record(calls, "PhysXBackend.create_app", create_app, lambda cls: cls.__name__)))
            recorder = record(calls, "launch_kit_app", kit.launch_kit_app)
            recorder.__wrapped__ = kit.launch_kit_app  # the launch patches read the source of what they wrap
            mp.setattr(kit, "launch_kit_app", recorder)
            with pytest.raises(SimulatorInitStarted):
                simulator._launch_simulator()
            app = og.app
            gc_enabled = gc.isenabled()
    finally:
        gc.enable()
    assert calls == [("_launch_app", None), ("PhysXBackend.create_app", "PhysXBackend"), ("launch_kit_app", None)]
    assert seen["argv"][-14:] == [
        "--/plugins/carb.tasking.plugin/threadCount=8", "--/plugins/omni.tbb.globalcontrol/maxThreadCount=4",
        "--/persistent/physics/numThreads=4",
        "--/rtx/descriptorSets=36000",
        "--/omni/replicator/asyncRendering=false", "--/app/renderer/waitIdle=true",
        "--/app/hydraEngine/waitIdle=true", "--/app/updateOrder/checkForHydraRenderComplete=1000",
        "--/exts/omni.replicator.core/Orchestrator/enabled=false", "--/exts/omni.renderer.core/present/enabled=false",
        "--/renderer/activeGpu=3", "--/renderer/multiGpu/enabled=false", "--/renderer/multiGpu/activeCudaGpus=0",
        "--/physics/cudaDevice=0",
    ]
    assert "--portable-root" in seen["argv"] and seen["config"]["headless"] is True and sys.argv == argv
    assert seen["viewer_camera"] is False and app is kit_apis.app and gc_enabled
    names = [name for name, *_ in kit_apis.mock_calls]
    budget = mock.call.carb.settings.get_settings().set_float(TEXTURE_BUDGET_SETTING, 0.2)
    assert budget in kit_apis.mock_calls
    assert names.index("isaacsim.SimulationApp") < kit_apis.mock_calls.index(budget)  # after Kit started
    assert names.index("isaacsim.SimulationApp") < names.index("isaacsim.core.utils.stage.close_stage")
    kit_apis.signal.signal.assert_called_once()  # upstream's launch ran to its end


@pytest.mark.parametrize("line_name", COMPOSING_LINES)
def test_simulator_step_hands_the_render_flag_to_simulation_context(og, monkeypatch, line_name):
    """``step()`` renders once (one rendered update of ``rendering_dt``) or steps physics only
    (``rendering_dt / physics_dt`` updates) as ``render_on_step`` says, then runs the non-physics step;
    ``render()`` renders. On the backend line each call passes through ``PhysXBackend`` (bdc01a23)."""
    activate_line(line_name, monkeypatch)
    log: list = []
    sim, context = recording_simulator(og, monkeypatch, log)
    sim.step()
    assert log == [("step", True), ("non_physics_step", None)]
    log.clear()
    with sim.render_on_step(False):
        sim.step()
    assert log == [("step", False)] * PHYSICS_PER_STEP + [("non_physics_step", None)]
    assert sim._render_on_step is True and context.current_time == pytest.approx(2 / 30)
    log.clear()
    sim.render()
    assert log == [("render", None)]
    if line_name == "backend":
        physx = sys.modules["omnigibson.physics_backends.physx_backend"]
        assert type(sim.physics_backend) is physx.PhysXBackend and sim.physics_backend._sim_context is context


def chunk_actions(num_envs: int, steps: int = CHUNK) -> np.ndarray:
    return np.stack([np.full((steps, 2), 0.1 * (i + 1)) for i in range(num_envs)])


@pytest.mark.parametrize("line_name", COMPOSING_LINES)
@pytest.mark.parametrize("skip", [True, False], ids=["fast", "stock"])
def test_a_chunk_renders_once_at_its_boundary_and_steps_physics_and_the_task_every_step(og, monkeypatch, line_name,
                                                                                       patch_set, skip):
    """main's multi-scene ``Environment`` over the line's real ``Simulator``: on the fast path (``render=False``
    inside the chunk) Kit renders exactly once per chunk, at its last step, where the observation is read;
    physics, the non-physics step and the task run every step. The stock path renders every step."""
    activate_line(line_name, monkeypatch)
    patch_set()
    log: list = []
    sim, context = recording_simulator(og, monkeypatch, log)
    h = build_multi_seam(multi_scene_environment_class(og), sim, num_envs=2)
    backend = OmniGibsonBackend(h.env)
    h.log.clear()
    log.clear()
    obs, result = run_chunk(backend, chunk_actions(2), np.arange(2), skip_intermediate_obs=skip, auto_reset=False)
    renders = 1 if skip else CHUNK
    assert context.renders == renders
    assert context.steps(False) == (CHUNK - renders) * PHYSICS_PER_STEP
    assert log.count(("non_physics_step", None)) == CHUNK and len(h.events("task.step")) == CHUNK
    assert h.events("sim.step") == [not skip] * (CHUNK - 1) + [True]
    assert result.rewards.tolist() == [[1.0] * CHUNK, [2.0] * CHUNK]
    assert sorted(h.events("sensor.read")) == sorted([0, 1] * (1 if skip else CHUNK))
    assert [o["robot0::robot0:eyes:Camera:0::rgb"][0, 0, 0] for o in obs] == [0.0, 1.0]


@pytest.mark.parametrize("line_name", ["1.1.1", "v3.7"])
def test_a_chunk_renders_once_at_og_sim_on_the_single_scene_lines(og, monkeypatch, line_name, patch_set):
    """1.1.1 and v3.7 (``VectorEnvironment`` of single-scene ``Environment``\\ s, og.sim seam): one rendered
    ``og.sim.step()`` per chunk and no ``og.sim.render()``; the task steps every step."""
    from .conftest import Harness, _seam_action, install_seam, instrument

    line = activate_line(line_name, monkeypatch)
    patch_set()
    sim, env_cls = install_seam(og, line, monkeypatch)
    from omnigibson.envs.vec_env_base import VectorEnvironment

    env_cls.terminate_at = {}
    h = Harness(VectorEnvironment(2, {"env": {}}), sim, action=_seam_action)
    instrument(h)
    h.log.clear()
    run_chunk(OmniGibsonBackend(h.venv), chunk_actions(2), np.arange(2), auto_reset=False)
    renders = [render for render, _ in h.events("sim.step")] + [True for _ in h.events("sim.render")]
    assert renders == [False] * (CHUNK - 1) + [True]
    assert len(h.events("task.step")) == 2 * CHUNK


# --- the Isaac Sim 6.0 / backend VisionSensor's stale-observation retry after a skipped-render chunk -----------
class RecordingCapture:
    """Stand-in for the kit render backend's capture (Replicator annotators behind ``og.sim.render_backend``):
    an annotator's data is the rgb frame rendered ``lag`` frames before the last one (0: synchronous
    rendering; 1: a frame offset, as with asynchronous rendering), each pixel the frame's simulated time; the
    first ``stale_reads`` reads come back in the wrong shape, as right after a render product is rebuilt."""

    supports_camera_capture = True

    def __init__(self, context, size: int, lag: int = 0, stale_reads: int = 0) -> None:
        self.context, self.size, self.lag, self.stale_reads = context, size, lag, stale_reads
        self.reads = 0

    def get_modality_data(self, annotator, device=None):
        self.reads += 1
        if self.reads <= self.stale_reads:
            return np.zeros((0, 0, 4), dtype=np.uint8)
        frames = self.context.frames
        shown = frames[max(len(frames) - 1 - self.lag, 0)]
        return np.full((self.size, self.size, 4), shown, dtype=np.float32)


@pytest.fixture
def backend_camera(og, monkeypatch):
    """``(sim, context, make_sensor)``: the backend line's real ``Simulator`` over a recording ``SimulationContext``
    and a factory of its real ``VisionSensor`` (9fa68a72) for rgb, made without its constructor (which loads a
    camera prim), reading through :class:`RecordingCapture`."""
    import types

    activate_line("backend", monkeypatch)
    from omnigibson.sensors.vision_sensor import VisionSensor

    physx = sys.modules["omnigibson.physics_backends.physx_backend"]
    monkeypatch.setattr(physx, "lazy", types.SimpleNamespace(isaacsim=types.SimpleNamespace(core=types.SimpleNamespace(
        simulation_manager=types.SimpleNamespace(SimulationManager=types.SimpleNamespace(
            get_physics_sim_device=lambda: "cpu"))))))  # Isaac Sim's physics device: og.sim.device
    log: list = []
    sim, context = recording_simulator(og, monkeypatch, log)

    def make_sensor(**capture) -> VisionSensor:
        sensor = object.__new__(VisionSensor)
        sensor.__dict__.update(_initialized=True, _modalities={"rgb"}, _annotators={"rgb": "rgb annotator"},
                               _viewport=None, _image_height=4, _image_width=4,
                               _semantic_labels_version=VisionSensor._SEMANTIC_LABELS_VERSION)
        sim.__dict__["_render_backend"] = RecordingCapture(context, 4, **capture)
        return sensor

    return sim, context, make_sensor


def skipped_render_chunk(sim) -> None:
    """A chunk on the fast path: ``render=False`` inside, the boundary step rendered."""
    for _ in range(CHUNK - 1):
        with sim.render_on_step(False):
            sim.step()
    sim.step()


def test_the_stale_observation_retry_adds_no_render_after_a_skipped_render_chunk(backend_camera):
    """``_fetch_and_preprocess_modality`` re-renders while the data looks stale by its shape (or an empty
    ``idToLabels``), never by its age: after a chunk whose only render is its boundary step, reading the
    camera renders nothing more and returns that boundary frame."""
    sim, context, make_sensor = backend_camera
    sensor = make_sensor()
    sim.step()  # the frame before the chunk
    skipped_render_chunk(sim)
    renders = context.renders
    obs, _ = sensor._get_obs()
    assert context.renders == renders == 2
    assert float(obs["rgb"][0, 0, 0]) == pytest.approx(context.current_time) == pytest.approx(context.frames[-1])


def test_the_retry_re_renders_only_while_the_shape_is_wrong(backend_camera):
    sim, context, make_sensor = backend_camera
    sensor = make_sensor(stale_reads=2)  # as right after _recreate_render_product
    skipped_render_chunk(sim)
    renders = context.renders
    obs, _ = sensor._get_obs()
    assert context.renders == renders + 2 and tuple(obs["rgb"].shape) == (4, 4, 4)


def test_a_frame_offset_is_not_caught_by_the_retry(backend_camera):
    """With a one-frame offset (asynchronous rendering) the boundary read returns the frame rendered before the
    chunk, in the right shape: the retry does not see it. What keeps the boundary frame current is synchronous
    rendering (``headless_render_settings``) and what catches an offset is ``validate``'s frame check."""
    sim, context, make_sensor = backend_camera
    sensor = make_sensor(lag=1)
    sim.step()
    before_chunk = context.current_time
    skipped_render_chunk(sim)
    renders = context.renders
    obs, _ = sensor._get_obs()
    assert context.renders == renders
    assert float(obs["rgb"][0, 0, 0]) == pytest.approx(before_chunk)
    assert context.current_time - before_chunk == pytest.approx(CHUNK / 30)  # the policy would see a chunk ago
