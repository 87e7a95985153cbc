import json
import subprocess
import sys

from behavior1k_fast.core.tracing import PHYSICS, RENDER, Profiler


def test_off_records_nothing_and_shares_one_null_context():
    prof = Profiler(enabled=False)
    with prof.section(PHYSICS):
        pass
    assert prof.section(PHYSICS) is prof.section(RENDER)
    assert prof.spans == [] and prof.summary() == {}


def test_sections_aggregate_per_stage_per_step_and_env():
    prof = Profiler(enabled=True)
    for step in range(4):
        with prof.section(PHYSICS, step=step):
            sum(range(1000))
    with prof.section(RENDER, env=1):
        pass
    summary = prof.summary(steps=4, envs=2)
    assert summary[PHYSICS]["count"] == 4 and summary[RENDER]["count"] == 1
    assert summary[PHYSICS]["total_ms"] > 0
    assert summary[PHYSICS]["ms_per_step"] == summary[PHYSICS]["total_ms"] / 4
    assert summary[PHYSICS]["ms_per_env_step"] == summary[PHYSICS]["total_ms"] / 8


def test_chrome_trace_export_is_valid_trace_event_json(tmp_path):
    prof = Profiler(enabled=True)
    with prof.section(PHYSICS, env=0):
        pass
    prof.merge([("render", 1_000_000, 2_000, 4242, 1, {"env": 3})])
    path = prof.export_chrome_trace(tmp_path / "run.trace.json")
    events = json.loads(open(path).read())["traceEvents"]
    assert {e["name"] for e in events} == {"physics", "render"}
    merged = next(e for e in events if e["name"] == "render")
    assert merged == {"name": "render", "ph": "X", "ts": 1000.0, "dur": 2.0, "pid": 4242, "tid": 1, "args": {"env": 3}}


def test_drain_hands_over_and_forgets():
    prof = Profiler(enabled=True)
    prof.add(PHYSICS, 0, 5)
    assert len(prof.drain()) == 1 and prof.spans == []


def test_package_import_stays_light():
    code = (
        "import sys, behavior1k_fast, behavior1k_fast.core.tracing, behavior1k_fast.core.frequencies,"
        " behavior1k_fast.omnigibson, behavior1k_fast.backends, behavior1k_fast.rollout, behavior1k_fast.tools.cli;"
        "heavy = [m for m in ('torch', 'mujoco', 'ray', 'omnigibson', 'matplotlib') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
