"""What one ``train-judge`` run gives: a :class:`TimeToTrainResult` of typed records, and its JSON form.

Per regime (:class:`RegimeResult`) every layout's seconds per sample (:class:`CostRow`), the training runs of
each semantics (:class:`TrainingRun`, one per seed), and per layout their product, the wall clock to the
target (:class:`LayoutRow`, medians and ranges over seeds as :class:`Spread`); a regime still being measured
is a :class:`RegimeProgress`. ``--lead-sweep`` gives a :class:`LeadSweep` instead. :meth:`to_dict` of each is
the JSON ``train-judge`` writes (``time_to_train_<tag>.json``: ``command``, ``machine``, ``config``,
``complete``, ``load``, ``wall_s``, ``regimes`` or ``lead_sweep``, ``in_progress`` while cut short,
``profiles``); :meth:`from_dict` reads a recorded one back (files of earlier versions too: a key they lack
reads as ``None``). Seconds per sample are wall seconds per own action of an env.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .layouts import LAYOUTS
from .stats import Interval


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class Spread:
    """Median and min-max over seeds of the values that exist (``None`` where no seed reached the target)."""

    median: float | None
    min: float | None
    max: float | None
    seeds_reached: int

    @classmethod
    def of(cls, values: list[float | None]) -> "Spread":
        have = [v for v in values if v is not None]
        if not have:
            return cls(None, None, None, 0)
        return cls(float(statistics.median(have)), float(min(have)), float(max(have)), len(have))

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "seeds_reached": self.seeds_reached}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Spread":
        return cls(data.get("median"), data.get("min"), data.get("max"), data.get("seeds_reached", 0))


@dataclass(frozen=True)
class CostRow:
    """One layout's or peer's seconds per own action, timed by :func:`~.timing.timed_loop`: the trainer's wait
    for a batch and its update (their sum is :attr:`s_per_sample`), the rollout's own wall, the busiest env
    worker's stepping, the behaviour forwards, the GPU's busy time and why it is missing, and the measured
    policy lag (mean weight versions behind the trained model); a row whose cost comes from its training runs
    (:func:`run_cost`) names the row whose PPO update it timed (``update_as``, itself; files of earlier versions:
    a TorchRL cost row, the engine layout whose update it ran, with the wall to its first batch and the share
    of its chunks whose lag the log-probs could not tell, ``first_batch_s`` and ``lag_unmatched``, read back).
    ``trainer_cpu_s_per_sample``: the CPU seconds of the thread that ran the update (``time.thread_time``), part
    of the bound. The wait and the update are ``None`` where no iteration after the first was timed (a row's own
    runs that all reached the target in one iteration): no steady state was measured."""

    wait_s_per_sample: float | None
    update_s_per_sample: float | None
    rollout_s_per_sample: float | None = None
    env_busy_s_per_sample: float | None = None
    model_s_per_sample: float | None = None
    gpu_busy_s_per_sample: float | None = None
    gpu_busy_missing: str | None = "not measured for a peer"
    policy_lag: float | None = None
    first_batch_s: float | None = None
    lag_unmatched: float | None = None
    update_as: str | None = None
    trainer_cpu_s_per_sample: float | None = None

    @property
    def s_per_sample(self) -> float | None:
        """The trainer's wall per own action: its wait for the batch, then the update (``None``: not measured)."""
        if self.wait_s_per_sample is None or self.update_s_per_sample is None:
            return None
        return self.wait_s_per_sample + self.update_s_per_sample

    @property
    def bound_s_per_sample(self) -> float | None:
        """max(GPU busy, busiest env worker, the trainer's CPU thread in the update): what the trainer's wall
        cannot beat (``None``: none measured)."""
        sides = [v for v in (self.gpu_busy_s_per_sample, self.env_busy_s_per_sample, self.trainer_cpu_s_per_sample)
                 if v is not None]
        return max(sides) if sides else None

    @property
    def of_bound(self) -> float | None:
        """The share of the bound the trainer's wall reaches (1.0 is the bound)."""
        bound, wall = self.bound_s_per_sample, self.s_per_sample
        return None if bound is None or wall is None else bound / wall

    def to_dict(self) -> dict[str, Any]:
        out = {"rollout_s_per_sample": self.rollout_s_per_sample, "wait_s_per_sample": self.wait_s_per_sample,
               "update_s_per_sample": self.update_s_per_sample,
               "env_busy_s_per_sample": self.env_busy_s_per_sample, "model_s_per_sample": self.model_s_per_sample,
               "gpu_busy_s_per_sample": self.gpu_busy_s_per_sample, "gpu_busy_missing": self.gpu_busy_missing,
               "bound_s_per_sample": self.bound_s_per_sample, "of_bound": self.of_bound,
               "s_per_sample": self.s_per_sample, "policy_lag": self.policy_lag}
        peer = {"first_batch_s": self.first_batch_s, "lag_unmatched": self.lag_unmatched, "update_as": self.update_as,
                "trainer_cpu_s_per_sample": self.trainer_cpu_s_per_sample}
        return out | {k: v for k, v in peer.items() if v is not None}  # where measured

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostRow":
        known = _known(cls, data)
        if "wait_s_per_sample" not in known:  # the first recorded files: the rollout was the wait
            known["wait_s_per_sample"] = data["s_per_sample"] - data["update_s_per_sample"]
        return cls(**{"gpu_busy_missing": None, **known})


