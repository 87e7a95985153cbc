"""The benchmark's report: speedups from ms/step, the goals check, the table, machine tag, JSON and PNG."""

import json

import pytest

from behavior1k_fast.tools.bench import report
from behavior1k_fast.tools.bench.result import BenchResult, Headline
from behavior1k_fast.tools.measure.calibration import Calibration
from behavior1k_fast.tools.measure.files import write_json
from behavior1k_fast.tools.measure.machine import LoadSample, describe_machine, machine_tag
from behavior1k_fast.tools.measure.record import RowMeasure, with_speedups


def _row(name, label, ms_per_step, prev):
    """A measured row of 10 rounds of N = 10 steps taking ``ms_per_step``; no T_env."""
    return RowMeasure(name=name, label=label, processes=2, envs_per_process=2, pipeline_stages=1, stages_sharing_physics=1,
                      chunk_size=10, rounds=10, own_actions=400, wall_s=ms_per_step * 100 / 1e3, model_s=0.1,
                      t_model_ms=1.0, t_env_ms=None, t_env_source="none", cpu_seconds=1.0,
                      peak_rss_mib_per_env_process=100.0, driver_peak_rss_mib=100.0, prev=prev)


def _rows():
    return with_speedups([_row("stock", "stock", 60.0, None), _row("slim", "+ slim", 12.0, "stock"),
                          _row("fast", "+ fast", 4.0, "slim")])


def test_speedups_follow_ms_per_step_and_prev_names():
    rows = _rows()
    assert [r.speedup_vs_stock for r in rows] == pytest.approx([1.0, 5.0, 15.0])
    assert rows[0].speedup_vs_prev is None
    assert rows[1].speedup_vs_prev == pytest.approx(5.0)
    assert rows[2].speedup_vs_prev == pytest.approx(3.0)


def test_derived_measures_follow_the_stored_ones():
    row = _row("a", "a", 4.0, None).replace(t_env_ms=30.0, t_model_ms=10.0, pipeline_stages=2, stages_sharing_physics=2)
    assert row.ms_per_step == pytest.approx(4.0) and row.steps == 100 and row.total_envs == 4
    assert row.env_steps_per_s == pytest.approx(400 / 0.4)
    # max(C * T_env, K * T_model, T_env + T_model) / N
    assert row.bound_ms_per_step == pytest.approx(max(2 * 30.0, 2 * 10.0, 40.0) / 10)
    assert row.pipeline_efficiency == pytest.approx(6.0 / 4.0)
    assert row.sim_ms_per_step == pytest.approx(6.0)
    data = row.to_dict()
    assert data["bound_ms_per_step"] == row.bound_ms_per_step and data["ms_per_step"] == row.ms_per_step
    assert _row("b", "b", 4.0, None).pipeline_efficiency is None


def test_goals_say_by_how_much_they_are_missed():
    goals = {g.name: g for g in report.check_goals(
        {"speedup_stock_to_all": 12.5, "pipeline_efficiency": 0.8, "speedup_over_stock_peer": 12.0}
    )}
    assert not goals["speedup_stock_to_all"].met
    assert "missed by 2.00x" in goals["speedup_stock_to_all"].shortfall
    assert not goals["pipeline_efficiency"].met
    assert "missed by 15.0 points" in goals["pipeline_efficiency"].shortfall
    assert goals["speedup_over_stock_peer"].met
    assert goals["speedup_over_stock_peer"].shortfall == ""
    assert goals["speedup_stock_to_all"].to_dict()["met"] is False
    text = report.format_goals(list(goals.values()))
    assert "12.50x (goal >= 25x) -> missed by 2.00x (12.50x of 25x)" in text
    assert "-> met" in text


def test_unmeasured_goal_is_not_met():
    goals = report.check_goals({"speedup_stock_to_all": 40.0, "pipeline_efficiency": 0.95})
    by_name = {g.name: g for g in goals}
    assert by_name["speedup_stock_to_all"].met and by_name["pipeline_efficiency"].met
    assert not by_name["speedup_over_stock_peer"].met
    assert by_name["speedup_over_stock_peer"].shortfall == "not measured"


def test_table_has_a_line_per_row_and_dashes_for_missing_values():
    rows = _rows()
    lines = report.format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].startswith("row") and "e2e ms/step" in lines[0]
    assert lines[2].startswith("stock") and "60.00" in lines[2]
    assert lines[4].startswith("+ fast") and lines[4].rstrip().endswith("-")


def test_machine_tag_names_cpu_cores_and_gpu():
    assert machine_tag({"logical_cores": 2, "gpu": None}) == "cpu2"
    assert machine_tag({"logical_cores": 16, "gpu": {"name": "NVIDIA H200"}}) == "h200-cpu16"


def test_describe_machine_has_cores_and_versions():
    machine = describe_machine("cpu")
    assert machine["logical_cores"] >= 1
    assert machine["memory_gib"] > 0
    assert machine["policy_device"] == "cpu"
    assert machine["numpy_version"]


def _calibration(**changes):
    fields = dict(env_ms_per_stage_chunk=3.0, target_model_ms=3.0, model_width=128, model_depth=4,
                  model_parameters=2_500_000, model_tokens_per_sample=8, model_dtype="float32",
                  forward_ms_at_stage_batch=3.0, stage_batch=2, policy_device="cpu", policy_threads=1,
                  t_model_by_batch=[{"batch": b, "ms": 1.5 * b, "ms_per_sample": 1.5} for b in (1, 2, 3, 4)])
    return Calibration(**(fields | changes))


