"""Intervals over seeds: ratios, verdicts, censored seeds and the success area, on values whose answer is known."""

import numpy as np
import pytest

pytest.importorskip("scipy")

from behavior1k_fast.tools.train import stats  # noqa: E402


def test_a_clear_speed_up_has_an_interval_above_one_and_a_small_exact_p_value():
    peer, ours = [10.0, 12, 11, 13, 9], [7.0, 8, 6.5, 8.5, 7.5]
    ratio = stats.ratio_interval(peer, ours)
    assert ratio.estimate == pytest.approx(np.mean(peer) / np.mean(ours))
    assert 1 < ratio.low < ratio.estimate < ratio.high
    # every value of ours is below every value of the peer: the most extreme of the 252 splits, two-sided
    assert ratio.p_value == pytest.approx(2 / 252)
    assert stats.verdict(ratio, 1.2) == stats.MET
    assert stats.verdict(ratio, 2.0) == stats.MISSED


def test_two_seeds_cannot_show_a_ratio_below_p_one_sixth():
    ratio = stats.ratio_interval([10.0, 11], [8.0, 8.5])
    assert ratio.p_value == pytest.approx(2 / 6)  # 2 vs 2 seeds: 6 splits, the observed one and its mirror


def test_fewer_than_four_seeds_a_side_get_no_verdict_however_narrow_their_interval():
    clear = stats.ratio_interval([20.0, 21, 22], [10.0, 10.5, 11])  # 3 against 3: p cannot go below 2/20
    assert clear.low > 1.5 and clear.p_value == pytest.approx(2 / 20)
    assert stats.verdict(clear, 1.5) == stats.NOT_SHOWN
    four = stats.ratio_interval([20.0, 21, 22, 20.5], [10.0, 10.5, 11, 10.2])
    assert four.p_value < 0.05 and stats.verdict(four, 1.5) == stats.MET
    assert stats.verdict(stats.ratio_interval([20.0, 21, 22, 20.5], [10.0, 10.5, 11]), 1.5) == stats.NOT_SHOWN


def test_overlapping_rows_are_not_shown():
    ratio = stats.ratio_interval([10.0, 14, 8, 12, 9], [9.0, 13, 8.5, 11, 10])
    assert ratio.low < 1.2 < ratio.high or ratio.high < 1.2
    assert stats.verdict(ratio, 1.05) == stats.NOT_SHOWN


def test_one_seed_gives_no_interval_and_no_verdict():
    ratio = stats.ratio_interval([10.0], [5.0])
    assert ratio.estimate == 2.0 and ratio.low is None
    assert stats.verdict(ratio, 1.5) == stats.NOT_SHOWN
    assert stats.within(ratio, 2.0) is None


def test_a_mean_interval_holds_its_mean_and_identical_seeds_collapse_to_a_point():
    interval = stats.mean_interval([4.0, 5, 6, 5, 5])
    assert interval.low < 5 < interval.high
    assert stats.within(interval, 5.0) and not stats.within(interval, 9.0)
    point = stats.mean_interval([3.0, 3.0, 3.0])
    assert (point.low, point.high) == (3.0, 3.0)


def test_intervals_are_reproducible_from_run_to_run():
    assert stats.ratio_interval([3.0, 4, 5], [2.0, 2.5, 3]) == stats.ratio_interval([3.0, 4, 5], [2.0, 2.5, 3])


@pytest.mark.parametrize("bad", [[], [1.0, -2.0], [float("nan")], [[1.0]]])
def test_values_that_are_not_positive_numbers_are_refused(bad):
    with pytest.raises(ValueError, match="peer"):
        stats.ratio_interval(bad, [1.0, 2.0])


def test_a_confidence_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        stats.mean_interval([1.0, 2.0], confidence=95)


def test_a_seed_that_never_reached_the_target_counts_at_its_budget():
    values, reached = stats.censored([100.0, None, 120.0], [150.0, 400.0, 130.0])
    assert values == [100.0, 400.0, 120.0] and reached == 2
    with pytest.raises(ValueError, match="budgets"):
        stats.censored([1.0], [1.0, 2.0])


def test_success_area_integrates_each_iterations_rate_over_its_samples():
    # iterations of 100 samples: rates 0, 0.5, (none ended: holds 0.5), 1.0
    steps, success = [100, 200, 300, 400], [0.0, 0.5, None, 1.0]
    assert stats.success_area(steps, success, 400) == pytest.approx((0 + 50 + 50 + 100) / 400)
    assert stats.success_area(steps, success, 250) == pytest.approx((0 + 50 + 25) / 250)
    # a run stopped at 400 samples holds its last rate to a budget of 600
    assert stats.success_area(steps, success, 600) == pytest.approx((200 + 200) / 600)
    with pytest.raises(ValueError, match="budget"):
        stats.success_area(steps, success, 0)