@dataclass(frozen=True)
class TrainingRun:
    """One PPO training run of a row with one seed:
    whether and after how many env steps (own actions) the success rate of the last ``--window`` iterations
    reached ``--target`` (``samples``), the run's own wall clock then (``direct_wall_s``, its start included),
    its curve and, per iteration, the trainer's clock (:func:`~.timing.timed_loop`: ``wait_s``, ``update_s``,
    and ``update_cpu_s`` the update thread's CPU seconds) and the busiest env worker's stepping seconds
    (``busiest_env_s``, ``None`` where the source does not report it); empty in files of earlier versions.

    The start (workers spawned, envs reset, first batch) is taken out equally for every row
    (:attr:`startup_s`): whatever ran before the first iteration, and the first wait's excess over the median
    of the run's other waits (the first wait counts at that median). :attr:`trained_wall_s` is the rest: the
    sum of every iteration's wait and update."""

    seed: int
    reached: bool
    samples: int | None
    direct_wall_s: float | None
    iterations: int
    success_rate: list = field(default_factory=list)
    env_steps: list = field(default_factory=list)
    wall_s: list = field(default_factory=list)
    policy_lag: list = field(default_factory=list)
    wait_s: list = field(default_factory=list)
    update_s: list = field(default_factory=list)
    update_cpu_s: list = field(default_factory=list)
    busiest_env_s: list = field(default_factory=list)

    def _first_wait_excess(self) -> float:
        typical = statistics.median(self.wait_s[1:]) if len(self.wait_s) > 1 else self.wait_s[0]
        return max(0.0, self.wait_s[0] - typical)

    @property
    def startup_s(self) -> float | None:
        """Wall seconds of the start (class docs); ``None`` without the clock."""
        if not self.wait_s:
            return None
        before = self.wall_s[0] - self.wait_s[0] - self.update_s[0]  # the run's wall before its first wait
        return max(0.0, before) + self._first_wait_excess()

    @property
    def trained_wall_s(self) -> float | None:
        """Wall seconds of the run without its start (class docs); ``None`` without the clock."""
        if not self.wait_s:
            return None
        return float(sum(self.wait_s) + sum(self.update_s) - self._first_wait_excess())

    @property
    def wall_to_target_s(self) -> float | None:
        """:attr:`trained_wall_s` where the run reached the target (it stops there), else ``None``."""
        return self.trained_wall_s if self.reached else None

    def to_dict(self) -> dict[str, Any]:
        out = {"seed": self.seed, "reached": self.reached, "samples": self.samples,
               "direct_wall_s": self.direct_wall_s, "iterations": self.iterations,
               "success_rate": self.success_rate, "env_steps": self.env_steps, "wall_s": self.wall_s,
               "policy_lag": self.policy_lag}
        if self.wait_s:
            out |= {"wait_s": self.wait_s, "update_s": self.update_s, "update_cpu_s": self.update_cpu_s,
                    "startup_s": self.startup_s, "trained_wall_s": self.trained_wall_s,
                    "wall_to_target_s": self.wall_to_target_s}
        if self.busiest_env_s:  # files of earlier versions have none
            out["busiest_env_s"] = self.busiest_env_s
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingRun":
        return cls(**_known(cls, data))


