"""doctor's thread, schedule, auto-apply and driver sections: Kit thread caps a profile sets above the cores this
process may use are named with the fix (the default profile's are not flagged), a bad ``BEHAVIOR1K_FAST`` makes
the report NOT OK, counts read in the singular where they are 1, and the NVIDIA driver is read through NVML (a
stand-in here) and checked against the known-bad Isaac Sim pairs."""

import os
import sys

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.tools import doctor


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


def test_caps_a_profile_sets_above_the_usable_cores_are_named_with_the_knob_to_lower(two_cores):
    report = doctor.collect(RolloutProfile(carb_tasking_threads=16, tbb_max_threads=3))
    above = report["threads"]["above_cores"]
    assert [(c["knob"], c["value"], c["usable_cores"]) for c in above] == [
        ("carb_tasking_threads", 16, 2), ("tbb_max_threads", 3, 2)]
    text = doctor.render_text(report)
    assert ("threadCount=16 is more than the 2 usable cores here: set carb_tasking_threads: 2 (or lower) in the "
            "profile") in text
    assert "maxThreadCount=3 is more than the 2 usable cores here: set tbb_max_threads: 2" in text


def test_the_default_profiles_caps_are_not_flagged_on_a_small_machine(two_cores):
    """The defaults (8 / 4 / 4) are the fast path as measured; a 2-core user is not told to change them on day
    one (the report says they are above the cores, without advice)."""
    report = doctor.collect(RolloutProfile())
    assert report["threads"]["above_cores"] == []
    assert report["threads"]["default_caps_above_cores"] == ["carb_tasking_threads", "tbb_max_threads",
                                                             "physx_worker_threads"]
    text = doctor.render_text(report)
    assert "usable cores here: set" not in text and "the default caps of carb_tasking_threads" in text


def test_a_bad_auto_apply_value_is_reported_and_doctor_is_not_ok(two_cores, monkeypatch):
    monkeypatch.setenv("BEHAVIOR1K_FAST", "fastest")
    report = doctor.collect(RolloutProfile())
    assert not report["ok"] and "BEHAVIOR1K_FAST='fastest'" in report["autoapply"]["error"]
    text = doctor.render_text(report)
    assert text.splitlines()[-1].startswith("NOT OK: BEHAVIOR1K_FAST='fastest'")
    monkeypatch.setenv("BEHAVIOR1K_FAST", "0")
    assert doctor.collect(RolloutProfile())["autoapply"]["error"] is None


def test_one_process_of_one_env_is_said_in_the_singular(two_cores):
    text = doctor.render_text(doctor.collect(RolloutProfile(num_env_processes=1, total_num_envs=1)))
    assert "1 process x 1 env\n" in text and "the policy's batch: 1 env\n" in text
    text = doctor.render_text(doctor.collect(RolloutProfile(num_env_processes=2, total_num_envs=4)))
    assert "2 processes x 2 envs" in text


class FakeNVML:
    """A stand-in for the ``pynvml`` module: reports ``version``, or raises as NVML does without a driver."""

    def __init__(self, version=None, error=None) -> None:
        self.version, self.error, self.calls = version, error, []

    def nvmlInit(self):
        self.calls.append("init")
        if self.error is not None:
            raise self.error

    def nvmlSystemGetDriverVersion(self):
        self.calls.append("version")
        return self.version

    def nvmlShutdown(self):
        self.calls.append("shutdown")


@pytest.mark.parametrize("isaac, driver, bad", [
    ("5.1.0.0", b"595.45.06", True), ("5.1.0", "580.95.05", False), ("4.5.0", "595.45.06", False),
    (None, "595.45.06", False),
])
def test_doctor_reads_the_driver_through_nvml_and_warns_about_a_known_bad_pair(two_cores, monkeypatch, isaac, driver,
                                                                               bad):
    from behavior1k_fast.core import gpus

    nvml = FakeNVML(driver)
    monkeypatch.setitem(sys.modules, gpus.NVML_MODULE, nvml)
    monkeypatch.setattr(doctor, "_version", lambda name: isaac if name == "isaacsim" else None)
    monkeypatch.delenv("ISAAC_PATH", raising=False)
    report = doctor.collect(RolloutProfile())
    state = report["driver"]
    assert nvml.calls == ["init", "version", "shutdown"]
    assert state["version"] == (driver.decode() if isinstance(driver, bytes) else driver) and state["source"] == "NVML"
    text = doctor.render_text(report)
    assert f"Driver: {state['version']} (NVML)" in text
    if bad:
        assert state["known_bad"] == [{"problem": "Isaac Sim 5.1 crashes on the 595.x driver branch",
                                       "source": "StanfordVL/BEHAVIOR-1K PR #2316"}]
        assert ("WARNING: Isaac Sim 5.1 crashes on the 595.x driver branch (source: StanfordVL/BEHAVIOR-1K PR "
                "#2316)") in text
        assert not report["ok"] and "595.x" in text.splitlines()[-1]
    else:
        assert state["known_bad"] == [] and "WARNING" not in text
        checked = "checked" if isaac else "not checked (needs both versions)"
        assert f"known-bad pairs {checked}: Isaac Sim 5.1 on 595.x (StanfordVL/BEHAVIOR-1K PR #2316)" in text


