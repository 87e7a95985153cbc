"""``behavior1k-fast doctor``: what this machine runs and what the patch set would do to it.

Reports versions (from package metadata, nothing heavy imported for them), whether OmniGibson imports (on
a machine without CUDA through the CPU import hook of :mod:`behavior1k_fast.omnigibson.cpu_import`), each
patch of the profile with the state ``apply()`` would give it and why (``PatchRegistry.plan``), thread
settings, CPU count, GPUs (``nvidia-smi`` when present) and, for a profile with ``gpu_ids``, the GPU each
env worker would run on with the settings that bind it (:mod:`behavior1k_fast.core.gpus`). Exit code 1 when
a patch the profile asks for cannot apply (``failed``), OmniGibson is installed but does not import, or the
GPU binding cannot hold; 2 for a bad ``--profile``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from typing import Any

from ..core import gpus
from ..patching import FAILED, SKIPPED, PatchRegistry
from ..patching.omnigibson import REGISTRY
from ..core.profile import RolloutProfile
from .argtypes import fail

#: Distributions whose versions are reported (``None`` when not installed).
DISTRIBUTIONS = ("omnigibson", "isaacsim", "torch", "numba", "llvmlite", "mujoco", "gymnasium", "wrapt")
#: USD's thread-pool cap, reported after the intra-op pool variables the ``intra_op_threads`` patch sets.
USD_THREAD_ENV_VAR = "PXR_WORK_THREAD_LIMIT"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="versions, patch plan, threads, CPU and GPU of this machine",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--profile", metavar="PATH", help="YAML rollout profile (default: the fast path)")
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
    """One row per patch: the state ``apply(profile)`` would give it and why."""
    registry = REGISTRY
    if omnigibson["imported"]:
        planned = registry.plan(profile)
    else:  # plan what needs no omnigibson import (process settings, patches the profile turns off)
        offline = [p for p in registry.patches if p.module is None or not p.wanted(profile)]
        planned = PatchRegistry(offline).plan(profile)
    outcomes = {o.name: (o.state, o.reason) for o in planned.outcomes}
    rows = []
    for patch in registry.patches:
        if patch.name in outcomes:
            state, reason = outcomes[patch.name]
        elif omnigibson["installed"]:
            state, reason = FAILED, f"omnigibson does not import: {omnigibson['error']}"
        else:
            state, reason = SKIPPED, "omnigibson is not installed"
        rows.append(
            {
                "name": patch.name,
                "state": state,
                "reason": reason,
                "targets": list(patch.describe_targets()),
                "upstream_file": patch.upstream_file,
            }
        )
    return rows


def _threads(profile: RolloutProfile) -> dict[str, Any]:
    from ..patching.omnigibson.runtime import INTRA_OP_ENV_VARS, kit_thread_args

    torch = sys.modules.get("torch")
    return {
        "kit_args": kit_thread_args(profile),
        "intra_op_threads": profile.intra_op_threads,
        "env": {var: os.environ.get(var) for var in (*INTRA_OP_ENV_VARS, USD_THREAD_ENV_VAR)},
        "torch_intra_op_threads": torch.get_num_threads() if torch is not None else None,
    }


def _cpu() -> dict[str, Any]:
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {"count": os.cpu_count(), "usable": len(affinity) if affinity is not None else None}


def _gpus() -> dict[str, Any]:
    """``nvidia-smi`` rows ``name, memory, driver``; ``available`` False when the tool is absent or fails."""
    devices, note = gpus.nvidia_smi_gpus()
    return {"available": devices is not None, "devices": devices or [], "note": note}


def _gpu_binding(profile: RolloutProfile, devices: list[str] | None) -> dict[str, Any]:
    """Per env worker of ``profile``: its GPU and the settings that bind it; ``error`` when it cannot hold."""
    from ..patching.omnigibson.gpu import kit_gpu_settings

    plan: dict[str, Any] = {"gpu_ids": profile.gpu_ids, "workers": [], "error": None}
    if profile.gpu_ids is None:
        return plan
    try:
        physical = gpus.worker_gpus(profile.gpu_ids, profile.num_env_processes, os.environ)
        gpus.check_gpus_present(physical, devices)
    except ValueError as exc:
        plan["error"] = str(exc)
        return plan
    plan["workers"] = [
        {"worker": w, "gpu": p, "env": gpus.binding_env(p), "kit_settings": kit_gpu_settings(p)}
        for w, p in enumerate(physical)
    ]
    return plan


def collect(profile: RolloutProfile) -> dict[str, Any]:
    """The doctor report as a JSON-ready dict; ``ok`` is False when the exit code is 1."""
    from ..core import __version__

    omnigibson = _omnigibson_state()
    patches = _patches(profile, omnigibson)
    gpu = _gpus()
    binding = _gpu_binding(profile, gpu["devices"] if gpu["available"] else None)
    ok = omnigibson["error"] is None and not any(p["state"] == FAILED for p in patches) and not binding["error"]
    return {
        "behavior1k_fast": __version__,
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
        "omnigibson": omnigibson,
        "profile": profile.to_dict(),
        "patches": patches,
        "threads": _threads(profile),
        "cpu": _cpu(),
        "gpu": gpu,
        "gpu_binding": binding,
        "ok": ok,
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
    lines += ["", f"OmniGibson: {og_line}", "", "Patches (state for this profile, and why):"]
    width = max(len(p["name"]) for p in report["patches"])
    lines += [f"  {p['name']:<{width}}  {p['state']:<11}  {p['reason']}" for p in report["patches"]]
    threads = report["threads"]
    lines += ["", "Threads:", f"  {'Kit launch args':<21} {' '.join(threads['kit_args']) or '-'}"]
    lines.append(f"  {'intra-op (profile)':<21} {threads['intra_op_threads'] or '-'}")
    lines += [f"  {var:<21} {value or '-'}" for var, value in threads["env"].items()]
    cpu, gpu = report["cpu"], report["gpu"]
    lines += ["", f"CPU: {cpu['count']} logical cores ({cpu['usable']} usable by this process)"]
    lines.append("GPU: " + ("; ".join(gpu["devices"]) if gpu["available"] else f"none ({gpu['note']})"))
    binding = report["gpu_binding"]
    if binding["gpu_ids"] is not None:
        lines += ["", f"GPU binding (gpu_ids={list(binding['gpu_ids'])}):"]
        if binding["error"]:
            lines.append(f"  cannot hold: {binding['error']}")
        for row in binding["workers"]:
            env = " ".join(f"{k}={v}" for k, v in row["env"].items())
            kit = " ".join(f"--{k}={v}" for k, v in row["kit_settings"].items())
            lines.append(f"  worker {row['worker']} -> GPU {row['gpu']}: {env}; Kit {kit}")
    lines += ["", "OK" if report["ok"] else
              "NOT OK: a requested patch cannot apply, OmniGibson does not import or the GPU binding cannot hold"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        profile = RolloutProfile.from_yaml(args.profile) if args.profile else RolloutProfile()
    except (OSError, TypeError, ValueError) as exc:
        return fail("doctor", f"bad --profile {args.profile!r}: {exc}")
    report = collect(profile)
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return 0 if report["ok"] else 1