def run_cost(runs: list[TrainingRun], update_as: str) -> CostRow:
    """A row's seconds per own action from its own training runs: per run the median over its iterations after
    the first (:func:`~.timing.per_sample`) of the wait, the update, the busiest env worker's stepping and the
    update thread's CPU seconds; the median over runs."""
    from .timing import per_sample

    def rate(values_of: Any) -> float | None:
        rates = [per_sample(values_of(r), list(np.diff([0, *r.env_steps]))) for r in runs if len(r.env_steps) > 1]
        rates = [v for v in rates if v is not None]
        return float(statistics.median(rates)) if rates else None

    lags = [lag for r in runs for lag in r.policy_lag[1:]]
    return CostRow(rate(lambda r: r.wait_s), rate(lambda r: r.update_s),
                   env_busy_s_per_sample=rate(lambda r: r.busiest_env_s),
                   trainer_cpu_s_per_sample=rate(lambda r: r.update_cpu_s),
                   gpu_busy_missing="not measured in training runs", policy_lag=float(np.mean(lags)) if lags else None,
                   update_as=update_as)


@dataclass(frozen=True)
class LayoutRow:
    """A layout's verdict in one regime: its samples and wall to target from its own training runs
    (:meth:`trained`), per seed (``wall_to_target_s_per_seed``) and as a :class:`Spread`, with those runs' own
    wall clock (``direct_wall_to_target_s``, start included); a layout that trained no seeds has its seconds per
    sample (``cost``) only (:meth:`of`; in files of the first versions, times the samples of its semantics'
    runs, ``trained_under``)."""

    semantics: str
    trained_under: str
    cost: CostRow
    samples_to_target: Spread
    wall_to_target_s_per_seed: list
    wall_to_target_s: Spread
    direct_wall_to_target_s: Spread | None = None
    #: The row trained its own seeds (its samples and wall to target are its own runs', start excluded:
    #: :class:`TrainingRun`); ``False``: seconds per sample times the samples of ``trained_under``'s runs, if any.
    own_runs: bool = False

    @classmethod
    def of(cls, semantics: str, cost: CostRow, runs: list[TrainingRun]) -> "LayoutRow":
        """A layout that trained no seeds of its own: ``cost`` times the samples of ``semantics``' ``runs``
        (files of the first versions; none elsewhere)."""
        per_seed = [None if r.samples is None or cost.s_per_sample is None else r.samples * cost.s_per_sample
                    for r in runs]
        return cls(semantics, semantics, cost, Spread.of([r.samples for r in runs]), per_seed, Spread.of(per_seed))

    @classmethod
    def trained(cls, semantics: str, name: str, cost: CostRow, runs: list[TrainingRun]) -> "LayoutRow":
        """A row that trained its own ``runs``: its samples and wall to target (start excluded) are theirs, and
        its direct wall (start included) too."""
        per_seed = [r.wall_to_target_s for r in runs]
        return cls(semantics, name, cost, Spread.of([r.samples for r in runs]), per_seed, Spread.of(per_seed),
                   Spread.of([r.direct_wall_s for r in runs]), own_runs=True)

    def to_dict(self) -> dict[str, Any]:
        out = {"semantics": self.semantics, "trained_under": self.trained_under, **self.cost.to_dict(),
               "samples_to_target": self.samples_to_target.to_dict(),
               "wall_to_target_s_per_seed": self.wall_to_target_s_per_seed,
               "wall_to_target_s": self.wall_to_target_s.to_dict()}
        if self.direct_wall_to_target_s is not None:
            out["direct_wall_to_target_s"] = self.direct_wall_to_target_s.to_dict()
        if self.own_runs:
            out["own_runs"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LayoutRow":
        direct = data.get("direct_wall_to_target_s")
        return cls(data["semantics"], data.get("trained_under", ""), CostRow.from_dict(data),
                   Spread.from_dict(data["samples_to_target"]), data["wall_to_target_s_per_seed"],
                   Spread.from_dict(data["wall_to_target_s"]), None if direct is None else Spread.from_dict(direct),
                   data.get("own_runs", False))


def _interval(data: dict[str, Any] | None) -> Interval | None:
    return None if data is None else Interval(**{**data, "seeds": tuple(data["seeds"])})


@dataclass(frozen=True)
class RowPower:
    """A row's measures over its seeds (issue 42): the mean samples and wall seconds to target with their 95 %
    bootstrap intervals (:func:`~.stats.mean_interval`; a seed that never reached the target counts at what
    it ran: :func:`~.stats.censored`), the seeds that reached it, the start taken out of the wall
    (:attr:`TrainingRun.startup_s`) and the mean success rate over the first ``budget`` samples per seed
    (:func:`~.stats.success_area`: the lower-variance measure beside the first crossing)."""

    samples: Interval
    wall_s: Interval
    seeds_reached: int
    seeds: int
    startup_s: Spread
    success_area: Spread
    budget: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples.to_dict(), "wall_s": self.wall_s.to_dict(),
                "seeds_reached": self.seeds_reached, "seeds": self.seeds, "startup_s": self.startup_s.to_dict(),
                "success_area": self.success_area.to_dict(), "budget": self.budget}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RowPower":
        return cls(_interval(data["samples"]), _interval(data["wall_s"]), data["seeds_reached"], data["seeds"],
                   Spread.from_dict(data["startup_s"]), Spread.from_dict(data["success_area"]), data.get("budget"))


