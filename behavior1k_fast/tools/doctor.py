"""``behavior1k-fast doctor``: what this machine runs and what the patch set would do to it.

Reports versions (from package metadata, nothing heavy imported for them), whether OmniGibson imports (on
a machine without CUDA through the CPU import hook of :mod:`behavior1k_fast.omnigibson.cpu_import`), each
patch of the profile with the state ``apply()`` would give it and why (``PatchRegistry.plan``), thread
settings, CPU count and GPUs (``nvidia-smi`` when present), and whether auto-apply (``BEHAVIOR1K_FAST``) is
set up and active. Exit code 1 when a patch the profile asks for
cannot apply (``failed``) or OmniGibson is installed but does not import; 2 for a bad ``--profile``.
``--upstream PATH`` checks a BEHAVIOR-1K checkout against ``patches/`` instead (:mod:`.upstream_check`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

from ..patching import FAILED, SKIPPED, PatchRegistry, autoapply
from ..patching.omnigibson import REGISTRY
from ..core.profile import RolloutProfile
from . import upstream_check

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
    parser.add_argument(
        "--upstream",
        metavar="PATH",
        help="instead: which line the BEHAVIOR-1K checkout (or OmniGibson/ folder) at PATH is, and whether each "
        "patch of the matching patches/ series applies to it (exit 0 only when every needed patch applies)",
    )
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
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"available": False, "devices": [], "note": "nvidia-smi not found"}
    try:
        out = subprocess.run(
            [tool, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"available": False, "devices": [], "note": f"nvidia-smi failed: {exc}"}
    return {"available": True, "devices": [line.strip() for line in out.splitlines() if line.strip()], "note": ""}


def autoapply_state() -> dict[str, Any]:
    """Auto-apply: the ``BEHAVIOR1K_FAST`` value and what it names, where the ``.pth`` is installed, what the
    hook did in this process, and whether new processes of this environment apply a profile at start-up
    (``active``: the value names a profile that loads and the ``.pth`` is installed)."""
    value = os.environ.get(autoapply.ENV_VAR)
    try:
        profile, meaning = autoapply.profile_for(value or "")
    except ValueError as exc:
        profile, meaning = None, f"bad value: {exc}"
    record = autoapply.startup()
    if record is None:
        here = "did not run (variable off, or the .pth not installed)"
    elif record.error:
        here = f"refused: {record.error}"
    else:
        here = f"applied {record.source}"
    pth = autoapply.installed_pth()
    return {
        "variable": value,
        "meaning": meaning,
        "pth": pth,
        "this_process": here,
        "active": profile is not None and bool(pth),
    }


def collect(profile: RolloutProfile) -> dict[str, Any]:
    """The doctor report as a JSON-ready dict; ``ok`` is False when the exit code is 1."""
    from ..core import __version__

    omnigibson = _omnigibson_state()
    patches = _patches(profile, omnigibson)
    ok = omnigibson["error"] is None and not any(p["state"] == FAILED for p in patches)
    return {
        "behavior1k_fast": __version__,
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
        "omnigibson": omnigibson,
        "profile": profile.to_dict(),
        "patches": patches,
        "threads": _threads(profile),
        "cpu": _cpu(),
        "gpu": _gpus(),
        "autoapply": autoapply_state(),
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
    lines += ["", *render_autoapply(report["autoapply"])]
    lines += ["", "OK" if report["ok"] else "NOT OK: a requested patch cannot apply or OmniGibson does not import"]
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


def run(args: argparse.Namespace) -> int:
    if args.upstream is not None:
        return upstream_check.run(args.upstream, args.json)
    try:
        profile = RolloutProfile.from_yaml(args.profile) if args.profile else RolloutProfile()
    except (OSError, TypeError, ValueError) as exc:
        print(f"behavior1k-fast doctor: bad --profile {args.profile!r}: {exc}", file=sys.stderr)
        return 2
    # A profile auto-applied at this process's start-up would make its own patches look like upstream
    # features ("upstream already has them"): plan against upstream's code instead.
    REGISTRY.revert()
    report = collect(profile)
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return 0 if report["ok"] else 1
