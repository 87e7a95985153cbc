"""``behavior1k-fast doctor``: what this machine runs and what the patch set would do to it.

Reports versions (from package metadata, nothing heavy imported for them), whether OmniGibson imports (on
a machine without CUDA through the CPU import hook of :mod:`behavior1k_fast.omnigibson.cpu_import`), each
patch of the profile with the state ``apply()`` would give it and why (``PatchRegistry.plan``), thread
settings (with BEHAVIOR-1K #2303's torch-thread constants of the challenge evaluator where the installed OmniGibson
has them, and how they meet ``intra_op_threads``), the effective ``gm.PHYSICS_BACKEND`` / ``gm.RENDER_BACKEND`` on
the render/physics-backend layout, the layout and schedule (stages, the policy's batch, whether envs hold on
shared physics, the
``lookahead`` lead and the committed actions the policy gets), CPU count, GPUs (``nvidia-smi`` when
present), for a profile with ``gpu_ids`` the GPU each env
worker would run on with the settings that bind it (:mod:`behavior1k_fast.core.gpus`), and whether auto-apply
(``BEHAVIOR1K_FAST``) is set up and active. With ``--ray ADDRESS`` it also prints on which node of that Ray
cluster each env worker of the profile would start (``--placement``, ``--worker-cpus``, ``--worker-gpus``: as
the engine's ``placement`` and ``ray_actor_options``). Exit code 1 when a patch the profile asks for cannot
apply (``failed``), OmniGibson is installed but does not import, the GPU binding cannot hold, or the cluster
cannot place the workers (a layout the engine would refuse is reported, not an error: a patch profile
often leaves the layout to the trainer's config); 2 for a bad ``--profile`` or a bad placement setting. It lists the shared-memory
segments (``/dev/shm/b1kf_*``) left by processes that are gone; ``--clean`` removes them
(:func:`behavior1k_fast.rollout.shm.remove_stale_segments`). ``--upstream PATH`` checks a
BEHAVIOR-1K checkout against ``patches/`` instead (:mod:`.upstream_check`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import gpus
from ..core.profile import RolloutProfile
from ..patching import FAILED, SKIPPED, PatchRegistry, autoapply
from ..patching.omnigibson import REGISTRY
from . import upstream_check
from .argtypes import fail, path

#: Distributions whose versions are reported (``None`` when not installed).
DISTRIBUTIONS = ("omnigibson", "isaacsim", "torch", "numba", "llvmlite", "mujoco", "gymnasium", "wrapt")
#: USD's thread-pool cap, reported after the intra-op pool variables the ``intra_op_threads`` patch sets.
USD_THREAD_ENV_VAR = "PXR_WORK_THREAD_LIMIT"
#: BEHAVIOR-1K #2303 ("constant options for torch threads nums", 3.9.1): module constants of the challenge
#: evaluator (``None``: torch's own default), read from its text (importing it would start an evaluation).
TORCH_THREAD_FILE = "eval/evaluator.py"
TORCH_THREAD_CONSTANTS = ("TORCH_NUM_THREADS", "TORCH_NUM_INTEROP_THREADS")


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="versions, patch plan, threads, CPU and GPU of this machine",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--profile", type=path, metavar="PATH", help="YAML rollout profile (default: the fast path)")
    parser.add_argument(
        "--upstream",
        type=path,
        metavar="PATH",
        help="instead: which line the BEHAVIOR-1K checkout (or OmniGibson/ folder) at PATH is, and whether each "
        "patch of the matching patches/ series applies to it (exit 0 only when every needed patch applies)",
    )
    parser.add_argument("--clean", action="store_true",
                        help="remove the shared-memory segments (/dev/shm/b1kf_*) of processes that are gone")
    _add_ray_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _omnigibson_state() -> dict[str, Any]:
    """Whether omnigibson is importable here and imports (through the CPU hook when CUDA is absent)."""
    state: dict[str, Any] = {"installed": False, "imported": False, "cpu_import_hook": False, "error": None}
    if importlib.util.find_spec("omnigibson") is None:
        return state
    state["installed"] = True
    from ..patching.omnigibson import cpu_import

    try:
        cpu_import.import_omnigibson()
    except Exception as exc:  # report, do not crash: the point of doctor
        state["error"] = f"{type(exc).__name__}: {exc}"
    else:
        state["imported"] = True
    state["cpu_import_hook"] = cpu_import.installed()
    return state


def _patches(profile: RolloutProfile, omnigibson: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per patch: the state ``apply(profile)`` would give it in a process that runs the simulator (an
    env worker), why, and in which processes it applies (``applies_in``)."""
    registry = REGISTRY
    if omnigibson["imported"]:
        planned = registry.plan(profile, process="simulator")
    else:  # plan what needs no omnigibson import (process settings, patches the profile turns off)
        offline = [p for p in registry.patches if p.module is None or not p.wanted(profile)]
        planned = PatchRegistry(offline, simulator=registry.simulator).plan(profile, process="simulator")
    outcomes = {o.name: o for o in planned.outcomes}
    rows = []
    for patch in registry.patches:
        targets, outcome = patch.describe_targets(), outcomes.get(patch.name)
        if outcome is not None:  # its targets as it binds them on this layout
            state, reason, targets = outcome.state, outcome.reason, outcome.targets
        elif omnigibson["installed"]:
            state, reason = FAILED, f"omnigibson does not import: {omnigibson['error']}"
        else:
            state, reason = SKIPPED, "omnigibson is not installed"
        rows.append(
            {
                "name": patch.name,
                "state": state,
                "reason": reason,
                "targets": list(targets),
                "upstream_file": patch.upstream_file,
                "process_setting": patch.module is None,
                "applies_in": registry.where(patch),
            }
        )
    return rows