def row_power(runs: list[TrainingRun], budget: float | None) -> RowPower | None:
    """:class:`RowPower` of a row's own ``runs`` (``None`` without a run that has the clock)."""
    from .stats import censored, mean_interval, success_area

    runs = [r for r in runs if r.wait_s]
    if not runs:
        return None
    samples, reached = censored([r.samples for r in runs], [r.env_steps[-1] for r in runs])
    wall, _ = censored([r.wall_to_target_s for r in runs], [r.trained_wall_s for r in runs])
    areas = [success_area(r.env_steps, r.success_rate, budget) for r in runs] if budget else []
    return RowPower(mean_interval(samples), mean_interval(wall), reached, len(runs),
                    Spread.of([r.startup_s for r in runs]), Spread.of(areas), budget)


@dataclass(frozen=True)
class Goal:
    """One goal of issue 42 judged with its interval (:func:`~.stats.verdict`): ``what`` in words, the ratio
    (``ours`` against ``peer``, a :func:`~.stats.ratio_interval` of their per-seed values of ``measure``) or
    value it is judged on, the ``goal`` it must clear, the verdict (``met`` / ``missed`` / ``not shown``) and
    why where it could not be judged (``note``). ``measure``: ``wall_s`` or ``samples`` (a ratio),
    ``within_samples`` (``goal``, ours' mean, inside the serial row's interval) or ``of_bound`` (a share)."""

    name: str
    what: str
    goal: float
    verdict: str
    interval: Interval | None = None
    ours: str | None = None
    peer: str | None = None
    measure: str = "wall_s"
    note: str = ""

    def format(self) -> str:
        """``what: the ratio with its interval (goal >= goal x) -> verdict``; a value judged against an interval
        (``within_samples``) or a share (``of_bound``) says so."""
        shown = "n/a" if self.interval is None else str(self.interval)
        note = f" ({self.note})" if self.note else ""
        if self.measure == "within_samples":
            return f"{self.what}: {shown} -> {self.verdict}{note}"
        if self.measure == "of_bound":
            return f"{self.what} (goal >= {self.goal:.0%}) -> {self.verdict}{note}"
        return f"{self.what}: {shown} (goal >= {self.goal:g}x) -> {self.verdict}{note}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "goal": self.goal, "verdict": self.verdict,
                "interval": None if self.interval is None else self.interval.to_dict(), "ours": self.ours,
                "peer": self.peer, "measure": self.measure, "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Goal":
        return cls(**{**_known(cls, data), "interval": _interval(data.get("interval"))})


