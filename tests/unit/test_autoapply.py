"""Auto-apply in this process: the value of ``BEHAVIOR1K_FAST``, the ``.pth`` line, ``at_startup`` and the
``rlinf`` preset. Start-up in real interpreters is tested in ``tests/autoapply``."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.patching import DISABLED, PENDING, PatchOutcome, PatchReport, autoapply
from behavior1k_fast.patching import omnigibson as patching
from behavior1k_fast.patching import registry
from behavior1k_fast.tools import doctor


@pytest.mark.parametrize("value", ["", "0", " 0\n", "  "])
def test_off_values_name_no_profile_even_where_a_file_has_their_name(value, tmp_path, monkeypatch, fresh_startup):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "0").write_text("intra_op_threads: 3\n")
    monkeypatch.setenv(autoapply.ENV_VAR, value)
    assert autoapply.profile_for(value) == (None, "off")
    assert autoapply.at_startup() is None and autoapply.startup() is None
    assert patching.REGISTRY.profile is None  # nothing applied
    state = doctor.autoapply_state()
    assert state["meaning"] == "off" and state["active"] is False


def test_a_file_named_like_an_off_value_or_a_preset_is_never_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("0", "1", "rlinf"):
        (tmp_path / name).write_text("intra_op_threads: 3\n")
    assert autoapply.profile_for("0") == (None, "off") and autoapply.profile_for(" 0 ") == (None, "off")
    assert autoapply.profile_for("1") == (RolloutProfile(), "preset '1'")
    assert autoapply.profile_for("rlinf") == (RolloutProfile.rlinf(), "preset 'rlinf'")


def test_a_relative_profile_path_is_resolved_and_named_absolute(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "tune.yaml").write_text("pipeline_stage_num: 2\n")
    monkeypatch.chdir(tmp_path)
    profile, source = autoapply.profile_for("conf/tune.yaml")
    assert profile.pipeline_stages == 2 and source == f"profile file {str(tmp_path / 'conf' / 'tune.yaml')!r}"
    with pytest.raises(ValueError, match=f"no file {str(tmp_path / 'missing.yaml')!r}"):
        autoapply.profile_for("missing.yaml")


def test_presets_and_profile_files(tmp_path):
    assert autoapply.profile_for("1") == (RolloutProfile(), "preset '1'")
    assert autoapply.profile_for(" RLinf ") == (RolloutProfile.rlinf(), "preset 'rlinf'")
    path = tmp_path / "p.yaml"
    path.write_text("skip_intermediate_obs_in_chunk: false\npipeline_stage_num: 4\n")
    profile, source = autoapply.profile_for(str(path))
    assert profile == RolloutProfile(skip_intermediate_obs=False, pipeline_stages=4)
    assert source == f"profile file {str(path)!r}"


@pytest.mark.parametrize(
    "text, message",
    [(None, "is not one of '', '0', '1', 'rlinf' and not a profile YAML file"),
     ("chunk: 4\n", "unknown profile key 'chunk'"),
     ("obs_modalities: [rgb, dept]\n", "unknown modality 'dept' in obs_modalities; did you mean 'depth'?")],
)
def test_bad_values_raise_one_line_naming_the_variable(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError) as err:
        autoapply.profile_for(str(path))
    assert str(err.value).startswith(f"BEHAVIOR1K_FAST={str(path)!r}") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_rlinf_preset_is_the_fast_path_less_what_rlinf_does_itself():
    fast, rlinf = RolloutProfile().to_dict(), RolloutProfile.rlinf().to_dict()
    changed = {k: rlinf[k] for k in fast if fast[k] != rlinf[k]}
    assert changed == {"gc_enable": False, "texture_streaming_budget": None, "intra_op_threads": None}
    assert RolloutProfile.rlinf(pipeline_stage_num=2).pipeline_stages == 2


def run_pth_line(environ: dict) -> tuple[list[str], list[str]]:
    """Execute the shipped ``.pth`` line with a recording ``__import__``: (modules imported, hook calls)."""
    imported, calls = [], []
    fake_os = types.SimpleNamespace(environ=environ)
    hook = types.SimpleNamespace(at_startup=lambda: calls.append("at_startup"))
    top = types.SimpleNamespace(patching=types.SimpleNamespace(autoapply=hook))

    def recording_import(name, *args, **kwargs):
        imported.append(name)
        return fake_os if name == "os" else top

    (line,) = autoapply.PTH_SOURCE.read_text().splitlines()
    exec(line, {"__builtins__": {"__import__": recording_import}})
    return imported, calls


@pytest.mark.parametrize("environ", [{}, {"BEHAVIOR1K_FAST": ""}, {"BEHAVIOR1K_FAST": "0"}, {"BEHAVIOR1K_FAST": " 0"}])
def test_pth_line_reads_the_variable_and_imports_only_os_when_off(environ):
    assert run_pth_line(environ) == (["os"], [])


@pytest.mark.parametrize("value", ["1", "rlinf", "/no/such.yaml"])
def test_pth_line_hands_any_other_value_to_at_startup(value):
    assert run_pth_line({"BEHAVIOR1K_FAST": value}) == (["os", "behavior1k_fast.patching.autoapply"], ["at_startup"])
    assert autoapply.PTH_SOURCE.read_text().startswith("import ")  # site executes only lines starting so


@pytest.fixture
def fresh_startup(monkeypatch):
    """No start-up record yet, not strict; the process-wide patch set reverted afterwards."""
    monkeypatch.setattr(autoapply, "_startup", None)
    monkeypatch.delenv(autoapply.STRICT_VAR, raising=False)
    yield
    patching.revert()


@pytest.mark.parametrize("value, on", [(None, False), ("", False), ("0", False), ("false", False), ("No", False),
                                       (" OFF ", False), ("1", True), ("true", True), ("Yes", True), ("ON", True)])
def test_strict_reads_0_false_no_off_as_off_and_1_true_yes_on_as_on_in_any_case(value, on, monkeypatch):
    if value is None:
        monkeypatch.delenv(autoapply.STRICT_VAR, raising=False)
    else:
        monkeypatch.setenv(autoapply.STRICT_VAR, value)
    assert autoapply.strict() is on


@pytest.mark.parametrize("value", ["2", "maybe", "ture"])
def test_strict_refuses_any_other_value_in_one_line_naming_it(value, monkeypatch):
    monkeypatch.setenv(autoapply.STRICT_VAR, value)
    with pytest.raises(ValueError, match=rf"^BEHAVIOR1K_FAST_STRICT='{value}' is neither on \(1/true/yes/on\) nor "
                                         r"off \(0/false/no/off or empty\), in any case$"):
        autoapply.strict()


def test_at_startup_applies_once_per_value(monkeypatch, fresh_startup, tmp_path):
    # hermetic: the OmniGibson patches wait for `import omnigibson` whether or not it is installed here
    monkeypatch.setattr(registry, "_installed", lambda top: True)
    monkeypatch.setenv("BEHAVIOR1K_FAST", "rlinf")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    record = autoapply.at_startup()
    assert record == autoapply.startup() and record.error is None and record.source == "preset 'rlinf'"
    assert patching.active_profile() == RolloutProfile.rlinf() == record.profile
    assert record.report.profile == record.profile and record.report["vector_env_step"].state in ("pending", "applied")
    assert autoapply.at_startup() is record  # a venv's .pth runs twice at start-up


def test_at_startup_with_a_bad_value_prints_one_line_and_applies_nothing(monkeypatch, fresh_startup, capsys):
    monkeypatch.setenv("BEHAVIOR1K_FAST", "fast please")
    record = autoapply.at_startup()
    assert record.profile is None and record.source == "a bad value"
    assert patching.active_profile() is None
    err = capsys.readouterr().err
    assert err == f"behavior1k_fast: {record.error}; nothing applied\n"


def test_at_startup_rolls_back_a_profile_that_fails_half_way(monkeypatch, fresh_startup, tmp_path, capsys):
    """In a process that has imported OmniGibson (here a stand-in module) the process settings apply at
    start-up: the numba cache dir that cannot be made fails, and the thread cap applied before it is undone."""
    if "omnigibson" not in sys.modules:
        monkeypatch.setitem(sys.modules, "omnigibson", types.ModuleType("omnigibson"))
    (tmp_path / "a-file").write_text("")
    path = tmp_path / "p.yaml"
    path.write_text(f"intra_op_threads: 2\nnumba_cache_dir: {tmp_path / 'a-file' / 'numba'}\n")
    monkeypatch.setenv("BEHAVIOR1K_FAST", str(path))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    record = autoapply.at_startup()
    assert record.profile is None and "patch 'numba_cache_dir' failed" in record.error
    assert patching.active_profile() is None and "OMP_NUM_THREADS" not in __import__("os").environ
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    "value, pth, active, meaning",
    [(None, ["/site/x.pth"], False, "off"),
     ("1", [], False, "preset '1'"),
     ("rlinf", ["/site/x.pth"], True, "preset 'rlinf'"),
     ("/no/such.yaml", ["/site/x.pth"], False, "bad value: BEHAVIOR1K_FAST='/no/such.yaml' is not one of")],
)
def test_doctor_reports_whether_new_processes_auto_apply(monkeypatch, fresh_startup, value, pth, active, meaning):
    if value is None:
        monkeypatch.delenv("BEHAVIOR1K_FAST", raising=False)
    else:
        monkeypatch.setenv("BEHAVIOR1K_FAST", value)
    monkeypatch.setattr(autoapply, "installed_pth", lambda: pth)
    state = doctor.autoapply_state()
    assert state["active"] is active and state["meaning"].startswith(meaning) and state["pth"] == pth
    assert state["this_process"].startswith("did not run")
    text = "\n".join(doctor.render_autoapply(state))
    assert text.startswith(f"Auto-apply: {'active' if active else 'not active'} in new processes")


def test_doctor_reports_what_the_hook_did_in_this_process(monkeypatch, fresh_startup):
    record = autoapply.StartupApply("x", "a bad value", None, "BEHAVIOR1K_FAST='x' is not one of ...")
    monkeypatch.setattr(autoapply, "_startup", record)
    assert doctor.autoapply_state()["this_process"] == f"refused: {record.error}"
    monkeypatch.setattr(autoapply, "_startup", dataclasses.replace(record, source="preset '1'", error=None))
    assert doctor.autoapply_state()["this_process"] == "applied preset '1'"
    outcomes = tuple(PatchOutcome(name, state, "", ()) for name, state in
                     [("a", PENDING), ("b", PENDING), ("c", DISABLED)])
    started = dataclasses.replace(record, source="preset '1'", error=None, report=PatchReport(RolloutProfile(), outcomes))
    monkeypatch.setattr(autoapply, "_startup", started)
    assert doctor.autoapply_state()["this_process"] == "applied preset '1' (1 disabled, 2 pending at start-up)"


def test_doctor_says_where_each_patch_applies():
    report = doctor.collect(RolloutProfile())
    rows = {row["name"]: row for row in report["patches"]}
    assert rows["intra_op_threads"]["process_setting"] and rows["intra_op_threads"]["applies_in"].startswith(
        "processes that run omnigibson (at `import omnigibson`")
    assert not rows["env_step_obs"]["process_setting"]
    assert rows["env_step_obs"]["applies_in"] == "processes that import omnigibson.envs.env_base"
    text = doctor.render_text(report)
    assert "process settings (gpu_binding, intra_op_threads, numba_cache_dir) apply only in processes that run " \
           "omnigibson" in text
