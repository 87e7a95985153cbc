"""The benchmark's outputs: the table printed to the terminal, the goals check, the JSON and the PNG chart.

A result is a plain dict (what goes into the JSON): ``machine``, ``config``, ``load`` (the machine's load
before and after), ``rows`` (the ablation at the bench layout, in order), ``budget_rows`` (the engine's
rows at the widest layout of the process budget), ``peers`` (:mod:`.peers`), each row a
:meth:`~..measure.record.RowMeasure.to_dict` of its median run; ``left_out`` (rows the layout cannot
hold, and why), ``headline`` (engine best against the best fair peer at the process budget), ``scaling``
(optional sweep over env processes) and ``goals``. Times are wall ms per step, where a step is one own
action of every env.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from pathlib import Path
from typing import Any, Sequence

from ..measure.critical_path import PARTS

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
}


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    if key == "ms_per_step_range":
        return fmt.format(row["ms_per_step_min"], row["ms_per_step_max"])
    value = row.get(key)
    return "-" if value is None else fmt.format(value)


def format_left_out(left_out: dict[str, str]) -> str:
    """One line per reason: the rows the layout cannot hold, grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for name, why in left_out.items():
        by_reason.setdefault(why, []).append(name)
    return "\n".join(f"left out {', '.join(names)}: {why}" for why, names in by_reason.items())


def format_headline(headline: dict[str, Any]) -> str:
    """One line: the engine's best row against the best fair peer at the process budget."""
    if headline["best_peer"] is None:
        return f"Process budget {headline['process_budget']}: no fair peer ran; engine best {headline['best_engine_row']}"
    return (f"Process budget {headline['process_budget']}: engine best {headline['best_engine_row']} is "
            f"{headline['speedup']:.2f}x the best fair peer {headline['best_peer']}")


def format_critical_path(row: dict[str, Any]) -> str | None:
    """One line: a ``lookahead`` row's median round, part by part (``RowMeasure.critical_path``), or
    ``None`` where the row has none."""
    path = row.get("critical_path")
    if not path or not path.get("rounds"):
        return None
    parts = ", ".join(f"{p.replace('_', ' ')} {path[p]['median_ms']:.1f}" for p in PARTS)
    return (f"{row['label']}: median round {path['round']['median_ms']:.1f} ms = {parts} "
            f"(lead render {path['render']['median_ms']:.1f}, worker stall {path['stall']['median_ms']:.1f}; "
            f"{path['rounds']} rounds)")


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> str:
    """Fixed-width text table of ``rows`` (``-`` where a value does not apply)."""
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


def format_scaling(entries: Sequence[dict[str, Any]]) -> str:
    """Text table of the scaling sweep over env processes."""
    return f"Scaling ({entries[0]['label']}):\n" + format_table(entries, SCALING_COLUMNS)


def check_goals(measured: dict[str, float | None], goals: dict[str, tuple] = GOALS) -> list[dict[str, Any]]:
    """One record per goal of ``goals`` (name -> what, target, unit): target, measured value, whether it is
    met and, if not, by how much it is missed."""
    out = []
    for name, (what, target, unit) in goals.items():
        value = measured.get(name)
        met = value is not None and value >= target
        if value is None:
            gap = "not measured"
        elif met:
            gap = ""
        elif unit == "x":
            gap = f"missed by {target / value:.2f}x ({value:.2f}x of {target:g}x)"
        else:
            gap = f"missed by {100 * (target - value):.1f} points ({value:.1%} of {target:.0%})"
        out.append({"name": name, "what": what, "target": target, "unit": unit, "measured": value, "met": met,
                    "shortfall": gap})
    return out


def format_goals(goals: Sequence[dict[str, Any]]) -> str:
    lines = ["Goals (reported, not asserted):"]
    for g in goals:
        value = g["measured"]
        shown = "n/a" if value is None else (f"{value:.2f}x" if g["unit"] == "x" else f"{value:.1%}")
        target = f"{g['target']:g}x" if g["unit"] == "x" else f"{g['target']:.0%}"
        status = "met" if g["met"] else g["shortfall"]
        lines.append(f"  {g['what']}: {shown} (goal >= {target}) -> {status}")
    return "\n".join(lines)


def describe_machine(device: str) -> dict[str, Any]:
    """CPU model, cores, memory, GPU and library versions of this machine."""
    import psutil

    cpu_model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "logical_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "policy_device": device,
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
        "gpu": None,
    }
    for module in ("torch", "mujoco", "gymnasium", "numpy"):
        try:  # from package metadata: importing mujoco here would fix its GL backend before MUJOCO_GL is set
            info[f"{module}_version"] = importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:  # a missing library is recorded as missing
            info[f"{module}_version"] = None
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                           "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    except Exception:  # torch absent: no GPU description
        pass
    return info


