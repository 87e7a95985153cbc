"""The upstream patches under ``patches/`` are well-formed ``git format-patch`` mails made against the real upstream
texts, and describe the same change as the runtime patches of ``behavior1k_fast.omnigibson``.

Each patch names its runtime counterparts in ``Behavior1k-Fast-Patch: <name>`` trailers. Checked here:

- structure: mbox ``From`` line, ``From:``/``Date:``/``Subject: [PATCH n/m]`` headers, a message, ``---``, diffs
  whose hunk line counts add up, three lines of context on both sides of every change;
- application, on throw-away repositories made from the verbatim upstream sets (``tests/upstream_lines.py``;
  skipped with a reason where the sets are absent): ``git am`` of each whole series on its set, every ``index``
  line naming the real blobs before and after its patch, and ``git am -3`` merging the series into a set whose
  context lines were edited (possible only because the pre-image blobs are real);
- equivalence: the files and functions each runtime patch's hunks touch (over the whole series) are its
  ``upstream_file`` and ``targets``, every runtime patch with an upstream file is covered on each line (or listed
  below with the reason it is not), and each rewritten ``def`` signature equals the one the runtime patch
  declares (``tests/omnigibson`` checks that it installs exactly those).
"""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from behavior1k_fast.patching.omnigibson import PATCHES

from ..upstream_lines import line_tree, missing_reason

PATCH_ROOT = Path(__file__).resolve().parents[2] / "patches"
SERIES = ("main", "v3.7.2")
#: Series -> the upstream line it is made against (its texts: ``tests/upstream_lines.line_tree``).
SET_OF = {"main": "main", "v3.7.2": "v3.7"}
TRAILER = "Behavior1k-Fast-Patch"
UPSTREAM_PREFIX = "OmniGibson/"  # patch paths are relative to the BEHAVIOR-1K repository root
CONTEXT = 3

#: Runtime patches with an upstream file that have no upstream patch on a line, and why.
KIT_RENDERER_GPU = "binds the engine's worker processes to the profile's gpu_ids; no upstream patch yet"
RENDER_QUALITY = "opt-in knobs that change pixels: a user's trade, not an upstream default"
ANNOTATOR_PRUNING = ("which modalities a policy consumes is the user's config and profile; upstream already attaches "
                     "only the modalities its config asks for")
HEADLESS_RENDER_SETTINGS = "opt-in Kit settings (Isaac Lab 3.0's headless rendering): a user's trade, not an upstream default"
NOT_UPSTREAMED = {
    "main": {
        "headless_viewport": "main has it since StanfordVL/BEHAVIOR-1K#2117",
        "vector_env_step": "main replaced VectorEnvironment by the multi-scene Environment (#2329): per-env "
                           "stepping is multi_scene_step's (0003)",
        "viewer_camera_off": "main's macros.py (00c69a80) defaults gm.RENDER_VIEWER_CAMERA to True: a headless default "
                             "is upstream's choice; the runtime patch switches it off in headless launches",
        "kit_launch_argv": "main keeps sys.argv = [argv0] since #2178 (00c69a80)",
        "rtx_descriptor_sets": "#2152 fixes the descriptor-set cap on main, in none of the stored texts",
        "render_quality": RENDER_QUALITY,
        "kit_renderer_gpu": KIT_RENDERER_GPU,
        "annotator_pruning": ANNOTATOR_PRUNING,
        "kit_headless_render_settings": HEADLESS_RENDER_SETTINGS,
    },
    "v3.7.2": {
        "multi_scene_step": "v3.7's Environment holds one scene: per-env stepping is VectorEnvironment.step's (0004)",
        "viewer_camera_off": "gm.RENDER_VIEWER_CAMERA already defaults to False on v3.7.x",
        "numba_cache_ik_controller": "the only v3.7 ik_controller.py text found (RLinf 27fbfc08) already has cache=True",
        "kit_launch_argv": "v3.7's _launch_app never clears sys.argv",
        "render_quality": RENDER_QUALITY,
        "kit_renderer_gpu": KIT_RENDERER_GPU,
        "annotator_pruning": ANNOTATOR_PRUNING,
        "kit_headless_render_settings": HEADLESS_RENDER_SETTINGS,
    },
}
#: Runtime targets that a line's patches leave unchanged (absent upstream, or upstream already does it), and why.
ABSENT_UPSTREAM = {
    ("main", "env_step_obs"): {"Environment._post_step": "main's multi-scene Environment has no _post_step"},
    ("main", "env_wrapper_forwarding"): {
        "EnvironmentWrapper.reset": "main's EnvironmentWrapper.reset already forwards **kwargs (343d786a)",
    },
    ("v3.7.2", "headless_viewport"): {
        "VisionSensor.clear": "v3.7's clear() calls remove() on every sensor, which the patch guards",
    },
}
#: (upstream file, function) a runtime patch's upstream series also changes, beyond its own targets, and why.
SUPPORT = {
    "env_step_obs": {("omnigibson/simulator.py", "render_on_step"): "restores the render flag when its block raises "
                     "(the runtime patch restores it itself)"},
    "vector_env_step": {("omnigibson/simulator.py", "render_on_step"): "as for env_step_obs"},
    "multi_scene_step": {("omnigibson/envs/env_base.py", "__init__"): "initialises _held_actions, the action each env "
                         "holds (the runtime patch keeps it beside the env)"},
}


