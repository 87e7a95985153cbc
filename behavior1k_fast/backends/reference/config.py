"""ReferenceConfig: the typed, immutable description of one reference-simulator scene.

Two knobs add costs BEHAVIOR has and the bare scene lacks; both are off by default (the scene, its
trajectories and the ablation's stock/fast rows stay as they were) and on in :meth:`ReferenceConfig.
behavior_like`, with values from published figures:

- ``reset_settle_steps``: a reset re-samples the object placements and lets the objects fall into place
  with real physics steps. OmniGibson's kinematic sampler (``sample_kinematics`` in
  ``omnigibson/utils/object_state_utils.py``, StanfordVL/BEHAVIOR-1K; the same loop in the ``Inside``
  setter, PR #2131) places each sampled object 5 cm above its pose, steps physics until it touches
  something (at most 0.5 s of simulated time), 5 more steps, then until its speed is below 1e-3 m/s (at
  most another 0.5 s): up to 2 * int(0.5 s * 120 Hz) + 5 = 125 physics steps at OmniGibson's default
  120 Hz, for every object it samples, where an env step is 4 (30 Hz actions).
- ``contact_iterations``: extra solver work per physics step that grows with the number of active contacts.
  In a published OmniGibson profile (a REALM port to OmniGibson 3.9.1, 120 Hz physics, RTX 5090:
  186 ms per step) the per-step contact bookkeeping (``RigidContactAPI.update_contact_cache``, 96-98 % of
  ``_non_physics_step``: 99.3 ms) costs more than the physics substeps and render together (82.2 ms), with
  ~300 ms spikes after gripper contact; PhysX itself runs a fixed number of solver iterations over every
  contact constraint. Here each physics step sweeps the friction constraints of every active contact
  ``contact_iterations`` more times (MuJoCo's noslip post-solver, run to that count: tolerance 0), so the
  step cost grows with the contacts; the value in ``behavior_like`` makes that work about 1.2x the rest of
  the physics step on the default scene (99.3 / 82.2), measured with ``benchmarks/behavior_costs.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...core.checks import check_int, shown
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
#: Height (m) above its resting pose from which a settled object falls (OmniGibson's sampler: 5 cm).
SETTLE_DROP = 0.05
#: ``reset_settle_steps`` of :meth:`ReferenceConfig.behavior_like`: OmniGibson's settle bound for one sampled
#: object at 120 Hz physics (module docs).
BEHAVIOR_SETTLE_STEPS = 125
#: ``contact_iterations`` of :meth:`ReferenceConfig.behavior_like` (module docs).
BEHAVIOR_CONTACT_ITERATIONS = 13


def check_resolution(value: Any) -> tuple[int, int]:
    """``value`` (the ``resolution`` key) as a ``(height, width)`` pair of ints in ``[1, MAX_RESOLUTION]``
    pixels; ``TypeError`` / ``ValueError`` naming the key and the value otherwise."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"resolution must be a (height, width) pair, got {shown(value)}")
    return tuple(check_int(f"resolution {side} (pixels)", v, 1, MAX_RESOLUTION)
                 for side, v in zip(("height", "width"), value))


def _omnigibson_default_frequencies() -> Frequencies:
    # OmniGibson's defaults: action 30 Hz, rendering 30 Hz, physics 120 Hz.
    return Frequencies(action_hz=30, rendering_hz=30, physics_hz=120)


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
    #: Physics steps that settle an env's objects after each reset: they are placed ``SETTLE_DROP`` above
    #: their sampled table cells and fall into place in a one-env copy of the scene at the unscaled physics
    #: dt (other envs and ``sim_time`` untouched). 0: placed at rest, no physics (module docs).
    reset_settle_steps: int = 0
    #: Extra solver iterations per physics step over the friction constraints of every active contact
    #: (MuJoCo noslip, tolerance 0): step cost that grows with the contacts. 0: off (module docs).
    contact_iterations: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "resolution", check_resolution(self.resolution))
        if not isinstance(self.frequencies, Frequencies):
            raise TypeError(f"frequencies must be a behavior1k_fast.core.frequencies.Frequencies, got {self.frequencies!r}")
        if not self.frequencies.headless:
            raise ValueError(
                f"frequencies={self.frequencies!r}: the reference simulator is headless, "
                "so frequencies.headless must be True (action_hz == rendering_hz)"
            )
        check_int("num_objects", self.num_objects, 1, MAX_OBJECTS)
        check_int("horizon", self.horizon, 1)
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
        check_int("reset_settle_steps", self.reset_settle_steps, low=0)
        check_int("contact_iterations", self.contact_iterations, low=0)

    @classmethod
    def behavior_like(cls, **overrides: object) -> "ReferenceConfig":
        """The scene with BEHAVIOR's reset and contact costs on (values and sources: module docs)."""
        return replace(cls(reset_settle_steps=BEHAVIOR_SETTLE_STEPS, contact_iterations=BEHAVIOR_CONTACT_ITERATIONS),
                       **overrides)