def machine_tag(machine: dict[str, Any]) -> str:
    """Short file-name tag: ``cpu2`` on a CPU machine, ``h200-cpu16`` with a GPU."""
    cores = f"cpu{machine.get('logical_cores')}"
    gpu = machine.get("gpu")
    if not gpu:
        return cores
    name = gpu["name"].replace("NVIDIA", "").strip().split()[0].lower()
    return f"{name}-{cores}"


def write_json(result: dict[str, Any], path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def format_model_cost(calibration: dict[str, Any]) -> str:
    """One line: the policy's size and T_model(batch) over batch 1..all envs."""
    curve = calibration["t_model_by_batch"]
    points = ", ".join(f"{c['batch']}: {c['ms']:.1f}" for c in curve)
    return (f"Policy: width {calibration['model_width']}, depth {calibration['model_depth']}, "
            f"{calibration['model_parameters'] / 1e6:.1f}M parameters, {calibration['model_dtype']}; "
            f"T_model ms by batch: {points}")


def write_plot(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Bar chart of end-to-end (median, min-max whiskers) and simulator-only ms/step per row (the ablation,
    the budget rows, the peers), the scaling sweep, and the policy's T_model(batch) against a cost linear in
    the batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [*result["rows"], *(result.get("budget_rows") or []), *(result.get("peers") or [])]
    scaling = result.get("scaling") or []
    calibration = result.get("calibration") or {}
    curve = calibration.get("t_model_by_batch") or []
    panels = 1 + bool(scaling) + bool(curve)
    fig, axes = plt.subplots(1, panels, figsize=(9 + 5 * (panels - 1), 5), squeeze=False)
    axes = list(axes[0])
    ax = axes.pop(0)
    xs = range(len(rows))
    e2e = [r["ms_per_step"] for r in rows]
    sim = [r.get("sim_ms_per_step") or 0.0 for r in rows]
    spread = [[r["ms_per_step"] - r.get("ms_per_step_min", r["ms_per_step"]) for r in rows],
              [r.get("ms_per_step_max", r["ms_per_step"]) - r["ms_per_step"] for r in rows]]
    ax.bar([x - 0.2 for x in xs], e2e, width=0.4, yerr=spread, capsize=2, label="end-to-end")
    ax.bar([x + 0.2 for x in xs], sim, width=0.4, label="simulator only")
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['speedup_vs_stock']:.1f}x", (x - 0.2, r["ms_per_step"]), ha="center", va="bottom",
                    fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["label"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per step (log)")
    ax.set_title("ablation (labels: speedup vs stock)")
    ax.legend()
    if scaling:
        ax = axes.pop(0)
        procs = [s["processes"] for s in scaling]
        ax.plot(procs, [s["env_steps_per_s"] for s in scaling], "o-", label="measured")
        ax.plot(procs, [s["bound_env_steps_per_s"] for s in scaling], "x--", label="bound (perfect overlap)")
        first = scaling[0]["env_steps_per_s"] / procs[0]
        ax.plot(procs, [first * p for p in procs], ":", color="grey", label=f"linear from {procs[0]} process(es)")
        ax.set_xlabel("env processes")
        ax.set_ylabel("env-steps / s")
        ax.set_title(f"scaling ({scaling[0]['label']})")
        ax.legend()
    if curve:
        ax = axes.pop(0)
        batches = [c["batch"] for c in curve]
        ax.plot(batches, [c["ms"] for c in curve], "o-", label="measured forward")
        full = curve[-1]
        ax.plot(batches, [full["ms_per_sample"] * b for b in batches], "--", color="gray",
                label="linear in batch (through the full batch)")
        stage = calibration.get("stage_batch")
        if stage:
            ax.axvline(stage, color="C1", ls=":", label=f"stage batch ({stage})")
        if calibration.get("target_model_ms"):
            ax.axhline(calibration["target_model_ms"], color="C2", ls=":", label="calibration target (T_env)")
        ax.set_xticks(batches if len(batches) <= 32 else batches[:: len(batches) // 16])
        ax.set_xlabel("batch (envs)")
        ax.set_ylabel("ms per forward")
        ax.set_title(f"policy T_model(batch): width {calibration['model_width']}, depth "
                     f"{calibration['model_depth']}, {calibration['model_dtype']}")
        ax.set_ylim(0, None)
        ax.legend(fontsize=8)
    m = result["machine"]
    gpu = m["gpu"]["name"] if m.get("gpu") else "no GPU"
    fig.suptitle(f"behavior1k-fast bench ({result['config']['backend']}): {m['cpu_model']}, "
                 f"{m['logical_cores']} cores, {gpu}", fontsize=9)
    return save_figure(fig, path)


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Lay out matplotlib figure ``fig``, write it to ``path`` (its folder made where absent), close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
