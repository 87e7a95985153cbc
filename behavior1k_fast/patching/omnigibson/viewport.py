"""No viewport per camera in headless runs, and no viewer camera (upstream PR #2117 semantics, backported).

Before #2117 (PyPI 1.1.1, v3.7.x) ``VisionSensor._post_load`` always creates a viewport window next to
the Replicator render product, so every camera renders twice per app update. Patched: a viewport is made
only if ``viewport_name`` is given or the run is not headless (``gm.HEADLESS``); otherwise
``_viewport is None`` and the image size lives in ``_image_width``/``_image_height`` (pixels). Members that
assumed a viewport:

- ``image_height`` / ``image_width``: the cached size without a viewport (the viewport's with one); setting
  one runs upstream's setter (render product rebuilt at the new size, annotators moved over, renders) and
  updates the cache, with nothing done to a viewport that does not exist;
- ``viewer_visibility``: ``False`` without a viewport; setting it ``True`` raises ``RuntimeError``;
- ``active_camera_path``: the sensor's own prim path without a viewport; setting it raises ``RuntimeError``;
- ``remove()`` / ``VisionSensor.clear()``: upstream's teardown runs unchanged for sensors without a viewport
  (on v3.7 ``remove()`` detaches every modality's annotator and destroys the render product, and ``clear()``
  removes every sensor); only the viewport part has nothing to destroy.

Upstream's setters and teardown read ``self._viewport``; for a sensor without one they run while
``_viewport`` is an :class:`AbsentViewport`, which answers the size reads from the cache, records size writes
in it and has nothing to destroy. Its name is not ``"Viewport"``, so upstream never re-points the main
viewport's camera for it. ``_viewport`` is ``None`` again when the call returns (or raises).

The viewer camera (``gm.RENDER_VIEWER_CAMERA``) is switched off at launch in headless runs.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterable, Iterator

from ...core.checks import check_positive_int
from ..registry import Knobs, Patch, PatchContext, UpstreamLayoutError
from ._util import LaunchAppPatch
from .layout import NOT_APPLICABLE, KitLauncher, class_in, is_render_backend_layout, raw_member, source_of

#: Lens attributes a sensor's load config may carry (1.1.1 has the first and the last; v3.7 all).
LENS_KEYS = ("focal_length", "focus_distance", "fstop", "horizontal_aperture", "clipping_range")
#: App updates upstream takes for camera changes to propagate.
PROPAGATION_RENDERS = 3


def _gm() -> Any:
    return sys.modules["omnigibson.macros"].gm


def propagate(module: Any) -> None:
    """The app renders upstream takes after a camera change (``module.render``, the sensor module's own)."""
    for _ in range(PROPAGATION_RENDERS):
        module.render()


class AbsentViewport:
    """What upstream ``VisionSensor`` code finds in ``_viewport`` while it runs for a sensor without a viewport:
    ``viewport_api`` reads and writes the sensor's cached size (pixels); ``destroy()`` has nothing to destroy."""

    #: Not the main viewport's name ("Viewport"): upstream destroys this one (a no-op) instead of re-pointing it.
    name = "behavior1k_fast: no viewport"

    def __init__(self, sensor: Any) -> None:
        self._sensor = sensor
        self.viewport_api = self

    def get_texture_resolution(self) -> tuple[int, int]:
        return self._sensor._image_width, self._sensor._image_height

    def set_texture_resolution(self, resolution: tuple[int, int]) -> None:
        self._sensor._image_width, self._sensor._image_height = resolution

    def destroy(self) -> None:
        pass


@contextlib.contextmanager
def absent_viewports(sensors: Iterable[Any]) -> Iterator[None]:
    """For the block, each of ``sensors`` that has no viewport holds an :class:`AbsentViewport`; ``None`` after."""
    headless = [sensor for sensor in sensors if sensor._viewport is None]
    for sensor in headless:
        sensor._viewport = AbsentViewport(sensor)
    try:
        yield
    finally:
        for sensor in headless:
            sensor._viewport = None


class HeadlessViewportPatch(Patch):
    """``VisionSensor`` without a viewport when headless; resolution cached; viewport members guarded."""

    name = "headless_viewport"
    knobs = ("remove_headless_viewports",)
    module = "omnigibson.sensors.vision_sensor"
    targets = (
        "VisionSensor._post_load",
        "VisionSensor.image_height",
        "VisionSensor.image_width",
        "VisionSensor.viewer_visibility",
        "VisionSensor.active_camera_path",
        "VisionSensor.remove",
        "VisionSensor.clear",
    )
    upstream_file = "omnigibson/sensors/vision_sensor.py"

    def wanted(self, profile: Knobs) -> bool:
        return profile.remove_headless_viewports

    def skip_reason(self, module: Any) -> str | None:
        sensor = class_in(module, "VisionSensor")
        for target in self.targets:
            raw_member(sensor, target.split(".", 1)[1])
        if "HEADLESS" in source_of(sensor._post_load):
            return "upstream VisionSensor._post_load already skips the viewport when headless (PR #2117)"
        simulator = sys.modules.get("omnigibson.simulator")
        if simulator is not None and is_render_backend_layout(simulator):
            return (f"{NOT_APPLICABLE}: cameras capture through og.sim.render_backend (create_camera_resource), "
                    "while this patch's headless _post_load builds a Replicator render product itself (pre-#2117 "
                    "VisionSensor)")
        if not callable(getattr(module, "render", None)):  # the app render the pre-#2117 module defines
            raise UpstreamLayoutError(f"{module.__name__}.render is missing: unsupported OmniGibson layout")
        return None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        sensor_cls = class_in(module, "VisionSensor")
        base_cls = sensor_cls.__mro__[1]

        def post_load(wrapped, sensor, args, kwargs):
            config = sensor._load_config
            width, height = config["image_width"], config["image_height"]
            if config["viewport_name"] is not None or not _gm().HEADLESS:
                result = wrapped(*args, **kwargs)
                sensor._image_width, sensor._image_height = width, height
                return result
            base_cls._post_load(sensor)
            sensor.SENSORS[sensor.prim_path] = sensor
            sensor._image_width, sensor._image_height = width, height
            sensor._render_product = module.lazy.omni.replicator.core.create.render_product(
                sensor.prim_path, (width, height)
            )
            sensor._viewport = None
            for key in LENS_KEYS:
                if key in config:
                    setattr(sensor, key, config[key])
            propagate(module)

        def size_property(original: property, axis: str) -> property:
            def getter(sensor):
                return getattr(sensor, f"_image_{axis}") if sensor._viewport is None else original.fget(sensor)

            def setter(sensor, value):
                if sensor._viewport is None:
                    check_positive_int(f"image_{axis}", value)
                with absent_viewports([sensor]):
                    original.fset(sensor, value)
                setattr(sensor, f"_image_{axis}", value)

            return property(getter, setter, doc=original.__doc__)

        def guarded_property(original: property, headless_value, may_set_false: bool = False) -> property:
            def getter(sensor):
                return headless_value(sensor) if sensor._viewport is None else original.fget(sensor)

            def setter(sensor, value):
                if sensor._viewport is None:
                    if may_set_false and value is False:
                        return
                    raise RuntimeError(
                        f"VisionSensor {sensor.name!r} has no viewport (headless run); cannot set "
                        f"{original.fget.__name__} to {value!r}"
                    )
                original.fset(sensor, value)

            return property(getter, setter, doc=original.__doc__)

        def remove(wrapped, sensor, args, kwargs):
            with absent_viewports([sensor]):
                return wrapped(*args, **kwargs)

        def clear(wrapped, cls, args, kwargs):
            with absent_viewports(tuple(cls.SENSORS.values())):
                return wrapped(*args, **kwargs)

        ctx.wrap(sensor_cls, "_post_load", post_load)
        for axis in ("height", "width"):
            ctx.set_attribute(sensor_cls, f"image_{axis}", size_property(raw_member(sensor_cls, f"image_{axis}"), axis))
        ctx.set_attribute(
            sensor_cls,
            "viewer_visibility",
            guarded_property(raw_member(sensor_cls, "viewer_visibility"), lambda sensor: False, may_set_false=True),
        )
        ctx.set_attribute(
            sensor_cls,
            "active_camera_path",
            guarded_property(raw_member(sensor_cls, "active_camera_path"), lambda sensor: sensor.prim_path),
        )
        ctx.wrap(sensor_cls, "remove", remove)
        ctx.wrap(sensor_cls, "clear", clear)


class ViewerCameraOffPatch(LaunchAppPatch):
    """Headless launches create no viewer camera: ``gm.RENDER_VIEWER_CAMERA`` is False when the app starts."""

    name = "viewer_camera_off"
    knobs = ("remove_headless_viewports",)
    rtx = True

    def wanted(self, profile: Knobs) -> bool:
        return profile.remove_headless_viewports

    def upstream_has_it(self, launcher: KitLauncher) -> str | None:
        gm = _gm()
        if "RENDER_VIEWER_CAMERA" not in gm:
            return "this OmniGibson has no RENDER_VIEWER_CAMERA macro"
        if gm["RENDER_VIEWER_CAMERA"] is False:
            return "upstream already renders no viewer camera by default (gm.RENDER_VIEWER_CAMERA is False)"
        return None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        gm = _gm()
        previous = gm["RENDER_VIEWER_CAMERA"]
        super().install(module, profile, ctx)
        ctx.on_undo(lambda: gm.__setitem__("RENDER_VIEWER_CAMERA", previous))

    def launch(self, launcher: KitLauncher, profile: Knobs, start):
        gm = _gm()
        if gm["HEADLESS"]:
            # Item access: MacroDict refuses attribute writes once a macro was read.
            gm["RENDER_VIEWER_CAMERA"] = False
        return start()

