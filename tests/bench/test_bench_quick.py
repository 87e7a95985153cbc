"""``behavior1k-fast bench --quick`` end to end on the reference simulator: every field, sane values."""

import argparse
import json
import math

import pytest

from behavior1k_fast.tools.bench import register

ROW_NAMES = ["stock", "slim", "skip_obs", "hybrid_serial", "hybrid_overlap", "hybrid_async", "process_serial",
             "process_overlap", "process_async"]
POSITIVE = ["wall_s", "ms_per_step", "sim_ms_per_step", "t_env_ms", "t_model_ms", "env_steps_per_s",
            "cpu_s_per_env_step", "peak_rss_mib_per_env_process", "bound_ms_per_step", "pipeline_efficiency",
            "speedup_vs_stock"]


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick", "--device", "cpu", "--out-dir", str(out), "--tag", "ci"])
    assert args.func(args) == 0
    return out, json.loads((out / "bench_ci.json").read_text())


def test_every_row_has_positive_times(quick_result):
    _, result = quick_result
    assert result["complete"]
    rows = result["rows"]
    assert [r["name"] for r in rows] == ROW_NAMES
    for row in rows + [result["baseline"]]:
        for key in POSITIVE:
            assert row[key] > 0 and math.isfinite(row[key]), (row["name"], key, row[key])
        assert row["gpu_mib_per_env"] is None or row["gpu_mib_per_env"] > 0
        assert row["own_actions"] <= row["steps"] * row["total_envs"]
        assert row["ms_per_step"] == pytest.approx(row["wall_s"] * 1e3 / row["steps"])
    for row in rows:
        assert len(row["worker_pids"]) == row["processes"]
        # the worker's wall time around its chunk stepping contains its simulator spans (warm-up round
        # first, so no reset outside a chunk is timed)
        assert 0 < row["t_env_ms"] <= row["t_env_worker_ms"] < row["wall_s"] * 1e3


def test_speedups_agree_with_the_times(quick_result):
    _, result = quick_result
    by = {r["name"]: r for r in result["rows"]}
    stock = by["stock"]["ms_per_step"]
    for row in result["rows"] + [result["baseline"]]:
        assert row["speedup_vs_stock"] == pytest.approx(stock / row["ms_per_step"])
    for row in result["rows"][1:]:
        assert row["speedup_vs_prev"] == pytest.approx(by[row["prev"]]["ms_per_step"] / row["ms_per_step"])
    for name, chunks_per_round in (("hybrid_overlap", 2), ("process_overlap", 1), ("skip_obs", 1)):
        row = by[name]
        assert row["chunks_per_round"] == chunks_per_round
        t_env, t_model = row["t_env_ms"], row["t_model_ms"]
        bound = max(chunks_per_round * t_env, row["pipeline_stages"] * t_model, t_env + t_model) / row["chunk_size"]
        assert row["bound_ms_per_step"] == pytest.approx(bound)
        assert row["sim_ms_per_step"] == pytest.approx(chunks_per_round * row["t_env_ms"] / row["chunk_size"])
        assert row["pipeline_efficiency"] == pytest.approx(row["bound_ms_per_step"] / row["ms_per_step"])


def test_goals_baseline_and_files(quick_result):
    out, result = quick_result
    by = {r["name"]: r for r in result["rows"]}
    goals = {g["name"]: g for g in result["goals"]}
    assert set(goals) == {"speedup_stock_to_all", "speedup_skip_obs_to_all", "pipeline_efficiency",
                          "speedup_async_over_barrier", "speedup_over_async_vector_env"}
    pipelined = [by[f"{p}_{s}"] for p in ("hybrid", "process") for s in ("overlap", "async")]
    best = min(pipelined, key=lambda r: r["ms_per_step"])
    assert result["best_row"] == best["name"]
    peer = goals["speedup_over_async_vector_env"]
    assert peer["measured"] == pytest.approx(result["baseline"]["ms_per_step"] / best["ms_per_step"])
    barrier = min(by["hybrid_overlap"]["ms_per_step"], by["process_overlap"]["ms_per_step"])
    asynchronous = min(by["hybrid_async"]["ms_per_step"], by["process_async"]["ms_per_step"])
    assert goals["speedup_async_over_barrier"]["measured"] == pytest.approx(barrier / asynchronous)
    for g in goals.values():
        assert g["met"] == (g["measured"] >= g["target"])
        assert (g["shortfall"] == "") == g["met"]
    assert result["baseline"]["profile"]["obs_modalities"] is None
    calibration = result["calibration"]
    assert calibration["model_width"] % 64 == 0 and calibration["model_depth"] >= 1
    assert calibration["model_dtype"] == "float32" and calibration["model_parameters"] > 0
    assert calibration["target_model_ms"] == calibration["env_ms_per_stage_chunk"] > 0
    curve = calibration["t_model_by_batch"]
    assert [c["batch"] for c in curve] == list(range(1, by["hybrid_overlap"]["total_envs"] + 1))
    assert all(c["ms"] > 0 for c in curve)
    assert result["machine"]["logical_cores"] >= 1
    assert (out / "bench_ci.png").read_bytes()[:4] == b"\x89PNG"
