"""The benchmark's outputs: the table printed to the terminal, the goals, the headline and the PNG chart.

Everything here reads the typed result (:class:`~.result.BenchResult`, its
:class:`~..measure.record.RowMeasure` rows); the JSON is :meth:`~.result.BenchResult.to_dict`, written by
:func:`~..measure.files.write_json`. Times are wall ms per step, where a step is one own action of every env.
What describes the machine and writes the files is the measurement kit's (:mod:`..measure.machine`,
:mod:`..measure.files`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..measure.calibration import Calibration
from ..measure.critical_path import PARTS
from ..measure.files import save_figure
from .result import BenchResult, Goal

#: (key in a row, column title, format) of the printed table.
COLUMNS = (
    ("label", "row", "{}"),
    ("processes", "P", "{}"),
    ("envs_per_process", "E", "{}"),
    ("ms_per_step", "e2e ms/step", "{:.2f}"),
    ("ms_per_step_range", "min-max", "{:.2f}-{:.2f}"),
    ("sim_ms_per_step", "sim ms/step", "{:.2f}"),
    ("speedup_vs_stock", "x stock", "{:.2f}"),
    ("speedup_vs_prev", "x prev", "{:.2f}"),
    ("cpu_s_per_env_step", "CPU s/env-step", "{:.4f}"),
    ("peak_rss_mib_per_env_process", "RSS MiB/proc", "{:.0f}"),
    ("gpu_mib_per_env", "GPU MiB/env", "{:.0f}"),
    ("pipeline_efficiency", "pipe eff", "{:.0%}"),
)

#: name -> (what, target, unit) of the goals printed after the table.
GOALS = {
    "speedup_stock_to_all": ("end-to-end speedup, stock -> all optimisations (best schedule)", 25.0, "x"),
    "speedup_skip_obs_to_all": ("end-to-end speedup of the pipeline over skip intermediate obs", 1.7, "x"),
    "pipeline_efficiency": ("pipeline efficiency of the best pipeline row (of its bound)", 0.95, "fraction"),
    "speedup_async_over_barrier": ("end-to-end speedup, best barrier pipeline row -> best async row", 1.3, "x"),
    "speedup_over_best_peer": ("end-to-end speedup, best fair peer -> engine best, at the process budget", 1.3,
                               "x"),
    "speedup_over_stock_peer": ("end-to-end speedup over the stock-profile AsyncVectorEnv peer", 10.0, "x"),
    "speedup_lookahead_over_hybrid": ("end-to-end speedup, hybrid K=2 overlap -> best lookahead row", 1.0, "x"),
    "lookahead_efficiency": ("pipeline efficiency of the best lookahead row (of its bound)", 0.95, "fraction"),
    "speedup_lookahead_over_user_lookahead": ("end-to-end speedup, the user-level lookahead peer -> the engine's "
                                              "lookahead row, same layout", 1.0, "x"),
}


def _value(row: Any, key: str) -> Any:
    """``row``'s ``key``: an attribute of a typed row, an entry of a mapping (shards' entries)."""
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def _cell(row: Any, key: str, fmt: str) -> str:
    if key == "ms_per_step_range":
        return fmt.format(_value(row, "ms_per_step_min"), _value(row, "ms_per_step_max"))
    value = _value(row, key)
    return "-" if value is None else fmt.format(value)


def _format_left_out(left_out: dict[str, str]) -> str:
    """One line per reason: the rows the layout cannot hold, grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for name, why in left_out.items():
        by_reason.setdefault(why, []).append(name)
    return "\n".join(f"left out {', '.join(names)}: {why}" for why, names in by_reason.items())