def _result():
    rows = [r.replace(t_env_ms=5.0) for r in _rows()]
    load = LoadSample(cores=2, load_average=None, other_cpu_cores=0.0, window_s=0.5)
    return BenchResult(machine={"cpu_model": "test cpu", "logical_cores": 2, "gpu": None},
                       config={"backend": "reference"}, load_before=load, left_out={}, rows=rows,
                       scaling=[r.replace(label="all", processes=p) for p, r in zip((1, 2), rows)],
                       calibration=_calibration())


def test_json_and_plot_are_written(tmp_path):
    result = _result()
    path = write_json(result.to_dict(), tmp_path / "out" / "bench_test.json")
    data = json.loads(path.read_text())
    assert [r["name"] for r in data["rows"]] == ["stock", "slim", "fast"]
    assert data["rows"][1]["ms_per_step"] == pytest.approx(12.0) and data["calibration"]["model_width"] == 128
    assert data["load"]["before"]["cores"] == 2 and data["load"]["after"] is None and not data["complete"]
    png = report.write_plot(result, tmp_path / "out" / "bench_test.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bench_test.json", "bench_test.png"]


def test_model_cost_line_names_the_size_and_every_batch():
    line = report.format_model_cost(_calibration(model_width=256, model_depth=6, model_parameters=5.2e6,
                                                 model_dtype="bfloat16",
                                                 t_model_by_batch=[{"batch": 1, "ms": 2.0}, {"batch": 2, "ms": 3.5}]))
    assert line == ("Policy: width 256, depth 6, 5.2M parameters, bfloat16; T_model ms by batch: 1: 2.0, 2: 3.5")


@pytest.mark.parametrize("value", ["1,x", "0,2", ""])
def test_scaling_list_rejects_bad_values(value):
    import argparse

    from behavior1k_fast.tools.argtypes import int_list

    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated ints"):
        int_list(value)


def test_left_out_rows_are_grouped_by_reason():
    result = _result()
    result.left_out = {"a": "P is odd", "b": "P is odd", "c": "E is 1"}
    lines = report.format_result(result).splitlines()
    assert lines[2 + len(result.rows):][:2] == ["left out a, b: P is odd", "left out c: E is 1"]


def _measured(name, *runs_ms):
    """A row whose median run and spread are ``runs_ms`` (ms per step)."""
    return _row(name, name, sorted(runs_ms)[(len(runs_ms) - 1) // 2], None).replace(repeat_ms_per_step=runs_ms)


def test_the_headline_names_the_budget_the_rows_and_the_ratio():
    headline = Headline.of(8, _measured("hybrid_overlap", 10.0, 10.2, 10.1), _measured("peer_double_buffer", 11.6, 11.8, 11.7))
    assert headline.format() == ("Process budget 8: engine best hybrid_overlap is 1.16x the best fair peer "
                                 "peer_double_buffer")
    assert headline.within_spread is False and headline.to_dict()["speedup"] == pytest.approx(11.7 / 10.1)
    assert "no fair peer ran" in Headline.of(1, _measured("skip_obs", 4.0), None).format()


def test_a_headline_inside_the_spread_of_the_runs_says_no_difference_was_measurable():
    headline = Headline.of(1, _measured("hybrid_overlap", 9.0, 10.0, 13.0), _measured("peer_chunk", 12.0, 13.4, 14.0))
    assert headline.within_spread is True
    line = headline.format()
    assert "1.34x" in line and "no difference measurable on this machine" in line
    assert "9.00-13.00" in line and "12.00-14.00" in line
    single = Headline.of(1, _measured("hybrid_overlap", 10.0), _measured("peer_chunk", 13.4))
    assert single.within_spread is None and "no spread measured" in single.format()


def test_a_calibration_that_missed_its_target_says_so():
    assert _calibration().miss() is None
    slow = _calibration(forward_ms_at_stage_batch=6.0).miss()
    assert "missed its target" in slow and "2.00x the target 3.0 ms (slower)" in slow
    assert "faster" in _calibration(forward_ms_at_stage_batch=1.0).miss()
    assert _calibration(target_model_ms=None).miss() is None  # a fixed size has no target


def test_the_printed_result_shows_what_was_measured_so_far():
    result = _result()
    result.headline = Headline.of(2, result.rows[-1], None)
    text = report.format_result(result)
    assert text.splitlines()[0].startswith("row") and "+ fast" in text and "Process budget 2" in text
    empty = BenchResult(machine={}, config={}, load_before=result.load_before, left_out={"x": "P is odd"})
    assert report.format_result(empty).splitlines() == ["(no row measured)", "left out x: P is odd"]


def test_a_row_above_its_bound_is_named_with_why_its_efficiency_may_pass_100_percent():
    result = _result()  # T_env 5 ms + T_model 1 ms per chunk of 10: bound 0.6 ms/step
    assert "pipe eff over 100 %" not in report.format_result(result)
    result.peers = [_row("peer_double_buffer", "two AsyncVectorEnvs", 0.5, None).replace(t_env_ms=5.0)]
    assert result.peers[0].pipeline_efficiency == pytest.approx(1.2)
    note = next(line for line in report.format_result(result).splitlines() if line.startswith("pipe eff over"))
    assert note.startswith("pipe eff over 100 % (peer_double_buffer): the bound comes from the run's own T_env")
    assert "core-bound" in note
