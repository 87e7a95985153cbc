"""``benchmarks/time_to_train.py --quick``: every layout's samples to target, seconds per sample and their product."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script():
    """``benchmarks/time_to_train.py`` as a module (its folder joins ``sys.path``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import time_to_train

    return time_to_train


def test_reaching_the_target_counts_episodes_of_the_last_window():
    ttt = load_script()
    entries = [{"success_rate": 0.0, "episodes": 4}, {"success_rate": 1.0, "episodes": 1},
               {"success_rate": None, "episodes": 0}, {"success_rate": 0.5, "episodes": 3}]
    assert not ttt.reached(entries[:1], 0.5, 2)  # fewer iterations than the window
    assert ttt.reached(entries, 0.6, 3)  # (1 * 1 + 0.5 * 3) / 4 episodes = 0.625
    assert not ttt.reached(entries, 0.7, 3)
    assert not ttt.reached(entries[:3], 0.1, 1)  # the last iteration ended no episode


@pytest.mark.slow
def test_quick_run_reports_wall_to_target_as_samples_times_seconds_per_sample(tmp_path, capsys):
    ttt = load_script()
    assert ttt.main(["--quick", "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "ci"]) == 0
    result = json.loads((tmp_path / "time_to_train_ci.json").read_text())
    layouts = result["layouts"]
    expected = {"stock", "k1_skip", "hybrid_k2", "process_k2", "double_buffer_peer"}
    assert expected <= set(layouts) and set(layouts) | set(result["not_run"]) >= expected | {"lookahead"}
    for name, row in layouts.items():
        assert row["s_per_sample"] == pytest.approx(row["rollout_s_per_sample"] + row["update_s_per_sample"])
        assert row["rollout_s_per_sample"] > 0 and row["update_s_per_sample"] > 0
        runs = result["training_runs"][row["semantics"]]
        assert len(runs) == result["config"]["seeds"] == len(row["wall_to_target_s_per_seed"])
        for run, wall in zip(runs, row["wall_to_target_s_per_seed"]):
            assert (wall is None) == (run["samples"] is None)
            if wall is not None:
                assert wall == pytest.approx(run["samples"] * row["s_per_sample"])
                assert run["reached"] and run["samples"] == run["env_steps"][-1] > 0
    # the layouts of one semantics share its samples to target; each semantics trained under its own layout
    assert layouts["stock"]["samples_to_target"] == layouts["k1_skip"]["samples_to_target"] == \
        layouts["double_buffer_peer"]["samples_to_target"]
    assert layouts["hybrid_k2"]["trained_under"] == "hybrid_k2" and "direct_wall_to_target_s" in layouts["hybrid_k2"]
    # the peer pays the same PPO update per sample as K = 1
    assert layouts["double_buffer_peer"]["update_s_per_sample"] == layouts["k1_skip"]["update_s_per_sample"]
    assert result["profiles"]["hybrid_k2"]["pipeline_stages"] == 2 and result["calibration"]["model_width"] == 64
    assert result["load"]["before"]["cores"] >= 1
    assert (tmp_path / "time_to_train_ci.png").read_bytes()[:4] == b"\x89PNG"
    assert "| k1_skip | fresh |" in capsys.readouterr().out


def test_the_lookahead_layout_takes_the_lead_given_and_a_bad_lead_is_a_usage_error(capsys):
    ttt = load_script()
    assert ttt.parse_args(["--lookahead-steps", "1"]).lookahead_steps == 1
    assert ttt.parse_args([]).lookahead_steps == "auto"
    profiles, _ = ttt.layout_profiles(2, 4, 8, 1)
    assert (profiles["lookahead"].schedule, profiles["lookahead"].lookahead_steps) == ("lookahead", 1)
    for argv, text in ((["--lookahead-steps", "soon"], "expected an int >= 0 or auto, got 'soon'"),
                       (["--lookahead-steps", "-1"], "expected an int >= 0 or auto, got '-1'"),
                       (["--lookahead-steps", "8"], "must be below --chunk-size 8, got 8")):
        with pytest.raises(SystemExit) as exc:
            ttt.parse_args(argv)
        assert exc.value.code == 2 and text in capsys.readouterr().err
