"""``behavior1k-fast bench --quick`` end to end on the reference simulator: every field, sane values, the peers."""

import argparse
import json
import math

import pytest

from behavior1k_fast.core.profile import auto_lead_cap
from behavior1k_fast.tools.bench import register

ROW_NAMES = ["stock", "slim", "skip_obs", "hybrid_serial", "hybrid_overlap", "hybrid_async", "process_serial",
             "process_overlap", "process_async", "lookahead", "lookahead_process"]
PEER_NAMES = ["peer_chunk", "peer_double_buffer", "peer_lookahead", "peer_stock"]
POSITIVE = ["wall_s", "ms_per_step", "sim_ms_per_step", "t_env_ms", "t_model_ms", "env_steps_per_s",
            "cpu_s_per_env_step", "peak_rss_mib_per_env_process", "bound_ms_per_step", "pipeline_efficiency",
            "speedup_vs_stock"]


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick", "--device", "cpu", "--max-processes", "2", "--out-dir", str(out),
                              "--tag", "ci"])
    assert args.func(args) == 0
    return out, json.loads((out / "bench_ci_quick.json").read_text())


def test_every_row_has_positive_times(quick_result):
    _, result = quick_result
    assert result["complete"]
    rows = result["rows"]
    assert [r["name"] for r in rows] == ROW_NAMES
    assert [p["name"] for p in result["peers"]] == PEER_NAMES
    assert result["budget_rows"] == [] and result["left_out"] == {}  # 2 x 2 is the budget's widest layout
    for row in rows + result["peers"]:
        for key in POSITIVE:
            assert row[key] > 0 and math.isfinite(row[key]), (row["name"], key, row[key])
        assert row["gpu_mib_per_env"] is None or row["gpu_mib_per_env"] > 0
        assert row["own_actions"] <= row["steps"] * row["total_envs"]
        assert row["ms_per_step"] == pytest.approx(row["wall_s"] * 1e3 / row["steps"])
        assert row["repeat_ms_per_step"] == [row["ms_per_step"]]  # quick: one run per row
    for row in rows + result["peers"]:
        assert len(row["worker_pids"]) == row["processes"]
        # the worker's wall time around its chunk stepping contains its simulator spans (warm-up round
        # first, so no reset outside a chunk is timed)
    for row in rows:
        assert 0 < row["t_env_ms"] <= row["t_env_worker_ms"] < row["wall_s"] * 1e3


def test_speedups_agree_with_the_times(quick_result):
    _, result = quick_result
    by = {r["name"]: r for r in result["rows"]}
    stock = by["stock"]["ms_per_step"]
    for row in result["rows"] + result["peers"]:
        assert row["speedup_vs_stock"] == pytest.approx(stock / row["ms_per_step"])
    for row in result["rows"][1:]:
        assert row["speedup_vs_prev"] == pytest.approx(by[row["prev"]]["ms_per_step"] / row["ms_per_step"])
    by |= {p["name"]: p for p in result["peers"]}
    # the double buffer is two stages of one chunk per worker per round, like the process partition
    for name, stages_sharing_physics in (("hybrid_overlap", 2), ("process_overlap", 1), ("skip_obs", 1),
                                   ("peer_chunk", 1), ("peer_double_buffer", 1)):
        row = by[name]
        assert row["stages_sharing_physics"] == stages_sharing_physics
        t_env, t_model = row["t_env_ms"], row["t_model_ms"]
        bound = max(stages_sharing_physics * t_env, row["pipeline_stages"] * t_model, t_env + t_model) / row["chunk_size"]
        assert row["bound_ms_per_step"] == pytest.approx(bound)
        assert row["sim_ms_per_step"] == pytest.approx(stages_sharing_physics * row["t_env_ms"] / row["chunk_size"])
        assert row["pipeline_efficiency"] == pytest.approx(row["bound_ms_per_step"] / row["ms_per_step"])
    # the user-level lookahead peer's bound counts its lead, as the engine's lookahead row's does
    peer = by["peer_lookahead"]
    assert peer["lookahead_steps"] == auto_lead_cap(peer["chunk_size"]) > 0
    lead_ms = peer["lookahead_steps"] * peer["t_env_ms"] / peer["chunk_size"]
    assert peer["bound_ms_per_step"] == pytest.approx(
        (peer["t_env_ms"] + max(0.0, peer["t_model_ms"] - lead_ms)) / peer["chunk_size"])


