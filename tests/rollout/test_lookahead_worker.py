"""The worker side of the lookahead schedule (issue 21): profile keys, the LEAD/END protocol of a chunk with
a lead, its episode rule, and the in-process reference run (``lookahead_reference``) it is checked against."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.patching import omnigibson as omnigibson_patches
from behavior1k_fast.rollout import RolloutEngine

from .pointmass import PointMassFactory

N = 6


# --- profile -------------------------------------------------------------------------------------------


def test_lookahead_profile_keys_default_to_today_and_round_trip():
    assert RolloutProfile().lookahead_steps == 0
    p = RolloutProfile(schedule="lookahead", lookahead_steps=np.int64(3), chunk_size=4)
    assert p.lookahead_steps == 3 and type(p.lookahead_steps) is int
    assert RolloutProfile.from_dict(p.to_dict()) == p
    assert RolloutProfile.from_yaml("schedule: lookahead\nlookahead_steps: auto\n").lookahead_steps == "auto"


@pytest.mark.parametrize(
    "kw, exc, text",
    [
        (dict(schedule="lookahead", pipeline_stages=2), ValueError,
         r"^schedule='lookahead' needs pipeline_stages=1 \(every env steps at every global step\), got "
         r"pipeline_stages=2$"),
        (dict(schedule="lookahead", lookahead_steps=4, chunk_size=4), ValueError,
         r"^lookahead_steps=4 must be < chunk_size=4"),
        (dict(lookahead_steps=2), ValueError,
         r"^lookahead_steps=2 needs schedule='lookahead', got schedule='barrier'$"),
        (dict(lookahead_steps="auto", schedule="async"), ValueError,
         "needs schedule='lookahead', got schedule='async'"),
        (dict(schedule="lookahead", lookahead_steps="soon"), ValueError,
         r"^lookahead_steps must be an int >= 0 or 'auto', got 'soon'$"),
        (dict(schedule="lookahead", lookahead_steps=-1), ValueError, r"^lookahead_steps must be .*, got -1$"),
        (dict(schedule="lookahead", lookahead_steps=True), TypeError, r"^lookahead_steps must be .*, got True$"),
        (dict(schedule="lookahead", lookahead_steps=1.0), TypeError, r"^lookahead_steps must be .*, got 1.0$"),
    ],
)
def test_bad_lookahead_settings_are_one_line_errors_naming_the_values(kw, exc, text):
    with pytest.raises(exc, match=text):
        RolloutProfile(**kw)


def test_the_engine_refuses_the_lookahead_schedule_before_starting_workers():
    # The driver side of the schedule is not in the engine yet: it must not run another schedule instead.
    with pytest.raises(NotImplementedError, match="schedule='lookahead'"):
        RolloutEngine(PointMassFactory(), RolloutProfile(chunk_size=N, schedule="lookahead", lookahead_steps=2),
                      executor="inline")
    assert omnigibson_patches.active_profile() is None
