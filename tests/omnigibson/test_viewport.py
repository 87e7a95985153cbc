"""VisionSensor patches (headless viewport, camera parameters) on the real omnigibson 1.1.1 class.

The real ``VisionSensor`` methods run; Isaac Sim is replaced where it is reached: ``og.lazy.omni`` /
``og.lazy.pxr`` (Replicator render products, annotators, viewport windows), the module's app ``render()``
and the USD prim parent (``BaseSensor._post_load``, ``set_attribute``)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types

import pytest

from behavior1k_fast.patching import APPLIED, SKIPPED, PatchRegistry
from behavior1k_fast.core.profile import RolloutProfile


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
    def __init__(self, path) -> None:
        self.path = path
        self.destroyed = False

    def destroy(self):
        self.destroyed = True


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
def isaac(og, monkeypatch):
    """Stand-ins for what VisionSensor reaches in Isaac Sim; returns the recorder."""
    from omnigibson.sensors import sensor_base, vision_sensor

    rec = Recorder()
    products = iter(range(100))
    viewport = types.SimpleNamespace(
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
                    render_product=rec("render_product", lambda: Product(f"/Render/RenderProduct_{next(products)}"))
                ),
                AnnotatorRegistry=types.SimpleNamespace(
                    get_annotator=lambda name: (rec.log.append(("get_annotator", (name,), {})), Annotator(rec, name))[1]
                ),
            )
        ),
        kit=types.SimpleNamespace(
            viewport=types.SimpleNamespace(utility=types.SimpleNamespace(create_viewport_window=rec("create_viewport", viewport)))
        ),
    )
    lazy = sys.modules["omnigibson.lazy"]
    monkeypatch.setattr(lazy, "omni", omni, raising=False)
    monkeypatch.setattr(lazy, "pxr", types.SimpleNamespace(Gf=types.SimpleNamespace(Vec2f=lambda *v: v)), raising=False)
    monkeypatch.setattr(vision_sensor, "render", rec("app.render"))
    monkeypatch.setattr(sensor_base.BaseSensor, "_post_load", rec("BaseSensor._post_load"))
    monkeypatch.setattr(sensor_base.BaseSensor, "remove", rec("BaseSensor.remove"))
    monkeypatch.setattr(vision_sensor.VisionSensor, "SENSORS", {})
    return rec


@pytest.fixture
def headless(og, monkeypatch):
    from omnigibson.macros import gm

    def set_headless(value: bool):
        monkeypatch.setitem(gm, "HEADLESS", value)

    set_headless(True)
    return set_headless


def make_camera(og, rec, width=128, height=96, viewport_name=None, modalities=("rgb",)):
    """A real VisionSensor (the subclass pins prim path, name, visibility) past ``__init__``, before
    ``_post_load``."""
    from omnigibson.sensors.vision_sensor import VisionSensor

    class Camera(VisionSensor):
        prim_path = "/World/robot0/eyes/Camera"
        name = "robot0:eyes:Camera:0"
        visible = True  # USD visibility toggle (prim state) as a plain attribute

    camera = Camera.__new__(Camera)
    camera._load_config = dict(
        image_width=width, image_height=height, focal_length=17.0, clipping_range=(0.001, 100.0),
        viewport_name=viewport_name,
    )
    camera._viewport = None
    camera._render_product = None
    camera._annotators = {m: Annotator(rec, m) for m in modalities}
    camera._RAW_SENSOR_TYPES = {
        "rgb": "rgb", "depth": "distance_to_camera", "depth_linear": "distance_to_image_plane",
        "camera_params": "camera_params",
    }
    camera.set_attribute = rec("prim.set_attribute")
    return camera


def test_headless_post_load_creates_no_viewport_and_caches_resolution(
    registry, fast_profile, isaac, headless, og, checks
):
    assert registry.apply(fast_profile)["headless_viewport"].state == APPLIED
    camera = make_camera(og, isaac)
    camera._post_load()
    assert "create_viewport" not in isaac.names()
    assert isaac.log[0][0] == "BaseSensor._post_load"
    (_, args, _), = [e for e in isaac.log if e[0] == "render_product"]
    assert args == ("/World/robot0/eyes/Camera", (128, 96))
    checks.headless_camera_has_no_viewport(camera)
    assert camera.SENSORS[camera.prim_path] is camera and camera.image_width == 128
    set_attrs = [(e[1] or (e[2]["attr"],))[0] for e in isaac.log if e[0] == "prim.set_attribute"]
    assert set_attrs == ["focalLength", "clippingRange"]
    camera.viewer_visibility = False  # no-op without a viewport
    with pytest.raises(RuntimeError, match="has no viewport.*active_camera_path"):
        camera.active_camera_path = "/World/other"
    with pytest.raises(RuntimeError, match="has no viewport"):
        camera.viewer_visibility = True


def test_headless_resize_rebuilds_render_product_without_viewport(registry, fast_profile, isaac, headless, og):
    registry.apply(fast_profile)
    camera = make_camera(og, isaac, modalities=("rgb", "depth"))
    camera._post_load()
    first = camera._render_product
    isaac.log.clear()
    camera.image_height = 64
    assert first.destroyed and camera._render_product is not first
    assert [e[2] for e in isaac.log if e[0] == "render_product"] == [{"force_new": True}]
    assert [e[1] for e in isaac.log if e[0] == "render_product"] == [("/World/robot0/eyes/Camera", (128, 64))]
    assert sorted(e[1][0] for e in isaac.log if e[0] == "annotator.attach") == ["depth", "rgb"]
    assert (camera.image_width, camera.image_height) == (128, 64)
    with pytest.raises(ValueError, match="image_width must be a positive int of pixels, got 0"):
        camera.image_width = 0


def test_headless_remove_and_clear_skip_viewport_teardown(registry, fast_profile, isaac, headless, og):
    registry.apply(fast_profile)
    camera = make_camera(og, isaac)
    camera._post_load()
    camera.remove()
    assert "viewport.destroy" not in isaac.names() and "BaseSensor.remove" in isaac.names()
    assert camera.prim_path not in camera.SENSORS
    camera._post_load()
    type(camera).clear()
    assert camera.SENSORS == {} and "viewport.destroy" not in isaac.names()


def test_viewport_still_created_when_not_headless_or_named(registry, fast_profile, isaac, headless, og):
    registry.apply(fast_profile)
    headless(False)
    camera = make_camera(og, isaac)
    camera._post_load()
    assert isaac.names().count("create_viewport") == 1 and camera._viewport is not None
    assert camera._image_width == 128


def test_revert_restores_upstream_viewport_and_identity(registry, fast_profile, isaac, headless, og):
    from omnigibson.sensors.vision_sensor import VisionSensor

    names = ("_post_load", "image_height", "image_width", "viewer_visibility", "active_camera_path", "remove", "clear")
    originals = {n: VisionSensor.__dict__[n] for n in names}
    registry.apply(fast_profile)
    assert all(VisionSensor.__dict__[n] is not originals[n] for n in names)
    registry.revert()
    assert all(VisionSensor.__dict__[n] is originals[n] for n in names)
    camera = make_camera(og, isaac)
    camera._post_load()
    assert isaac.names().count("create_viewport") == 1  # upstream: a viewport even when headless


def test_stock_profile_leaves_vision_sensor_alone(registry, isaac, og):
    from behavior1k_fast.core.profile import RolloutProfile
    from omnigibson.sensors.vision_sensor import VisionSensor

    post_load = VisionSensor.__dict__["_post_load"]
    report = registry.apply(RolloutProfile.stock())
    assert report["headless_viewport"].state == "disabled"
    assert VisionSensor.__dict__["_post_load"] is post_load


def test_pr_2117_layout_is_skipped_with_reason(og, tmp_path, monkeypatch):
    from behavior1k_fast.patching.omnigibson.viewport import HeadlessViewportPatch

    source = inspect.getsource(sys.modules["omnigibson.sensors.vision_sensor"])
    source = source.replace(
        "        if viewport_name is not None:\n            vp_names",
        "        should_create_viewport = viewport_name is not None or not gm.HEADLESS\n"
        "        if viewport_name is not None:\n            vp_names",
    )
    path = tmp_path / "vision_sensor_2117.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("vision_sensor_2117", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reason = HeadlessViewportPatch().skip_reason(module)
    assert reason and "PR #2117" in reason


def test_camera_parameters_attaches_one_annotator_and_reuses_it(registry, fast_profile, isaac, headless, og):
    assert registry.apply(fast_profile)["camera_parameters_cache"].state == APPLIED
    camera = make_camera(og, isaac)
    camera._post_load()
    assert camera.camera_parameters == {"cameraFocalLength": 17.0}
    assert camera.camera_parameters["cameraFocalLength"] == 17.0
    camera._annotators = {"rgb": Annotator(isaac, "rgb")}  # the table is rebuilt (as _initialize does)
    camera.camera_parameters
    assert isaac.names().count("get_annotator") == 1
    registry.revert()
    camera._annotators = {"rgb": Annotator(isaac, "rgb")}
    camera.camera_parameters
    assert isaac.names().count("get_annotator") == 2  # upstream attaches a second one


def test_audit_lists_every_attached_annotator(registry, fast_profile, isaac, headless, og):
    from behavior1k_fast.backends.omnigibson.config import AttachedAnnotator, audit_annotators

    registry.apply(fast_profile)
    camera = make_camera(og, isaac, modalities=("rgb", "depth_linear"))
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


def test_viewer_camera_is_off_for_headless_launch(registry, fast_profile, og, monkeypatch, headless):
    from omnigibson import simulator
    from omnigibson.macros import gm

    seen = []
    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", True)
    monkeypatch.setattr(simulator, "_launch_app", lambda: seen.append(gm["RENDER_VIEWER_CAMERA"]) or "app")
    monkeypatch.setattr(sys.modules["omnigibson.lazy"], "carb", types.SimpleNamespace(
        settings=types.SimpleNamespace(get_settings=lambda: types.SimpleNamespace(get=lambda p: None, set_float=lambda p, v: None))
    ), raising=False)
    assert registry.apply(fast_profile)["viewer_camera_off"].state == APPLIED
    assert simulator._launch_app() == "app" and seen == [False]
    registry.revert()
    assert gm["RENDER_VIEWER_CAMERA"] is True


def test_viewer_camera_patch_skips_when_upstream_default_is_off(og, monkeypatch):
    from behavior1k_fast.patching.omnigibson.viewport import ViewerCameraOffPatch
    from omnigibson import simulator
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "RENDER_VIEWER_CAMERA", False)
    assert "RENDER_VIEWER_CAMERA is False" in ViewerCameraOffPatch().skip_reason(simulator)
    launch_app = simulator.__dict__["_launch_app"]
    report = PatchRegistry([ViewerCameraOffPatch()]).apply(RolloutProfile())
    assert report["viewer_camera_off"].state == SKIPPED
    assert simulator.__dict__["_launch_app"] is launch_app
