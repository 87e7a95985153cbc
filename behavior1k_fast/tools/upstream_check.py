"""``behavior1k-fast doctor --upstream PATH``: which upstream line a BEHAVIOR-1K tree is, and whether this
package's ``patches/`` series for that line applies to it, patch by patch.

``PATH`` is a BEHAVIOR-1K checkout (holding ``OmniGibson/omnigibson/``) or its ``OmniGibson/`` folder. The line
comes from the tree's own files (:func:`detect_line`), first match wins:

- ``render_backends/kit_backend.py`` defining ``launch_kit_app()``, else a ``render_backends/`` or
  ``physics_backends/`` package: the render/physics-backend refactor (``backend``);
- ``omnigibson_6_0_0.kit``: the Isaac Sim 6.0 work (``isaac6``);
- ``envs/env_base.py``: ``Environment.__init__(self, configs, in_vec_env=False)`` is the v3.7 line; an
  ``Environment`` whose ``get_obs`` takes ``env_indices`` is main's multi-scene layout;
- the ``version`` of the ``omnigibson_*.kit`` experience files (3.9.x releases: the kit files carry it), else
  the ``version=`` of ``OmniGibson/setup.py``: 3.7 is v3.7, 3.8 and 3.9 are main.

The release (:func:`release_of`: kit file, else setup.py) is reported with the line. The backend and isaac6
lines have no series of their own: they are checked against the main series (the nearest), and the report
also says what each runtime patch does there (:data:`RUNTIME_ON_LINE`, the outcomes the tests assert on those
texts) and, per render/physics-backend file the tree holds, what it is and what binds there
(:func:`backend_holdings`; the stored sets of that refactor hold a few files each). The tree is never modified: the files the series touches are copied to a temporary folder and checked
there with ``git apply`` (see :func:`check_series`). Per patch the report says:

- ``already upstream``: its reverse applies (the tree already has the change);
- ``applies``: ``git apply --check`` passes, on top of the earlier patches of the series that apply;
- ``does not apply``: neither; the detail names the first hunk git rejected (file, line, function);
- ``file absent``: the tree lacks a file the patch changes.

Exit code 0 when the line is known and every patch applies or is already upstream (the series can be
cherry-picked with ``git am``), 1 otherwise, 2 for a ``PATH`` that is no BEHAVIOR-1K tree (one line, no report).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .argtypes import fail

#: Upstream line -> the series folder under ``patches/`` it is checked against (backend and isaac6 have no
#: series of their own: main's is the nearest).
SERIES = {"v3.7": "v3.7.2", "main": "main", "backend": "main", "isaac6": "main"}
#: Lines checked against another line's series.
BORROWED_SERIES = ("backend", "isaac6")
_LAUNCH_KIT_APP = "omnigibson.render_backends.kit_backend.launch_kit_app"
_KIT_PATCHES = ("kit_thread_caps", "rtx_descriptor_sets", "kit_headless_render_settings", "kit_renderer_gpu",
                "gc_after_launch", "texture_streaming_budget")
_SHARED_WITH_MAIN = {  # neither line's sets hold an env_base, env_wrapper or controllers: main's (the backend
    # line's VisionSensor is 9fa68a72's, Isaac 6's main's: the sensor rows are the same on both)
    "gpu_binding": ("applied", "installed on CUDA_VISIBLE_DEVICES, MUJOCO_EGL_DEVICE_ID"),
    "intra_op_threads": ("applied", "installed on OMP_NUM_THREADS"),
    "numba_cache_dir": ("applied", "installed on NUMBA_CACHE_DIR"),
    "numba_cache_joint_controller": ("applied", "installed on omnigibson.controllers.joint_controller.numba_ix"),
    "numba_cache_ik_controller": ("applied", "installed on omnigibson.controllers.ik_controller._compute_ik_qpos_numpy"),
    "numba_cache_osc_controller": ("applied",
                                   "installed on omnigibson.controllers.osc_controller._compute_osc_torques_numpy"),
    "headless_viewport": ("skipped", "upstream VisionSensor._post_load already skips the viewport when headless "
                                     "(PR #2117)"),
    "annotator_pruning": ("applied", "installed on omnigibson.sensors.vision_sensor.VisionSensor."
                                     "_add_modality_to_backend"),
    "env_step_obs": ("applied", "installed on omnigibson.envs.env_base.Environment.step"),
    "multi_scene_step": ("applied", "installed on omnigibson.envs.env_base.Environment.step"),
    "vector_env_step": ("skipped", "upstream Environment is main's multi-scene layout"),
    "multi_scene_vector_env": ("applied", "installed on omnigibson.envs.VectorEnvironment"),
    "env_wrapper_forwarding": ("applied", "installed on omnigibson.envs.env_wrapper.EnvironmentWrapper.step"),
    "render_quality": ("applied", "installed on omnigibson.launch"),
}
#: Line -> runtime patch -> ``(state, reason)`` with a profile that asks for every patch, where the line's kit
#: render backend and PhysX are in use (``tests/omnigibson/test_new_lines.py`` asserts these on the texts).
RUNTIME_ON_LINE = {
    "backend": {
        **_SHARED_WITH_MAIN,
        "viewer_camera_off": ("applied", f"installed on {_LAUNCH_KIT_APP}"),
        "kit_launch_argv": ("skipped", "upstream launch_kit_app already keeps sys.argv[0] (PR #2178)"),
        **{name: ("applied", f"installed on {_LAUNCH_KIT_APP}") for name in _KIT_PATCHES},
    },
    "isaac6": {
        **_SHARED_WITH_MAIN,
        "viewer_camera_off": ("applied", "installed on omnigibson.simulator._launch_app"),
        "kit_launch_argv": ("skipped", "upstream _launch_app already keeps sys.argv[0] (PR #2178)"),
        **{name: ("applied", "installed on omnigibson.simulator._launch_app") for name in _KIT_PATCHES},
    },
}
#: Line -> runtime patch -> what else a user of that line should know.
RUNTIME_NOTES = {
    "backend": {
        "headless_viewport": "on a VisionSensor without #2117 it is not applicable on this layout (cameras capture "
                             "through og.sim.render_backend)",
        "viewer_camera_off": "with gm.RENDER_BACKEND other than 'kit' the launch and RTX patches are not applicable "
                             "on this layout (also none binds with gm.PHYSICS_BACKEND='newton' and no kit renderer)",
        "annotator_pruning": "not applicable with gm.RENDER_BACKEND='none' (no camera capture) or 'newton' (RGB only)",
        "kit_headless_render_settings": "on request (headless_render_settings): the boundary frame is the current one",
    },
    "isaac6": {
        "viewer_camera_off": "a reliability fix on Isaac Sim 6.0: headless viewports stall frames (~10 s after a few "
                             "minutes, IsaacSim issue #701)",
    },
}
_REGISTRY_KEYS = re.compile(r"^\s*[\"'](\w+)[\"']\s*:", re.M)
_KIT_FILE_VERSIONS = re.compile(r"^\s*\((\d+), (\d+), (\d+)\):", re.M)
_MACRO = re.compile(r"^gm\.(PHYSICS_BACKEND|RENDER_BACKEND) = (.+)$", re.M)


def _keys(text: str) -> str:
    return ", ".join(dict.fromkeys(_REGISTRY_KEYS.findall(text))) or "none"


def _kit_versions(text: str) -> str:
    return ", ".join(".".join(version) for version in _KIT_FILE_VERSIONS.findall(text))


#: Files of the render/physics-backend line -> (a text the file must hold to say this, what it is and what binds
#: there: a function of its text). :func:`backend_holdings` reports each one a tree holds.
BACKEND_FILES = {
    "simulator.py": (".create_app()", lambda text: "_launch_app() only hands the launch to "
                     "PhysicsBackend.create_app(); step() hands its render flag to PhysicsBackend.step(render=...)"),
    "macros.py": ("gm.RENDER_BACKEND", lambda text: "defaults " + ", ".join(
        f"gm.{name} = {value}" for name, value in _MACRO.findall(text))),
    "render_backends/__init__.py": ("RENDER_BACKENDS", lambda text: f"RENDER_BACKENDS: {_keys(text)}"),
    "render_backends/kit_backend.py": ("def launch_kit_app(", lambda text: "launch_kit_app() builds the Kit app "
                                       f"(Isaac Sim {_kit_versions(text)}): every launch patch binds there"),
    "render_backends/null_backend.py": ("class NullRenderBackend", lambda text: "no camera capture: with "
                                        "gm.RENDER_BACKEND='none' annotator_pruning and the RTX launch patches are not "
                                        "applicable"),
    "render_backends/newton_backend.py": ("class NewtonRenderBackend", lambda text: "RGB-only capture without Kit: "
                                          "with gm.RENDER_BACKEND='newton' annotator_pruning and the RTX launch "
                                          "patches are not applicable"),
    "render_backends/usd_stage_services.py": ("class UsdStageServicesMixin", lambda text: "pure-pxr stage services "
                                              "of render backends without Kit: nothing binds"),
    "physics_backends/__init__.py": ("PHYSICS_BACKENDS", lambda text: f"PHYSICS_BACKENDS: {_keys(text)}"),
    "physics_backends/physx_backend.py": ("launch_kit_app", lambda text: "PhysXBackend.create_app() launches Kit "
                                          "through launch_kit_app(); PhysXBackend.step(render) calls "
                                          "SimulationContext.step(render=render): a render=False step renders "
                                          "nothing"),
    "sensors/vision_sensor.py": ("og.sim.render_backend.create_annotator", lambda text: "VisionSensor captures "
                                 "through og.sim.render_backend: annotator_pruning binds at _add_modality_to_backend; "
                                 "its stale-observation retry re-renders on a wrong shape or empty idToLabels only, "
                                 "never after a skipped-render chunk"),
}


def backend_holdings(folder: Path) -> list[dict[str, str]]:
    """``{"file", "holds"}`` for each file of :data:`BACKEND_FILES` the ``OmniGibson/`` folder holds (in that
    table's order): what it is on the render/physics-backend line and what binds there."""
    found = []
    for relpath, (marker, describe) in BACKEND_FILES.items():
        path = folder / "omnigibson" / relpath
        text = path.read_text(errors="replace") if path.is_file() else ""
        if marker in text:
            found.append({"file": relpath, "holds": describe(text)})
    return found


#: Folder of the patch series (the repository's ``patches/``, next to the package).
PATCHES_DIR = Path(__file__).resolve().parents[2] / "patches"
#: Patch paths are relative to the BEHAVIOR-1K root; this is their common prefix.
TREE_PREFIX = "OmniGibson/"

APPLIES, ALREADY_UPSTREAM, DOES_NOT_APPLY, FILE_ABSENT = "applies", "already upstream", "does not apply", "file absent"

_V37_INIT = re.compile(r"def __init__\(self, configs, in_vec_env=False\)")
_MAIN_GET_OBS = re.compile(r"def get_obs\(self, env_indices=None\)")
_VERSION = re.compile(r"""version\s*=\s*["'](\d+)\.(\d+)(?:\.(\d+))?[^"']*["']""")
_LAUNCH_KIT_APP_DEF = re.compile(r"^def launch_kit_app\(", re.M)
#: Release series (major, minor) -> line.
_LINE_OF_RELEASE = {(3, 7): "v3.7", (3, 8): "main", (3, 9): "main"}
_FAILED = re.compile(r"^error: patch failed: (\S+):(\d+)$", re.M)
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$")
_DIFF = re.compile(r"^diff --git a/(\S+) b/\S+$")


class UpstreamPathError(ValueError):
    """``PATH`` is not a BEHAVIOR-1K checkout or ``OmniGibson/`` folder."""


@dataclass(frozen=True)
class PatchCheck:
    patch: str
    state: str
    detail: str = ""


def _omnigibson_folder(path: str | Path) -> Path:
    """The ``OmniGibson/`` folder of a BEHAVIOR-1K checkout ``path`` (or ``path`` itself if it is one)."""
    root = Path(path)
    for candidate in (root / "OmniGibson", root):
        if (candidate / "omnigibson").is_dir():
            return candidate
    raise UpstreamPathError(f"{str(path)!r} holds neither OmniGibson/omnigibson/ nor omnigibson/: not a BEHAVIOR-1K tree")


def release_of(folder: Path) -> tuple[str, str] | None:
    """``(version, source)`` of an ``OmniGibson/`` folder: the ``version`` of its ``omnigibson_*.kit`` files (the
    first in name order; 3.9.x releases set it there), else ``setup.py``'s; ``None`` where neither says."""
    sources = [*sorted((folder / "omnigibson").glob("omnigibson_*.kit")), folder / "setup.py"]
    for source in sources:
        match = _VERSION.search(source.read_text(errors="replace")) if source.is_file() else None
        if match:
            version = ".".join(part for part in match.groups() if part is not None)
            return version, str(source.relative_to(folder)).removeprefix("omnigibson/")
    return None


def detect_line(folder: Path) -> tuple[str, str]:
    """``(line, evidence)`` for an ``OmniGibson/`` folder: ``backend``, ``isaac6``, ``v3.7``, ``main`` or
    ``unknown`` (module docs)."""
    package = folder / "omnigibson"
    kit_backend = package / "render_backends" / "kit_backend.py"
    if kit_backend.is_file() and _LAUNCH_KIT_APP_DEF.search(kit_backend.read_text(errors="replace")):
        return "backend", "render_backends/kit_backend.py: launch_kit_app() builds the Kit app (render/physics backends)"
    backend_packages = [name for name in ("render_backends", "physics_backends") if (package / name).is_dir()]
    if backend_packages:
        return "backend", f"{', '.join(f'{name}/' for name in backend_packages)}: the render/physics-backend packages"
    if (package / "omnigibson_6_0_0.kit").is_file():
        return "isaac6", "omnigibson_6_0_0.kit: the Isaac Sim 6.0 experience"
    env_base = package / "envs" / "env_base.py"
    if env_base.is_file():
        text = env_base.read_text(errors="replace")
        if _V37_INIT.search(text):
            return "v3.7", "envs/env_base.py: Environment.__init__(self, configs, in_vec_env=False)"
        if _MAIN_GET_OBS.search(text):
            return "main", "envs/env_base.py: multi-scene Environment (get_obs(self, env_indices=None))"
    release = release_of(folder)
    if release is None:
        return "unknown", "neither envs/env_base.py, a .kit file nor setup.py says which line this is"
    version, source = release
    major, minor = (int(part) for part in version.split(".")[:2])
    return _LINE_OF_RELEASE.get((major, minor), "unknown"), f"{source}: version {version}"


def series_patches(line: str) -> list[Path]:
    """The patch files of ``line``'s series, in order."""
    return sorted((PATCHES_DIR / SERIES[line]).glob("*.patch"))


def _hunks(patch: Path) -> dict[str, list[tuple[int, str]]]:
    """File -> ``(old start line, function context)`` of each hunk, in order."""
    hunks: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in patch.read_text().splitlines():
        if m := _DIFF.match(line):
            current = hunks.setdefault(m[1], [])
        elif current is not None and (m := _HUNK.match(line)):
            current.append((int(m[1]), m[2].strip()))
    return hunks


def _rejected_hunk(patch: Path, stderr: str) -> str:
    """Which hunk ``git apply`` rejected, from its error output."""
    m = _FAILED.search(stderr)
    if not m:
        first = stderr.strip().splitlines()[0] if stderr.strip() else "git apply failed"
        return first.removeprefix("error: ")
    path, at = m[1], int(m[2])
    hunks = _hunks(patch).get(path, [])
    for k, (start, context) in enumerate(hunks, 1):
        if start == at:
            where = f" ({context})" if context else ""
            return f"hunk {k}/{len(hunks)} of {path} at line {at}{where}"
    return f"{path} at line {at}"


def _git_apply(tree: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", *flags, str(patch)], cwd=tree, capture_output=True, text=True)


def _copy_tree(folder: Path, paths: list[str], tree: Path) -> None:
    """The files ``paths`` (patch paths) that exist under ``folder``, copied into ``tree`` (replacing its copies)."""
    for path in paths:
        source = folder / path.removeprefix(TREE_PREFIX)
        if source.is_file():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, tree / path)


def check_series(folder: Path, patches: list[Path]) -> list[PatchCheck]:
    """Each of ``patches`` checked in order against a copy of the files they touch under ``folder``.

    First, from the last patch back, a patch whose reverse applies is already upstream and is reversed on the
    copy (a later patch can touch the lines next to an earlier one, so they are taken off in reverse order).
    Then, on a fresh copy, every other patch is checked in order and applied when it applies."""
    touched = sorted({path for patch in patches for path in _hunks(patch)})
    with tempfile.TemporaryDirectory(prefix="b1k-upstream-") as tmp:
        tree = Path(tmp)
        # its own repository root: git apply run inside another work tree would resolve paths against that one
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True, capture_output=True)
        _copy_tree(folder, touched, tree)
        upstream = set()
        for patch in reversed(patches):
            if _git_apply(tree, patch, "--check", "--reverse").returncode == 0:
                _git_apply(tree, patch, "--reverse")
                upstream.add(patch)
        _copy_tree(folder, touched, tree)
        results = []
        for patch in patches:
            absent = [path for path in _hunks(patch) if not (folder / path.removeprefix(TREE_PREFIX)).is_file()]
            if absent:
                results.append(PatchCheck(patch.name, FILE_ABSENT, f"this tree has no {', '.join(absent)}"))
                continue
            if patch in upstream:
                results.append(PatchCheck(patch.name, ALREADY_UPSTREAM))
                continue
            check = _git_apply(tree, patch, "--check")
            if check.returncode == 0:
                _git_apply(tree, patch)
                results.append(PatchCheck(patch.name, APPLIES))
            else:
                results.append(PatchCheck(patch.name, DOES_NOT_APPLY, _rejected_hunk(patch, check.stderr)))
        return results


