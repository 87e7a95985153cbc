"""``behavior1k-fast doctor --upstream PATH``: which upstream line a BEHAVIOR-1K tree is, and whether this
package's ``patches/`` series for that line applies to it, patch by patch.

``PATH`` is a BEHAVIOR-1K checkout (holding ``OmniGibson/omnigibson/``) or its ``OmniGibson/`` folder. The line
comes from the tree's own files: ``envs/env_base.py`` (``Environment.__init__(self, configs, in_vec_env=False)``
is the v3.7 line; an ``Environment`` whose ``get_obs`` takes ``env_indices`` is main's multi-scene layout),
else the ``version=`` of ``OmniGibson/setup.py`` (3.7.x or 3.8.x). The tree is never modified: the files the
series touches are copied to a temporary folder and checked there with ``git apply`` (see
:func:`check_series`). Per patch the report says:

- ``already upstream``: its reverse applies (the tree already has the change);
- ``applies``: ``git apply --check`` passes, on top of the earlier patches of the series that apply;
- ``does not apply``: neither; the detail names the first hunk git rejected (file, line, function).

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

#: Upstream line -> its series folder under ``patches/``.
SERIES = {"v3.7": "v3.7.2", "main": "main"}
#: Folder of the patch series (the repository's ``patches/``, next to the package).
PATCHES_DIR = Path(__file__).resolve().parents[2] / "patches"
#: Patch paths are relative to the BEHAVIOR-1K root; this is their common prefix.
TREE_PREFIX = "OmniGibson/"

APPLIES, ALREADY_UPSTREAM, DOES_NOT_APPLY = "applies", "already upstream", "does not apply"

_V37_INIT = re.compile(r"def __init__\(self, configs, in_vec_env=False\)")
_MAIN_GET_OBS = re.compile(r"def get_obs\(self, env_indices=None\)")
_VERSION = re.compile(r"""version\s*=\s*["'](\d+)\.(\d+)(?:\.\d+)?[^"']*["']""")
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


def omnigibson_folder(path: str | Path) -> Path:
    """The ``OmniGibson/`` folder of a BEHAVIOR-1K checkout ``path`` (or ``path`` itself if it is one)."""
    root = Path(path)
    for candidate in (root / "OmniGibson", root):
        if (candidate / "omnigibson").is_dir():
            return candidate
    raise UpstreamPathError(f"{str(path)!r} holds neither OmniGibson/omnigibson/ nor omnigibson/: not a BEHAVIOR-1K tree")


def detect_line(folder: Path) -> tuple[str, str]:
    """``(line, evidence)`` for an ``OmniGibson/`` folder: ``v3.7``, ``main`` or ``unknown``."""
    env_base = folder / "omnigibson" / "envs" / "env_base.py"
    if env_base.is_file():
        text = env_base.read_text(errors="replace")
        if _V37_INIT.search(text):
            return "v3.7", "envs/env_base.py: Environment.__init__(self, configs, in_vec_env=False)"
        if _MAIN_GET_OBS.search(text):
            return "main", "envs/env_base.py: multi-scene Environment (get_obs(self, env_indices=None))"
    setup = folder / "setup.py"
    match = _VERSION.search(setup.read_text(errors="replace")) if setup.is_file() else None
    if match:
        version = (int(match[1]), int(match[2]))
        line = {(3, 7): "v3.7", (3, 8): "main"}.get(version, "unknown")
        return line, f"setup.py: version {match[1]}.{match[2]}"
    return "unknown", "neither envs/env_base.py nor setup.py says which line this is"


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
    folder = omnigibson_folder(path)
    line, evidence = detect_line(folder)
    report: dict[str, Any] = {"path": str(path), "line": line, "evidence": evidence, "series": None, "patches": []}
    if line in SERIES:
        report["series"] = f"patches/{SERIES[line]}"
        report["patches"] = [asdict(c) for c in check_series(folder, series_patches(line))]
    report["ok"] = line in SERIES and all(p["state"] != DOES_NOT_APPLY for p in report["patches"])
    return report


def render_text(report: dict[str, Any]) -> str:
    lines = [f"BEHAVIOR-1K tree {report['path']}: line {report['line']} ({report['evidence']})"]
    if report["series"] is None:
        lines.append(f"No patch series for this line (series exist for: {', '.join(SERIES)}).")
    else:
        lines.append(f"Series {report['series']}, checked in order with git apply --check:")
        width = max(len(p["patch"]) for p in report["patches"])
        for p in report["patches"]:
            detail = f": {p['detail']}" if p["detail"] else ""
            lines.append(f"  {p['patch']:<{width}}  {p['state']}{detail}")
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
        print(f"behavior1k-fast doctor: {problem}", file=sys.stderr)
        return 2
    try:
        report = collect(path)
    except UpstreamPathError as exc:
        print(f"behavior1k-fast doctor: bad --upstream: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if as_json else render_text(report))
    return 0 if report["ok"] else 1
