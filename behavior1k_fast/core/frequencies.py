"""Simulator frequencies, OmniGibson's dt rules and the physics rescale for K pipeline stages.

OmniGibson's rules (``Simulator._validate_dts``): the rendering dt is an integer multiple of (and not
shorter than) the physics dt; the sim-step dt (one ``env.step``) is an integer multiple of the rendering
dt; headless runs need sim-step dt == rendering dt. Frequencies are checked as exact rationals: nothing
is rounded.

With K hybrid stages, every global sim step advances every env of a process, but an env receives an
action of its own only in its stage's chunk. Per round of K chunks (N actions each), an env takes N own
actions and holds its last action for (K - 1) * N global steps, so each own action costs K global steps
of simulated time and physics on average. The rescale modes:

- ``none``: frequencies unchanged. Simulated time and physics substeps per own action grow K-fold.
- ``divide_physics`` (RLinf): physics Hz / K. Physics substeps per own action stay as with K = 1
  (same compute); simulated time per own action is K / action_hz (an implicit action repeat) and the
  physics dt is K times coarser.
- ``preserve_sim_time``: action and rendering Hz * K, physics Hz unchanged. Simulated time and physics
  substeps per own action stay as with K = 1 (same physics dt, same compute); each own action is applied
  for 1 / (K * action_hz) seconds and then held.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .checks import check_choice, check_number, check_positive_int
from .profile import PHYSICS_RESCALE_MODES


def _as_fraction(name: str, hz: float) -> Fraction:
    """``hz`` as an exact rational (a ``Fraction`` stays exact; floats are read to 1e-6)."""
    if not isinstance(hz, Fraction):
        hz = check_number(name, hz, 0.0, low_open=True, unit="of Hz")
    elif not hz > 0:
        raise ValueError(f"{name} must be a finite number of Hz > 0, got {hz!r}")
    return Fraction(hz).limit_denominator(1_000_000)


@dataclass(frozen=True)
class Frequencies:
    """Action (= sim-step), rendering and physics frequencies in Hz, validated by OmniGibson's dt rules."""

    action_hz: float
    rendering_hz: float
    physics_hz: float
    headless: bool = True

    def __post_init__(self) -> None:
        action = _as_fraction("action_hz", self.action_hz)
        rendering = _as_fraction("rendering_hz", self.rendering_hz)
        physics = _as_fraction("physics_hz", self.physics_hz)
        per_render = physics / rendering
        if per_render.denominator != 1:
            raise ValueError(
                f"rendering_hz={self.rendering_hz} must divide physics_hz={self.physics_hz}: the rendering dt "
                f"must be an integer multiple of the physics dt (and not shorter)"
            )
        per_step = rendering / action
        if per_step.denominator != 1:
            raise ValueError(
                f"action_hz={self.action_hz} must divide rendering_hz={self.rendering_hz}: the sim-step dt "
                f"must be an integer multiple of the rendering dt"
            )
        if self.headless and per_step != 1:
            raise ValueError(
                f"headless runs need action_hz == rendering_hz, got action_hz={self.action_hz}, "
                f"rendering_hz={self.rendering_hz}"
            )

    @property
    def sim_step_dt(self) -> float:
        """Simulated seconds per global sim step (one ``env.step``)."""
        return 1.0 / self.action_hz

    @property
    def physics_dt(self) -> float:
        return 1.0 / self.physics_hz

    @property
    def physics_substeps(self) -> int:
        """Physics steps per global sim step."""
        return int(_as_fraction("physics_hz", self.physics_hz) / _as_fraction("action_hz", self.action_hz))


@dataclass(frozen=True)
class StageTiming:
    """What K stages mean for each env. Times in simulated seconds."""

    #: Frequencies to build the simulator with.
    frequencies: Frequencies
    #: Stages sharing the physics (``RolloutProfile.stages_sharing_physics``).
    stages_sharing_physics: int
    mode: str
    #: Global sim steps an env spends per own action, averaged over a round (own step + holds).
    global_steps_per_own_action: int
    #: Simulated seconds each env experiences per own action, averaged over a round.
    sim_seconds_per_own_action: float
    #: Physics substeps each env experiences per own action, averaged over a round.
    physics_substeps_per_own_action: int

    def hold_steps_per_round(self, chunk_size: int) -> int:
        """Global steps per round in which an env holds its last action instead of taking a new one."""
        return (self.stages_sharing_physics - 1) * chunk_size


def rescale_for_stages(base: Frequencies, stages_sharing_physics: int, mode: str = "divide_physics") -> StageTiming:
    """Frequencies for ``stages_sharing_physics`` stages sharing one physics (``RolloutProfile.
    stages_sharing_physics``: K in hybrid partition, 1 in process partition) under ``mode``, with the time
    each env experiences.

    Raises ValueError listing the valid stage counts when the rescaled frequencies break the dt rules.
    """
    stages = check_positive_int("stages", stages_sharing_physics)
    check_choice("mode", mode, PHYSICS_RESCALE_MODES)
    try:
        freqs = _rescaled(base, stages, mode)
    except ValueError as exc:
        valid = valid_stage_counts(base, mode)
        raise ValueError(
            f"stages={stages} is impossible with physics_rescale={mode!r} at "
            f"{base.action_hz}/{base.rendering_hz}/{base.physics_hz} Hz (action/rendering/physics): {exc}; "
            f"valid stage counts up to 16: {valid}"
        ) from None
    own_seconds = stages * freqs.sim_step_dt
    return StageTiming(
        frequencies=freqs,
        stages_sharing_physics=stages,
        mode=mode,
        global_steps_per_own_action=stages,
        sim_seconds_per_own_action=own_seconds,
        physics_substeps_per_own_action=stages * freqs.physics_substeps,
    )


def _rescaled(base: Frequencies, stages: int, mode: str) -> Frequencies:
    if mode == "none" or stages == 1:
        return base
    if mode == "divide_physics":
        return Frequencies(base.action_hz, base.rendering_hz, base.physics_hz / stages, base.headless)
    return Frequencies(base.action_hz * stages, base.rendering_hz * stages, base.physics_hz, base.headless)


def valid_stage_counts(base: Frequencies, mode: str, max_stages: int = 16) -> list[int]:
    """Stage counts in 1..max_stages whose rescaled frequencies pass the dt rules."""
    valid = []
    for k in range(1, max_stages + 1):
        try:
            _rescaled(base, k, mode)
        except ValueError:
            continue
        valid.append(k)
    return valid