# --- parsing ----------------------------------------------------------------------------------------------------
@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str  # the function context git printed after the second @@
    lines: list[str]  # body lines, each starting with ' ', '-' or '+'


@dataclass
class FileDiff:
    path: str
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class PatchMail:
    path: Path
    number: int
    total: int
    subject: str
    message: str
    trailers: list[str]
    diffs: list[FileDiff]


FROM_LINE = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$")
SUBJECT = re.compile(r"^\[PATCH (\d+)/(\d+)\] (.+)$")
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def parse_patch(path: Path) -> PatchMail:
    """Parse one ``git format-patch`` file; ValueError naming the file and line on anything malformed."""
    lines = path.read_text().split("\n")

    def fail(i: int, why: str) -> ValueError:
        return ValueError(f"{path.name}:{i + 1}: {why}: {lines[i] if i < len(lines) else '<EOF>'!r}")

    if not FROM_LINE.match(lines[0]):
        raise fail(0, "not an mbox From line")
    headers: dict[str, str] = {}
    i = 1
    while lines[i]:
        if lines[i].startswith(" ") and headers:
            key = list(headers)[-1]
            headers[key] += lines[i]
        else:
            key, sep, value = lines[i].partition(": ")
            if not sep:
                raise fail(i, "not a mail header")
            headers[key] = value
        i += 1
    for key in ("From", "Date", "Subject"):
        if key not in headers:
            raise fail(i, f"missing {key}: header")
    subject = SUBJECT.match(headers["Subject"])
    if not subject:
        raise fail(i, "Subject is not '[PATCH n/m] summary'")
    end = lines.index("---", i)
    message = "\n".join(lines[i + 1 : end]).strip()
    trailers = [line.split(": ", 1)[1] for line in message.split("\n") if line.startswith(f"{TRAILER}: ")]
    diffs: list[FileDiff] = []
    i = end + 1
    while i < len(lines) and not lines[i].startswith("diff --git "):
        i += 1  # diffstat
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        m = re.match(r"^diff --git a/(\S+) b/(\S+)$", lines[i])
        if not m or m[1] != m[2]:
            raise fail(i, "expected 'diff --git a/X b/X'")
        diff = FileDiff(m[1])
        i += 1
        if lines[i].startswith("index "):
            i += 1
        if lines[i] != f"--- a/{diff.path}" or lines[i + 1] != f"+++ b/{diff.path}":
            raise fail(i, "expected ---/+++ lines of the same file")
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            h = HUNK_HEADER.match(lines[i])
            if not h:
                raise fail(i, "malformed hunk header")
            hunk = Hunk(int(h[1]), int(h[2] or 1), int(h[3]), int(h[4] or 1), h[5], [])
            i += 1
            old = new = 0
            while old < hunk.old_len or new < hunk.new_len:
                line = lines[i]
                if not line or line[0] not in " +-":
                    raise fail(i, f"hunk body ended after {old}/{hunk.old_len} old, {new}/{hunk.new_len} new lines")
                old += line[0] in " -"
                new += line[0] in " +"
                hunk.lines.append(line)
                i += 1
            if old != hunk.old_len or new != hunk.new_len:
                raise fail(i, "hunk line counts do not match its header")
            diff.hunks.append(hunk)
        if not diff.hunks:
            raise fail(i, "file diff without hunks")
        diffs.append(diff)
    if not diffs:
        raise ValueError(f"{path.name}: no diff")
    return PatchMail(path, int(subject[1]), int(subject[2]), subject[3], message, trailers, diffs)