def test_peers_run_the_same_envs_and_policy_on_the_same_profile(quick_result):
    _, result = quick_result
    by = {r["name"]: r for r in result["rows"] + result["peers"]}
    chunk, double, stock = by["peer_chunk"], by["peer_double_buffer"], by["peer_stock"]
    assert (chunk["processes"], chunk["envs_per_process"], chunk["pipeline_stages"]) == (2, 2, 1)
    assert (double["processes"], double["envs_per_process"], double["pipeline_stages"]) == (2, 2, 2)
    assert (stock["processes"], stock["envs_per_process"]) == (4, 1)
    for peer in (chunk, double):
        assert len(peer["worker_pids"]) == peer["processes"]
        assert 0 < peer["own_actions"] <= 4 * peer["steps"]  # an env whose episode ends holds for the chunk's rest
        # same env profile as the engine's skip-obs row, but for the layout
        engine = dict(by["skip_obs"]["profile"], num_env_processes=None)
        assert dict(peer["profile"], num_env_processes=None) == engine
    assert stock["profile"]["obs_modalities"] is None and not stock["profile"]["skip_intermediate_obs"]


def test_goals_headline_load_and_files(quick_result):
    out, result = quick_result
    by = {r["name"]: r for r in result["rows"]}
    peers = {p["name"]: p for p in result["peers"]}
    goals = {g["name"]: g for g in result["goals"]}
    assert set(goals) == {"speedup_stock_to_all", "speedup_skip_obs_to_all", "pipeline_efficiency",
                          "speedup_async_over_barrier", "speedup_over_best_peer", "speedup_over_stock_peer",
                          "speedup_lookahead_over_hybrid", "lookahead_efficiency",
                          "speedup_lookahead_over_user_lookahead"}
    assert goals["speedup_lookahead_over_user_lookahead"]["measured"] == pytest.approx(
        peers["peer_lookahead"]["ms_per_step"] / by["lookahead"]["ms_per_step"])
    pipelined = [by[f"{p}_{s}"] for p in ("hybrid", "process") for s in ("overlap", "async")] + [by["lookahead"], by["lookahead_process"]]
    best = min(pipelined, key=lambda r: r["ms_per_step"])
    assert result["best_row"] == best["name"]
    assert goals["speedup_over_stock_peer"]["measured"] == pytest.approx(peers["peer_stock"]["ms_per_step"]
                                                                        / best["ms_per_step"])
    headline = result["headline"]
    engine_best = min(result["rows"], key=lambda r: r["ms_per_step"])
    fair_best = min((peers["peer_chunk"], peers["peer_double_buffer"], peers["peer_lookahead"]),
                    key=lambda r: r["ms_per_step"])
    assert (headline["process_budget"], headline["best_engine_row"], headline["best_peer"]) == (
        2, engine_best["name"], fair_best["name"])
    assert headline["speedup"] == pytest.approx(fair_best["ms_per_step"] / engine_best["ms_per_step"])
    assert goals["speedup_over_best_peer"]["measured"] == headline["speedup"]
    assert by["lookahead"]["critical_path"]["rounds"] == 0  # quick: one round, no forward after it
    assert all(r["critical_path"] is None for r in result["rows"] if r["name"] != "lookahead")  # K = 1 only
    for when in ("before", "after"):
        load = result["load"][when]
        assert load["cores"] >= 1 and load["other_cpu_cores"] >= 0 and load["busy"] in (True, False)
    barrier = min(by["hybrid_overlap"]["ms_per_step"], by["process_overlap"]["ms_per_step"])
    asynchronous = min(by["hybrid_async"]["ms_per_step"], by["process_async"]["ms_per_step"])
    assert goals["speedup_async_over_barrier"]["measured"] == pytest.approx(barrier / asynchronous)
    for g in goals.values():
        assert g["met"] == (g["measured"] >= g["target"])
        assert (g["shortfall"] == "") == g["met"]
    calibration = result["calibration"]
    assert calibration["model_width"] % 64 == 0 and calibration["model_depth"] >= 1
    assert calibration["model_dtype"] == "float32" and calibration["model_parameters"] > 0
    assert calibration["target_model_ms"] == calibration["env_ms_per_stage_chunk"] > 0
    curve = calibration["t_model_by_batch"]
    assert [c["batch"] for c in curve] == list(range(1, by["hybrid_overlap"]["total_envs"] + 1))
    assert all(c["ms"] > 0 for c in curve)
    assert result["machine"]["logical_cores"] >= 1
    assert (out / "bench_ci_quick.png").read_bytes()[:4] == b"\x89PNG"
