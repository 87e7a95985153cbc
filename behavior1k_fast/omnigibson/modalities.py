"""Only the observation modalities the policy consumes: slim env config, annotator audit, camera parameters.

- :func:`slim_config` turns a stock OmniGibson env config into one that produces only the consumed
  modalities (robot ``obs_modalities`` and ``sensor_config`` overrides, no external sensors, no wrapper
  that adds modalities) and lists what it removed.
- :func:`audit_annotators` lists every Replicator annotator attached to every camera of a live env; an
  annotator is rendered on every app update whether or not anyone reads it.
- :class:`CameraParametersPatch`: upstream ``VisionSensor.camera_parameters`` attaches a ``camera_params``
  annotator (and renders 3x) whenever the sensor's annotator table has no entry for it, e.g. after the
  table was rebuilt, leaving the earlier annotator attached. Patched, each sensor keeps one
  ``camera_params`` annotator per render product and reuses it; only the very first read attaches.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..patching import Patch, PatchContext
from ..profile import RolloutProfile, VISION_MODALITIES
from ._util import class_in, raw_member, source_of
from .viewport import propagate

#: Robot ``obs_modalities`` when a robot config does not set it (``BaseRobot.__init__``).
UPSTREAM_ROBOT_MODALITIES = ("rgb", "proprio")
#: Wrappers that add modalities to every camera (``learning/wrappers``).
MODALITY_ADDING_WRAPPERS = ("DefaultWrapper", "RichObservationWrapper")


@dataclass(frozen=True)
class SlimConfig:
    """A slimmed env config and one line per removed item (``path: what``)."""

    config: dict
    removed: tuple[str, ...]


def _modality_set(value: Any) -> set[str]:
    if value == "all":
        return set(VISION_MODALITIES) | {"proprio"}
    return {value} if isinstance(value, str) else set(value)


def slim_config(config: Mapping[str, Any], obs_modalities: Sequence[str] = ("rgb", "proprio")) -> SlimConfig:
    """A copy of OmniGibson env ``config`` that produces only ``obs_modalities``; ``config`` is unchanged.

    Every robot gets ``obs_modalities``; explicit ``sensor_config[<class>]["modalities"]`` overrides are
    narrowed to them; ``env.external_sensors`` are dropped; a wrapper that adds modalities is dropped.
    Unknown modalities raise ValueError (checked as the profile's ``obs_modalities``)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be an OmniGibson config mapping, got {type(config).__name__}")
    wanted = RolloutProfile(obs_modalities=tuple(obs_modalities)).obs_modalities
    out = copy.deepcopy(dict(config))
    removed: list[str] = []
    for i, robot in enumerate(out.get("robots") or ()):
        dropped = _modality_set(robot.get("obs_modalities", UPSTREAM_ROBOT_MODALITIES)) - set(wanted)
        if dropped:
            removed.append(f"robots[{i}].obs_modalities: {', '.join(sorted(dropped))}")
        robot["obs_modalities"] = list(wanted)
        for sensor_cls, sensor_cfg in (robot.get("sensor_config") or {}).items():
            if "modalities" not in sensor_cfg:
                continue
            have = _modality_set(sensor_cfg["modalities"])
            dropped = have - set(wanted)
            if dropped:
                removed.append(f"robots[{i}].sensor_config.{sensor_cls}.modalities: {', '.join(sorted(dropped))}")
            sensor_cfg["modalities"] = [m for m in wanted if m in have]
    env = out.get("env") or {}
    if env.get("external_sensors"):
        names = [s.get("name", f"#{j}") for j, s in enumerate(env["external_sensors"])]
        removed.append(f"env.external_sensors: {', '.join(names)}")
        env["external_sensors"] = None
    wrapper = out.get("wrapper") or {}
    if wrapper.get("type") in MODALITY_ADDING_WRAPPERS:
        removed.append(f"wrapper.type: {wrapper['type']} (adds modalities to every camera)")
        wrapper["type"] = None
    return SlimConfig(out, tuple(removed))


@dataclass(frozen=True)
class AttachedAnnotator:
    """One annotator attached to one camera's render product."""

    camera: str
    modality: str
    annotator: str


def _vision_sensor_class() -> type:
    return class_in(sys.modules["omnigibson.sensors.vision_sensor"], "VisionSensor")


def _raw_sensor_types(sensor: Any) -> Mapping[str, str]:
    types = getattr(sensor, "_RAW_SENSOR_TYPES", None)  # 1.1.1 / v3.7: instance attribute
    return types if types is not None else sensor.raw_sensor_types  # main


def audit_annotators(env: Any) -> list[AttachedAnnotator]:
    """Every annotator attached to every camera (robot sensors, then external sensors) of a live env."""
    vision_sensor = _vision_sensor_class()
    cameras = [s for robot in env.robots for s in robot.sensors.values()]
    cameras += list((env.external_sensors or {}).values())
    found = []
    for camera in cameras:
        if not isinstance(camera, vision_sensor):
            continue
        names = _raw_sensor_types(camera)
        for modality, annotator in (camera._annotators or {}).items():
            if annotator is not None:
                found.append(AttachedAnnotator(camera.name, modality, names.get(modality, modality)))
    return found


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
            raise TypeError(f"VisionSensor.camera_parameters is a {type(prop).__name__}, expected a property")
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

