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
        assert upstream_check.detect_line(folder) == (line, f"setup.py: version {version.rsplit('.', 1)[0]}")


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
    assert err.count("\n") == 1 and f"bad --upstream: {str(path)!r} holds neither OmniGibson/omnigibson/" in err


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
    assert code == 2 and out == "" and err.count("\n") == 1 and "needs the patch series in" in err
