"""How a :class:`~.result.TimeToTrainResult` is shown: markdown tables (:func:`format_table`) and a plot
(:func:`plot`), both also for a recorded result read back (``train-judge --plot RESULT.json``), a run cut
short included (its current regime drawn from what it measured)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..measure.files import save_figure
from .layouts import REGIMES
from .result import LayoutRow, RegimeResult, Spread, TimeToTrainResult, layout_rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f}"


def _wall(w: Spread) -> str:
    return "not reached" if w.median is None else f"{w.median:.1f} ({w.min:.1f}-{w.max:.1f})"


def _samples(s: Spread) -> str:
    return "-" if s.median is None else f"{s.median:.0f}"


def _lag(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def regime_rows(result: TimeToTrainResult) -> dict[str, dict[str, LayoutRow]]:
    """Per regime its layout rows; a regime of a run cut short (``in_progress``) as ``<regime> (cut short)``,
    with the rows of what it measured."""
    rows = {regime: data.layouts for regime, data in result.regimes.items()}
    rows.update({f"{regime} (cut short)": layout_rows(data.cost, data.training_runs)
                 for regime, data in result.in_progress.items()})
    return rows


def format_table(result: TimeToTrainResult) -> str:
    """The result as markdown tables: per regime, one row per layout (``--lead-sweep``: one per lead), each
    with its measured policy lag (a cost row whose layout trained no seeds here: ``not trained``); then each
    regime's direct run and the layouts not run."""
    if result.lead_sweep is not None:
        lines = ["| lead d | ms/sample | samples to target | seeds reached | wall to target s (min-max) |",
                 "| ---: | ---: | ---: | ---: | ---: |"]
        for r in result.lead_sweep.leads.values():
            lines.append(f"| {r.lead} | {_ms(r.cost.s_per_sample)} | {_samples(r.samples_to_target)} | "
                         f"{r.seeds_reached} | {_wall(r.wall_to_target_s)} |")
        return "\n".join(lines)
    lines = []
    for regime, rows in regime_rows(result).items():
        lines += [f"{regime} (T_model / T_env = {REGIMES[regime.split(' ')[0]]}):",
                  "| layout | semantics | ms/sample | rollout ms/sample | update ms/sample | policy lag | "
                  "samples to target | wall to target s (min-max) |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in rows.items():
            c = r.cost
            lines.append(f"| {name} | {r.semantics} | {_ms(c.s_per_sample)} | {_ms(c.rollout_s_per_sample)} | "
                         f"{_ms(c.update_s_per_sample)} | {_lag(c.policy_lag)} | {_samples(r.samples_to_target)} | "
                         f"{_wall(r.wall_to_target_s) if r.wall_to_target_s_per_seed else 'not trained'} |")
        data = result.regimes.get(regime)
        if data is not None and data.direct is not None:
            lines.append(data.direct.describe())
    for regime, data in result.regimes.items():
        lines += power_table(regime, data)
    for regime, data in {**result.regimes, **result.in_progress}.items():
        if data.not_run:
            lines.append(f"{regime}: not run: " + "; ".join(f"{k}: {v}" for k, v in data.not_run.items()))
    return "\n".join(lines)


def _interval(interval: Any, scale: str = ".0f") -> str:
    if interval.low is None:
        return f"{interval.estimate:{scale}}"
    return f"{interval.estimate:{scale}} [{interval.low:{scale}}, {interval.high:{scale}}]"


def power_table(regime: str, data: RegimeResult) -> list[str]:
    """The rows that trained their own seeds, each with its means and 95 % intervals (start excluded from the
    wall and shown apart), then the goals of issue 42 with their verdicts."""
    if not data.power:
        return []
    budget = next(iter(data.power.values())).budget
    lines = [f"{regime}: every row from its own training runs (mean [95 % bootstrap interval] over seeds; a seed "
             f"that never reached the target counts at what it ran)",
             f"| row | seeds reached | samples to target | wall to target s | start s (median, apart) | mean "
             f"success over the first {budget or 0:.0f} samples (median) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, p in data.power.items():
        start = "-" if p.startup_s.median is None else f"{p.startup_s.median:.1f}"
        area = "-" if p.success_area.median is None else f"{p.success_area.median:.3f}"
        lines.append(f"| {name} | {p.seeds_reached}/{p.seeds} | {_interval(p.samples)} | "
                     f"{_interval(p.wall_s, '.1f')} | {start} | {area} |")
    lines += [f"{regime} goal: {goal.format()}" for goal in data.goals]
    return lines


def plot(result: TimeToTrainResult, path: Path) -> None:
    """Per regime: wall clock to the target per layout (median, min-max over seeds) and seconds per sample
    (rollout and update), a regime of a run cut short with what it measured; ``--lead-sweep``: samples,
    seconds per sample and wall to target against the lead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if result.lead_sweep is not None:
        rows = list(result.lead_sweep.leads.values())
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        leads = [r.lead for r in rows]
        for ax, spreads, label in ((axes[0], [r.samples_to_target for r in rows], "samples to target"),
                                   (axes[2], [r.wall_to_target_s for r in rows], "wall s to target")):
            ax.plot(leads, [s.median or np.nan for s in spreads], "o-")
            ax.set_ylabel(label)
        axes[1].plot(leads, [r.cost.s_per_sample * 1e3 for r in rows], "o-")
        axes[1].set_ylabel("ms per sample")
        for ax in axes:
            ax.set_xlabel("lookahead lead d (steps)")
    else:
        regimes = regime_rows(result)
        fig, axes = plt.subplots(len(regimes), 2, figsize=(14, 4.5 * len(regimes)), squeeze=False)
        for (regime, rows), (left, right) in zip(regimes.items(), axes):
            names = list(rows)
            power = result.regimes[regime].power if regime in result.regimes else {}
            wall, low, high = [], [], []
            for n in names:  # a row of its own runs: mean and 95 % interval; else median and min-max
                if n in power:
                    i = power[n].wall_s
                    wall.append(i.estimate)
                    low.append(0.0 if i.low is None else i.estimate - i.low)
                    high.append(0.0 if i.high is None else i.high - i.estimate)
                else:
                    w = rows[n].wall_to_target_s
                    m = w.median or 0.0
                    wall.append(m)
                    low.append(m - (w.min or m))
                    high.append((w.max or m) - m)
            left.bar(names, wall, yerr=[low, high], capsize=3)
            left.set_ylabel(f"{regime}: wall s to success >= {result.config['target']}\n(own runs: mean, 95 % "
                            f"interval, start apart; others: median, min-max)", fontsize=7)
            costs = [rows[n].cost for n in names]
            right.bar(names, [(c.s_per_sample or np.nan) * 1e3 for c in costs], label="ms per sample (trainer's wall)")
            right.plot(names, [(c.rollout_s_per_sample or np.nan) * 1e3 for c in costs], "o", label="rollout")
            right.plot(names, [(c.update_s_per_sample or np.nan) * 1e3 for c in costs], "x", label="update")
            right.legend(fontsize=7)
            for ax in (left, right):
                ax.tick_params(axis="x", rotation=40, labelsize=7)
    fig.suptitle(f"time to a trained policy ({result.machine.get('cpu_model')}, {result.config['seeds']} seeds)",
                 fontsize=9)
    save_figure(fig, path)
