"""``behavior1k-fast selftest``: its steps on every line's real OmniGibson code at the og.sim seam (the engine
inline, validate's sides in this process), its pytest step on the isaacsim tests, and its report."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from behavior1k_fast.tools import selftest

CONFIG = yaml.safe_load(selftest.EXAMPLE_CONFIG.read_text())


def test_every_step_runs_on_each_layout_and_the_report_says_what_ran(line, patched, seam_og, monkeypatch, tmp_path):
    """validate's sides run in this process here, with the patches applied as a worker would apply them."""
    from behavior1k_fast import backends

    sim, env_cls = seam_og
    patched("env_step_obs")
    monkeypatch.setattr(backends, "isolate_sides", lambda backend: False)
    # the seam's task ignores termination_config: its episodes end at these steps (single-scene seam envs are
    # keyed by creation: 2 per validate side, 2 per bench profile)
    env_cls.terminate_at = {i: 3 + 2 * (i % 2) for i in range(8)}
    report = selftest.run_selftest(CONFIG, chunks=2, chunk_size=4, rounds=2, seam_tests=tmp_path / "absent.py",
                                   executor="inline")
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == ["doctor", "seam checks", "validate", "bench"]
    assert steps["seam checks"]["status"] == "skipped" and "the seam checks ship with the repository" in \
        steps["seam checks"]["summary"]
    assert not report["passed"]  # a skipped step is not a pass
    check = steps["validate"]
    assert check["status"] == "passed", check
    assert check["validate"]["episodes_ended"] >= 2 and check["validate"]["max_abs_reward_delta"] == 0.0
    assert report["settings"]["episode_steps"] == 4  # half the run of 2 chunks of 4
    validated = env_cls.built[:1] if line.name == "main" else env_cls.built[:4]
    assert all(env.config["task"]["termination_config"]["max_steps"] == 4 for env in validated)
    bench = steps["bench"]
    assert bench["status"] == "passed", bench
    assert set(bench["rows"]) == {"stock", "fast"} and bench["rows"]["fast"]["profile"]["pipeline_stages"] == 2
    assert bench["speedup"] == pytest.approx(bench["rows"]["stock"]["ms_per_step"] / bench["rows"]["fast"]["ms_per_step"])
    assert "GPU MiB per env process: stock unknown, fast unknown" in bench["summary"]  # inline: no worker process
    assert report["summary"][0].startswith("behavior1k-fast selftest: FAILED (behavior1k_fast ")
    assert [line_.split()[0] for line_ in report["summary"][1:]] == ["doctor", "seam", "validate", "bench"]
    json.dumps(report, default=str)  # the report file is JSON


def test_the_seam_step_runs_the_isaacsim_tests_and_reads_each_outcome(tmp_path):
    tests = tmp_path / "tests" / "omnigibson" / "test_fake_isaacsim.py"
    tests.parent.mkdir(parents=True)
    tests.write_text(textwrap.dedent("""
        import pytest

        pytestmark = pytest.mark.isaacsim

        def test_holds():
            assert True

        def test_breaks():
            assert 1 == 2, "broken on purpose"

        def test_not_here():
            pytest.skip("tiled rendering is main's")
    """))
    status, summary, details = selftest.seam_step(tests, timeout_s=300)
    assert status == "failed" and summary.startswith("1 passed, 1 failed, 1 skipped (tiled rendering is main's)")
    outcomes = {case["test"]: (case["outcome"], case["message"]) for case in details["tests"]}
    assert outcomes["test_holds"] == ("passed", "")
    assert outcomes["test_breaks"][0] == "failed" and "broken on purpose" in outcomes["test_breaks"][1]
    assert outcomes["test_not_here"] == ("skipped", "tiled rendering is main's")
    tests.write_text("import pytest\npytestmark = pytest.mark.isaacsim\n\ndef test_holds():\n    assert True\n")
    assert selftest.seam_step(tests, timeout_s=300)[:2] == ("passed", "1 passed, 0 failed, 0 skipped")


def test_the_real_seam_checks_skip_without_isaac_sim():
    status, summary, details = selftest.seam_step(selftest.SEAM_TESTS, timeout_s=600)
    assert status == "skipped" and details["exit_code"] == 0
    assert summary == f"0 passed, 0 failed, {len(details['tests'])} skipped (Isaac Sim is not installed)"
    assert {case["test"] for case in details["tests"]} >= {"test_render_false_is_physics_only", "test_revert_restores_upstream"}
