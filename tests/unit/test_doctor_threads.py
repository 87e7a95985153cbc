"""doctor's thread section: Kit thread caps above the cores this process may use are named, with the fix."""

import os

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.tools import doctor


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


def test_caps_above_the_usable_cores_are_named_with_the_profile_knob_to_lower(two_cores):
    report = doctor.collect(RolloutProfile())  # caps 8 / 4 / 4
    above = report["threads"]["above_cores"]
    assert [(c["knob"], c["value"], c["usable_cores"]) for c in above] == [
        ("carb_tasking_threads", 8, 2), ("tbb_max_threads", 4, 2), ("physx_worker_threads", 4, 2)]
    text = doctor.render_text(report)
    assert ("threadCount=8 is more than the 2 usable cores here: set carb_tasking_threads: 2 (or lower) in the "
            "profile") in text
    assert "maxThreadCount=4 is more than the 2 usable cores here: set tbb_max_threads: 2" in text


def test_caps_within_the_cores_or_left_to_kit_are_not_flagged(two_cores):
    profile = RolloutProfile(carb_tasking_threads=2, tbb_max_threads=1, physx_worker_threads=None)
    report = doctor.collect(profile)
    assert report["threads"]["above_cores"] == []
    assert "usable cores here" not in doctor.render_text(report)
