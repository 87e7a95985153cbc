"""The goals of issue 42, judged with intervals over seeds (:mod:`.stats`) from the rows that trained their own
seeds (:class:`~.result.RowPower`), per regime:

- wall clock to target with collect-while-train (ours: the engine's ``+overlap`` row with the shortest mean
  wall) **>= 1.5x shorter** than the serial double buffer and **>= 1.2x shorter** than the double buffer with
  its update on a thread, in the env-bound and balanced regimes; **never longer** (>= 1x) in the model-bound
  one (:data:`WALL_GOALS`);
- samples to target at lag 1 (ours) within the serial engine row's 95 % interval (its mean at most the
  interval's high end: met, also below it, which the line says; above: missed);
- shorter than every TorchRL row that ran (>= 1x);
- seconds per sample >= 90 % of the bound max(GPU busy, busiest env worker, trainer CPU thread) (:data:`OF_BOUND`)
  in ours' cost row (a median over iterations, no interval).

``--corrections`` judges each correction's row against the serial row instead (:func:`correction_goals`).
A ratio goal is ``met`` only when its interval's low end clears it (:func:`~.stats.verdict`). A seed that never
reached the target counts at what it ran (:func:`~.stats.censored`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import stats
from .layouts import TORCHRL_PEERS
from .result import Goal, LayoutRow, RowPower

#: regime -> (the ratio over the serial double buffer, over the double buffer with its update on a thread).
WALL_GOALS = {"env-bound": (1.5, 1.2), "balanced": (1.5, 1.2), "model-bound": (1.0, 1.0)}
#: The share of the bound seconds per sample must reach.
OF_BOUND = 0.9


def _censored(runs: list[Any], measure: str) -> list[float]:
    if measure == "samples":
        return stats.censored([r.samples for r in runs], [r.env_steps[-1] for r in runs])[0]
    return stats.censored([r.wall_to_target_s for r in runs], [r.trained_wall_s for r in runs])[0]


def ours(power: dict[str, RowPower], rows: dict[str, Any]) -> str | None:
    """The engine ``+overlap`` row (of ``rows``: name -> :class:`~.layouts.CompareRow`) with the shortest mean
    wall to target, ``None`` where none trained."""
    overlap = [n for n in power if n in rows and not rows[n].layout.is_peer and rows[n].layout.overlap]
    return min(overlap, key=lambda n: power[n].wall_s.estimate) if overlap else None


def ratio_goal(name: str, what: str, goal: float, runs: dict[str, list[Any]], power: dict[str, RowPower],
               mine: str, peer: str, measure: str = "wall_s") -> Goal:
    """``peer`` / ``mine`` of ``measure`` (per-seed ``wall_s`` or ``samples``, censored) >= ``goal``."""
    if peer not in power:
        return Goal(name, what, goal, stats.NOT_SHOWN, ours=mine, peer=peer, measure=measure,
                    note=f"{peer} did not train here")
    interval = stats.ratio_interval(_censored(runs[peer], measure), _censored(runs[mine], measure))
    return Goal(name, what, goal, stats.verdict(interval, goal), interval, mine, peer, measure)


def within_serial(mine: str, serial: str, power: dict[str, RowPower]) -> Goal:
    """``mine``'s mean samples to target within (or below) ``serial``'s 95 % interval: met (the lag cost no
    samples the serial seeds cannot account for); above its high end: missed; no interval: not shown."""
    interval, value = power[serial].samples, power[mine].samples.estimate
    verdict = (stats.NOT_SHOWN if interval.high is None else stats.MET if value <= interval.high
               else stats.MISSED)
    below = interval.low is not None and value < interval.low
    return Goal(f"lag1_samples_within_serial:{mine}", f"samples to target of {mine} ({value:.0f}) within {serial}'s "
                f"95 % interval", value, verdict, interval, mine, serial, "within_samples",
                "below it: fewer samples than serial" if below else "")


def correction_goals(runs: dict[str, list[Any]], power: dict[str, RowPower], rows: dict[str, Any]) -> list[Goal]:
    """``--corrections``: per overlapped row (one lag correction each) its samples to target within its serial
    twin's interval, and its wall to target against the serial twin's (>= 1x: not longer)."""
    goals = []
    for name in power:
        serial = rows[name].layout.serial_twin
        if serial in power:
            goals += [within_serial(name, serial, power),
                      ratio_goal(f"wall_vs_serial:{name}", f"wall to target, {name} vs {serial}", 1.0, runs, power,
                                 name, serial)]
    return goals


def regime_goals(regime: str, runs: dict[str, list[Any]], power: dict[str, RowPower], rows: dict[str, Any],
                 layouts: dict[str, LayoutRow]) -> list[Goal]:
    """The goals of issue 42 (module docs) in ``regime`` from the rows' own ``runs`` (row -> runs), their
    ``power``, the compared ``rows`` and the layout rows (for the TorchRL rows and ours' cost)."""
    mine = ours(power, rows)
    if mine is None:
        return []
    serial_db, thread_db = WALL_GOALS[regime.split(" ")[0]]
    goals = [
        ratio_goal("wall_vs_double_buffer", f"wall to target, {mine} vs the serial double buffer", serial_db, runs,
                   power, mine, "double_buffer_peer"),
        ratio_goal("wall_vs_thread_double_buffer", f"wall to target, {mine} vs the double buffer with its update "
                   f"on a thread", thread_db, runs, power, mine, "double_buffer_thread"),
    ]
    serial = rows[mine].layout.serial_twin
    if serial in power:
        goals.append(replace(within_serial(mine, serial, power), name="lag1_samples_within_serial"))
    for peer in TORCHRL_PEERS:
        if peer in layouts or peer in power:
            goals.append(ratio_goal(f"wall_vs_{peer}", f"wall to target, {mine} vs {peer}", 1.0, runs, power, mine,
                                    peer))
    cost = layouts[mine].cost if mine in layouts else None
    share = None if cost is None else cost.of_bound
    goals.append(Goal("of_bound", f"{mine}: share of the bound max(GPU busy, busiest env worker, trainer CPU "
                      f"thread) its seconds per sample reach", OF_BOUND,
                      stats.NOT_SHOWN if share is None else stats.MET if share >= OF_BOUND else stats.MISSED,
                      ours=mine, measure="of_bound",
                      note="no cost row" if share is None else f"{share:.0%}: the cost row's median over "
                                                               f"iterations, no interval"))
    return goals
