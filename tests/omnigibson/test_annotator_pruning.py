"""``annotator_pruning`` on the real ``VisionSensor`` of every line: 1.1.1, v3.7 and main attach annotators through
Replicator's ``AnnotatorRegistry``, the render/physics-backend line (Isaac Sim 6.0 ``VisionSensor`` of 9fa68a72)
through ``og.sim.render_backend``. The seam: a recording stand-in for the annotator source each line calls
(``lazy.omni.replicator.core`` of the sensor module, or ``og.sim.render_backend``), and a sensor made without
its constructor (which loads a camera prim) holding the members ``initialize_sensors`` reads. Upstream's own
``initialize_sensors`` / ``_add_modality_to_backend`` / ``remove_modality`` run."""

from __future__ import annotations

import contextlib
import types

import pytest

from behavior1k_fast.patching import APPLIED, SKIPPED, PatchRegistry
from behavior1k_fast.patching.omnigibson import PATCHES
from behavior1k_fast.patching.omnigibson.annotators import kept_modalities
from behavior1k_fast.patching.omnigibson.layout import NOT_APPLICABLE

from ..upstream_lines import activate_line
from .test_new_lines import profile

#: What the camera's config asks for (seg_semantic: upstream adds it for seg_instance).
REQUESTED = {"rgb", "depth", "normal", "seg_instance", "seg_semantic"}
#: What the policy consumes.
CONSUMED = ("rgb", "seg_instance", "proprio")


class RecordingAnnotators:
    """Stand-in for what attaches annotators on a line: Replicator's ``AnnotatorRegistry`` (``get_annotator``;
    the annotator's ``attach([product])``) and the render backend's ``create_annotator`` / ``attach_modality``.
    ``attached`` lists the raw annotator names attached, in order."""

    supports_camera_capture = True
    supports_bbox = True

    def __init__(self) -> None:
        self.attached: list[str] = []

    def get_annotator(self, name):
        return types.SimpleNamespace(name=name, attach=lambda products: self.attached.append(name))

    create_annotator = get_annotator

    def attach_modality(self, annotator, product):
        self.attached.append(annotator.name)

    def detach_modality(self, annotator, product):
        self.attached.remove(annotator.name)


@pytest.fixture(params=["1.1.1", "v3.7", "main", "backend"])
def any_line(request, og, monkeypatch):
    return activate_line(request.param, monkeypatch)


@pytest.fixture
def camera(any_line, og, monkeypatch):
    """``(sensor, annotators)``: a ``VisionSensor`` of the line with :data:`REQUESTED`, not initialised yet."""
    from omnigibson.sensors import vision_sensor

    annotators = RecordingAnnotators()
    if any_line.name == "backend":
        monkeypatch.setattr(og, "sim", types.SimpleNamespace(render_backend=annotators,
                                                             editing_usd=contextlib.nullcontext))
    else:
        monkeypatch.setattr(og, "sim", types.SimpleNamespace(editing_usd=contextlib.nullcontext))
        monkeypatch.setattr(vision_sensor, "lazy", types.SimpleNamespace(omni=types.SimpleNamespace(
            replicator=types.SimpleNamespace(core=types.SimpleNamespace(AnnotatorRegistry=annotators)))))
    sensor = object.__new__(vision_sensor.VisionSensor)
    if not hasattr(vision_sensor.VisionSensor, "RAW_SENSOR_TYPES"):  # 1.1.1, v3.7: set by the constructor
        names = (*vision_sensor.VisionSensor.all_modalities, "camera_params")
        sensor._RAW_SENSOR_TYPES = {m: f"raw_{m}" for m in names}
    sensor._modalities = set(REQUESTED)
    sensor._annotators = {m: None for m in REQUESTED}
    sensor._render_product = "render_product"
    return sensor, annotators


def raw(sensor, modalities) -> list[str]:
    names = getattr(sensor, "_RAW_SENSOR_TYPES", None) or type(sensor).RAW_SENSOR_TYPES
    return sorted(names[m] for m in modalities)


def initialise(sensor) -> None:
    """What ``VisionSensor._initialize`` does with the annotators on every line."""
    sensor.initialize_sensors(names=sensor._modalities)


def initialise_patched(sensor, tmp_path, **knobs) -> None:
    """:func:`initialise` with the patch set applied for ``profile(**knobs)`` (reverted after)."""
    registry = PatchRegistry(PATCHES)
    try:
        registry.apply(profile(tmp_path, **knobs))
        initialise(sensor)
    finally:
        registry.revert()


