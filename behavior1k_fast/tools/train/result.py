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

from .layouts import LAYOUTS


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
    policy lag (mean weight versions behind the trained model). A peer driven as a collector also has the
    wall to its first batch (its workers' start), the share of chunks whose lag could not be found, and the
    engine layout whose PPO update it runs (``update_as``)."""

    wait_s_per_sample: float
    update_s_per_sample: float
    rollout_s_per_sample: float | None = None
    env_busy_s_per_sample: float | None = None
    model_s_per_sample: float | None = None
    gpu_busy_s_per_sample: float | None = None
    gpu_busy_missing: str | None = "not measured for a peer"
    policy_lag: float | None = None
    first_batch_s: float | None = None
    lag_unmatched: float | None = None
    update_as: str | None = None

    @property
    def s_per_sample(self) -> float:
        """The trainer's wall per own action: its wait for the batch, then the update."""
        return self.wait_s_per_sample + self.update_s_per_sample

    @property
    def bound_s_per_sample(self) -> float | None:
        """max(GPU busy, busiest env worker): what the trainer's wall cannot beat (``None``: neither measured)."""
        sides = [v for v in (self.gpu_busy_s_per_sample, self.env_busy_s_per_sample) if v is not None]
        return max(sides) if sides else None

    @property
    def of_bound(self) -> float | None:
        """The share of the bound the trainer's wall reaches (1.0 is the bound)."""
        bound = self.bound_s_per_sample
        return None if bound is None else bound / self.s_per_sample

    def to_dict(self) -> dict[str, Any]:
        out = {"rollout_s_per_sample": self.rollout_s_per_sample, "wait_s_per_sample": self.wait_s_per_sample,
               "update_s_per_sample": self.update_s_per_sample,
               "env_busy_s_per_sample": self.env_busy_s_per_sample, "model_s_per_sample": self.model_s_per_sample,
               "gpu_busy_s_per_sample": self.gpu_busy_s_per_sample, "gpu_busy_missing": self.gpu_busy_missing,
               "bound_s_per_sample": self.bound_s_per_sample, "of_bound": self.of_bound,
               "s_per_sample": self.s_per_sample, "policy_lag": self.policy_lag}
        peer = {"first_batch_s": self.first_batch_s, "lag_unmatched": self.lag_unmatched, "update_as": self.update_as}
        return out | {k: v for k, v in peer.items() if v is not None}  # a peer driven as a collector

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostRow":
        known = _known(cls, data)
        if "wait_s_per_sample" not in known:  # the first recorded files: the rollout was the wait
            known["wait_s_per_sample"] = data["s_per_sample"] - data["update_s_per_sample"]
        return cls(**{"gpu_busy_missing": None, **known})


@dataclass(frozen=True)
class TrainingRun:
    """One PPO training run of a semantics (under its ``trained_under`` layout) with one seed: whether and
    after how many env steps (own actions) the success rate of the last ``--window`` iterations reached
    ``--target`` (``samples``), the run's own wall clock then (``direct_wall_s``), and its curve."""

    seed: int
    reached: bool
    samples: int | None
    direct_wall_s: float | None
    iterations: int
    success_rate: list = field(default_factory=list)
    env_steps: list = field(default_factory=list)
    wall_s: list = field(default_factory=list)
    policy_lag: list = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "reached": self.reached, "samples": self.samples,
                "direct_wall_s": self.direct_wall_s, "iterations": self.iterations,
                "success_rate": self.success_rate, "env_steps": self.env_steps, "wall_s": self.wall_s,
                "policy_lag": self.policy_lag}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingRun":
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class LayoutRow:
    """A layout's verdict in one regime: its seconds per sample (``cost``) times its semantics' samples to
    target, per seed (``wall_to_target_s_per_seed``) and as a :class:`Spread`; the layout the semantics
    trained under also has those runs' own wall clock (``direct_wall_to_target_s``)."""

    semantics: str
    trained_under: str
    cost: CostRow
    samples_to_target: Spread
    wall_to_target_s_per_seed: list
    wall_to_target_s: Spread
    direct_wall_to_target_s: Spread | None = None

    @classmethod
    def of(cls, semantics: str, trained_under: str, cost: CostRow, runs: list[TrainingRun],
           direct: bool) -> "LayoutRow":
        per_seed = [None if r.samples is None else r.samples * cost.s_per_sample for r in runs]
        return cls(semantics, trained_under, cost, Spread.of([r.samples for r in runs]), per_seed,
                   Spread.of(per_seed), Spread.of([r.direct_wall_s for r in runs]) if direct else None)

    def to_dict(self) -> dict[str, Any]:
        out = {"semantics": self.semantics, "trained_under": self.trained_under, **self.cost.to_dict(),
               "samples_to_target": self.samples_to_target.to_dict(),
               "wall_to_target_s_per_seed": self.wall_to_target_s_per_seed,
               "wall_to_target_s": self.wall_to_target_s.to_dict()}
        if self.direct_wall_to_target_s is not None:
            out["direct_wall_to_target_s"] = self.direct_wall_to_target_s.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LayoutRow":
        direct = data.get("direct_wall_to_target_s")
        return cls(data["semantics"], data.get("trained_under", ""), CostRow.from_dict(data),
                   Spread.from_dict(data["samples_to_target"]), data["wall_to_target_s_per_seed"],
                   Spread.from_dict(data["wall_to_target_s"]), None if direct is None else Spread.from_dict(direct))


def layout_rows(cost: dict[str, CostRow], trained: dict[str, list[TrainingRun]]) -> dict[str, LayoutRow]:
    """Per layout or peer of ``cost``: its semantics' samples to target from the training runs ``trained``
    (semantics -> runs, one per seed) and their product (:meth:`LayoutRow.of`)."""
    rows = {}
    for name, c in cost.items():
        layout = LAYOUTS[name]
        rows[name] = LayoutRow.of(layout.semantics, layout.trained_under, c, trained.get(layout.semantics, []),
                                  direct=name == layout.trained_under)
    return rows


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

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": self.calibration, "layouts": {n: r.to_dict() for n, r in self.layouts.items()},
                "not_run": self.not_run, "training_runs": _runs_dict(self.training_runs),
                "direct": None if self.direct is None else self.direct.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RegimeResult":
        direct = data.get("direct")
        return cls(data.get("calibration", {}), {n: LayoutRow.from_dict(r) for n, r in data["layouts"].items()},
                   data.get("not_run", {}), _runs_of(data.get("training_runs", {})),
                   None if direct is None else DirectRun.from_dict(direct))


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
