"""OmniGibson env configs for the fast path: only the consumed modalities, frequencies rescaled for K stages.

- :func:`check_env_config` checks the shape OmniGibson reads (its sections are mappings, ``robots`` a list
  of them), naming the key and value of the first that is not.
- :func:`slim_config` turns a stock OmniGibson env config into one that produces only the consumed
  modalities (robot ``obs_modalities`` and ``sensor_config`` overrides, no external sensors, no wrapper
  that adds modalities) and lists what it removed.
- :func:`audit_annotators` lists every Replicator annotator attached to every camera of a live env; an
  annotator is rendered on every app update whether or not anyone reads it (the ``annotator_pruning`` patch
  attaches none for a modality outside the profile's ``obs_modalities``, for envs built from configs not slimmed).
- :func:`rescale_env_config` sets the frequencies for K pipeline stages.

An OmniGibson config sets ``env.action_frequency`` (one ``env.step``), ``env.rendering_frequency`` and
``env.physics_frequency`` in Hz; missing keys take upstream's defaults (``gm.DEFAULT_SIM_STEP_FREQ`` 30,
``DEFAULT_RENDERING_FREQ`` 30, ``DEFAULT_PHYSICS_FREQ`` 120). The rules and the time each env experiences
per own action are those of :mod:`behavior1k_fast.core.frequencies`.
"""

from __future__ import annotations

import copy
import reprlib
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...core.checks import check_number
from ...core.frequencies import Frequencies, StageTiming, rescale_for_stages
from ...core.profile import VISION_MODALITIES, RolloutProfile
from ...patching.omnigibson.layout import class_in

#: Robot ``obs_modalities`` when a robot config does not set it (``BaseRobot.__init__``).
UPSTREAM_ROBOT_MODALITIES = ("rgb", "proprio")
#: Wrappers that add modalities to every camera (``learning/wrappers``).
MODALITY_ADDING_WRAPPERS = ("DefaultWrapper", "RichObservationWrapper")


#: Sections of an env config that hold one mapping each (or null); ``robots`` holds a list of mappings.
MAPPING_SECTIONS = ("env", "render", "scene", "task", "wrapper")


def _shown(value: Any) -> str:
    """``value`` in a message: its type and a shortened repr; ``None`` (an empty YAML document) as such."""
    return "nothing (an empty document)" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"


def check_env_config(config: Any) -> Mapping[str, Any]:
    """``config`` once it has the shape OmniGibson reads (module docs); TypeError naming the key and value
    otherwise (the value shortened)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"the env config must be a mapping of sections (env, scene, robots, task, ...), got "
                        f"{_shown(config)}")
    for key in MAPPING_SECTIONS:
        value = config.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"env config key {key!r} must be a mapping of its settings, got {_shown(value)}")
    robots = config.get("robots")
    if robots is not None and not isinstance(robots, (list, tuple)):
        raise TypeError(f"env config key 'robots' must be a list of robot configs, got {_shown(robots)}")
    for i, robot in enumerate(robots or ()):
        if not isinstance(robot, Mapping):
            raise TypeError(f"env config key robots[{i}] must be a mapping of robot settings, got {_shown(robot)}")
    return config


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


def episode_max_steps(config: Mapping[str, Any]) -> Any:
    """The task's ``termination_config.max_steps`` of env ``config`` (own actions before the timeout), or
    ``None`` where the config leaves it to the task's default."""
    return ((config.get("task") or {}).get("termination_config") or {}).get("max_steps")


def cut_episodes(config: Mapping[str, Any], max_steps: int) -> dict:
    """A copy of env ``config`` whose task ends an episode by timeout after ``max_steps`` own actions
    (``task.termination_config.max_steps``, which every OmniGibson task's timeout reads)."""
    out = copy.deepcopy(dict(config))
    task = out.setdefault("task", {})
    task["termination_config"] = {**(task.get("termination_config") or {}), "max_steps": max_steps}
    return out


#: Config key -> upstream default in Hz.
FREQUENCY_KEYS = {"action_frequency": 30, "rendering_frequency": 30, "physics_frequency": 120}


def env_frequencies(config: Mapping[str, Any], headless: bool = True) -> Frequencies:
    """The frequencies of env ``config`` checked against OmniGibson's dt rules (ValueError naming the key)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be an OmniGibson config mapping, got {type(config).__name__}")
    env = config.get("env") or {}
    hz = {}
    for key, default in FREQUENCY_KEYS.items():
        value = env.get(key, default)
        check_number(f"env.{key}", value, 0.0, low_open=True, unit="of Hz")
        hz[key] = value  # as given: 30 stays 30 in messages and in the rescaled config
    try:
        return Frequencies(hz["action_frequency"], hz["rendering_frequency"], hz["physics_frequency"], headless)
    except ValueError as exc:
        raise ValueError(f"env config frequencies break OmniGibson's dt rules: {exc}") from None


def rescale_env_config(
    config: Mapping[str, Any], stages_sharing_physics: int, mode: str = "divide_physics", headless: bool = True
) -> tuple[dict, StageTiming]:
    """A copy of ``config`` with frequencies for ``stages_sharing_physics`` stages sharing its physics
    (``RolloutProfile.stages_sharing_physics``) under ``mode``, and the timing.

    ``timing.sim_seconds_per_own_action`` is the simulated time each env experiences per own action;
    an impossible ``stages_sharing_physics`` raises ValueError listing the valid stage counts."""
    timing = rescale_for_stages(env_frequencies(config, headless), stages_sharing_physics, mode)
    out = copy.deepcopy(dict(config))
    env = out.setdefault("env", {})
    freqs = timing.frequencies
    env["action_frequency"] = freqs.action_hz
    env["rendering_frequency"] = freqs.rendering_hz
    env["physics_frequency"] = freqs.physics_hz
    return out, timing
