"""The runtime patches on a line's texts after that line's ``patches/`` series was applied (a checkout that
cherry-picked the series): each runtime patch the series carries finds its change upstream and skips, so
nothing is patched twice; only the launch settings, which the series adds as macros that default to off,
still apply at run time."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from behavior1k_fast.patching import SKIPPED, WOULD_APPLY, PatchRegistry
from behavior1k_fast.patching.omnigibson import PATCHES
from behavior1k_fast.patching.omnigibson.stepping import MULTI_SCENE_REASON

from ..upstream_lines import REPO, Line, missing_reason, set_folder

SERIES = {"v3.7": "v3.7.2", "main": "main"}
PATCH_ROOT = REPO / "patches"
#: Runtime patches of a series that still apply with it: its launch macros default to off.
OPT_IN_MACROS = {"kit_thread_caps", "gc_after_launch", "texture_streaming_budget"}


def _trailers(series: str) -> set[str]:
    return {
        line.split(": ", 1)[1]
        for patch in (PATCH_ROOT / series).glob("*.patch")
        for line in patch.read_text().splitlines()
        if line.startswith("Behavior1k-Fast-Patch: ")
    }


@pytest.mark.parametrize("name", sorted(SERIES))
def test_runtime_patches_find_the_series_already_upstream(name, og, tmp_path, monkeypatch, fast_profile):
    if missing_reason(name):
        pytest.skip(missing_reason(name))
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tree = tmp_path / name
    shutil.copytree(set_folder(name), tree)
    for patch in sorted((PATCH_ROOT / SERIES[name]).glob("*.patch")):
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    patched_line = Line(f"{name}+{SERIES[name]}", tree / "OmniGibson" / "omnigibson", stand_ins_of=name)
    patched_line.activate(monkeypatch)
    plan = PatchRegistry(PATCHES).plan(fast_profile)
    carried = _trailers(SERIES[name])
    assert carried & OPT_IN_MACROS == OPT_IN_MACROS
    for patch_name in sorted(carried - OPT_IN_MACROS):
        outcome = plan[patch_name]
        assert outcome.state == SKIPPED, (patch_name, outcome)
        assert "already" in outcome.reason or (name == "main" and outcome.reason == MULTI_SCENE_REASON), outcome
    for patch_name in OPT_IN_MACROS:
        assert plan[patch_name].state == WOULD_APPLY, plan[patch_name]
