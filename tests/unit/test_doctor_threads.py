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


def test_the_schedule_section_says_what_each_env_does_and_what_a_lookahead_policy_gets(two_cores):
    staged = RolloutProfile(num_env_processes=4, total_num_envs=8, pipeline_stages=2, partition="process",
                            schedule="lookahead", lookahead_steps="auto", chunk_size=16)
    report = doctor.collect(staged)
    state = report["schedule"]
    assert (state["stage_batch"], state["processes_per_stage"], state["holds"], state["error"]) == (4, 2, False, None)
    assert state["policy_input"] == "committed_actions [batch, 15, action_dim]"
    text = doctor.render_text(report)
    assert "every env steps at every global step" in text and "lead: auto (measured on the first round)" in text
    hybrid = doctor.collect(RolloutProfile(num_env_processes=2, total_num_envs=4, pipeline_stages=2))
    assert hybrid["schedule"]["holds"] and "lookahead_steps" not in hybrid["schedule"]
    assert "hold their last action while one steps" in doctor.render_text(hybrid)


def test_a_layout_the_engine_would_refuse_is_reported_without_failing_doctor(two_cores):
    """A patch profile often leaves the layout to the trainer's config: reported, not an error."""
    report = doctor.collect(RolloutProfile(num_env_processes=3, total_num_envs=3, pipeline_stages=2,
                                           partition="process"))
    assert "process partition needs pipeline_stages=2 to divide" in report["schedule"]["error"]
    assert report["ok"] == doctor.collect(RolloutProfile())["ok"]
    assert "the engine would refuse this layout: process partition" in doctor.render_text(report)