def series(name: str) -> list[PatchMail]:
    return [parse_patch(p) for p in sorted((PATCH_ROOT / name).glob("*.patch"))]


# --- what a hunk touches ------------------------------------------------------------------------------------------
DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)\s*\(")
CLASS = re.compile(r"^(\s*)class\s+(\w+)\b")


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def touched(hunk: Hunk) -> tuple[set[str], set[str]]:
    """(existing functions whose lines change, functions the hunk adds). Module-level lines are not counted;
    a changed decorator belongs to the function it decorates."""
    # git prints the nearest def/class above the hunk without its indentation: it encloses every indented line
    # until a module-level line, and nested or sibling definitions in the hunk stack on top of it
    seed = DEF.match(hunk.section) or CLASS.match(hunk.section)
    stack: list[tuple[int, str, bool]] = [(0, seed[2], False)] if seed else []  # (indent, name, added here)
    changed: set[str] = set()
    added: set[str] = set()
    pending: list[bool] = []  # changed decorators waiting for their def
    for line in hunk.lines:
        sign, text = line[0], line[1:]
        if not text.strip():
            continue
        indent = _indent(text)
        while stack and indent <= stack[-1][0]:
            stack.pop()
        d = DEF.match(text) or CLASS.match(text)
        if d:
            is_def = bool(DEF.match(text))
            new_def = sign == "+" and is_def
            stack.append((indent, d[2], new_def))
            if is_def:
                if new_def:
                    added.add(d[2])
                elif sign == "-" or pending:
                    changed.add(d[2])
            pending = []
            continue
        if text.lstrip().startswith("@"):
            if sign != " ":
                pending.append(True)
            continue
        if sign != " " and stack:
            name, is_new = stack[-1][1], stack[-1][2]
            (added if is_new else changed).add(name)
    removed_then_added = {name for name in added if any(
        line.startswith("-") and (m := DEF.match(line[1:])) and m[2] == name for line in hunk.lines)}
    return changed | removed_then_added, added - removed_then_added


def touched_in(mail: PatchMail, upstream_file: str) -> tuple[set[str], set[str]]:
    changed: set[str] = set()
    added: set[str] = set()
    for diff in mail.diffs:
        if diff.path == UPSTREAM_PREFIX + upstream_file:
            for hunk in diff.hunks:
                c, a = touched(hunk)
                changed |= c
                added |= a
    return changed, added


def new_signatures(mail: PatchMail) -> dict[str, inspect.Signature]:
    """Name -> signature of every function whose ``def`` line the patch rewrites (removed and re-added)."""
    result: dict[str, inspect.Signature] = {}
    for diff in mail.diffs:
        for hunk in diff.hunks:
            removed = {m[2] for line in hunk.lines if line[0] == "-" and (m := DEF.match(line[1:]))}
            plus = [line[1:] for line in hunk.lines if line[0] in "+ "]
            for k, text in enumerate(plus):
                m = DEF.match(text)
                if not m or m[2] not in removed:
                    continue
                source = text
                while not source.rstrip().endswith(":"):
                    k += 1
                    source += "\n" + plus[k]
                result[m[2]] = _signature_of(ast.parse(source.strip() + "\n    pass").body[0])
    return result


def _signature_of(fn: ast.FunctionDef) -> inspect.Signature:
    a = fn.args
    P = inspect.Parameter
    positional = a.posonlyargs + a.args
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    params = [P(x.arg, P.POSITIONAL_OR_KEYWORD, default=d) for x, d in zip(positional, defaults)]
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for x, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append(P(x.arg, P.KEYWORD_ONLY, default=P.empty if d is None else ast.literal_eval(d)))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


# --- structure --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SERIES)
def test_series_is_numbered_and_trailed(name):
    mails = series(name)
    assert mails, f"patches/{name} holds no patch"
    assert [m.number for m in mails] == list(range(1, len(mails) + 1))
    assert {m.total for m in mails} == {len(mails)}
    for mail in mails:
        assert mail.path.name.startswith(f"{mail.number:04d}-")
        assert mail.trailers, f"{mail.path.name} names no runtime patch ({TRAILER}: trailer)"
        assert all(d.path.startswith(UPSTREAM_PREFIX + "omnigibson/") for d in mail.diffs)


@pytest.mark.parametrize("name", SERIES)
def test_every_change_has_full_context(name):
    for mail in series(name):
        for diff in mail.diffs:
            for hunk in diff.hunks:
                signs = "".join(line[0] for line in hunk.lines)
                lead, trail = len(signs) - len(signs.lstrip(" ")), len(signs) - len(signs.rstrip(" "))
                where = f"{mail.path.name} {diff.path} @@ -{hunk.old_start}"
                assert lead == CONTEXT or hunk.old_start == 1, f"{where}: {lead} leading context lines"
                assert trail == CONTEXT, f"{where}: {trail} trailing context lines"
                assert signs.strip(" "), f"{where}: hunk changes nothing"


def test_parser_rejects_malformed_patches(tmp_path):
    good = next((PATCH_ROOT / "main").glob("*.patch")).read_text()
    cases = {
        "from": good.replace("From 0000", "Frm 0000", 1),
        "subject": good.replace("Subject: [PATCH ", "Subject: [PTCH ", 1),
        "count": re.sub(r"^@@ -(\d+),(\d+)", lambda m: f"@@ -{m[1]},{int(m[2]) + 1}", good, count=1, flags=re.M),
    }
    for label, text in cases.items():
        bad = tmp_path / f"{label}.patch"
        bad.write_text(text)
        with pytest.raises(ValueError, match=bad.name):
            parse_patch(bad)


def test_touched_attributes_decorators_and_new_helpers():
    hunk = Hunk(1, 6, 1, 11, "def before(", [
        "     return u",
        " ",
        "-@jit(nopython=True)",
        "+@jit(nopython=True, cache=True)",
        " def kernel(",
        "+    def _helper(self):",
        "+        return 1",
        "+",
        " ",
        " class Sensor:",
        "     def remove(self):",
        "-        self._viewport.destroy()",
        "+        pass",
    ])
    assert touched(hunk) == ({"kernel", "remove"}, {"_helper"})


# --- application ------------------------------------------------------------------------------------------------
def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True)