def _threads(profile: RolloutProfile) -> dict[str, Any]:
    """Launch settings: Kit command-line arguments (thread caps, descriptor sets), the ``argv[0]`` fix, the
    render-quality settings; the intra-op pools. ``above_cores``: each Kit thread cap the profile sets above
    the cores this process may use, as ``{knob, setting, value, usable_cores}`` (Kit starts that many workers per
    simulator process: on a small machine they only contend). The default profile's caps are not flagged: they
    are the values the fast path is measured with (on simulator hosts), and a profile must mean the same launch
    on every machine; ``default_caps_above_cores`` lists them for the record."""
    from ..patching.omnigibson.runtime import (INTRA_OP_ENV_VARS, KIT_THREAD_SETTINGS, launch_kit_args,
                                               render_quality_settings)

    torch = sys.modules.get("torch")
    usable = _cpu()["usable"] or os.cpu_count() or 1
    above = [
        {"knob": knob, "setting": setting, "value": getattr(profile, knob), "usable_cores": usable}
        for knob, setting in KIT_THREAD_SETTINGS.items()
        if getattr(profile, knob) is not None and getattr(profile, knob) > usable
    ]
    defaults = {f.name: f.default for f in dataclasses.fields(RolloutProfile)}
    return {
        "kit_args": launch_kit_args(profile),
        "above_cores": [cap for cap in above if cap["value"] != defaults[cap["knob"]]],
        "default_caps_above_cores": [cap["knob"] for cap in above if cap["value"] == defaults[cap["knob"]]],
        "keep_launch_argv0": profile.keep_launch_argv0,
        "render_settings": render_quality_settings(profile),
        "intra_op_threads": profile.intra_op_threads,
        "env": {var: os.environ.get(var) for var in (*INTRA_OP_ENV_VARS, USD_THREAD_ENV_VAR)},
        "torch_intra_op_threads": torch.get_num_threads() if torch is not None else None,
        "torch_thread_option": torch_thread_option(_omnigibson_package()),
    }


