"""``behavior1k-fast train-compare`` (``behavior1k_fast/tools/train/curves.py``, the example's former
``--compare``): learning curves per profile over seeds, their verdict, and its output."""

import json

import pytest

from behavior1k_fast.tools.cli import main
from behavior1k_fast.tools.train import curves


def test_compare_judges_each_lookahead_lead_against_k1_within_the_pair_s_seed_spread():
    def run(profile, seed, success, lead=7):
        return {"config": {"profile": profile, "seed": seed, "lookahead_steps": lead}, "env_steps": [1, 2, 3, 4],
                "success_rate": [success] * 4, "mean_return": [-success] * 4, "episodes": [10] * 4}

    runs = [run("k1_skip", 0, 0.8), run("k1_skip", 1, 0.9), run("lookahead", 0, 0.82, lead=1),
            run("lookahead", 1, 0.86, lead=1), run("lookahead", 0, 0.4), run("lookahead", 1, 0.5)]
    pairs = curves.compare(runs)["final_success"]["against_k1_skip"]
    assert set(pairs) == {"lookahead_d1", "lookahead_d7"}
    assert pairs["lookahead_d1"]["agree_within_noise"] and pairs["lookahead_d1"]["noise"] == pytest.approx(0.1)
    assert not pairs["lookahead_d7"]["agree_within_noise"]
    assert pairs["lookahead_d7"]["difference"] == pytest.approx(0.45 - 0.85)
    # at equal samples: a run with more env steps is cut where the shortest ended (its extra, perfect
    # iterations do not count)
    runs[0] = {**runs[0], "env_steps": [1, 2, 3, 4, 5], "success_rate": [0.8] * 4 + [1.0], "mean_return": [0] * 5,
               "episodes": [10] * 5}
    result = curves.compare(runs)
    assert result["equal_samples"]["env_steps"] == 4
    assert result["final_success"]["per_seed"]["k1_skip"] == pytest.approx([0.8, 0.9])
    lines = curves.verdict_lines(result)
    assert lines[0].startswith("final_success: ") and any("against k1_skip: lookahead_d1 " in line for line in lines)


def test_the_smoothed_curve_has_one_value_per_iteration_even_when_the_window_is_longer_than_the_run():
    run = {"success_rate": [0.0, None, 1.0], "episodes": [2, 0, 2]}
    smooth = curves.smoothed(run, "success_rate", window=5)
    assert smooth.shape == (3,) and smooth[1] == pytest.approx(0.5)


@pytest.mark.parametrize("argv, text", [
    (["--iterations", "0"], "--iterations"), (["--iterations", "-3"], "--iterations"), (["--seeds", "0"], "--seeds"),
    (["--seeds", "-1"], "--seeds"), (["--profiles", "k1_skip", "--lookahead-steps", "3"], "--lookahead-steps 3"),
    (["--lookahead-steps", "8"], "--lookahead-steps 8"), (["--profiles", "k3"], "--profiles"),
    (["--record", "--out-dir", "x"], "--record"), (["--runs-from", "/nonexistent.json"], "--runs-from"),
    # an unusable output folder is refused before any training (issue 44, N16)
    (["--out-dir", "/proc/version/x"], "--out-dir"), (["--tag", "a/b"], "--tag"),
])
def test_a_bad_argument_is_a_one_line_usage_error_before_any_training(argv, text, capsys):
    try:
        code = main(["train-compare", *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and text in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_a_comparison_writes_its_runs_after_each_one_says_what_it_does_and_announces_its_files(tmp_path,
                                                                                             monkeypatch, capsys):
    from behavior1k_fast.tools.train import learner

    written = []
    original = curves.write_json

    def recording(data, path):  # what the JSON held at each write
        written.append(json.loads(json.dumps(data, default=float)))
        return original(data, path)

    monkeypatch.setattr(curves, "write_json", recording)
    monkeypatch.setattr(learner.PPOConfig, "__init__", _small(learner.PPOConfig.__init__))
    assert main(["train-compare", "--profiles", "k1_skip,k2_skip", "--seeds", "1", "--iterations", "2",
                 "--out-dir", str(tmp_path), "--tag", "ci"]) == 0
    out = capsys.readouterr().out
    # one write after each run (incomplete), then the whole result
    assert [len(w["runs"]) for w in written] == [1, 2] and not any(w["complete"] for w in written)
    result = json.loads((tmp_path / "ppo_reach_ci.json").read_text())
    assert result["complete"] and len(result["runs"]) == 2
    assert result["profiles"] == ["k1_skip", "k2_skip"] and len(result["cross_evaluation"]) == 4
    assert "k1_skip seed 0: training 2 iterations (serial)" in out
    assert "evaluating the seed-0 policy trained under k2_skip under k1_skip" in out
    assert f"wrote {tmp_path / 'ppo_reach_ci.json'}" in out and f"wrote {tmp_path / 'ppo_reach_ci.png'}" in out
    assert '"comparison"' not in out and "final_success: " in out  # the verdict in words, no JSON dump
    assert (tmp_path / "ppo_reach_ci.png").read_bytes()[:4] == b"\x89PNG"


def _small(init):
    """``PPOConfig.__init__`` with a layout small enough for a test (4 envs, 2 rounds, episodes of 6 steps: every
    curve has ended episodes; inline executor)."""
    def small(self, **kwargs):
        init(self, **{"envs": 4, "rounds": 2, "horizon": 6, "epochs": 1, "minibatches": 1, "executor": "inline",
                      **kwargs})
    return small