def set_repo(name: str, where: Path) -> Path:
    """A throw-away git repository holding the upstream line of series ``name`` (skips where it is absent)."""
    line = SET_OF[name]
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if missing_reason(line):
        pytest.skip(missing_reason(line))
    shutil.copytree(line_tree(line), where)  # the verbatim files, not the links
    assert _git(where, "init", "-q").returncode == 0
    _git(where, "add", "-A")
    assert _git(where, "commit", "-qm", "upstream").returncode == 0
    return where


def _am(repo: Path, mails: list[PatchMail], *flags: str) -> subprocess.CompletedProcess:
    return _git(repo, "am", *flags, *[str(m.path) for m in mails])


@pytest.mark.parametrize("name", SERIES)
def test_series_applies_with_git_am_to_its_upstream_set(name, tmp_path):
    mails = series(name)
    repo = set_repo(name, tmp_path / "repo")
    am = _am(repo, mails)
    assert am.returncode == 0, am.stdout + am.stderr
    log = _git(repo, "log", "--format=%s", f"-{len(mails)}").stdout.splitlines()
    assert log[::-1] == [m.subject for m in mails]
    assert _git(repo, "status", "--porcelain").stdout == ""


@pytest.mark.parametrize("name", SERIES)
def test_index_lines_name_the_real_blobs(name, tmp_path):
    """Each patch's ``index`` line names the file's blob before it (the upstream text, or the previous patch's
    result) and after it, so ``git am -3`` can find the pre-image."""
    mails = series(name)
    repo = set_repo(name, tmp_path / "repo")
    assert _am(repo, mails).returncode == 0
    for k, mail in enumerate(mails):
        commit = f"HEAD~{len(mails) - 1 - k}"
        text = mail.path.read_text()
        for diff in mail.diffs:
            pre, post = re.search(rf"^diff --git a/{re.escape(diff.path)} .*\nindex (\w+)\.\.(\w+) ", text, re.M).groups()
            assert _git(repo, "rev-parse", f"{commit}^:{diff.path}").stdout.startswith(pre), (mail.path.name, diff.path)
            assert _git(repo, "rev-parse", f"{commit}:{diff.path}").stdout.startswith(post), (mail.path.name, diff.path)