def torch_thread_option(package: Path | None) -> dict[str, Any]:
    """BEHAVIOR-1K #2303's torch thread constants (:data:`TORCH_THREAD_CONSTANTS`) where the OmniGibson package
    folder ``package`` has them in :data:`TORCH_THREAD_FILE`: ``{"found", "file", "values"}``, each value the
    constant's source text (``"None"``: torch's default)."""
    path = package / TORCH_THREAD_FILE if package is not None else None
    text = path.read_text(errors="replace") if path is not None and path.is_file() else ""
    values = {}
    for name in TORCH_THREAD_CONSTANTS:
        match = re.search(rf"^{name}\s*=\s*([^#\n]+?)\s*(?:#.*)?$", text, re.M)
        if match:
            values[name] = match[1]
    return {"found": bool(values), "file": str(path) if values else None, "values": values}


def _omnigibson_package() -> Path | None:
    """The installed ``omnigibson`` package folder (found without importing it), or ``None``."""
    spec = importlib.util.find_spec("omnigibson")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _backends(omnigibson: dict[str, Any]) -> dict[str, Any]:
    """The physics and render backends the simulator runs (``gm.PHYSICS_BACKEND`` / ``gm.RENDER_BACKEND`` and the
    classes their registries map them to) on the render/physics-backend layout; ``layout`` says which layout."""
    from ..patching.omnigibson.layout import capture_reason, is_render_backend_layout, selected_backends

    simulator = sys.modules.get("omnigibson.simulator") if omnigibson["imported"] else None
    if simulator is None or not is_render_backend_layout(simulator):
        return {"layout": "kit_launch" if simulator is not None else None}
    physics, render = selected_backends()
    physics_cls = getattr(simulator, "PHYSICS_BACKENDS", {}).get(physics)
    render_cls = simulator.RENDER_BACKENDS.get(render)
    return {
        "layout": "render_physics_backends",
        "physics": physics,
        "physics_class": getattr(physics_cls, "__name__", None),
        "render": render,
        "render_class": getattr(render_cls, "__name__", None),
        "camera_capture": None if render_cls is None else (capture_reason(render_cls) or "every modality"),
    }


def _render_backends(state: dict[str, Any]) -> list[str]:
    """The backends part of the text report."""
    if state["layout"] is None:
        return ["Backends: unknown (OmniGibson does not import)"]
    if state["layout"] == "kit_launch":
        return ["Backends: none (this OmniGibson's simulator launches Kit itself: no gm.PHYSICS_BACKEND / "
                "gm.RENDER_BACKEND)"]

    def named(key: str, registry: str) -> str:
        cls = state[f"{key}_class"]
        return f"{state[key]!r} ({cls})" if cls else f"{state[key]!r} (not in {registry}: the simulator cannot start)"

    return ["Backends (render/physics-backend layout):",
            f"  {'gm.PHYSICS_BACKEND':<21} {named('physics', 'PHYSICS_BACKENDS')}",
            f"  {'gm.RENDER_BACKEND':<21} {named('render', 'RENDER_BACKENDS')}",
            f"  {'camera capture':<21} {state['camera_capture'] or '-'}"]


def _render_torch_threads(option: dict[str, Any], intra_op_threads: int | None) -> list[str]:
    """The torch-thread lines of the text report: #2303's constants and how they relate to ``intra_op_threads``."""
    if not option["found"]:
        return [f"  {'#2303 torch threads':<21} not found in this install (BEHAVIOR-1K #2303, 3.9.1, puts "
                f"{' / '.join(TORCH_THREAD_CONSTANTS)} in omnigibson/{TORCH_THREAD_FILE})"]
    values = " ".join(f"{name}={value}" for name, value in option["values"].items())
    ours = (f"intra_op_threads={intra_op_threads} sets torch's intra-op pool (and OMP/MKL/OpenBLAS) in env worker "
            "processes when they import OmniGibson" if intra_op_threads else "intra_op_threads is off")
    return [f"  {'#2303 torch threads':<21} {values} ({option['file']})",
            f"  {'':<21} the evaluator sets torch's pools itself, in its own process, where a constant is not None; "
            f"{ours}; in an evaluator process that applies this profile the evaluator's call comes later and wins; "
            "interop threads are the evaluator's only"]


def _cpu() -> dict[str, Any]:
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {"count": os.cpu_count(), "usable": len(affinity) if affinity is not None else None}


