"""OmniGibson env-config frequencies and their rescale for K pipeline stages.

An OmniGibson config sets ``env.action_frequency`` (one ``env.step``), ``env.rendering_frequency`` and
``env.physics_frequency`` in Hz; missing keys take upstream's defaults (``gm.DEFAULT_SIM_STEP_FREQ`` 30,
``DEFAULT_RENDERING_FREQ`` 30, ``DEFAULT_PHYSICS_FREQ`` 120). The rules and the time each env experiences
per own action are those of :mod:`behavior1k_fast.timing`.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from ..timing import Frequencies, StageTiming, rescale_for_stages

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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"env.{key} must be a positive finite frequency in Hz, got {value!r}")
        hz[key] = value
    try:
        return Frequencies(hz["action_frequency"], hz["rendering_frequency"], hz["physics_frequency"], headless)
    except ValueError as exc:
        raise ValueError(f"env config frequencies break OmniGibson's dt rules: {exc}") from None


def rescale_env_config(
    config: Mapping[str, Any], stages: int, mode: str = "divide_physics", headless: bool = True
) -> tuple[dict, StageTiming]:
    """A copy of ``config`` with frequencies for ``stages`` pipeline stages under ``mode``, and the timing.

    ``timing.sim_seconds_per_own_action`` is the simulated time each env experiences per own action;
    an impossible ``stages`` raises ValueError listing the valid stage counts."""
    timing = rescale_for_stages(env_frequencies(config, headless), stages, mode)
    out = copy.deepcopy(dict(config))
    env = out.setdefault("env", {})
    freqs = timing.frequencies
    env["action_frequency"] = freqs.action_hz
    env["rendering_frequency"] = freqs.rendering_hz
    env["physics_frequency"] = freqs.physics_hz
    return out, timing