@pytest.mark.parametrize("name", SERIES)
def test_git_am_3way_merges_the_series_into_an_edited_checkout(name, tmp_path):
    """A checkout whose context lines differ (a local edit next to every hunk's first context line): plain
    ``git am`` stops, ``git am -3`` merges through the pre-image blobs and keeps the edit."""
    mails = series(name)
    repo = set_repo(name, tmp_path / "repo")
    edited = []
    for diff in mails[0].diffs:
        path = repo / diff.path
        lines = path.read_text().split("\n")
        at = diff.hunks[0].old_start - 1  # the hunk's first context line
        lines[at] = lines[at] + "  # local edit"
        path.write_text("\n".join(lines))
        edited.append((path, lines[at]))
    _git(repo, "commit", "-qam", "local edit")
    assert _am(repo, mails[:1]).returncode != 0
    _git(repo, "am", "--abort")
    merged = _am(repo, mails, "-3")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    for path, line in edited:
        assert line in path.read_text().split("\n")


# --- equivalence with the runtime patches ----------------------------------------------------------------------
RUNTIME = {p.name: p for p in PATCHES}


@pytest.mark.parametrize("name", SERIES)
def test_trailers_name_runtime_patches_and_cover_them(name):
    covered = {t for mail in series(name) for t in mail.trailers}
    unknown = covered - set(RUNTIME)
    assert not unknown, f"patches/{name} names runtime patches that do not exist: {sorted(unknown)}"
    with_file = {p.name for p in PATCHES if p.upstream_file}
    excused = NOT_UPSTREAMED[name]
    assert not covered & set(excused), f"{sorted(covered & set(excused))} are both patched and excused"
    missing = with_file - covered - set(excused)
    assert not missing, f"runtime patches with an upstream file but no patch in patches/{name}: {sorted(missing)}"


@pytest.mark.parametrize("name", SERIES)
def test_hunks_touch_the_runtime_targets(name):
    """Over the whole series, the hunks of the patches trailed with a runtime patch change exactly its upstream
    file's targets (less those absent upstream), plus the support changes listed in ``SUPPORT`` (in another file,
    or in the same one)."""
    mails = series(name)
    for trailer in sorted({t for mail in mails for t in mail.trailers}):
        patch = RUNTIME[trailer]
        own = [mail for mail in mails if trailer in mail.trailers]
        support = SUPPORT.get(trailer, {})
        for mail in own:
            allowed = {UPSTREAM_PREFIX + f for t in mail.trailers for f in
                       {RUNTIME[t].upstream_file, *(f for f, _ in SUPPORT.get(t, {}))}}
            files = {d.path for d in mail.diffs}
            assert files <= allowed, f"{mail.path.name} touches {sorted(files - allowed)}, which no trailer declares"
        absent = set(ABSENT_UPSTREAM.get((name, trailer), {}))
        changed, added = set(), set()
        for mail in own:
            c, a = touched_in(mail, patch.upstream_file)
            changed |= c
            added |= a
        targets = {t.rsplit(".", 1)[-1] for t in set(patch.targets) - absent}
        same_file = {function for upstream_file, function in support if upstream_file == patch.upstream_file}
        assert changed == targets | same_file, (
            f"{trailer} in patches/{name}: hunks change {sorted(changed)}, targets {sorted(targets)} + {sorted(same_file)}"
        )
        assert all(n.startswith("_") for n in added), f"{trailer} in patches/{name}: new public functions {sorted(added)}"
        for upstream_file, function in support:
            if upstream_file == patch.upstream_file:
                continue
            there = set().union(*(touched_in(mail, upstream_file)[0] for mail in own))
            assert there == {function}, f"{trailer} in patches/{name}: {upstream_file} changes {sorted(there)}"


def _declared_signatures(patch) -> dict[str, inspect.Signature]:
    """Method -> the signature a keyword-adding runtime patch installs (its adapter's)."""
    return {method.attr: inspect.signature(method.signature) for method in getattr(patch, "methods", ())}


@pytest.mark.parametrize("name", SERIES)
def test_new_signatures_equal_the_runtime_ones(name):
    compared = 0
    for mail in series(name):
        signatures = new_signatures(mail)
        for trailer in mail.trailers:
            for function, declared in _declared_signatures(RUNTIME[trailer]).items():
                if function in signatures:
                    assert signatures[function] == declared, f"{mail.path.name} {function}: {signatures[function]} != {declared}"
                    compared += 1
    assert compared == {"main": 3, "v3.7.2": 6}[name]


def test_readme_maps_every_patch_file_and_runtime_patch():
    readme = (PATCH_ROOT / "README.md").read_text()
    for name in SERIES:
        for mail in series(name):
            assert mail.path.name in readme, f"README.md does not mention {name}/{mail.path.name}"
            for trailer in mail.trailers:
                assert f"`{trailer}`" in readme
        for excused in NOT_UPSTREAMED[name]:
            assert f"`{excused}`" in readme
