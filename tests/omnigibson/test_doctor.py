"""``behavior1k-fast doctor`` with omnigibson 1.1.1 present, absent, and with a layout it cannot patch."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys

import pytest

from behavior1k_fast.patching.omnigibson import PATCHES
from behavior1k_fast.tools import doctor

from ..upstream_lines import REPO


def run_doctor(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    doctor.register(parser.add_subparsers())
    args = parser.parse_args(["doctor", *argv])
    return args.func(args)


def json_report(capsys, *argv: str) -> tuple[int, dict]:
    code = run_doctor("--json", *argv)
    return code, json.loads(capsys.readouterr().out)


#: README's patch-table words: ``doctor`` plans "would apply" (applied) or "skipped" with a reason saying that
#: upstream already has the change (already upstream) or that the line's layout has no use for it (not needed);
#: a patch the fast profile leaves off until a knob asks for it (``gpu_ids``) is "disabled" (on request).
APPLIED_CELL, ALREADY, NOT_NEEDED, ON_REQUEST = "applied", "already upstream", "not needed", "on request"
#: Patches the fast profile does not ask for.
OFF_BY_DEFAULT = {"gpu_binding", "kit_renderer_gpu", "render_quality", "kit_headless_render_settings"}
#: What ``doctor`` plans for the fast profile on each line (patches not listed: applied).
PLAN = {
    "1.1.1": {
        "numba_cache_joint_controller": NOT_NEEDED, "numba_cache_ik_controller": NOT_NEEDED,
        "numba_cache_osc_controller": NOT_NEEDED, "multi_scene_step": NOT_NEEDED, "kit_launch_argv": NOT_NEEDED,
        "multi_scene_vector_env": NOT_NEEDED,
    },
    "v3.7": {"viewer_camera_off": ALREADY, "numba_cache_ik_controller": ALREADY, "multi_scene_step": NOT_NEEDED,
             "kit_launch_argv": NOT_NEEDED, "multi_scene_vector_env": NOT_NEEDED},
    "main": {"headless_viewport": ALREADY, "vector_env_step": NOT_NEEDED, "kit_launch_argv": ALREADY},
}


def cell(outcome: dict) -> str:
    """The README table word for one patch of ``doctor``'s plan."""
    if outcome["state"] == "would apply":
        return APPLIED_CELL
    if outcome["state"] == "disabled":
        return ON_REQUEST
    assert outcome["state"] == "skipped", outcome
    return ALREADY if "already" in outcome["reason"] else NOT_NEEDED


#: README patch-table column -> the line it is (tests/upstream_lines.py names).
README_COLUMNS = {"1.1.1": "1.1.1", "v3.7": "v3.7", "main/3.9": "main", "backend": "backend", "Isaac 6": "isaac6"}


def readme_table() -> dict[str, dict[str, str]]:
    """Patch -> line -> the first words of its cell in README's patch table (one column per line of
    :data:`README_COLUMNS`, after the knob column)."""
    text = (REPO / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("| Patch ("))
    header = [c.strip() for c in text[start].strip("|").split("|")]
    assert header[3:] == list(README_COLUMNS), header
    lines = [README_COLUMNS[c] for c in header[3:]]
    table: dict[str, dict[str, str]] = {}
    for row in text[start + 2 :]:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip("|").split("|")]
        words = {line: next(w for w in (APPLIED_CELL, ALREADY, NOT_NEEDED, ON_REQUEST) if c.startswith(w))
                 for line, c in zip(lines, cells[3:])}
        for name in re.findall(r"`(\w+)`", cells[0]):
            table[name] = words
    return table


def test_json_report_with_omnigibson(line, capsys):
    code, report = json_report(capsys)
    assert code == 0 and report["ok"]
    assert report["versions"]["omnigibson"] == importlib.metadata.version("omnigibson")
    assert report["omnigibson"]["imported"] and report["omnigibson"]["error"] is None
    cells = {p["name"]: cell(p) for p in report["patches"]}
    assert set(cells) == {patch.name for patch in PATCHES}
    expected = {name: ON_REQUEST if name in OFF_BY_DEFAULT else PLAN[line.name].get(name, APPLIED_CELL) for name in cells}
    assert cells == expected
    table = readme_table()  # README's patch table: one row per patch, a column per line, the words of this plan
    assert set(table) == set(cells)
    assert {name: table[name][line.name] for name in cells} == cells
    by_name = {p["name"]: p for p in report["patches"]}
    assert by_name["env_step_obs"]["upstream_file"] == "omnigibson/envs/env_base.py"
    assert "--/plugins/carb.tasking.plugin/threadCount=8" in report["threads"]["kit_args"]
    assert "--/rtx/descriptorSets=36000" in report["threads"]["kit_args"]
    assert report["threads"]["keep_launch_argv0"] is True and report["threads"]["render_settings"] == {}
    assert report["cpu"]["count"] >= 1 and isinstance(report["gpu"]["available"], bool)