def test_without_nvml_or_nvidia_smi_the_driver_is_unknown_with_the_reason(two_cores, monkeypatch):
    from behavior1k_fast.core import gpus

    monkeypatch.setitem(sys.modules, gpus.NVML_MODULE, None)  # import raises ImportError: not installed
    assert gpus.driver_version(None) == (None, "the NVML bindings are not installed (pip install nvidia-ml-py); "
                                               "no nvidia-smi rows")
    assert gpus.driver_version(["NVIDIA H200, 143771 MiB, 570.133.20"]) == ("570.133.20", "nvidia-smi")
    failing = FakeNVML(error=RuntimeError("NVML Shared Library Not Found"))
    assert gpus.nvml_driver_version(failing) == (None, "NVML: RuntimeError: NVML Shared Library Not Found")
    monkeypatch.setattr(gpus, "nvidia_smi_gpus", lambda: (None, "nvidia-smi not found"))
    text = doctor.render_text(doctor.collect(RolloutProfile()))
    assert "Driver: unknown (the NVML bindings are not installed (pip install nvidia-ml-py); no nvidia-smi rows)" in text


def test_caps_within_the_cores_or_left_to_kit_are_not_flagged(two_cores):
    profile = RolloutProfile(carb_tasking_threads=2, tbb_max_threads=1, physx_worker_threads=None)
    report = doctor.collect(profile)
    assert report["threads"]["above_cores"] == []
    assert "usable cores here" not in doctor.render_text(report)


def test_the_schedule_section_says_what_each_env_does_and_what_a_lookahead_policy_gets(two_cores):
    staged = RolloutProfile(num_env_processes=4, total_num_envs=8, pipeline_stages=2, partition="process",
                            schedule="lookahead", lookahead_steps="auto", chunk_size=16)
    report = doctor.collect(staged)
    state = report["schedule"]
    assert (state["stage_batch"], state["processes_per_stage"], state["holds"], state["error"]) == (4, 2, False, None)
    assert state["policy_input"] == "committed_actions [batch, 4, action_dim]"  # auto: a quarter of 16 steps
    text = doctor.render_text(report)
    assert "every env steps at every global step" in text and "lookahead_steps: auto (measured on the first round)" in text
    hybrid = doctor.collect(RolloutProfile(num_env_processes=2, total_num_envs=4, pipeline_stages=2))
    assert hybrid["schedule"]["holds"] and "lookahead_steps" not in hybrid["schedule"]
    assert "hold their last action while one steps" in doctor.render_text(hybrid)


def test_a_layout_the_engine_would_refuse_is_reported_without_failing_doctor(two_cores):
    """A patch profile often leaves the layout to the trainer's config: reported, not an error."""
    report = doctor.collect(RolloutProfile(num_env_processes=3, total_num_envs=3, pipeline_stages=2,
                                           partition="process"))
    assert "process partition needs pipeline_stages=2 to divide" in report["schedule"]["error"]
    assert report["ok"] == doctor.collect(RolloutProfile())["ok"]
    assert "the engine would refuse this layout: process partition" in doctor.render_text(report)


def test_doctor_says_it_is_importing_omnigibson_before_the_wait(monkeypatch, capsys):
    """Importing an installed OmniGibson takes 10-20 s: doctor says so on stderr first (JSON stays on stdout)."""
    import argparse
    import importlib.util
    import json

    monkeypatch.delitem(sys.modules, "omnigibson", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "omnigibson" else None)
    seen = []

    def collect(profile, clean=False):
        seen.append(capsys.readouterr().err)  # what was printed before the import would start
        return {"ok": True}

    monkeypatch.setattr(doctor, "collect", collect)
    parser = argparse.ArgumentParser()
    doctor.register(parser.add_subparsers())
    args = parser.parse_args(["doctor", "--json"])
    assert args.func(args) == 0
    assert seen == ["behavior1k-fast doctor: importing omnigibson to plan its patches (10-20 s) ...\n"]
    assert json.loads(capsys.readouterr().out) == {"ok": True}