def _format_critical_path(row: Any) -> str | None:
    """One line: a ``lookahead`` row's median round, part by part (``RowMeasure.critical_path``), or
    ``None`` where the row has none."""
    path = row.critical_path
    if not path or not path.get("rounds"):
        return None
    parts = ", ".join(f"{p.replace('_', ' ')} {path[p]['median_ms']:.1f}" for p in PARTS)
    return (f"{row.label}: median round {path['round']['median_ms']:.1f} ms = {parts} "
            f"(lead render {path['render']['median_ms']:.1f}, worker stall {path['stall']['median_ms']:.1f}; "
            f"{path['rounds']} rounds)")


def format_table(rows: Sequence[Any], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> str:
    """Fixed-width text table of ``rows`` (typed rows or mappings; ``-`` where a value does not apply)."""
    cells = [[title for _, title, _ in columns]]
    cells += [[_cell(row, key, fmt) for key, _, fmt in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: (key in a scaling entry, column title, format) of the printed scaling table.
SCALING_COLUMNS = (
    ("processes", "procs", "{}"),
    ("total_envs", "envs", "{}"),
    ("ms_per_step", "e2e ms/step", "{:.2f}"),
    ("env_steps_per_s", "env-steps/s", "{:.0f}"),
    ("bound_env_steps_per_s", "bound env-steps/s", "{:.0f}"),
    ("pipeline_efficiency", "pipe eff", "{:.0%}"),
    ("cpu_s_per_env_step", "CPU s/env-step", "{:.4f}"),
    ("gpu_mib_per_env", "GPU MiB/env", "{:.0f}"),
)


def _format_scaling(entries: Sequence[Any]) -> str:
    """Text table of the scaling sweep over env processes."""
    return f"Scaling ({entries[0].label}):\n" + format_table(entries, SCALING_COLUMNS)


def check_goals(measured: Mapping[str, float | None], goals: Mapping[str, tuple] = GOALS) -> list[Goal]:
    """One :class:`~.result.Goal` per entry of ``goals`` (name -> what, target, unit), its value from
    ``measured`` (``None`` or absent: not measured)."""
    return [Goal(name, what, target, unit, measured.get(name)) for name, (what, target, unit) in goals.items()]


def format_goals(goals: Sequence[Goal]) -> str:
    return "\n".join(["Goals (reported, not asserted):", *(f"  {g.format()}" for g in goals)])


def format_model_cost(calibration: Calibration) -> str:
    """One line: the policy's size and T_model(batch) over batch 1..all envs."""
    points = ", ".join(f"{c['batch']}: {c['ms']:.1f}" for c in calibration.t_model_by_batch)
    return (f"Policy: width {calibration.model_width}, depth {calibration.model_depth}, "
            f"{calibration.model_parameters / 1e6:.1f}M parameters, {calibration.model_dtype}; "
            f"T_model ms by batch: {points}")


def format_result(result: BenchResult) -> str:
    """What ``bench`` prints once it measured (also what it measured so far, before a failure): the table,
    the rows left out, the scaling sweep, the lookahead rows' critical paths, the headline and the goals."""
    lines = [format_table(result.table)] if result.table else ["(no row measured)"]
    over = [row.name for row in result.table if (row.pipeline_efficiency or 0.0) > 1.0]
    if over:
        lines.append(f"pipe eff over 100 % ({', '.join(over)}): the bound comes from the run's own T_env and "
                     f"T_model, which held waiting for cores the other used; a core-bound run, not one faster than "
                     f"perfect overlap")
    if result.left_out:
        lines.append(_format_left_out(result.left_out))
    if result.scaling:
        lines.append(_format_scaling(result.scaling))
    lines += [line for row in result.table if (line := _format_critical_path(row))]
    if result.headline is not None:
        lines.append(result.headline.format())
    if result.goals:
        lines.append(format_goals(result.goals))
    return "\n".join(lines)


def _plot_rows(ax: Any, rows: Sequence[Any]) -> None:
    """End-to-end (median, min-max whiskers) and simulator-only ms/step per row, labelled by speedup."""
    xs = range(len(rows))
    e2e = [r.ms_per_step for r in rows]
    sim = [r.sim_ms_per_step or 0.0 for r in rows]
    spread = [[r.ms_per_step - r.ms_per_step_min for r in rows], [r.ms_per_step_max - r.ms_per_step for r in rows]]
    ax.bar([x - 0.2 for x in xs], e2e, width=0.4, yerr=spread, capsize=2, label="end-to-end")
    ax.bar([x + 0.2 for x in xs], sim, width=0.4, label="simulator only")
    for x, r in zip(xs, rows):
        if r.speedup_vs_stock is not None:
            ax.annotate(f"{r.speedup_vs_stock:.1f}x", (x - 0.2, r.ms_per_step), ha="center", va="bottom",
                        fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r.label for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per step (log)")
    ax.set_title("ablation (labels: speedup vs stock)")
    ax.legend()


def _plot_scaling(ax: Any, scaling: Sequence[Any]) -> None:
    """Measured env-steps/s over env processes, against the bound and a line from the first point."""
    procs = [s.processes for s in scaling]
    ax.plot(procs, [s.env_steps_per_s for s in scaling], "o-", label="measured")
    ax.plot(procs, [s.bound_env_steps_per_s or 0.0 for s in scaling], "x--", label="bound (perfect overlap)")
    first = scaling[0].env_steps_per_s / procs[0]
    ax.plot(procs, [first * p for p in procs], ":", color="grey", label=f"linear from {procs[0]} process(es)")
    ax.set_xlabel("env processes")
    ax.set_ylabel("env-steps / s")
    ax.set_title(f"scaling ({scaling[0].label})")
    ax.legend()


def _plot_model_cost(ax: Any, calibration: Calibration) -> None:
    """The policy's T_model(batch) against a cost linear in the batch, the stage batch and the target."""
    curve = calibration.t_model_by_batch
    batches = [c["batch"] for c in curve]
    ax.plot(batches, [c["ms"] for c in curve], "o-", label="measured forward")
    ax.plot(batches, [curve[-1]["ms_per_sample"] * b for b in batches], "--", color="gray",
            label="linear in batch (through the full batch)")
    if calibration.stage_batch:
        ax.axvline(calibration.stage_batch, color="C1", ls=":", label=f"stage batch ({calibration.stage_batch})")
    if calibration.target_model_ms:
        ax.axhline(calibration.target_model_ms, color="C2", ls=":", label="calibration target (T_env)")
    ax.set_xticks(batches if len(batches) <= 32 else batches[:: len(batches) // 16])
    ax.set_xlabel("batch (envs)")
    ax.set_ylabel("ms per forward")
    ax.set_title(f"policy T_model(batch): width {calibration.model_width}, depth {calibration.model_depth}, "
                 f"{calibration.model_dtype}")
    ax.set_ylim(0, None)
    ax.legend(fontsize=8)


def write_plot(result: BenchResult, path: str | os.PathLike) -> Path:
    """Bar chart of end-to-end and simulator-only ms/step per row (the ablation, the budget rows, the peers),
    the scaling sweep, and the policy's T_model(batch) against a cost linear in the batch; written
    atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result.calibration is not None and bool(result.calibration.t_model_by_batch)
    panels = 1 + bool(result.scaling) + curve
    fig, axes = plt.subplots(1, panels, figsize=(9 + 5 * (panels - 1), 5), squeeze=False)
    axes = list(axes[0])
    _plot_rows(axes.pop(0), result.table)
    if result.scaling:
        _plot_scaling(axes.pop(0), result.scaling)
    if curve:
        _plot_model_cost(axes.pop(0), result.calibration)
    m = result.machine
    gpu = m["gpu"]["name"] if m.get("gpu") else "no GPU"
    fig.suptitle(f"behavior1k-fast bench ({result.config['backend']}): {m['cpu_model']}, "
                 f"{m['logical_cores']} cores, {gpu}", fontsize=9)
    return save_figure(fig, path)
