"""VisionSensor patches (headless viewport, viewer camera) on the real ``VisionSensor`` of every upstream line.

The real ``VisionSensor`` methods run; Isaac Sim is replaced where it is reached: ``og.lazy.omni`` /
``og.lazy.pxr`` (Replicator render products, annotators, viewport windows), the app ``render()`` (the
sensor module's own before #2117, ``og.sim.render()`` on main) and the USD prim parent
(``BaseSensor._post_load``, ``remove``, ``set_attribute``). main has #2117 upstream: ``headless_viewport`` is
skipped there, and those tests assert the skip and its reason."""

from __future__ import annotations

import contextlib
import inspect
import sys
import types

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.patching import APPLIED, SKIPPED, PatchRegistry


class Recorder:
    def __init__(self) -> None:
        self.log: list = []

    def __call__(self, name, result=None):
        def fn(*args, **kwargs):
            self.log.append((name, args, kwargs))
            return result() if callable(result) else result

        return fn

    def names(self) -> list:
        return [name for name, *_ in self.log]


class Product:
    def __init__(self, rec, path) -> None:
        self.rec, self.path = rec, path

    def destroy(self):
        self.rec.log.append(("render_product.destroy", (self.path,), {}))


class Annotator:
    def __init__(self, rec, name) -> None:
        self.rec, self.name = rec, name

    def attach(self, products):
        self.rec.log.append(("annotator.attach", (self.name,), {}))

    def detach(self, products):
        self.rec.log.append(("annotator.detach", (self.name,), {}))

    def get_data(self, device=None):
        return {"cameraFocalLength": 17.0}


@pytest.fixture
def isaac(line, monkeypatch):
    """Stand-ins for what this line's VisionSensor reaches in Isaac Sim; returns the recorder."""
    import omnigibson as og
    from omnigibson.sensors import sensor_base, vision_sensor

    rec = Recorder()
    products = iter(range(100))

    def new_viewport():
        return types.SimpleNamespace(
            name="Viewport 1",
            visible=True,
            destroy=rec("viewport.destroy"),
            viewport_api=types.SimpleNamespace(
                set_active_camera=rec("viewport.set_active_camera"),
                set_texture_resolution=rec("viewport.set_texture_resolution"),
                get_texture_resolution=lambda: (128, 96),
            ),
        )

    omni = types.SimpleNamespace(
        replicator=types.SimpleNamespace(
            core=types.SimpleNamespace(
                create=types.SimpleNamespace(
                    render_product=rec("render_product", lambda: Product(rec, f"/Render/RenderProduct_{next(products)}"))
                ),
                AnnotatorRegistry=types.SimpleNamespace(
                    get_annotator=lambda name: (rec.log.append(("get_annotator", (name,), {})), Annotator(rec, name))[1]
                ),
            )
        ),
        kit=types.SimpleNamespace(
            viewport=types.SimpleNamespace(utility=types.SimpleNamespace(create_viewport_window=rec("create_viewport", new_viewport)))
        ),
    )
    lazy = sys.modules["omnigibson.lazy"]
    monkeypatch.setattr(lazy, "omni", omni, raising=False)
    monkeypatch.setattr(lazy, "pxr", types.SimpleNamespace(Gf=types.SimpleNamespace(Vec2f=lambda *v: v)), raising=False)
    monkeypatch.setattr(vision_sensor, "render", rec("app.render"), raising=False)  # main renders through og.sim
    sim = types.SimpleNamespace(render=rec("app.render"), editing_usd=contextlib.nullcontext)
    monkeypatch.setattr(og, "sim", sim, raising=False)
    monkeypatch.setattr(sensor_base.BaseSensor, "_post_load", rec("BaseSensor._post_load"))
    monkeypatch.setattr(sensor_base.BaseSensor, "remove", rec("BaseSensor.remove"))
    monkeypatch.setattr(vision_sensor.VisionSensor, "SENSORS", {})
    return rec


@pytest.fixture
def headless(line, monkeypatch):
    from omnigibson.macros import gm

    def set_headless(value: bool):
        monkeypatch.setitem(gm, "HEADLESS", value)

    set_headless(True)
    return set_headless


CAMERA_PATH = "/World/robot0/eyes/Camera"


