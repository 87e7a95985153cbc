"""``behavior1k-fast doctor --upstream PATH`` on the verbatim upstream sets, on copies with the series already
applied or deliberately edited, and on paths that are no BEHAVIOR-1K tree."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from behavior1k_fast.tools import upstream_check
from behavior1k_fast.tools.cli import main

from ..upstream_lines import LINE_SETS, line_tree, missing_reason, set_folder

SERIES_OF = {"v3.7": "v3.7.2", "main": "main"}


def upstream_set(line: str) -> Path:
    """The BEHAVIOR-1K tree of ``line`` (a line of ``LINE_SETS``: its texts laid out as one tree) or of a set."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if missing_reason(line):
        pytest.skip(missing_reason(line))
    return line_tree(line) if line in LINE_SETS else set_folder(line)


def copy_of(line: str, tmp_path: Path) -> Path:
    tree = tmp_path / line
    shutil.copytree(upstream_set(line), tree)
    return tree


def doctor(capsys, path, *flags) -> tuple[int, str, str]:
    code = main(["doctor", "--upstream", str(path), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def states(report: dict) -> list[str]:
    return [p["state"] for p in report["patches"]]


@pytest.mark.parametrize("line", ["v3.7", "main"])
def test_each_set_is_recognised_and_its_whole_series_applies(line, capsys):
    code, out, err = doctor(capsys, upstream_set(line), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and err == ""
    assert report["line"] == line and report["series"] == f"patches/{SERIES_OF[line]}"
    assert len(report["patches"]) == len(upstream_check.series_patches(line)) and set(states(report)) == {"applies"}


@pytest.mark.parametrize("line", ["v3.7", "main"])
def test_an_omnigibson_folder_is_accepted_too(line, capsys):
    code, out, _ = doctor(capsys, upstream_set(line) / "OmniGibson")
    assert code == 0 and f"line {line} (envs/env_base.py" in out and out.rstrip().endswith("OK: every patch applies or is already upstream")


@pytest.mark.parametrize("line", ["v3.7", "main"])
def test_a_checkout_with_the_series_applied_reports_already_upstream(line, tmp_path, capsys):
    tree = copy_of(line, tmp_path)
    for patch in upstream_check.series_patches(line):
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    code, out, _ = doctor(capsys, tree, "--json")
    assert code == 0 and set(states(json.loads(out))) == {"already upstream"}


def test_an_edited_checkout_names_the_patch_and_hunk_that_do_not_apply(tmp_path, capsys):
    tree = copy_of("v3.7", tmp_path)
    osc = tree / "OmniGibson/omnigibson/controllers/osc_controller.py"
    text = osc.read_text()
    assert text.count("@jit(nopython=True)\ndef _compute_osc_torques_numpy(") == 1
    osc.write_text(text.replace("@jit(nopython=True)\ndef _compute_osc_torques_numpy(", "@jit(nopython=True, fastmath=True)\ndef _compute_osc_torques_numpy("))
    code, out, _ = doctor(capsys, tree, "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    failed = [p for p in report["patches"] if p["state"] != "applies"]
    assert [p["patch"] for p in failed] == [p.name for p in upstream_check.series_patches("v3.7") if "numba" in p.name]
    assert failed[0]["state"] == "does not apply"
    assert failed[0]["detail"].startswith("hunk 1/1 of OmniGibson/omnigibson/controllers/osc_controller.py at line")
    assert failed[0]["detail"].endswith("(def _compute_osc_torques_torch()")
    code, text_out, _ = doctor(capsys, tree)
    assert code == 1 and "does not apply: hunk 1/1" in text_out and text_out.rstrip().endswith("NOT OK")


def test_main_alt_env_base_already_taking_render_rejects_the_step_hunk(tmp_path, capsys):
    """343d786a's ``Environment.step`` already has ``render``: the main series' step patches do not apply there
    (0002's signature hunk is rejected, and 0003 changes 0002's result); see patches/README.md for why the
    series targets 006d10e5."""
    tree = copy_of("main", tmp_path)
    shutil.copyfile(upstream_set("main-alt-343d786a") / "OmniGibson/omnigibson/envs/env_base.py",
                    tree / "OmniGibson/omnigibson/envs/env_base.py")
    code, out, _ = doctor(capsys, tree, "--json")
    report = json.loads(out)
    rejected = {p["patch"]: p["detail"] for p in report["patches"] if p["state"] == "does not apply"}
    step_patches = [p.name for p in upstream_check.series_patches("main")[1:3]]
    assert code == 1 and report["line"] == "main" and list(rejected) == step_patches
    assert all("envs/env_base.py at line" in detail for detail in rejected.values())


def test_mains_older_simulator_names_the_launch_hunks_that_do_not_apply(capsys):
    """The ``main/`` set as stored: its simulator (blob 0de9a31) predates cbd13c78, which the main series is made
    against; the render-flag fix still applies there, the thread-caps launch hunk and the GC/texture macro hunk
    (next to cbd13c78's Warp lines) do not."""
    upstream_set("main")  # skips where the texts are absent
    code, out, _ = doctor(capsys, set_folder("main"), "--json")
    report = json.loads(out)
    rejected = {p["patch"][:4]: p["detail"] for p in report["patches"] if p["state"] == "does not apply"}
    assert code == 1 and report["line"] == "main" and sorted(rejected) == ["0005", "0006"]
    assert rejected["0005"] == "hunk 2/2 of OmniGibson/omnigibson/simulator.py at line 291 (def _launch_app():)"
    assert rejected["0006"].startswith("hunk 2/3 of OmniGibson/omnigibson/simulator.py")


def test_line_comes_from_setup_py_without_env_base(tmp_path):
    for version, line in (("3.7.1", "v3.7"), ("3.8.0", "main"), ("1.1.1", "unknown")):
        folder = tmp_path / version / "OmniGibson"
        (folder / "omnigibson").mkdir(parents=True)
        (folder / "setup.py").write_text(f'setup(name="omnigibson", version="{version}")\n')
        assert upstream_check.detect_line(folder) == (line, f"setup.py: version {version}")


@pytest.mark.parametrize("name, line, release", [
    ("backend-7423c692", "backend", None),
    ("backend-1b618dc0", "backend", None),
    ("isaac6-2af465a2", "isaac6", {"version": "3.9.0", "from": "omnigibson_6_0_0.kit"}),
    ("main-1294717b", "main", {"version": "3.9.1", "from": "omnigibson_5_1_0.kit"}),
])
def test_the_new_sets_are_named_by_their_own_files(name, line, release, capsys):
    """The backend set by its kit backend's ``launch_kit_app``, the Isaac Sim 6.0 set by its 6.0 kit file (its
    release from that file), the 3.9.1 set by its kit files' version: the 3.9.x release line takes the main
    series. These sets hold a few files each, so the series reports the files they lack."""
    code, out, err = doctor(capsys, upstream_set(name), "--json")
    report = json.loads(out)
    assert err == "" and report["line"] == line and report["release"] == release
    assert report["series"] == "patches/main"
    assert "file absent" in states(report) and code == 1 and not report["ok"]
    if name == "main-1294717b":
        assert report["evidence"] == "omnigibson_5_1_0.kit: version 3.9.1" and report["runtime"] == []
    else:
        assert {p["name"]: (p["state"], p["reason"]) for p in report["runtime"]} == upstream_check.RUNTIME_ON_LINE[line]
    _, text, _ = doctor(capsys, upstream_set(name))
    assert f"line {line} (" in text.splitlines()[0] and text.rstrip().endswith("NOT OK")
    if line == "isaac6":
        assert "a reliability fix on Isaac Sim 6.0" in text and "IsaacSim issue #701" in text


#: The sets added 2026-12-04 -> the backend-line files each holds (``upstream_check.BACKEND_FILES``).
NEW_BACKEND_SETS = {
    "isaac6-9fa68a72": ["render_backends/kit_backend.py", "sensors/vision_sensor.py"],
    "backend-bdc01a23": ["physics_backends/physx_backend.py"],
    "backend-5f47267b": ["physics_backends/__init__.py"],
    "backend-dc91670f": ["render_backends/null_backend.py", "render_backends/newton_backend.py",
                         "physics_backends/__init__.py"],
    "backend-5afaef30": ["render_backends/null_backend.py", "render_backends/usd_stage_services.py"],
    "backend-88c66feb": ["render_backends/__init__.py"],
}


@pytest.mark.parametrize("name", sorted(NEW_BACKEND_SETS))
def test_each_new_backend_set_says_its_line_and_what_binds_on_its_files(name, capsys):
    """Each set of the render/physics-backend refactor and the Isaac 6 ``VisionSensor`` is the backend line (its
    ``render_backends/`` / ``physics_backends/`` files; 9fa68a72 by its kit backend's ``launch_kit_app``); the
    report names every backend file it holds with what binds there, and the runtime table of the line."""
    code, out, err = doctor(capsys, upstream_set(name), "--json")
    report = json.loads(out)
    assert err == "" and report["line"] == "backend" and code == 1 and "file absent" in states(report)
    assert [h["file"] for h in report["holds"]] == NEW_BACKEND_SETS[name]
    assert {p["name"]: (p["state"], p["reason"]) for p in report["runtime"]} == upstream_check.RUNTIME_ON_LINE["backend"]
    holds = {h["file"]: h["holds"] for h in report["holds"]}
    if name == "isaac6-9fa68a72":
        assert "(Isaac Sim 6.0.0, 6.0.1): every launch patch binds there" in holds["render_backends/kit_backend.py"]
        assert "annotator_pruning binds at _add_modality_to_backend" in holds["sensors/vision_sensor.py"]
    if name == "backend-dc91670f":
        assert holds["physics_backends/__init__.py"] == "PHYSICS_BACKENDS: physx, newton"
    _, text, _ = doctor(capsys, upstream_set(name))
    assert "Render/physics-backend files in this tree, and what binds there:" in text
    assert "annotator_pruning" in text and text.rstrip().endswith("NOT OK")


def test_the_backend_lines_tree_names_every_backend_file_it_is_made_of(capsys):
    _, out, _ = doctor(capsys, upstream_set("backend"), "--json")
    holds = {h["file"]: h["holds"] for h in json.loads(out)["holds"]}
    assert sorted(holds) == sorted(upstream_check.BACKEND_FILES.keys() - {"render_backends/usd_stage_services.py"})
    assert holds["macros.py"] == 'defaults gm.PHYSICS_BACKEND = "physx", gm.RENDER_BACKEND = "kit"'
    assert holds["render_backends/__init__.py"] == "RENDER_BACKENDS: none, kit, newton"


@pytest.mark.parametrize("line", ["backend", "isaac6"])
def test_the_new_lines_report_each_main_patch_on_their_own_simulator(line, capsys):
    """The line's tree (its sets over main's files): the env, wrapper and controller patches apply to main's
    files there; the simulator patches are made against cbd13c78's text and name the hunk the line's
    simulator rejects (on the backend line the launch is in launch_kit_app, which the runtime patches bind)."""
    code, out, _ = doctor(capsys, upstream_set(line), "--json")
    report = json.loads(out)
    by_number = {p["patch"][:4]: p for p in report["patches"]}
    assert code == 1 and report["line"] == line
    assert {n for n, p in by_number.items() if p["state"] == "applies"} == {"0002", "0003", "0004", "0007"}
    assert by_number["0005"]["detail"].startswith("hunk 1/2 of OmniGibson/omnigibson/simulator.py")
    runtime = {p["name"]: p["reason"] for p in report["runtime"]}
    launcher = "render_backends.kit_backend.launch_kit_app" if line == "backend" else "simulator._launch_app"
    assert runtime["kit_thread_caps"] == f"installed on omnigibson.{launcher}"


def test_a_3_9_checkout_takes_the_main_series_and_says_its_release(tmp_path, capsys):
    """The main line's tree with the 3.9.1 kit file beside its simulator: line main, release 3.9.1."""
    tree = copy_of("main", tmp_path)
    shutil.copyfile(upstream_set("main-1294717b") / "OmniGibson/omnigibson/omnigibson_5_1_0.kit",
                    tree / "OmniGibson/omnigibson/omnigibson_5_1_0.kit")
    code, out, _ = doctor(capsys, tree)
    assert code == 0 and out.splitlines()[0].endswith(", release 3.9.1 (omnigibson_5_1_0.kit)")
    assert "Series patches/main, checked" in out


def test_unknown_line_exits_1_without_a_series(tmp_path, capsys):
    (tmp_path / "OmniGibson" / "omnigibson" / "envs").mkdir(parents=True)
    (tmp_path / "OmniGibson" / "omnigibson" / "envs" / "env_base.py").write_text("class Environment:\n    pass\n")
    code, out, _ = doctor(capsys, tmp_path)
    assert code == 1 and "line unknown" in out and "No patch series for this line" in out


@pytest.mark.parametrize("make", [lambda tmp: tmp / "missing", lambda tmp: tmp])
def test_a_path_that_is_no_behavior1k_tree_exits_2_with_one_line(make, tmp_path, capsys):
    path = make(tmp_path)
    code, out, err = doctor(capsys, path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"behavior1k-fast doctor: error: bad --upstream: {str(path)!r} holds neither OmniGibson/omnigibson/")


def test_a_checkout_with_part_of_the_series_reports_each_part(tmp_path, capsys):
    tree = copy_of("main", tmp_path)
    patches = upstream_check.series_patches("main")
    for patch in patches[:2]:
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    code, out, _ = doctor(capsys, tree, "--json")
    assert code == 0 and states(json.loads(out)) == ["already upstream"] * 2 + ["applies"] * (len(patches) - 2)


def test_without_the_patch_series_it_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(upstream_check, "PATCHES_DIR", tmp_path / "no-patches")
    code, out, err = doctor(capsys, tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("behavior1k-fast doctor: error: --upstream needs the patch series in")
