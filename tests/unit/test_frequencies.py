import pytest

from behavior1k_fast.core.frequencies import Frequencies, rescale_for_stages, valid_stage_counts


def test_omnigibson_dt_rules():
    f = Frequencies(30, 30, 120)
    assert f.physics_substeps == 4 and f.sim_step_dt == pytest.approx(1 / 30)
    with pytest.raises(ValueError, match="rendering_hz=30 must divide physics_hz=45"):
        Frequencies(30, 30, 45)
    with pytest.raises(ValueError, match="headless runs need action_hz == rendering_hz"):
        Frequencies(30, 60, 120)
    assert Frequencies(30, 60, 120, headless=False).physics_substeps == 4
    with pytest.raises(ValueError, match="action_hz=45 must divide rendering_hz=60"):
        Frequencies(45, 60, 120, headless=False)


@pytest.mark.parametrize("bad", [0, -30, float("nan"), float("inf")])
def test_invalid_frequency_values(bad):
    with pytest.raises(ValueError, match=r"physics_hz must be a finite number of Hz > 0, got"):
        Frequencies(30, 30, bad)


def test_frequency_type_error():
    with pytest.raises(TypeError, match="action_hz must be a finite number of Hz > 0, got .30."):
        Frequencies("30", 30, 120)


def test_rlinf_table_divide_physics_at_60_60_120():
    """upstream-omnigibson.md §4: S=1 -> 2 substeps, S=2 -> physics 60 Hz, 2/60 s per own action."""
    one = rescale_for_stages(Frequencies(60, 60, 120), 1)
    two = rescale_for_stages(Frequencies(60, 60, 120), 2)
    assert one.frequencies.physics_substeps == 2 and one.sim_seconds_per_own_action == pytest.approx(1 / 60)
    assert two.frequencies.physics_hz == 60 and two.frequencies.physics_substeps == 1
    assert two.sim_seconds_per_own_action == pytest.approx(2 / 60)
    assert two.physics_substeps_per_own_action == one.physics_substeps_per_own_action
    assert two.hold_steps_per_round(32) == 32
    with pytest.raises(ValueError, match=r"stages=3 is impossible.*valid stage counts up to 16: \[1, 2\]"):
        rescale_for_stages(Frequencies(60, 60, 120), 3)


def test_valid_stage_counts_at_omnigibson_defaults():
    assert valid_stage_counts(Frequencies(30, 30, 120), "divide_physics") == [1, 2, 4]
    assert valid_stage_counts(Frequencies(30, 30, 120), "preserve_sim_time") == [1, 2, 4]
    assert valid_stage_counts(Frequencies(30, 30, 120), "none", max_stages=5) == [1, 2, 3, 4, 5]


def test_preserve_sim_time_keeps_seconds_and_substeps_per_own_action():
    base = rescale_for_stages(Frequencies(30, 30, 120), 1)
    for k in (2, 4):
        t = rescale_for_stages(Frequencies(30, 30, 120), k, "preserve_sim_time")
        assert t.sim_seconds_per_own_action == pytest.approx(base.sim_seconds_per_own_action)
        assert t.physics_substeps_per_own_action == base.physics_substeps_per_own_action
        assert t.frequencies.physics_dt == pytest.approx(base.frequencies.physics_dt)


def test_mode_none_grows_time_and_compute_k_fold():
    t = rescale_for_stages(Frequencies(30, 30, 120), 3, "none")
    assert t.sim_seconds_per_own_action == pytest.approx(3 / 30)
    assert t.physics_substeps_per_own_action == 12


@pytest.mark.parametrize("stages, exc", [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_stage_count(stages, exc):
    with pytest.raises(exc, match="stages"):
        rescale_for_stages(Frequencies(30, 30, 120), stages)


def test_bad_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        rescale_for_stages(Frequencies(30, 30, 120), 2, "halve")


def test_the_timing_names_the_stages_sharing_one_physics():
    timing = rescale_for_stages(Frequencies(60, 60, 120), stages_sharing_physics=2)
    assert timing.stages_sharing_physics == 2 and timing.hold_steps_per_round(8) == 8
    assert not hasattr(timing, "stages")