def test_profile_yaml_turns_patches_off(og, capsys, tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("remove_headless_viewports: false\npipeline_stage_num: 2\ncarb_tasking_threads: null\n")
    code, report = json_report(capsys, "--profile", str(path))
    states = {p["name"]: p["state"] for p in report["patches"]}
    assert code == 0 and states["headless_viewport"] == "disabled" and states["viewer_camera_off"] == "disabled"
    assert report["profile"]["pipeline_stages"] == 2
    assert not any("carb.tasking" in arg for arg in report["threads"]["kit_args"])


def test_doctor_shows_the_launch_settings_with_their_values(og, capsys, tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("rtx_descriptor_sets: 50000\nrtx_reflections: false\nkeep_launch_argv0: false\n")
    code, report = json_report(capsys, "--profile", str(path))
    assert report["threads"]["render_settings"] == {"/rtx/reflections/enabled": False}
    assert {p["name"]: p["state"] for p in report["patches"]}["render_quality"] == "would apply"
    run_doctor("--profile", str(path))
    out = capsys.readouterr().out
    assert "--/rtx/descriptorSets=50000" in out and "/rtx/reflections/enabled=False (changes pixels)" in out
    assert "Kit argv[0] fix       off (upstream as is)" in out


def test_bad_profile_exits_2_naming_the_key(capsys, tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("pipeline_stage: 2\n")
    assert run_doctor("--profile", str(path)) == 2
    assert "unknown profile key 'pipeline_stage'" in capsys.readouterr().err


def test_unsupported_layout_exits_nonzero(line, capsys, monkeypatch):
    from omnigibson.envs.env_wrapper import EnvironmentWrapper

    monkeypatch.delattr(EnvironmentWrapper, "reset")
    assert run_doctor() == 1
    out = capsys.readouterr().out
    assert "env_wrapper_forwarding" in out and "failed" in out and "NOT OK" in out


def test_report_without_omnigibson(og, capsys, monkeypatch):
    for name in [n for n in sys.modules if n == "omnigibson" or n.startswith("omnigibson.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import omnigibson now raises ModuleNotFoundError
    real_version = importlib.metadata.version

    def version(name):
        if name == "omnigibson":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    code, report = json_report(capsys)
    assert code == 0 and report["ok"]
    assert report["versions"]["omnigibson"] is None and not report["omnigibson"]["installed"]
    by_state = {p["name"]: (p["state"], p["reason"]) for p in report["patches"]}
    assert by_state["env_step_obs"] == ("skipped", "omnigibson is not installed")
    assert by_state["intra_op_threads"][0] == "would apply"
    assert run_doctor() == 0
    assert "OmniGibson: not installed" in capsys.readouterr().out


def test_omnigibson_that_does_not_import_exits_nonzero(capsys, monkeypatch):
    from behavior1k_fast.patching.omnigibson import cpu_import

    def broken():
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(cpu_import, "import_omnigibson", broken)
    code, report = json_report(capsys)
    assert code == 1 and "Torch not compiled with CUDA enabled" in report["omnigibson"]["error"]
    states = {p["name"]: (p["state"], p["reason"]) for p in report["patches"]}
    assert states["env_step_obs"][0] == "failed" and "does not import" in states["env_step_obs"][1]
    assert states["numba_cache_dir"][0] == "would apply"


def test_doctor_shows_the_gpu_of_every_worker(capsys, tmp_path, monkeypatch):
    from behavior1k_fast.core import gpus

    monkeypatch.setattr(gpus, "nvidia_smi_gpus", lambda: (["H200, 143771 MiB, 550"] * 2, ""))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = tmp_path / "profile.yaml"
    path.write_text("num_env_processes: 3\ngpu_ids: [1, 0]\n")
    code, report = json_report(capsys, "--profile", str(path))
    workers = report["gpu_binding"]["workers"]
    assert [(w["worker"], w["gpu"]) for w in workers] == [(0, 1), (1, 0), (2, 1)]
    assert workers[0]["env"] == {"CUDA_VISIBLE_DEVICES": "1", "MUJOCO_EGL_DEVICE_ID": "1"}
    assert workers[0]["kit_settings"]["/renderer/activeGpu"] == 1
    run_doctor("--profile", str(path))
    assert "worker 2 -> GPU 1: CUDA_VISIBLE_DEVICES=1 MUJOCO_EGL_DEVICE_ID=1; Kit --/renderer/activeGpu=1" in \
        capsys.readouterr().out
    path.write_text("gpu_ids: [5]\n")
    code, report = json_report(capsys, "--profile", str(path))
    assert code == 1 and not report["ok"]
    assert report["gpu_binding"]["error"] == ("gpu_ids place workers on GPU(s) [5], but this machine has 2 GPU(s) "
                                              "(nvidia-smi)")


@pytest.mark.parametrize("device_files, text", [
    ([], "gpu_ids place workers on GPU(s) [7], but this machine has 0 GPU(s) (nvidia-smi not found; 0 "),
    (None, "gpu_ids place workers on GPU(s) [7]: nvidia-smi not found, and "),
])
def test_doctor_without_nvidia_smi_exits_1_for_a_gpu_it_cannot_find(capsys, tmp_path, monkeypatch, device_files,
                                                                     text):
    from behavior1k_fast.core import gpus

    monkeypatch.setattr(gpus, "nvidia_smi_gpus", lambda: (None, "nvidia-smi not found"))
    monkeypatch.setattr(gpus, "DEVICE_DIR", str(tmp_path / "dev"))
    if device_files is not None:
        (tmp_path / "dev").mkdir()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = tmp_path / "profile.yaml"
    path.write_text("num_env_processes: 2\ngpu_ids: [7]\n")
    code, report = json_report(capsys, "--profile", str(path))
    assert code == 1 and not report["ok"]
    assert report["gpu_binding"]["error"].startswith(text), report["gpu_binding"]["error"]


@pytest.mark.parametrize("render, render_class, capture", [
    ("kit", "KitRenderBackend", "every modality"),
    ("none", "NullRenderBackend", "has no camera capture"),
    ("newton", "NewtonRenderBackend", "captures RGB only"),
])
def test_doctor_prints_the_effective_backends_on_the_backend_line(og, monkeypatch, capsys, render, render_class,
                                                                  capture):
    from ..upstream_lines import activate_line

    activate_line("backend", monkeypatch)
    from omnigibson.macros import gm

    monkeypatch.setitem(gm, "RENDER_BACKEND", render)
    code, report = json_report(capsys)
    backends = report["backends"]
    assert backends["layout"] == "render_physics_backends"
    assert (backends["physics"], backends["physics_class"]) == ("physx", "PhysXBackend")
    assert (backends["render"], backends["render_class"]) == (render, render_class)
    assert capture in backends["camera_capture"]
    run_doctor()
    text = capsys.readouterr().out
    assert f"gm.RENDER_BACKEND     '{render}' ({render_class})" in text
    assert "gm.PHYSICS_BACKEND    'physx' (PhysXBackend)" in text


def test_doctor_says_a_kit_launching_simulator_has_no_backends(line, capsys):
    code, report = json_report(capsys)
    assert report["backends"] == {"layout": "kit_launch"}


def test_torch_thread_option_of_2303_is_read_where_the_install_has_it(tmp_path, capsys, monkeypatch):
    """BEHAVIOR-1K #2303's constants, found by their text in ``eval/evaluator.py`` (no stored upstream text and
    not 1.1.1 have the file: a folder laid out as the 3.9.1 package stands in), and said to be absent otherwise."""
    assert doctor.torch_thread_option(tmp_path) == {"found": False, "file": None, "values": {}}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "evaluator.py").write_text(
        "import torch as th\n\nTORCH_NUM_THREADS = 4  # per env worker\nTORCH_NUM_INTEROP_THREADS = None\n\n"
        "if TORCH_NUM_THREADS is not None:\n    th.set_num_threads(TORCH_NUM_THREADS)\n")
    option = doctor.torch_thread_option(tmp_path)
    assert option == {"found": True, "file": str(tmp_path / "eval" / "evaluator.py"),
                      "values": {"TORCH_NUM_THREADS": "4", "TORCH_NUM_INTEROP_THREADS": "None"}}
    monkeypatch.setattr(doctor, "_omnigibson_package", lambda: tmp_path)
    run_doctor()
    text = capsys.readouterr().out
    assert "#2303 torch threads   TORCH_NUM_THREADS=4 TORCH_NUM_INTEROP_THREADS=None" in text
    assert "intra_op_threads=1 sets torch's intra-op pool" in text and "the evaluator's call comes later and wins" in text
    monkeypatch.setattr(doctor, "_omnigibson_package", lambda: None)
    run_doctor()
    assert "#2303 torch threads   not found in this install" in capsys.readouterr().out