def _gpus() -> dict[str, Any]:
    """``nvidia-smi`` rows ``name, memory, driver``; ``available`` False when the tool is absent or fails."""
    devices, note = gpus.nvidia_smi_gpus()
    return {"available": devices is not None, "devices": devices or [], "note": note}


def _isaac_sim_version() -> tuple[str | None, str]:
    """``(version, where it was read)``: the ``isaacsim`` package, else ``$ISAAC_PATH/VERSION`` (a launcher
    install); ``(None, why)``."""
    version = _version("isaacsim")
    if version is not None:
        return version, "isaacsim package"
    isaac_path = os.environ.get("ISAAC_PATH")
    if isaac_path:
        try:
            with open(os.path.join(isaac_path, "VERSION")) as file:
                return file.read().strip().split("-")[0], "$ISAAC_PATH/VERSION"
        except OSError as exc:
            return None, f"$ISAAC_PATH/VERSION unreadable: {exc}"
    return None, "not installed (no isaacsim package, ISAAC_PATH unset)"


def _driver(smi_rows: list[str] | None) -> dict[str, Any]:
    """The NVIDIA driver (NVML, else ``nvidia-smi``), the Isaac Sim version, and every known-bad pair
    (:data:`~behavior1k_fast.core.gpus.KNOWN_BAD_DRIVERS`) they form, with its source."""
    version, source = gpus.driver_version(smi_rows)
    isaac, isaac_source = _isaac_sim_version()
    bad = gpus.known_bad_driver(isaac, version)
    return {
        "version": version, "source": source, "isaac_sim": isaac, "isaac_sim_source": isaac_source,
        "known_bad": [{"problem": b.problem, "source": b.source} for b in bad],
        "checked_pairs": [f"Isaac Sim {b.isaac_sim} on {b.driver_branch}.x ({b.source})" for b in gpus.KNOWN_BAD_DRIVERS],
    }


def _render_driver(state: dict[str, Any]) -> list[str]:
    """The driver part of the text report."""
    driver = f"{state['version']} ({state['source']})" if state["version"] else f"unknown ({state['source']})"
    isaac = (f"{state['isaac_sim']} ({state['isaac_sim_source']})" if state["isaac_sim"]
             else state["isaac_sim_source"])
    lines = [f"Driver: {driver}; Isaac Sim: {isaac}"]
    lines += [f"  WARNING: {bad['problem']} (source: {bad['source']}): use another driver branch"
              for bad in state["known_bad"]]
    if not state["known_bad"]:
        checked = "checked" if state["version"] and state["isaac_sim"] else "not checked (needs both versions)"
        lines.append(f"  known-bad pairs {checked}: {'; '.join(state['checked_pairs'])}")
    return lines


def _gpu_binding(profile: RolloutProfile, devices: list[str] | None, note: str = "") -> dict[str, Any]:
    """Per env worker of ``profile``: its GPU and the settings that bind it; ``error`` when it cannot hold
    or no GPU could be checked (``devices``: the ``nvidia-smi`` rows, ``None`` with the ``note`` why)."""
    from ..patching.omnigibson.gpu import kit_gpu_settings

    plan: dict[str, Any] = {"gpu_ids": profile.gpu_ids, "workers": [], "error": None}
    if profile.gpu_ids is None:
        return plan
    try:
        physical = gpus.worker_gpus(profile.gpu_ids, profile.num_env_processes, os.environ)
        unchecked = gpus.check_gpus_present(physical, devices, note)
    except ValueError as exc:
        plan["error"] = str(exc)
        return plan
    if unchecked:
        plan["error"] = unchecked
    plan["workers"] = [
        {"worker": w, "gpu": p, "env": gpus.binding_env(p), "kit_settings": kit_gpu_settings(p)}
        for w, p in enumerate(physical)
    ]
    return plan


