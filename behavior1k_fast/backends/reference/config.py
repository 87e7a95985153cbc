"""ReferenceConfig: the typed, immutable description of one reference-simulator scene."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.frequencies import Frequencies

#: Cameras every env carries: the robot's head camera and one camera on each wrist.
CAMERAS = ("head", "left_wrist", "right_wrist")
#: Vision modalities the reference simulator renders (a subset of ``profile.VISION_MODALITIES``).
SUPPORTED_VISION_MODALITIES = ("rgb", "depth", "depth_linear", "normal", "seg_semantic", "seg_instance")
#: Upper bound on movable objects: the number of free placement cells on the table.
MAX_OBJECTS = 31
#: Largest image side in pixels: every camera renders into one offscreen buffer of the image size, and
#: larger buffers run into the GL limits of common drivers (after seconds and gigabytes of allocation).
MAX_RESOLUTION = 4096


def _omnigibson_default_frequencies() -> Frequencies:
    # OmniGibson's defaults: action 30 Hz, rendering 30 Hz, physics 120 Hz.
    return Frequencies(action_hz=30, rendering_hz=30, physics_hz=120)


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


@dataclass(frozen=True)
class ReferenceConfig:
    """One reference scene. Resolutions in pixels, frequencies in Hz, horizon in own actions per episode."""

    #: Image size (height, width) of every camera, in pixels.
    resolution: tuple[int, int] = (224, 224)
    #: Action (= sim-step), rendering and physics frequencies before the K-stage rescale.
    frequencies: Frequencies = field(default_factory=_omnigibson_default_frequencies)
    #: Movable objects on the table, the task's target included.
    num_objects: int = 20
    #: Own actions per episode before timeout truncation.
    horizon: int = 500
    #: Cameras per env, a subset of ``CAMERAS``.
    cameras: tuple[str, ...] = CAMERAS

    def __post_init__(self) -> None:
        res = self.resolution
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise TypeError(f"resolution must be a (height, width) pair, got {res!r}")
        for name, value in zip(("height", "width"), res):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"resolution {name} must be an int, got {value!r} in resolution={res!r}")
            if not 1 <= value <= MAX_RESOLUTION:
                raise ValueError(f"resolution {name} must be positive and at most {MAX_RESOLUTION} pixels, got "
                                 f"{value!r} in resolution={res!r}")
        object.__setattr__(self, "resolution", tuple(res))
        if not isinstance(self.frequencies, Frequencies):
            raise TypeError(f"frequencies must be a behavior1k_fast.core.frequencies.Frequencies, got {self.frequencies!r}")
        if not self.frequencies.headless:
            raise ValueError(
                f"frequencies={self.frequencies!r}: the reference simulator is headless, "
                "so frequencies.headless must be True (action_hz == rendering_hz)"
            )
        _check_int("num_objects", self.num_objects, 1, MAX_OBJECTS)
        _check_int("horizon", self.horizon, 1)
        cams = self.cameras
        if isinstance(cams, str) or not isinstance(cams, (tuple, list)):
            raise TypeError(f"cameras must be a sequence of camera names, got {cams!r}")
        if not cams:
            raise ValueError("cameras must name at least one camera, got an empty sequence")
        for cam in cams:
            if cam not in CAMERAS:
                raise ValueError(f"unknown camera {cam!r} in cameras; known cameras: {CAMERAS}")
        if len(set(cams)) != len(cams):
            raise ValueError(f"cameras={cams!r} contains duplicates")
        object.__setattr__(self, "cameras", tuple(cams))
