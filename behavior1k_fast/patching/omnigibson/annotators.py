"""Annotator pruning: a camera attaches annotators only for the modalities the policy consumes.

Every annotator attached to a camera's render product is rendered on every app update, read or not
(:func:`~behavior1k_fast.backends.omnigibson.config.audit_annotators` lists them). ``slim_config`` keeps an env
that this package's backend factory builds to the profile's ``obs_modalities``; an env built elsewhere (RLinf's
env worker, a config with ``depth`` or segmentation on) keeps what its config asks for. This patch binds where
every line attaches an annotator, ``VisionSensor._add_modality_to_backend(modality)`` (Replicator's
``AnnotatorRegistry`` on 1.1.1, v3.7 and main; ``og.sim.render_backend.create_annotator`` / ``attach_modality``
on the render/physics-backend and Isaac Sim 6.0 ``VisionSensor``): a modality outside ``obs_modalities`` gets
no annotator and leaves the sensor's modalities (a new set: whoever holds the old one keeps it), so ``get_obs``
never reads it and the observation space, which the env loads after the sensors are initialised, does not list
it. That holds for a modality added later with ``add_modality()`` too.

Kept whatever ``obs_modalities`` says:

- ``seg_semantic`` where a kept modality needs it (upstream adds it for ``seg_instance``, ``seg_instance_id`` and
  the bounding boxes, whose ids it remaps through the semantic mapping);
- ``camera_params``, which ``VisionSensor.camera_parameters`` attaches on its first read (BEHAVIOR's eval reads it
  every step); it is no observation modality;
- every modality while tiled rendering is on (``gm.ENABLE_TILED_RENDERING``, main): the tiled sensor is built
  from each camera's modalities before the cameras are initialised and serves them from its own render product.

Removal needs no change: upstream's ``_remove_modality_from_backend`` skips a modality without an annotator.
Not applicable where the render backend has no camera capture or captures RGB only
(:func:`~.layout.capture_reason`: at apply time on the class ``gm.RENDER_BACKEND`` picks, at call time on
``og.sim.render_backend``; upstream's own code runs there).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

from ..registry import Knobs, Patch, PatchContext, UpstreamLayoutError
from ._util import bind, simulator
from .layout import capture_reason, class_in, raw_member, render_backend_class, source_of

#: Modalities upstream's ``VisionSensor`` remaps through the semantic segmentation (it adds ``seg_semantic``).
SEMANTIC_DEPENDENT_MODALITIES = ("seg_instance", "seg_instance_id", "bbox_2d_tight", "bbox_2d_loose", "bbox_3d")
#: Attached on demand by ``VisionSensor.camera_parameters``: never pruned.
ON_DEMAND_MODALITIES = ("camera_params",)


def kept_modalities(obs_modalities: Iterable[str]) -> frozenset[str]:
    """The modalities a camera keeps an annotator for when the policy consumes ``obs_modalities`` (module docs)."""
    kept = set(obs_modalities) | set(ON_DEMAND_MODALITIES)
    if kept & set(SEMANTIC_DEPENDENT_MODALITIES):
        kept.add("seg_semantic")
    return frozenset(kept)


def _tiled_rendering() -> bool:
    return bool(sys.modules["omnigibson.macros"].gm.get("ENABLE_TILED_RENDERING", False))


def _captures_every_modality() -> bool:
    """Whether the running simulator's render backend (where it has one) renders several modalities per frame."""
    backend = getattr(simulator(), "render_backend", None)
    return backend is None or capture_reason(backend) is None


class AnnotatorPruningPatch(Patch):
    """``VisionSensor`` attaches no annotator for a modality the policy does not consume (module docs)."""

    name = "annotator_pruning"
    module = "omnigibson.sensors.vision_sensor"
    knobs = ("obs_modalities",)
    targets = ("VisionSensor._add_modality_to_backend",)
    upstream_file = "omnigibson/sensors/vision_sensor.py"

    def wanted(self, profile: Knobs) -> bool:
        return profile.obs_modalities is not None

    def skip_reason(self, module: Any) -> str | None:
        sensor = class_in(module, "VisionSensor")
        raw_member(sensor, "_add_modality_to_backend")
        if "_add_modality_to_backend" not in source_of(raw_member(sensor, "initialize_sensors")):
            raise UpstreamLayoutError(f"{module.__name__}.VisionSensor.initialize_sensors does not attach through "
                                      "_add_modality_to_backend: unsupported OmniGibson layout")
        sim_module = sys.modules.get("omnigibson.simulator")
        backend = render_backend_class(sim_module) if sim_module is not None else None
        return capture_reason(backend) if backend is not None else None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        sensor_cls = class_in(module, "VisionSensor")
        adapter = raw_member(sensor_cls, "_add_modality_to_backend")
        kept = kept_modalities(profile.obs_modalities)

        def add_modality_to_backend(wrapped, sensor, args, kwargs):
            modality = bind(adapter, args, kwargs)["modality"]
            if modality in kept or _tiled_rendering() or not _captures_every_modality():
                return wrapped(*args, **kwargs)
            sensor._modalities = set(sensor._modalities) - {modality}
            sensor._annotators.pop(modality, None)
            return None

        ctx.wrap(sensor_cls, "_add_modality_to_backend", add_modality_to_backend)
