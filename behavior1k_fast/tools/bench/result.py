"""What one ``bench`` run gives: :class:`BenchResult`, its :class:`Headline` and its :class:`Goal` s.

A result holds typed records (:class:`~..measure.record.RowMeasure` per row, :class:`~..measure.machine.LoadSample`,
:class:`~..measure.calibration.Calibration`); :meth:`BenchResult.to_dict` is the JSON form ``bench`` writes
(``bench_<tag>.json``): ``complete``, ``machine``, ``config``, ``load`` (before and after), ``calibration``,
``rows`` (the ablation at the bench layout, in order), ``budget_rows`` (the engine's rows at the widest
layout of the process budget), ``peers``, ``left_out`` (rows the layout cannot hold, and why),
``scaling``, ``goals``, ``best_row``, ``headline`` and ``gpu_memory``. Times are wall ms per step, where a
step is one own action of every env.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..measure.calibration import Calibration
from ..measure.machine import LoadSample
from ..measure.record import RowMeasure


@dataclass(frozen=True)
class Goal:
    """One goal of the benchmark: what it is, its target, what was measured, and the verdict.

    Args:
        name: key (``speedup_stock_to_all``...).
        what: the goal in words.
        target: the value to reach (at least).
        unit: ``x`` (a ratio) or ``fraction``.
        measured: the measured value, or ``None`` where the run did not measure it.
    """

    name: str
    what: str
    target: float
    unit: str
    measured: float | None

    @property
    def met(self) -> bool:
        return self.measured is not None and self.measured >= self.target

    @property
    def shortfall(self) -> str:
        """By how much the goal is missed (``""`` when met, ``not measured`` without a value)."""
        value, target = self.measured, self.target
        if value is None:
            return "not measured"
        if self.met:
            return ""
        if self.unit == "x":
            return f"missed by {target / value:.2f}x ({value:.2f}x of {target:g}x)"
        return f"missed by {100 * (target - value):.1f} points ({value:.1%} of {target:.0%})"

    def format(self) -> str:
        """``what: measured (goal >= target) -> met | shortfall``."""
        value = self.measured
        shown = "n/a" if value is None else (f"{value:.2f}x" if self.unit == "x" else f"{value:.1%}")
        target = f"{self.target:g}x" if self.unit == "x" else f"{self.target:.0%}"
        return f"{self.what}: {shown} (goal >= {target}) -> {'met' if self.met else self.shortfall}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"met": self.met, "shortfall": self.shortfall}


@dataclass(frozen=True)
class Headline:
    """The engine's best row against the best fair peer at the process budget, and whether the difference is
    larger than the spread of the runs.

    Args:
        process_budget: most env processes of any row compared.
        best_engine_row: the engine's fastest row within the budget.
        best_peer: the fastest fair peer within the budget, or ``None`` where none ran.
        speedup: the peer's ms per step over the engine's, or ``None``.
        engine_ms_range: min-max ms per step of the engine row's runs.
        peer_ms_range: min-max ms per step of the peer's runs, or ``None``.
        runs: runs of each row (``--repeats``).
    """

    process_budget: int
    best_engine_row: str
    best_peer: str | None = None
    speedup: float | None = None
    engine_ms_range: tuple[float, float] = (0.0, 0.0)
    peer_ms_range: tuple[float, float] | None = None
    runs: int = 1

    @classmethod
    def of(cls, budget: int, engine: RowMeasure, peer: RowMeasure | None) -> "Headline":
        """The headline of ``engine`` against ``peer`` (their median runs, each with every run's ms per step)."""
        runs = len(engine.repeat_ms_per_step) or 1
        engine_range = (engine.ms_per_step_min, engine.ms_per_step_max)
        if peer is None:
            return cls(budget, engine.name, engine_ms_range=engine_range, runs=runs)
        return cls(budget, engine.name, peer.name, peer.ms_per_step / engine.ms_per_step, engine_range,
                   (peer.ms_per_step_min, peer.ms_per_step_max), runs)

    @property
    def within_spread(self) -> bool | None:
        """The engine's and the peer's runs overlap (min-max), so this machine measured no difference between
        them; ``None`` without a peer or with one run each (no spread measured)."""
        if self.peer_ms_range is None or self.runs < 2:
            return None
        (e_low, e_high), (p_low, p_high) = self.engine_ms_range, self.peer_ms_range
        return e_low <= p_high and p_low <= e_high

    def format(self) -> str:
        """One line, with a second clause when the ratio lies inside the spread of the runs."""
        if self.best_peer is None:
            return f"Process budget {self.process_budget}: no fair peer ran; engine best {self.best_engine_row}"
        line = (f"Process budget {self.process_budget}: engine best {self.best_engine_row} is {self.speedup:.2f}x "
                f"the best fair peer {self.best_peer}")
        if self.within_spread:
            (e_low, e_high), (p_low, p_high) = self.engine_ms_range, self.peer_ms_range
            line += (f"; no difference measurable on this machine (over {self.runs} runs each the engine took "
                     f"{e_low:.2f}-{e_high:.2f} ms/step, the peer {p_low:.2f}-{p_high:.2f}: the ranges overlap)")
        elif self.within_spread is None:
            line += " (one run each: no spread measured; --repeats 3 measures one)"
        return line

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"within_spread": self.within_spread}


@dataclass
class BenchResult:
    """One ``bench`` run, filled as it goes (module docs: the JSON form). ``complete`` turns true once every
    row, the sweep and the summary are in."""

    machine: dict
    config: dict
    load_before: LoadSample
    left_out: dict[str, str]
    load_after: LoadSample | None = None
    calibration: Calibration | None = None
    rows: list[RowMeasure] = field(default_factory=list)
    budget_rows: list[RowMeasure] = field(default_factory=list)
    peers: list[RowMeasure] = field(default_factory=list)
    scaling: list[RowMeasure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    best_row: str | None = None
    headline: Headline | None = None
    gpu_memory: dict | None = None
    complete: bool = False

    @property
    def table(self) -> list[RowMeasure]:
        """Every row of the printed table: the ablation, the budget rows, the peers."""
        return [*self.rows, *self.budget_rows, *self.peers]

    @property
    def loads(self) -> list[LoadSample]:
        return [s for s in (self.load_before, self.load_after) if s is not None]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (module docs)."""
        return {
            "complete": self.complete,
            "machine": self.machine,
            "config": self.config,
            "load": {"before": self.load_before.to_dict(),
                     "after": self.load_after.to_dict() if self.load_after else None},
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "rows": [r.to_dict() for r in self.rows],
            "budget_rows": [r.to_dict() for r in self.budget_rows],
            "peers": [r.to_dict() for r in self.peers],
            "left_out": self.left_out,
            "scaling": [r.to_dict() for r in self.scaling],
            "goals": [g.to_dict() for g in self.goals],
            "best_row": self.best_row,
            "headline": self.headline.to_dict() if self.headline else None,
            "gpu_memory": self.gpu_memory,
        }
