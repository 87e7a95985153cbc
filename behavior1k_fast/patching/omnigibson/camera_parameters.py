"""``VisionSensor.camera_parameters`` reuses one ``camera_params`` annotator per render product.

Upstream ``VisionSensor.camera_parameters`` attaches a ``camera_params`` annotator (and renders 3x) whenever
the sensor's annotator table has no entry for it, e.g. after the table was rebuilt, leaving the earlier
annotator attached. Patched, each sensor keeps one ``camera_params`` annotator per render product and reuses
it; only the very first read attaches.
"""

from __future__ import annotations

from typing import Any

from ...core.profile import RolloutProfile
from ..registry import Patch, PatchContext, UpstreamLayoutError
from ._util import class_in, raw_member, source_of
from .viewport import propagate


class CameraParametersPatch(Patch):
    """``VisionSensor.camera_parameters`` reuses one ``camera_params`` annotator per render product."""

    name = "camera_parameters_cache"
    module = "omnigibson.sensors.vision_sensor"
    targets = ("VisionSensor.camera_parameters",)
    upstream_file = "omnigibson/sensors/vision_sensor.py"

    def wanted(self, profile: RolloutProfile) -> bool:
        return profile.cache_camera_parameters

    def skip_reason(self, module: Any) -> str | None:
        prop = raw_member(class_in(module, "VisionSensor"), "camera_parameters")
        if not isinstance(prop, property):
            raise UpstreamLayoutError(f"VisionSensor.camera_parameters is a {type(prop).__name__}, expected a property")
        if "camera_params" not in source_of(prop.fget):
            return "upstream camera_parameters reads no camera_params annotator"
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        sensor_cls = class_in(module, "VisionSensor")
        original = raw_member(sensor_cls, "camera_parameters")

        def camera_parameters(sensor):
            annotator = sensor._annotators.get("camera_params")
            if annotator is None:
                kept = sensor.__dict__.get("_camera_params_annotator")
                if kept is not None and kept[0] is sensor._render_product:
                    annotator = kept[1]
                else:
                    sensor._annotators.pop("camera_params", None)
                    sensor.initialize_sensors(names="camera_params")
                    propagate(module)
                    annotator = sensor._annotators["camera_params"]
                sensor._annotators["camera_params"] = annotator
                sensor._camera_params_annotator = (sensor._render_product, annotator)
            return annotator.get_data()

        ctx.set_attribute(sensor_cls, "camera_parameters", property(camera_parameters, doc=original.__doc__))

