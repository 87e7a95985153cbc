"""The benchmark's report: speedups from ms/step, the goals check, the table, machine tag, JSON and PNG."""

import json

import pytest

from behavior1k_fast.tools.bench import report
from behavior1k_fast.tools.measure.record import RowMeasure, with_speedups


def _row(name, label, ms_per_step, prev):
    """A measured row of 10 rounds of N = 10 steps taking ``ms_per_step``; no T_env."""
    return RowMeasure(name=name, label=label, processes=2, envs_per_process=2, pipeline_stages=1, chunks_per_round=1,
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
    row = _row("a", "a", 4.0, None).replace(t_env_ms=30.0, t_model_ms=10.0, pipeline_stages=2, chunks_per_round=2)
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
    goals = {g["name"]: g for g in report.check_goals(
        {"speedup_stock_to_all": 12.5, "pipeline_efficiency": 0.8, "speedup_over_stock_peer": 12.0}
    )}
    assert not goals["speedup_stock_to_all"]["met"]
    assert "missed by 2.00x" in goals["speedup_stock_to_all"]["shortfall"]
    assert not goals["pipeline_efficiency"]["met"]
    assert "missed by 15.0 points" in goals["pipeline_efficiency"]["shortfall"]
    assert goals["speedup_over_stock_peer"]["met"]
    assert goals["speedup_over_stock_peer"]["shortfall"] == ""
    text = report.format_goals(list(goals.values()))
    assert "12.50x (goal >= 25x) -> missed by 2.00x (12.50x of 25x)" in text
    assert "-> met" in text


def test_unmeasured_goal_is_not_met():
    goals = report.check_goals({"speedup_stock_to_all": 40.0, "pipeline_efficiency": 0.95})
    by_name = {g["name"]: g for g in goals}
    assert by_name["speedup_stock_to_all"]["met"] and by_name["pipeline_efficiency"]["met"]
    assert not by_name["speedup_over_stock_peer"]["met"]
    assert by_name["speedup_over_stock_peer"]["shortfall"] == "not measured"


def test_table_has_a_line_per_row_and_dashes_for_missing_values():
    rows = [r.to_dict() for r in _rows()]
    lines = report.format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].startswith("row") and "e2e ms/step" in lines[0]
    assert lines[2].startswith("stock") and "60.00" in lines[2]
    assert lines[4].startswith("+ fast") and lines[4].rstrip().endswith("-")


def test_machine_tag_names_cpu_cores_and_gpu():
    assert report.machine_tag({"logical_cores": 2, "gpu": None}) == "cpu2"
    assert report.machine_tag({"logical_cores": 16, "gpu": {"name": "NVIDIA H200"}}) == "h200-cpu16"


def test_describe_machine_has_cores_and_versions():
    machine = report.describe_machine("cpu")
    assert machine["logical_cores"] >= 1
    assert machine["memory_gib"] > 0
    assert machine["policy_device"] == "cpu"
    assert machine["numpy_version"]


def test_json_and_plot_are_written(tmp_path):
    rows = [r.replace(t_env_ms=5.0).to_dict() for r in _rows()]
    result = {
        "machine": {"cpu_model": "test cpu", "logical_cores": 2, "gpu": None},
        "config": {"backend": "reference"},
        "rows": rows,
        "baseline": None,
        "scaling": [{"label": "all", "processes": p, "env_steps_per_s": 100.0 * p,
                     "bound_env_steps_per_s": 110.0 * p} for p in (1, 2)],
        "calibration": {"model_width": 128, "model_depth": 4, "model_dtype": "float32", "stage_batch": 2,
                        "target_model_ms": 3.0, "model_parameters": 2.5e6,
                        "t_model_by_batch": [{"batch": b, "ms": 1.5 * b, "ms_per_sample": 1.5} for b in (1, 2, 3, 4)]},
    }
    path = report.write_json(result, tmp_path / "out" / "bench_test.json")
    assert json.loads(path.read_text()) == result
    png = report.write_plot(result, tmp_path / "out" / "bench_test.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_model_cost_line_names_the_size_and_every_batch():
    line = report.format_model_cost({"model_width": 256, "model_depth": 6, "model_parameters": 5.2e6,
                                     "model_dtype": "bfloat16",
                                     "t_model_by_batch": [{"batch": 1, "ms": 2.0}, {"batch": 2, "ms": 3.5}]})
    assert line == ("Policy: width 256, depth 6, 5.2M parameters, bfloat16; T_model ms by batch: 1: 2.0, 2: 3.5")


@pytest.mark.parametrize("value", ["1,x", "0,2", ""])
def test_scaling_list_rejects_bad_values(value):
    import argparse

    from behavior1k_fast.tools.argtypes import int_list

    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated ints"):
        int_list(value)


def test_left_out_rows_are_grouped_by_reason():
    text = report.format_left_out({"a": "P is odd", "b": "P is odd", "c": "E is 1"})
    assert text.splitlines() == ["left out a, b: P is odd", "left out c: E is 1"]


def test_the_headline_names_the_budget_the_rows_and_the_ratio():
    line = report.format_headline({"process_budget": 8, "best_engine_row": "hybrid_overlap",
                                   "best_peer": "peer_double_buffer", "speedup": 1.16})
    assert line == ("Process budget 8: engine best hybrid_overlap is 1.16x the best fair peer "
                    "peer_double_buffer")
    assert "no fair peer ran" in report.format_headline({"process_budget": 1, "best_engine_row": "skip_obs",
                                                          "best_peer": None, "speedup": None})
