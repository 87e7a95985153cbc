"""The runtime patches on a line's texts after that line's ``patches/`` series was applied (a checkout that
cherry-picked the series): each runtime patch the series carries finds its change upstream and skips, so
nothing is patched twice; only the launch settings, which the series adds as macros that default to off,
still apply at run time. And main's ``Environment.step`` behaves the same with the series as with the
runtime patches."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from behavior1k_fast.patching import APPLIED, SKIPPED, WOULD_APPLY, PatchRegistry
from behavior1k_fast.patching.omnigibson import PATCHES

from ..upstream_lines import REPO, Line, get_line, line_tree, missing_reason
from .conftest import RecordingSim, build_multi_seam, multi_scene_environment_class

SERIES = {"v3.7": "v3.7.2", "main": "main"}
PATCH_ROOT = REPO / "patches"
#: Runtime patches of a series that still apply with it: its launch macros default to off.
OPT_IN_MACROS = {
    "main": {"kit_thread_caps", "gc_after_launch", "texture_streaming_budget"},
    "v3.7": {"kit_thread_caps", "gc_after_launch", "texture_streaming_budget", "rtx_descriptor_sets"},
}


def _trailers(series: str) -> set[str]:
    return {
        line.split(": ", 1)[1]
        for patch in (PATCH_ROOT / series).glob("*.patch")
        for line in patch.read_text().splitlines()
        if line.startswith("Behavior1k-Fast-Patch: ")
    }


def series_line(name: str, where) -> Line:
    """Line ``name``'s texts with its whole ``patches/`` series applied (``git apply`` on a copy in ``where``);
    skips where the texts or git are absent."""
    if missing_reason(name):
        pytest.skip(missing_reason(name))
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tree = where / name
    shutil.copytree(line_tree(name), tree)  # the verbatim files, not the links
    for patch in sorted((PATCH_ROOT / SERIES[name]).glob("*.patch")):
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    return Line(f"{name}+{SERIES[name]}", tree / "OmniGibson" / "omnigibson", stand_ins_of=(name,))


@pytest.mark.parametrize("name", sorted(SERIES))
def test_runtime_patches_find_the_series_already_upstream(name, og, tmp_path, monkeypatch, fast_profile):
    series_line(name, tmp_path).activate(monkeypatch)
    plan = PatchRegistry(PATCHES).plan(fast_profile)
    carried = _trailers(SERIES[name])
    assert carried & OPT_IN_MACROS[name] == OPT_IN_MACROS[name]
    for patch_name in sorted(carried - OPT_IN_MACROS[name]):
        outcome = plan[patch_name]
        assert outcome.state == SKIPPED, (patch_name, outcome)
        assert "already" in outcome.reason, outcome
    for patch_name in OPT_IN_MACROS[name]:
        assert plan[patch_name].state == WOULD_APPLY, plan[patch_name]


#: A sequence of main ``Environment`` calls: full and subset steps with and without observation and rendering,
#: extra renders, automatic resets of selected envs that end (env 0 at its 2nd step, env 1 at its 3rd, every
#: episode), a subset reset. Run with and without tiled rendering, with scene-graph builders.
MAIN_SCRIPT = (
    lambda h: h.env.step(h.rows(range(3))),
    lambda h: h.env.step(h.rows([1]), env_indices=[1]),
    lambda h: h.env.step(h.rows([2, 0]), env_indices=[2, 0], get_obs=False, render=False),
    lambda h: h.env.step(h.rows([1]), env_indices=[1], get_obs=False),
    lambda h: h.env.step(h.rows(range(3)), 2),
    lambda h: h.env.reset(env_indices=[2]),
    lambda h: h.env.step(h.rows([0, 2]), env_indices=[0, 2]),
    lambda h: h.env.step(h.rows(range(3)), get_obs=False),
    lambda h: h.env.step(h.rows([1]), env_indices=[1], render=False),
)


@pytest.mark.parametrize("tiled", [False, True], ids=["cameras", "tiled"])
def test_main_series_step_behaves_as_the_runtime_patches(tiled, og, tmp_path, monkeypatch, fast_profile):
    """The same calls on main's text with the runtime patches (``env_step_obs``, ``multi_scene_step``) and on
    main's text with ``patches/main`` applied: the same results, counters and simulator, robot, task,
    builder, sensor and tile calls."""
    series = series_line("main", tmp_path)

    def run() -> list:
        sim = RecordingSim()
        monkeypatch.setattr(og, "sim", sim)
        h = build_multi_seam(multi_scene_environment_class(og), sim, 3, terminate_at={0: 2, 1: 3}, tiled=tiled,
                             builders=True, automatic_reset=True)
        return [h.outcome(call) for call in MAIN_SCRIPT]

    with monkeypatch.context() as runtime:
        get_line("main").activate(runtime)
        registry = PatchRegistry(PATCHES)
        report = registry.apply(fast_profile)
        assert report["env_step_obs"].state == report["multi_scene_step"].state == APPLIED
        try:
            patched_at_runtime = run()
        finally:
            registry.revert()
    series.activate(monkeypatch)
    assert run() == patched_at_runtime