def autoapply_state() -> dict[str, Any]:
    """Auto-apply: the ``BEHAVIOR1K_FAST`` value and what it names, where the ``.pth`` is installed, what the
    hook did in this process, and whether new processes of this environment apply a profile at start-up
    (``active``: the value names a profile that loads and the ``.pth`` is installed)."""
    value = os.environ.get(autoapply.ENV_VAR)
    error = None
    try:
        profile, meaning = autoapply.profile_for(value or "")
    except ValueError as exc:
        profile, meaning, error = None, f"bad value: {exc}", str(exc)
    record = autoapply.startup()
    if record is None:
        here = "did not run (variable off, or the .pth not installed)"
    elif record.error:
        here = f"refused: {record.error}"
    else:
        counts = Counter(str(state) for state in record.report.states.values()) if record.report else {}
        here = f"applied {record.source}" + (f" ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))} at start-up)"
                                             if counts else "")
    pth = autoapply.installed_pth()
    return {
        "variable": value,
        "meaning": meaning,
        "pth": pth,
        "this_process": here,
        "active": profile is not None and bool(pth),
        "error": error,
    }


def _shared_memory_state(clean: bool) -> dict[str, Any]:
    """Segments of this package whose owner process is gone (``[name, bytes]``), removed first when
    ``clean``."""
    from ..rollout.shm import remove_stale_segments, stale_segments

    removed = remove_stale_segments() if clean else []
    return {"removed": [list(s) for s in removed], "stale": [list(s) for s in stale_segments()]}


def _schedule(profile: RolloutProfile) -> dict[str, Any]:
    """What the profile's layout and schedule do to every env: stages, the policy's batch, whether envs hold
    on shared physics, and under ``lookahead`` the lead and the committed actions the policy gets; ``error``
    where the engine would refuse the layout (reported only: the layout may come from the trainer's config)."""
    from ..rollout.plan import PartitionPlan
    from ..rollout.policy import COMMITTED_KEY
    from ..rollout.schedules.lookahead import committed_width

    out: dict[str, Any] = {"schedule": profile.schedule, "pipeline_stages": profile.pipeline_stages,
                           "partition": profile.partition, "num_env_processes": profile.num_env_processes,
                           "envs_per_process": profile.envs_per_process, "error": None}
    try:
        plan = PartitionPlan.from_profile(profile)
    except ValueError as exc:
        return out | {"error": str(exc)}
    out |= {"stages_sharing_physics": plan.stages_sharing_physics, "stage_batch": plan.stage_size,
            "processes_per_stage": len(plan.stage_slices(0)), "holds": plan.stages_sharing_physics > 1}
    if profile.schedule == "lookahead":
        out |= {"lookahead_steps": profile.lookahead_steps,
                "policy_input": f"{COMMITTED_KEY} [batch, {committed_width(profile)}, action_dim]"}
    return out