def layout_rows(cost: dict[str, CostRow], trained: dict[str, list[TrainingRun]],
                rows: dict[str, Any] | None = None) -> dict[str, LayoutRow]:
    """Per row: one that trained its own seeds (in ``trained``: row name -> runs, one per seed; ``rows``: the
    compared rows, :class:`~.layouts.CompareRow` by name, for names outside :data:`~.layouts.LAYOUTS`) from
    those runs (:meth:`LayoutRow.trained`; its cost row ``cost``'s, else from the runs: :func:`run_cost`);
    a row of ``cost`` without runs of its own (a run cut short; files of the first versions) from its cost
    row (:meth:`LayoutRow.of`)."""
    layouts = {name: row.layout for name, row in (rows or {}).items()}
    out = {}
    for name in dict.fromkeys([*cost, *trained]):
        layout = layouts.get(name) or LAYOUTS.get(name)
        if layout is None:  # a semantics of a file of an earlier version
            continue
        runs = trained.get(name)
        if runs is not None:
            out[name] = LayoutRow.trained(layout.semantics, name, cost.get(name) or run_cost(runs, name), runs)
        else:
            out[name] = LayoutRow.of(layout.semantics, cost[name], trained.get(layout.semantics, []))
    return out


@dataclass(frozen=True)
class DirectRun:
    """The wall clock to target of the best engine layout measured in its own training run(s): from the
    semantics' training runs where it is the layout they trained under (``wall_s`` a :class:`Spread`), else
    from one run of its own, seed 0 (``wall_s`` seconds, ``samples`` its samples to target)."""

    layout: str
    wall_s: Spread | float | None
    source: str
    samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        wall = self.wall_s.to_dict() if isinstance(self.wall_s, Spread) else self.wall_s
        if isinstance(self.wall_s, Spread):
            return {"layout": self.layout, "wall_s": wall, "from": self.source}
        return {"layout": self.layout, "wall_s": wall, "samples": self.samples, "from": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DirectRun":
        wall = data.get("wall_s")
        return cls(data["layout"], Spread.from_dict(wall) if isinstance(wall, dict) else wall,
                   data.get("from", ""), data.get("samples"))

    def describe(self) -> str:
        if isinstance(self.wall_s, Spread):
            w = self.wall_s
            wall = "not reached" if w.median is None else f"{w.median:.1f} s ({w.min:.1f}-{w.max:.1f})"
        else:
            wall = "not reached" if self.wall_s is None else f"{self.wall_s:.1f} s"
        return f"direct run of the best layout, {self.layout}: {wall} ({self.source})"


@dataclass
class RegimeProgress:
    """A regime while it is measured (the JSON's ``in_progress``): the cost rows so far, the layouts not run
    (name -> why) and the training runs so far (semantics -> runs, one per seed). The judge fills it in place."""

    calibration: dict[str, Any]
    cost: dict[str, CostRow] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=dict)
    training_runs: dict[str, list[TrainingRun]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": self.calibration, "cost": {n: c.to_dict() for n, c in self.cost.items()},
                "not_run": self.not_run, "training_runs": _runs_dict(self.training_runs)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RegimeProgress":
        return cls(data.get("calibration", {}), {n: CostRow.from_dict(c) for n, c in data.get("cost", {}).items()},
                   data.get("not_run", {}), _runs_of(data.get("training_runs", {})))


def _runs_dict(runs: dict[str, list[TrainingRun]]) -> dict[str, list[dict]]:
    return {semantics: [r.to_dict() for r in rs] for semantics, rs in runs.items()}


def _runs_of(data: dict[str, list[dict]]) -> dict[str, list[TrainingRun]]:
    return {semantics: [TrainingRun.from_dict(r) for r in rs] for semantics, rs in data.items()}


@dataclass(frozen=True)
class RegimeResult:
    """One regime measured: per layout its :class:`LayoutRow`, the layouts not run (name -> why), the training
    runs per semantics, the direct run of the best engine layout, and the policy's calibration (a dict: the
    model's size and cost, the regime, the env's ms per chunk)."""

    calibration: dict[str, Any]
    layouts: dict[str, LayoutRow]
    not_run: dict[str, str]
    training_runs: dict[str, list[TrainingRun]]
    direct: DirectRun | None = None
    #: Per row that trained its own seeds, its :class:`RowPower`; the goals of issue 42 (:class:`Goal`).
    power: dict[str, RowPower] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {"calibration": self.calibration, "layouts": {n: r.to_dict() for n, r in self.layouts.items()},
               "not_run": self.not_run, "training_runs": _runs_dict(self.training_runs),
               "direct": None if self.direct is None else self.direct.to_dict()}
        if self.power or self.goals:
            out |= {"power": {n: p.to_dict() for n, p in self.power.items()},
                    "goals": [g.to_dict() for g in self.goals]}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RegimeResult":
        direct = data.get("direct")
        return cls(data.get("calibration", {}), {n: LayoutRow.from_dict(r) for n, r in data["layouts"].items()},
                   data.get("not_run", {}), _runs_of(data.get("training_runs", {})),
                   None if direct is None else DirectRun.from_dict(direct),
                   {n: RowPower.from_dict(p) for n, p in data.get("power", {}).items()},
                   [Goal.from_dict(g) for g in data.get("goals", [])])


@dataclass(frozen=True)
class LeadRow:
    """One lookahead lead d of the delay sweep: seconds per sample, samples to target over seeds, and their
    product."""

    lead: int
    cost: CostRow
    samples_to_target: Spread
    wall_to_target_s_per_seed: list
    wall_to_target_s: Spread
    seeds_reached: int
    training_runs: list[TrainingRun]

    def to_dict(self) -> dict[str, Any]:
        return {"lead": self.lead, **self.cost.to_dict(), "samples_to_target": self.samples_to_target.to_dict(),
                "wall_to_target_s_per_seed": self.wall_to_target_s_per_seed,
                "wall_to_target_s": self.wall_to_target_s.to_dict(), "seeds_reached": self.seeds_reached,
                "training_runs": [r.to_dict() for r in self.training_runs]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LeadRow":
        return cls(data["lead"], CostRow.from_dict(data), Spread.from_dict(data["samples_to_target"]),
                   data["wall_to_target_s_per_seed"], Spread.from_dict(data["wall_to_target_s"]),
                   data["seeds_reached"], [TrainingRun.from_dict(r) for r in data.get("training_runs", [])])


@dataclass
class LeadSweep:
    """The delay sweep of the lookahead lead: the calibration, and one :class:`LeadRow` per lead (by ``str(d)``)."""

    calibration: dict[str, Any]
    leads: dict[str, LeadRow] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": self.calibration, "leads": {d: r.to_dict() for d, r in self.leads.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LeadSweep":
        return cls(data.get("calibration", {}), {d: LeadRow.from_dict(r) for d, r in data["leads"].items()})


@dataclass
class TimeToTrainResult:
    """A ``train-judge`` run (module docs): what ran it (``command``, ``machine``, ``config``), whether it
    finished (``complete``: a run cut short keeps what it measured, the current regime under ``in_progress``),
    the machine's load before and after, its wall seconds, and the regimes or the lead sweep; ``profiles``:
    the engine profiles by name, as dicts."""

    command: str
    machine: dict[str, Any]
    config: dict[str, Any]
    complete: bool | None = False
    load: dict[str, Any] | None = None
    wall_s: float = 0.0
    regimes: dict[str, RegimeResult] = field(default_factory=dict)
    in_progress: dict[str, RegimeProgress] = field(default_factory=dict)
    lead_sweep: LeadSweep | None = None
    profiles: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"command": self.command, "machine": self.machine, "config": self.config,
                               "complete": self.complete}
        if self.load is not None:
            out["load"] = self.load
        out["wall_s"] = self.wall_s
        if self.lead_sweep is not None:
            out["lead_sweep"] = self.lead_sweep.to_dict()
        else:
            out["regimes"] = {n: r.to_dict() for n, r in self.regimes.items()}
            if self.in_progress:
                out["in_progress"] = {n: r.to_dict() for n, r in self.in_progress.items()}
        out["profiles"] = self.profiles
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TimeToTrainResult":
        """A recorded result; ``ValueError`` where ``data`` is not one (no ``regimes`` or ``lead_sweep``, or
        no ``config``)."""
        if not isinstance(data, dict) or not ({"regimes", "lead_sweep"} & set(data)) or "config" not in data:
            raise ValueError("is not a time_to_train result (no regimes or lead_sweep)")
        try:
            sweep = data.get("lead_sweep")
            return cls(data.get("command", ""), data.get("machine", {}), data["config"], data.get("complete"),
                       data.get("load"), data.get("wall_s", 0.0),
                       {n: RegimeResult.from_dict(r) for n, r in data.get("regimes", {}).items()},
                       {n: RegimeProgress.from_dict(r) for n, r in data.get("in_progress", {}).items()},
                       None if sweep is None else LeadSweep.from_dict(sweep), data.get("profiles", {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"is not a time_to_train result ({type(exc).__name__}: {exc})") from None