def test_only_the_consumed_modalities_and_what_they_need_get_an_annotator(camera, tmp_path):
    sensor, annotators = camera
    registry = PatchRegistry(PATCHES)
    try:
        report = registry.apply(profile(tmp_path, obs_modalities=CONSUMED))
        assert report["annotator_pruning"].state == APPLIED
        original_modalities = sensor._modalities
        initialise(sensor)
        kept = {"rgb", "seg_instance", "seg_semantic"}  # seg_semantic: seg_instance is remapped through it
        assert sorted(annotators.attached) == raw(sensor, kept)
        assert sensor.modalities == kept and set(sensor._annotators) == kept
        assert original_modalities == REQUESTED  # whoever held the old set (main's tiled sensor) keeps it
        sensor.initialize_sensors(names="camera_params")  # camera_parameters attaches it on its first read
        assert annotators.attached[-1] == raw(sensor, ["camera_params"])[0]
    finally:
        registry.revert()
    annotators.attached.clear()
    sensor._modalities, sensor._annotators = set(REQUESTED), {m: None for m in REQUESTED}
    initialise(sensor)  # upstream again: every requested modality
    assert sorted(annotators.attached) == raw(sensor, REQUESTED)


def test_tiled_rendering_keeps_every_modality(camera, any_line, tmp_path, monkeypatch):
    """Under main's tiled rendering the tiled sensor serves each camera's modalities from its own product."""
    from omnigibson.macros import gm

    sensor, annotators = camera
    monkeypatch.setitem(gm, "ENABLE_TILED_RENDERING", True)
    initialise_patched(sensor, tmp_path, obs_modalities=CONSUMED)
    assert sorted(annotators.attached) == raw(sensor, REQUESTED) and sensor.modalities == REQUESTED


@pytest.mark.parametrize("render_backend, reason", [
    ("none", "the render backend NullRenderBackend has no camera capture (supports_camera_capture is False)"),
    ("newton", "the render backend NewtonRenderBackend captures RGB only"),
])
def test_backends_without_multi_modality_capture_are_not_applicable(og, monkeypatch, tmp_path, render_backend,
                                                                    reason):
    """The render backend ``gm.RENDER_BACKEND`` picks, probed by its capability flags (the null backend of
    dc91670f still has ``runs_inside_kit``, 5afaef30's not: the probe never reads it)."""
    activate_line("backend", monkeypatch)
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "RENDER_BACKEND", render_backend)
    registry = PatchRegistry(PATCHES)
    try:
        outcome = registry.apply(profile(tmp_path))["annotator_pruning"]
    finally:
        registry.revert()
    assert outcome.state == SKIPPED and outcome.reason.startswith(f"{NOT_APPLICABLE}: {reason}"), outcome


def test_a_render_backend_without_capture_at_run_time_gets_upstreams_code(og, monkeypatch, tmp_path):
    """Applied for the kit backend, but the simulator runs another one: upstream's own code runs (it attaches
    nothing without camera capture), the sensor's modalities stay as configured."""
    activate_line("backend", monkeypatch)
    from omnigibson.sensors import vision_sensor

    null = types.SimpleNamespace(supports_camera_capture=False)
    monkeypatch.setattr(og, "sim", types.SimpleNamespace(render_backend=null, editing_usd=contextlib.nullcontext))
    sensor = object.__new__(vision_sensor.VisionSensor)
    sensor._modalities, sensor._annotators = set(REQUESTED), {m: None for m in REQUESTED}
    initialise_patched(sensor, tmp_path, obs_modalities=CONSUMED)
    assert sensor.modalities == REQUESTED and set(sensor._annotators.values()) == {None}


def test_stock_profile_leaves_the_annotators_alone(og, monkeypatch, tmp_path):
    activate_line("backend", monkeypatch)
    registry = PatchRegistry(PATCHES)
    try:
        outcome = registry.apply(profile(tmp_path, obs_modalities=None))["annotator_pruning"]
    finally:
        registry.revert()
    assert outcome.state == "disabled"


def test_kept_modalities_add_what_upstream_remaps_through_and_what_is_read_on_demand():
    assert kept_modalities(["rgb"]) == {"rgb", "camera_params"}
    assert kept_modalities(["bbox_2d_tight", "proprio"]) == {"bbox_2d_tight", "seg_semantic", "proprio",
                                                             "camera_params"}


def test_a_render_backend_name_the_registry_lacks_leaves_the_decision_to_run_time(og, monkeypatch, tmp_path):
    """Upstream's simulator refuses an unknown ``gm.RENDER_BACKEND`` when it starts; the patch set still applies."""
    activate_line("backend", monkeypatch)
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "RENDER_BACKEND", "vulkan")
    registry = PatchRegistry(PATCHES)
    try:
        assert registry.apply(profile(tmp_path))["annotator_pruning"].state == APPLIED
    finally:
        registry.revert()