def _count(n: int, one: str, many: str = "") -> str:
    """``n`` and the noun, singular for 1 (``1 process``, ``2 envs``)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _render_schedule(state: dict[str, Any]) -> list[str]:
    """The schedule part of the text report."""
    head = (f"Schedule: {state['schedule']}, K={state['pipeline_stages']} {state['partition']} partition, "
            f"{_count(state['num_env_processes'], 'process', 'processes')} x {_count(state['envs_per_process'], 'env')}")
    if state["error"]:
        return [head, f"  the engine would refuse this layout: {state['error']}"]
    lines = [head, f"  {state['pipeline_stages']} stage(s) of {state['processes_per_stage']} process(es); the "
                   f"policy's batch: {_count(state['stage_batch'], 'env')}"]
    lines.append(f"  the other {state['stages_sharing_physics'] - 1} stage(s) of a process hold their last action "
                 "while one steps (shared physics)" if state["holds"] else "  every env steps at every global step")
    if state["schedule"] == "lookahead":
        lead = state["lookahead_steps"]
        lines.append(f"  lookahead_steps: {'auto (measured on the first round)' if lead == 'auto' else lead}; the "
                     f"policy also gets {state['policy_input']}")
    return lines


def collect(profile: RolloutProfile, clean: bool = False) -> dict[str, Any]:
    """The doctor report as a JSON-ready dict; ``ok`` is False when the exit code is 1. ``clean``: remove
    stale shared-memory segments first (:func:`_shared_memory_state`)."""
    from ..core import __version__

    omnigibson = _omnigibson_state()
    patches = _patches(profile, omnigibson)
    gpu = _gpus()
    binding = _gpu_binding(profile, gpu["devices"] if gpu["available"] else None, gpu["note"])
    schedule = _schedule(profile)
    driver = _driver(gpu["devices"] if gpu["available"] else None)
    auto = autoapply_state()
    failed = [p["name"] for p in patches if p["state"] == FAILED]
    problems = [
        *(["OmniGibson does not import"] if omnigibson["error"] else []),
        *([f"requested patch(es) cannot apply: {', '.join(failed)}"] if failed else []),
        *(["the GPU binding cannot hold"] if binding["error"] else []),
        *([auto["error"]] if auto["error"] else []),
        *(f"{bad['problem']} ({bad['source']})" for bad in driver["known_bad"]),
    ]
    return {
        "behavior1k_fast": __version__,
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
        "omnigibson": omnigibson,
        "profile": profile.to_dict(),
        "schedule": schedule,
        "patches": patches,
        "threads": _threads(profile),
        "backends": _backends(omnigibson),
        "cpu": _cpu(),
        "gpu": gpu,
        "gpu_binding": binding,
        "driver": driver,
        "autoapply": auto,
        "shared_memory": _shared_memory_state(clean),
        "problems": problems,
        "ok": not problems,
    }


def render_text(report: dict[str, Any]) -> str:
    """The report for a person."""
    og = report["omnigibson"]
    if not og["installed"]:
        og_line = "not installed (patches that target it are skipped)"
    elif og["error"]:
        og_line = f"installed but does not import: {og['error']}"
    else:
        og_line = "imports" + (" (CPU import hook: no CUDA)" if og["cpu_import_hook"] else "")
    lines = [f"behavior1k_fast {report['behavior1k_fast']} on Python {report['python']}", "", "Versions:"]
    lines += [f"  {name:<10} {version or '-'}" for name, version in report["versions"].items()]
    lines += ["", f"OmniGibson: {og_line}", "", "Patches (state for this profile in an env worker, and why):"]
    width = max(len(p["name"]) for p in report["patches"])
    lines += [f"  {p['name']:<{width}}  {p['state']:<11}  {p['reason']}" for p in report["patches"]]
    settings = [p for p in report["patches"] if p["process_setting"]]
    if settings:
        lines.append(f"  process settings ({', '.join(p['name'] for p in settings)}) apply only in "
                     f"{settings[0]['applies_in']}: env workers, not a trainer; the others where their module is "
                     "imported")
    threads = report["threads"]
    render = " ".join(f"{path}={value}" for path, value in threads["render_settings"].items())
    lines += ["", "Launch and threads:", f"  {'Kit launch args':<21} {' '.join(threads['kit_args']) or '-'}"]
    lines += [f"  {'':<21} {cap['setting'].rsplit('/', 1)[-1]}={cap['value']} is more than the {cap['usable_cores']} "
              f"usable cores here: set {cap['knob']}: {cap['usable_cores']} (or lower) in the profile"
              for cap in threads["above_cores"]]
    if threads["default_caps_above_cores"]:
        lines.append(f"  {'':<21} (the default caps of {', '.join(threads['default_caps_above_cores'])} are above "
                     "the usable cores here; they are the measured fast path for simulator hosts)")
    lines += [f"  {'Kit argv[0] fix':<21} "
              f"{'on (where _launch_app clears sys.argv)' if threads['keep_launch_argv0'] else 'off (upstream as is)'}",
              f"  {'render quality':<21} {render + ' (changes pixels)' if render else 'upstream settings'}"]
    lines.append(f"  {'intra-op (profile)':<21} {threads['intra_op_threads'] or '-'}")
    lines += [f"  {var:<21} {value or '-'}" for var, value in threads["env"].items()]
    lines += _render_torch_threads(threads["torch_thread_option"], threads["intra_op_threads"])
    lines += ["", *_render_backends(report["backends"])]
    cpu, gpu = report["cpu"], report["gpu"]
    lines += ["", f"CPU: {cpu['count']} logical cores ({cpu['usable']} usable by this process)"]
    lines.append("GPU: " + ("; ".join(gpu["devices"]) if gpu["available"] else f"none ({gpu['note']})"))
    lines += _render_driver(report["driver"])
    binding = report["gpu_binding"]
    if binding["gpu_ids"] is not None:
        lines += ["", f"GPU binding (gpu_ids={list(binding['gpu_ids'])}):"]
        if binding["error"]:
            lines.append(f"  cannot hold: {binding['error']}")
        for row in binding["workers"]:
            env = " ".join(f"{k}={v}" for k, v in row["env"].items())
            kit = " ".join(f"--{k}={v}" for k, v in row["kit_settings"].items())
            lines.append(f"  worker {row['worker']} -> GPU {row['gpu']}: {env}; Kit {kit}")
    lines += ["", *_render_schedule(report["schedule"])]
    lines += ["", *render_autoapply(report["autoapply"])]
    lines += ["", *_render_shared_memory(report["shared_memory"])]
    lines += ["", "OK" if report["ok"] else f"NOT OK: {'; '.join(report['problems'])}"]
    return "\n".join(lines)


def render_autoapply(state: dict[str, Any]) -> list[str]:
    """The auto-apply part of the text report."""
    variable = autoapply.ENV_VAR
    value = "unset" if state["variable"] is None else repr(state["variable"])
    return [
        "Auto-apply: " + ("active" if state["active"] else "not active") + " in new processes",
        f"  {variable:<21} {value} ({state['meaning']})",
        f"  {'.pth':<21} {', '.join(state['pth']) or 'not installed (pip install this package)'}",
        f"  {'this process':<21} {state['this_process']}",
    ]


def _render_shared_memory(state: dict[str, Any]) -> list[str]:
    """The shared-memory part of the text report."""
    def total(rows: list) -> str:
        return f"{len(rows)} ({sum(size for _, size in rows) / 2**20:.1f} MiB)"

    lines = [f"Shared memory of processes that are gone: {total(state['stale'])}"
             + ("" if not state["stale"] else ": remove with behavior1k-fast doctor --clean")]
    if state["removed"]:
        lines.append(f"  removed {total(state['removed'])}: {', '.join(name for name, _ in state['removed'])}")
    return lines


def run(args: argparse.Namespace) -> int:
    if args.upstream is not None:
        return upstream_check.run(args.upstream, args.json)
    try:
        profile = RolloutProfile.from_yaml(args.profile) if args.profile is not None else RolloutProfile()
    except (OSError, TypeError, ValueError) as exc:
        return fail("doctor", f"bad --profile {args.profile!r}: {exc}")
    try:
        ray_request = RayRequest.from_args(args, profile)
    except (TypeError, ValueError) as exc:
        return fail("doctor", str(exc))
    # A profile auto-applied at this process's start-up would make its own patches look like upstream
    # features ("upstream already has them"): plan against upstream's code instead.
    REGISTRY.revert()
    if "omnigibson" not in sys.modules and importlib.util.find_spec("omnigibson") is not None:
        # importing OmniGibson (and torch, and through the CPU hook without CUDA) takes 10-20 s
        print("behavior1k-fast doctor: importing omnigibson to plan its patches (10-20 s) ...", file=sys.stderr,
              flush=True)
    report = collect(profile, clean=args.clean)
    placed = True
    if ray_request is not None:
        report["ray"] = ray_placement(ray_request)
        placed = report["ray"]["error"] is None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_text(report) + ("" if ray_request is None else "\n\n" + _render_ray_text(report["ray"])))
    return 0 if report["ok"] and placed else 1


# --- Ray placement (--ray) ----------------------------------------------------------------------------


def _add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray", metavar="ADDRESS",
        help="also print where each env worker would start on the Ray cluster at ADDRESS ('auto': the local one)",
    )
    parser.add_argument(
        "--placement", default="spread",
        help="with --ray: spread | pack | comma-separated node ids or resource labels, one per env worker",
    )
    parser.add_argument("--worker-cpus", type=float, default=1.0, help="with --ray: CPUs per env worker (default 1)")
    parser.add_argument("--worker-gpus", type=float, default=0.0, help="with --ray: GPU share per env worker (default 0)")


@dataclass(frozen=True)
class RayRequest:
    """What ``--ray`` asks: the cluster, the checked placement setting and each worker's actor options."""

    address: str
    placement: str | tuple[str, ...]
    actor_options: dict
    #: Global env ids of each worker, in worker order.
    env_ids: tuple[tuple[int, ...], ...]

    @classmethod
    def from_args(cls, args: argparse.Namespace, profile: RolloutProfile) -> "RayRequest | None":
        """``None`` without ``--ray``; TypeError / ValueError for a bad setting (before any connection)."""
        from ..core.checks import check_number
        from ..rollout.placement import STRATEGIES, check_placement

        if args.ray is None:
            return None
        options = {
            "num_cpus": check_number("--worker-cpus", args.worker_cpus, low=0.0),
            "num_gpus": check_number("--worker-gpus", args.worker_gpus, low=0.0),
        }
        text = args.placement
        setting = text if text in STRATEGIES else tuple(entry.strip() for entry in text.split(","))
        workers, per_worker = profile.num_env_processes, profile.envs_per_process
        setting = check_placement(setting, workers, "ray", options)
        env_ids = tuple(tuple(range(w * per_worker, (w + 1) * per_worker)) for w in range(workers))
        return cls(args.ray, setting, options, env_ids)