def make_camera(rec, width=128, height=96, viewport_name=None, modalities=("rgb",)):
    """A real VisionSensor of the active line (the subclass pins prim path, name, visibility) as its
    ``__init__`` and ``_initialize`` leave it, without running them: the load config holds the line's
    ``__init__`` defaults, the annotator table is attached."""
    from omnigibson.sensors.vision_sensor import VisionSensor

    class Camera(VisionSensor):
        prim_path = CAMERA_PATH
        name = "robot0:eyes:Camera:0"
        visible = True  # USD visibility toggle (prim state) as a plain attribute

    camera = Camera.__new__(Camera)
    defaults = {
        name: p.default for name, p in inspect.signature(VisionSensor.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    camera._load_config = {
        **{key: defaults[key] for key in ("focal_length", "focus_distance", "fstop", "horizontal_aperture", "clipping_range") if key in defaults},
        "image_width": width, "image_height": height, "viewport_name": viewport_name,
    }
    camera._viewport = None
    camera._render_product = None
    camera._modalities = set(modalities)
    camera._annotators = {m: Annotator(rec, m) for m in modalities}
    camera._RAW_SENSOR_TYPES = {
        "rgb": "rgb", "depth": "distance_to_camera", "depth_linear": "distance_to_image_plane",
        "camera_params": "camera_params",
    }
    camera.set_attribute = rec("prim.set_attribute")
    return camera


def test_headless_post_load_creates_no_viewport_and_caches_resolution(patched, isaac, headless, checks):
    if not patched("headless_viewport"):
        return
    camera = make_camera(isaac)
    camera._post_load()
    assert "create_viewport" not in isaac.names()
    assert isaac.log[0][0] == "BaseSensor._post_load"
    (_, args, _), = [e for e in isaac.log if e[0] == "render_product"]
    assert args == (CAMERA_PATH, (128, 96))
    checks.headless_camera_has_no_viewport(camera)
    assert camera.SENSORS[camera.prim_path] is camera and camera.image_width == 128
    set_attrs = [(e[1] or (e[2]["attr"],))[0] for e in isaac.log if e[0] == "prim.set_attribute"]
    lens = {"focalLength", "clippingRange"} | ({"focusDistance", "fStop", "horizontalAperture"} if "fstop" in camera._load_config else set())
    assert set(set_attrs) == lens
    camera.viewer_visibility = False  # no-op without a viewport
    with pytest.raises(RuntimeError, match="has no viewport.*active_camera_path"):
        camera.active_camera_path = "/World/other"
    with pytest.raises(RuntimeError, match="has no viewport"):
        camera.viewer_visibility = True


def test_headless_resize_runs_upstream_rebuild_without_viewport(patched, isaac, headless):
    if not patched("headless_viewport"):
        return
    camera = make_camera(isaac, modalities=("rgb", "depth"))
    camera._post_load()
    first = camera._render_product
    isaac.log.clear()
    camera.image_height = 64
    assert ("render_product.destroy", (first.path,), {}) in isaac.log and camera._render_product is not first
    assert [e[2] for e in isaac.log if e[0] == "render_product"] == [{"force_new": True}]
    assert [e[1] for e in isaac.log if e[0] == "render_product"] == [(CAMERA_PATH, (128, 64))]
    assert sorted(e[1][0] for e in isaac.log if e[0] == "annotator.attach") == ["depth", "rgb"]
    assert (camera.image_width, camera.image_height) == (128, 64) and camera._viewport is None
    assert not any(name.startswith("viewport.") for name in isaac.names())
    with pytest.raises(ValueError, match="image_width must be an int >= 1, got 0"):
        camera.image_width = 0


def _teardown(isaac, headless, headless_run: bool, action) -> tuple[list, object]:
    """Events of ``action(camera)`` on a loaded camera, the viewport's own events left out, with the camera
    and its render product named by role (the two runs build different ones)."""
    headless(headless_run)
    camera = make_camera(isaac, modalities=("rgb", "depth"))
    camera._post_load()
    product = camera._render_product.path
    isaac.log.clear()
    action(camera)
    roles = {id(camera): "<camera>"}

    def role(value):
        return "<render product>" if value == product else roles.get(id(value), value)

    events = [(name, tuple(role(a) for a in args), kwargs) for name, args, kwargs in isaac.log]
    return [e for e in events if not e[0].startswith("viewport.")], camera


@pytest.mark.parametrize("action", ["remove", "clear"])
def test_headless_teardown_is_upstreams_without_the_viewport(action, patched, isaac, headless):
    """``remove()`` / ``VisionSensor.clear()`` of a sensor without a viewport do everything upstream's do for a
    sensor with one (v3.7: detach every annotator, destroy the render product; clear removes every sensor),
    except destroying a viewport."""
    if not patched("headless_viewport"):
        return
    run = (lambda camera: camera.remove()) if action == "remove" else (lambda camera: type(camera).clear())
    with_viewport, shown = _teardown(isaac, headless, False, run)
    assert shown._viewport is not None and ("viewport.destroy", (), {}) in isaac.log
    without_viewport, camera = _teardown(isaac, headless, True, run)
    assert without_viewport == with_viewport
    assert camera._viewport is None and camera.prim_path not in camera.SENSORS
    assert not any(name.startswith("viewport.") for name in isaac.names())


def test_headless_teardown_on_v3_7_detaches_annotators_and_destroys_render_product(line, patched, isaac, headless):
    """v3.7's ``remove()`` tears down modalities and the render product; 1.1.1's leaves both to the stage."""
    if not patched("headless_viewport"):
        return
    for run in (lambda camera: camera.remove(), lambda camera: type(camera).clear()):
        events, _ = _teardown(isaac, headless, True, run)
        names = [name for name, *_ in events]
        torn_down = sorted(args[0] for name, args, _ in events if name == "annotator.detach")
        if line.name == "v3.7":
            assert torn_down == ["depth", "rgb"] and names.count("render_product.destroy") == 1
        else:
            assert torn_down == [] and "render_product.destroy" not in names
        assert "BaseSensor.remove" in names or line.is_pypi  # 1.1.1's clear() does not call remove()


def test_viewport_still_created_when_not_headless_or_named(patched, isaac, headless):
    patched("headless_viewport")  # main: upstream's own #2117 code decides
    headless(False)
    camera = make_camera(isaac)
    camera._post_load()
    assert isaac.names().count("create_viewport") == 1 and camera._viewport is not None
    assert camera.image_width == 128


def test_revert_restores_upstream_viewport_and_identity(patched, registry, isaac, headless):
    from omnigibson.sensors.vision_sensor import VisionSensor

    names = ("_post_load", "image_height", "image_width", "viewer_visibility", "active_camera_path", "remove", "clear")
    originals = {n: VisionSensor.__dict__[n] for n in names}
    if not patched("headless_viewport"):
        assert all(VisionSensor.__dict__[n] is originals[n] for n in names)
        return
    assert all(VisionSensor.__dict__[n] is not originals[n] for n in names)
    registry.revert()
    assert all(VisionSensor.__dict__[n] is originals[n] for n in names)
    camera = make_camera(isaac)
    camera._post_load()
    assert isaac.names().count("create_viewport") == 1  # upstream: a viewport even when headless


def test_stock_profile_leaves_vision_sensor_alone(registry, isaac):
    from omnigibson.sensors.vision_sensor import VisionSensor

    post_load = VisionSensor.__dict__["_post_load"]
    report = registry.apply(RolloutProfile.stock())
    assert report["headless_viewport"].state == "disabled"
    assert VisionSensor.__dict__["_post_load"] is post_load


def test_upstream_camera_parameters_attaches_its_annotator_once(line, isaac, headless):
    """Why there is no camera-parameters patch: on every line, upstream's ``camera_parameters`` attaches one
    ``camera_params`` annotator at the first read and finds its table entry afterwards, also after a resize
    (the table is rebuilt only by ``_initialize``, which runs once per sensor)."""
    headless(False)
    camera = make_camera(isaac)
    camera._post_load()
    for _ in range(3):
        assert camera.camera_parameters == {"cameraFocalLength": 17.0}
    camera.image_height = 64
    assert camera.camera_parameters == {"cameraFocalLength": 17.0}
    assert isaac.names().count("get_annotator") == 1


def test_audit_lists_every_attached_annotator(patched, isaac, headless):
    from behavior1k_fast.backends.omnigibson.config import AttachedAnnotator, audit_annotators

    patched("headless_viewport")
    camera = make_camera(isaac, modalities=("rgb", "depth_linear"))
    camera._post_load()
    camera.camera_parameters
    robot = types.SimpleNamespace(sensors={"eyes": camera, "scan": object()})
    env = types.SimpleNamespace(robots=[robot], external_sensors=None)
    found = audit_annotators(env)
    assert sorted(found, key=lambda a: a.modality) == [
        AttachedAnnotator(camera.name, "camera_params", "camera_params"),
        AttachedAnnotator(camera.name, "depth_linear", "distance_to_image_plane"),
        AttachedAnnotator(camera.name, "rgb", "rgb"),
    ]


def test_viewer_camera_is_off_for_headless_launch(line, fast_profile, monkeypatch, headless):
    """A user who turned the viewer camera on gets it off in headless launches (on every line)."""
    from behavior1k_fast.patching.omnigibson.viewport import ViewerCameraOffPatch
    from omnigibson import simulator
    from omnigibson.macros import gm

    seen = []
    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", True)
    monkeypatch.setattr(simulator, "_launch_app", lambda: seen.append(gm["RENDER_VIEWER_CAMERA"]) or "app")
    registry = PatchRegistry([ViewerCameraOffPatch()])
    assert registry.apply(fast_profile)["viewer_camera_off"].state == APPLIED
    assert simulator._launch_app() == "app" and seen == [False]
    registry.revert()
    assert gm["RENDER_VIEWER_CAMERA"] is True


def test_viewer_camera_patch_follows_the_lines_default(line, patched):
    """v3.7's macros default ``RENDER_VIEWER_CAMERA`` to False (skipped there); 1.1.1's and main's (its own
    macros.py, 00c69a80) to True, so the patch applies on both."""
    from omnigibson.macros import gm

    assert line.is_pypi or line.path_of("omnigibson.macros").exists()  # each line's own default
    assert gm["RENDER_VIEWER_CAMERA"] is (line.name != "v3.7")
    assert patched("viewer_camera_off") is (line.name != "v3.7")


def test_viewer_camera_patch_skip_leaves_launch_untouched(line, monkeypatch):
    from behavior1k_fast.patching.omnigibson.viewport import ViewerCameraOffPatch
    from omnigibson import simulator
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", False)
    assert "RENDER_VIEWER_CAMERA is False" in ViewerCameraOffPatch().skip_reason(simulator)
    launch_app = simulator.__dict__["_launch_app"]
    registry = PatchRegistry([ViewerCameraOffPatch()])
    assert registry.apply(RolloutProfile())["viewer_camera_off"].state == SKIPPED
    assert simulator.__dict__["_launch_app"] is launch_app
    registry.revert()


# --- tiled rendering keeps what it needs ----------------------------------------------------------------------
def _tiled_sensor_needs() -> tuple[set, set]:
    """From main's real ``sensors/tiled_sensor.py``: the ``lazy.<...>`` chains it calls into Kit (the tiled render
    product, annotators, the stage, Warp) and the members it reads on each ``VisionSensor``."""
    import ast

    from ..upstream_lines import missing_reason, package_folder

    if missing_reason("main"):
        pytest.skip(missing_reason("main"))
    tree = ast.parse((package_folder("main") / "sensors" / "tiled_sensor.py").read_text())
    chains, members = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "lazy":
                chains.add(".".join(reversed(parts)))
            if isinstance(inner, ast.Name) and inner.id == "sensor" and len(parts) == 1:
                members.add(node.attr)
    return chains, members


def test_no_patch_touches_the_viewport_extension_or_what_a_tiled_render_product_needs(line, registry, monkeypatch,
                                                                                      tmp_path):
    """Headless tiled render products need Kit's ``omni.kit.viewport.window`` extension (Isaac Lab PR #5375):
    no patch (every one asked for) binds in main's tiled sensor or on a Kit call it makes, no Kit launch argument
    touches an extension or viewport, and no patch module names that extension or disables any extension."""
    import pathlib

    import behavior1k_fast.patching as patching
    from behavior1k_fast.patching.omnigibson.gpu import kit_gpu_settings
    from behavior1k_fast.patching.omnigibson.runtime import launch_kit_args

    chains, members = _tiled_sensor_needs()
    assert "omni.replicator.core.create.render_product_tiled" in chains
    assert {"modalities", "image_width", "image_height", "prim_path"} <= members
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    profile = RolloutProfile(numba_cache_dir=str(tmp_path), gpu_ids=[0], texture_streaming_budget=0.2,
                             rtx_reflections=False)
    report = registry.apply(profile)
    targets = [t for o in report.outcomes if o.state == APPLIED for t in o.targets]
    assert targets and not any("tiled" in t or "viewport.window" in t or "render_product" in t for t in targets)
    assert not any(t.endswith(chain) for t in targets for chain in chains)
    args = launch_kit_args(profile) + [f"--{path}={value}" for path, value in kit_gpu_settings(0).items()]
    assert not any(word in arg for arg in args for word in ("viewport", "exts", "extension"))
    sources = [p.read_text() for p in pathlib.Path(patching.__file__).parent.rglob("*.py")]
    assert not any("omni.kit.viewport.window" in text or "disable_extension" in text for text in sources)


def test_a_patched_headless_camera_gives_the_tiled_sensor_what_it_reads(patched, isaac, headless):
    """Where ``headless_viewport`` applies (1.1.1, v3.7; main has #2117), a camera without a viewport still answers
    every member main's tiled sensor reads, and main's env_base's tiled-rendering set-up (viewer visibility off,
    the render product) works on it."""
    chains, members = _tiled_sensor_needs()
    if not patched("headless_viewport"):
        return
    camera = make_camera(isaac, width=64, height=48)
    camera._post_load()
    sizes = {"image_width", "image_height", "prim_path"}
    assert sizes <= members
    assert {member: getattr(camera, member) for member in sizes} == {"image_width": 64, "image_height": 48,
                                                                    "prim_path": CAMERA_PATH}
    assert camera._modalities == {"rgb"}
    camera.viewer_visibility = False  # env_base with gm.ENABLE_TILED_RENDERING
    assert camera._render_product is not None and camera._viewport is None
