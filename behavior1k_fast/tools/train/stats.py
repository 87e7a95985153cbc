"""Intervals over seeds for the time-to-train judge: when can a ratio be told from seed noise.

A training run's samples and wall seconds to a success target vary from seed to seed (a per-seed
log-spread of about 0.2 on the reach task), so a ratio of two layouts' means is believed only with its
interval. Here:

- :func:`mean_interval`: a row's mean over seeds with its bootstrap interval (BCa, resampling seeds);
- :func:`ratio_interval`: the ratio ``mean(peer) / mean(ours)`` (how many times shorter ours is) with its
  bootstrap interval (the two rows' seeds resampled independently) and the exact two-sided permutation
  p-value of the log values' difference in means (every split of the pooled seeds; 5 against 5 seeds gives
  252 splits, so p can go down to 2/252);
- :func:`verdict`: a goal ``ratio >= goal`` is ``met`` only when the interval's low end clears it,
  ``missed`` when its high end is below it, and ``not shown`` in between, and with fewer than
  :data:`MIN_SEEDS` seeds a side (a bootstrap over 2 or 3 seeds is far too narrow, and no split of them can
  reach p = 0.05);
- :func:`censored`: a seed that did not reach the target within its budget counts at that budget (a lower
  bound of what it would have needed), and the row says how many seeds reached it;
- :func:`success_area`: the lower-variance learning measure beside the first crossing: the mean success rate
  over the first ``budget`` samples (the area under the success curve, divided by the budget).

All intervals are two-sided at ``confidence`` (0.95 unless asked). ``scipy.stats`` does the resampling.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

#: Resamples of a bootstrap interval (BCa); fixed seed, so an interval is the same from run to run.
RESAMPLES = 9999
BOOTSTRAP_SEED = 0

MET, MISSED, NOT_SHOWN = "met", "missed", "not shown"
#: Seeds a side before a ratio gets a verdict: the fewest whose exact permutation test can go below p = 0.05
#: (4 against 4: 70 splits, two-sided p down to 2/70; 3 against 3: 2/20).
MIN_SEEDS = 4


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval; ``low``/``high`` are ``None`` with fewer than 2 values per side
    (no interval can be drawn from one seed). ``p_value``: for a ratio, the exact permutation test's
    two-sided p of "the two rows are alike" (``None`` for a single row's mean)."""

    estimate: float
    low: float | None
    high: float | None
    confidence: float
    seeds: tuple[int, ...]
    p_value: float | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "seeds": list(self.seeds)}

    def __str__(self) -> str:
        if self.low is None:
            return f"{self.estimate:.3g} (no interval: {'/'.join(map(str, self.seeds))} seeds)"
        text = f"{self.estimate:.3g} [{self.low:.3g}, {self.high:.3g}]"
        return text if self.p_value is None else f"{text} p={self.p_value:.2g}"


def _values(values: Sequence[float], name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError(f"{name}: expected a non-empty list of numbers, got {values!r}")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name}: expected positive finite numbers (samples or seconds), got {values!r}")
    return array


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a number between 0 and 1, got {confidence!r}")


def _bootstrap(data: tuple[np.ndarray, ...], statistic, confidence: float) -> tuple[float, float]:
    """BCa interval of ``statistic`` over independently resampled ``data``: a point where every seed of every
    row is alike, the percentile interval where BCa is undefined otherwise (scipy warns and returns NaN)."""
    from scipy import stats

    if all(np.ptp(values) == 0 for values in data):
        estimate = float(statistic(*data))
        return estimate, estimate
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa on a near-degenerate resample: NaN, then the percentile
            result = stats.bootstrap(data, statistic, paired=False, vectorized=True, confidence_level=confidence,
                                     n_resamples=RESAMPLES, method=method, random_state=BOOTSTRAP_SEED)
        low, high = result.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            break
    return float(low), float(high)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of one row's per-seed ``values`` with its bootstrap interval."""
    _check_confidence(confidence)
    array = _values(values, "values")
    if len(array) < 2:
        return Interval(float(array.mean()), None, None, confidence, (len(array),))
    low, high = _bootstrap((array,), _mean, confidence)
    return Interval(float(array.mean()), low, high, confidence, (len(array),))


def ratio_interval(peer: Sequence[float], ours: Sequence[float], confidence: float = 0.95) -> Interval:
    """``mean(peer) / mean(ours)`` (> 1: ours is shorter) with its bootstrap interval and the exact permutation
    p-value of the log values (module docs). ``peer`` and ``ours``: per-seed samples or seconds to target."""
    from scipy import stats

    _check_confidence(confidence)
    a, b = _values(peer, "peer"), _values(ours, "ours")
    estimate = float(a.mean() / b.mean())
    if len(a) < 2 or len(b) < 2:
        return Interval(estimate, None, None, confidence, (len(a), len(b)))

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)

    def log_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    low, high = _bootstrap((a, b), ratio, confidence)
    test = stats.permutation_test((np.log(a), np.log(b)), log_difference, permutation_type="independent",
                                  n_resamples=np.inf, vectorized=True, alternative="two-sided")
    return Interval(estimate, low, high, confidence, (len(a), len(b)), float(test.pvalue))


def verdict(interval: Interval, goal: float) -> str:
    """``met`` when the interval clears ``goal`` (low end >= goal), ``missed`` when it lies below (high end <
    goal), else ``not shown``; fewer than :data:`MIN_SEEDS` seeds on a side is ``not shown``."""
    if interval.low is None or min(interval.seeds) < MIN_SEEDS:
        return NOT_SHOWN
    if interval.low >= goal:
        return MET
    if interval.high < goal:
        return MISSED
    return NOT_SHOWN


def within(interval: Interval, value: float) -> bool | None:
    """Whether ``value`` lies inside ``interval`` (``None`` without an interval)."""
    if interval.low is None:
        return None
    return interval.low <= value <= interval.high


def censored(reached: Sequence[float | None], budgets: Sequence[float]) -> tuple[list[float], int]:
    """Per-seed values to target, a seed that never reached it counted at its budget (the samples or seconds it
    ran: a lower bound of what it needed), and how many seeds reached the target."""
    if len(reached) != len(budgets):
        raise ValueError(f"budgets: expected one per seed ({len(reached)}), got {len(budgets)}")
    values = [float(b) if r is None else float(r) for r, b in zip(reached, budgets)]
    return values, sum(r is not None for r in reached)


def success_area(env_steps: Sequence[float], success: Sequence[float | None], budget: float) -> float:
    """Mean success rate over the first ``budget`` samples: the success curve (an iteration's samples take the
    rate of the episodes that ended in it, or the last rate where none ended; 0 before any) integrated over
    samples up to ``budget`` and divided by it. A run shorter than ``budget`` holds its last rate to the budget (a run stopped
    at its target keeps succeeding as it did then)."""
    if budget <= 0:
        raise ValueError(f"budget: expected a positive number of samples, got {budget!r}")
    if len(env_steps) != len(success):
        raise ValueError(f"success: expected one rate per iteration ({len(env_steps)}), got {len(success)}")
    area, previous, rate = 0.0, 0.0, 0.0
    for steps, value in zip(env_steps, success):
        if value is not None:
            rate = float(value)
        end = min(float(steps), budget)
        area += rate * max(0.0, end - previous)
        previous = max(previous, end)
        if steps >= budget:
            break
    area += rate * max(0.0, budget - previous)
    return area / budget