def collect(path: str | Path) -> dict[str, Any]:
    """The ``--upstream`` report as a JSON-ready dict; ``ok`` is True when the exit code is 0."""
    folder = _omnigibson_folder(path)
    line, evidence = detect_line(folder)
    release = release_of(folder)
    report: dict[str, Any] = {"path": str(path), "line": line, "evidence": evidence,
                              "release": None if release is None else {"version": release[0], "from": release[1]},
                              "series": None, "patches": [], "runtime": [],
                              "holds": backend_holdings(folder) if line in BORROWED_SERIES else []}
    if line in SERIES:
        report["series"] = f"patches/{SERIES[line]}"
        report["patches"] = [asdict(c) for c in check_series(folder, series_patches(line))]
    notes = RUNTIME_NOTES.get(line, {})
    report["runtime"] = [{"name": name, "state": state, "reason": reason, "note": notes.get(name, "")}
                         for name, (state, reason) in RUNTIME_ON_LINE.get(line, {}).items()]
    report["ok"] = line in SERIES and all(p["state"] in (APPLIES, ALREADY_UPSTREAM) for p in report["patches"])
    return report


def render_text(report: dict[str, Any]) -> str:
    release = report["release"]
    lines = [f"BEHAVIOR-1K tree {report['path']}: line {report['line']} ({report['evidence']})"
             + ("" if release is None else f", release {release['version']} ({release['from']})")]
    if report["series"] is None:
        lines.append(f"No patch series for this line (series exist for: {', '.join(sorted(set(SERIES.values())))}).")
    else:
        borrowed = " (this line has no series of its own: the nearest)" if report["line"] in BORROWED_SERIES else ""
        lines.append(f"Series {report['series']}{borrowed}, checked in order with git apply --check:")
        width = max(len(p["patch"]) for p in report["patches"])
        for p in report["patches"]:
            detail = f": {p['detail']}" if p["detail"] else ""
            lines.append(f"  {p['patch']:<{width}}  {p['state']}{detail}")
    if report["holds"]:
        lines.append("Render/physics-backend files in this tree, and what binds there:")
        width = max(len(h["file"]) for h in report["holds"])
        lines += [f"  {h['file']:<{width}}  {h['holds']}" for h in report["holds"]]
    if report["runtime"]:
        lines.append("Runtime patches on this line (behavior1k_fast.apply(), a profile that asks for each; the env "
                     "and controller rows as on main's texts, which no stored set of this line holds; the sensor rows "
                     "of the backend line on 9fa68a72's VisionSensor, of Isaac 6 on main's):")
        width = max(len(p["name"]) for p in report["runtime"])
        for p in report["runtime"]:
            note = f" [{p['note']}]" if p["note"] else ""
            lines.append(f"  {p['name']:<{width}}  {p['state']:<8} {p['reason']}{note}")
    lines.append("OK: every patch applies or is already upstream" if report["ok"] else "NOT OK")
    return "\n".join(lines)


def run(path: str, as_json: bool) -> int:
    """Print the report for ``path``; the exit code (see the module docs)."""
    problem = None
    if shutil.which("git") is None:
        problem = "--upstream needs git on PATH"
    elif not PATCHES_DIR.is_dir():
        problem = f"--upstream needs the patch series in {PATCHES_DIR} (run from a behavior1k_fast checkout)"
    if problem:
        return fail("doctor", problem)
    try:
        report = collect(path)
    except UpstreamPathError as exc:
        return fail("doctor", f"bad --upstream: {exc}")
    print(json.dumps(report, indent=2) if as_json else render_text(report))
    return 0 if report["ok"] else 1