def ray_placement(request: RayRequest, timeout_s: float = 60.0) -> dict[str, Any]:
    """Where each env worker would start: reserves the placement as the engine would, reads it, releases it.

    Connects to ``request.address`` unless this process is already connected to a Ray cluster. A
    placement the cluster cannot satisfy (or a failed connection) is reported in ``"error"``."""
    import ray

    from ..rollout.placement import RayPlacement, live_nodes

    result: dict[str, Any] = {
        "address": request.address, "placement": request.placement, "actor_options": request.actor_options,
        "nodes": [], "workers": [], "error": None,
    }
    connect = not ray.is_initialized()
    try:
        if connect:
            _check_reachable(request.address)
            ray.init(address=request.address, logging_level="ERROR", log_to_driver=False)
        result["nodes"] = [{"node_id": n.node_id, "address": n.address, "resources": dict(n.resources)}
                           for n in live_nodes()]
        placement = RayPlacement(request.placement, len(request.env_ids), request.actor_options, timeout_s)
        try:
            planned = placement.planned_nodes()
        finally:
            placement.remove()
        result["bundle"] = placement.bundle
        result["workers"] = [{"worker": w, "env_ids": list(ids), "nodes": list(planned[w])}
                             for w, ids in enumerate(request.env_ids)]
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if connect and ray.is_initialized():
            ray.shutdown()
    return result


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """ConnectionError unless a ``host:port`` address accepts a TCP connection (``ray.init`` retries an
    unreachable address for minutes); other forms (``auto``, ``ray://...``) are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None


def _render_ray_text(ray_report: dict[str, Any]) -> str:
    """The ``--ray`` section for a person."""
    head = f"Ray placement on {ray_report['address']} ({ray_report['placement']!r}):"
    if ray_report["error"] is not None:
        return f"{head}\n  NOT POSSIBLE: {ray_report['error']}"
    addresses = {n["node_id"]: n["address"] for n in ray_report["nodes"]}
    lines = [head, f"  {len(addresses)} live nodes; each worker asks for {ray_report['bundle']}"]
    for row in ray_report["workers"]:
        where = " or ".join(f"{n} ({addresses[n]})" for n in row["nodes"])
        lines.append(f"  worker {row['worker']} (envs {row['env_ids']}): {where}")
    return "\n".join(lines)
