"""The judge's verdict from rows that trained their own seeds: the wall to target without the start, each row's
intervals, the goals of issue 42 with their verdicts in the result JSON, and the plot of a new and an old result."""

import json
from pathlib import Path

import pytest

pytest.importorskip("scipy")

from behavior1k_fast.tools.train.goals import correction_goals, regime_goals  # noqa: E402
from behavior1k_fast.tools.train.judge import regime_power  # noqa: E402
from behavior1k_fast.tools.train.layouts import LAYOUTS, CompareRow, compared_rows  # noqa: E402
from behavior1k_fast.tools.train.report import format_table, plot  # noqa: E402
from behavior1k_fast.tools.train.result import (CostRow, RegimeResult, TimeToTrainResult, TrainingRun,  # noqa: E402
                                                layout_rows)

ROOT = Path(__file__).resolve().parents[2]


def run(seed, wait, update, reached=True, before=0.5, samples_per_iteration=100):
    """A training run whose iterations waited ``wait`` (a list: the first is the start) and updated ``update`` s."""
    n = len(wait)
    walls, total = [], before
    for w, u in zip(wait, [update] * n):
        total += w + u
        walls.append(total)
    steps = [samples_per_iteration * (i + 1) for i in range(n)]
    return TrainingRun(seed, reached, steps[-1] if reached else None, walls[-1] if reached else None, n,
                       success_rate=[0.1 * (i + 1) for i in range(n)], env_steps=steps, wall_s=walls,
                       policy_lag=[0.0] * n, wait_s=list(wait), update_s=[update] * n, update_cpu_s=[update] * n)


def test_a_row_s_wall_to_target_leaves_out_its_start_counting_the_first_wait_at_the_median_of_the_others():
    r = run(0, [5.0, 1.0, 1.2, 0.8], update=0.5, before=2.0)
    # the first wait counts at the median of the others (1.0); its 4 s excess and the 2 s before it are the start
    assert r.startup_s == pytest.approx(2.0 + 4.0)
    assert r.trained_wall_s == pytest.approx(1.0 + 1.0 + 1.2 + 0.8 + 4 * 0.5)
    assert r.wall_to_target_s == r.trained_wall_s
    assert r.direct_wall_s == pytest.approx(r.trained_wall_s + r.startup_s)  # the run's own clock has both
    assert run(0, [1.0, 1.0], 0.5, reached=False).wall_to_target_s is None
    # a first wait shorter than the others is no start
    assert run(0, [0.5, 1.0, 1.0], 0.5, before=0.0).startup_s == 0.0


def rows_and_runs(slow_peer=1.0, lag1=105):
    rows = compared_rows(["k1_skip"], ["double_buffer_peer", "double_buffer_thread"])
    runs = {
        "k1_skip": [run(s, [9.0] + [1.0 + 0.05 * s] * 4, 0.5, samples_per_iteration=100 + 10 * s) for s in range(5)],
        "k1_skip+overlap": [run(s, [9.0] + [0.4 + 0.02 * s] * 4, 0.5, samples_per_iteration=lag1 + 10 * s)
                            for s in range(5)],
        "double_buffer_peer": [run(s, [20.0] + [2.0 * slow_peer + 0.1 * s] * 4, 0.5) for s in range(5)],
        "double_buffer_thread": [run(s, [20.0] + [0.5 + 0.02 * s] * 4, 0.5, reached=s < 4) for s in range(5)],
    }
    return rows, runs


def test_the_result_json_carries_each_row_s_intervals_and_each_goal_s_verdict(tmp_path):
    rows, runs = rows_and_runs()
    assert list(rows) == ["k1_skip", "k1_skip+overlap", "double_buffer_peer", "double_buffer_thread"]
    cost = {"k1_skip+overlap": CostRow(0.001, 0.001, env_busy_s_per_sample=0.0015, trainer_cpu_s_per_sample=0.0019)}
    layouts = layout_rows(cost, runs, rows)
    assert all(layouts[n].own_runs for n in rows) and layouts["k1_skip+overlap"].cost is cost["k1_skip+overlap"]
    # the bound counts the trainer's CPU thread: here it is the largest side
    assert cost["k1_skip+overlap"].bound_s_per_sample == 0.0019 and cost["k1_skip+overlap"].of_bound == 0.95
    power = regime_power(runs, rows)
    # a seed that never reached the target counts at what it ran; the others at their own wall without the start
    thread = power["double_buffer_thread"]
    assert (thread.seeds_reached, thread.seeds) == (4, 5) and thread.wall_s.low <= thread.wall_s.estimate
    assert power["k1_skip"].startup_s.median == pytest.approx(0.5 + 9.0 - 1.0, abs=0.2)
    assert power["k1_skip"].budget == 500  # the smallest median samples to target
    goals = {g.name: g for g in regime_goals("balanced", runs, power, rows, layouts)}
    assert goals["wall_vs_double_buffer"].verdict == "met"  # 4x shorter on every seed
    assert goals["wall_vs_double_buffer"].interval.low > 1.5 and goals["wall_vs_double_buffer"].ours == (
        "k1_skip+overlap")
    # the overlapped row's mean samples (625) inside the serial row's interval around 600; far out: missed
    assert goals["lag1_samples_within_serial"].verdict == "met"
    assert goals["lag1_samples_within_serial"].interval.low < 625 < goals["lag1_samples_within_serial"].interval.high
    far_rows, far_runs = rows_and_runs(lag1=200)
    far = {g.name: g for g in regime_goals("balanced", far_runs, regime_power(far_runs, far_rows), far_rows, {})}
    assert far["lag1_samples_within_serial"].verdict == "missed" and far["of_bound"].verdict == "not shown"
    low_rows, low_runs = rows_and_runs(lag1=50)  # half the serial row's samples: no cost of the lag, said so
    low = {g.name: g for g in regime_goals("balanced", low_runs, regime_power(low_runs, low_rows), low_rows, {})}
    assert low["lag1_samples_within_serial"].verdict == "met" and "below" in low["lag1_samples_within_serial"].note
    assert goals["of_bound"].verdict == "met"
    result = TimeToTrainResult("cmd", {"cpu_model": "test"}, {"target": 0.7, "seeds": 5}, True,
                               regimes={"balanced": RegimeResult({}, layouts, {}, runs, None, power,
                                                                 list(goals.values()))})
    data = json.loads(json.dumps(result.to_dict()))
    regime = data["regimes"]["balanced"]
    assert regime["power"]["k1_skip"]["wall_s"]["low"] is not None
    assert {g["name"]: g["verdict"] for g in regime["goals"]}["wall_vs_double_buffer"] == "met"
    assert regime["training_runs"]["k1_skip"][0]["startup_s"] == pytest.approx(8.5, abs=0.2)
    back = TimeToTrainResult.from_dict(data)
    assert back.to_dict() == data
    text = format_table(back)
    assert "wall to target, k1_skip+overlap vs the serial double buffer" in text and "-> met" in text
    plot(back, tmp_path / "new.png")
    assert (tmp_path / "new.png").read_bytes()[:4] == b"\x89PNG"


def test_a_slower_peer_within_seed_noise_is_not_shown():
    rows, runs = rows_and_runs(slow_peer=0.3)  # the peer's waits about the overlap row's: no clear ratio
    runs["double_buffer_peer"] = [run(s, [20.0] + [0.3 + 0.4 * (s % 2)] * 4, 0.5) for s in range(5)]
    power = regime_power(runs, rows)
    goals = {g.name: g for g in regime_goals("balanced", runs, power, rows, layout_rows({}, runs, rows))}
    assert goals["wall_vs_double_buffer"].verdict in ("not shown", "missed")
    assert goals["wall_vs_double_buffer"].interval.low < 1.5


def test_the_corrections_compare_the_overlapped_row_under_each_correction_with_the_serial_one():
    rows = compared_rows(["k1_skip"], [], ["none", "first_epoch", "current_values"])
    assert list(rows) == ["k1_skip", "k1_skip+overlap/none", "k1_skip+overlap/first_epoch",
                          "k1_skip+overlap/current_values"]
    assert rows["k1_skip+overlap/first_epoch"] == CompareRow("k1_skip+overlap/first_epoch",
                                                             LAYOUTS["k1_skip+overlap"], "first_epoch")
    # the user's collect-while-train peers too, each beside its serial twin; serial peers have none
    rows = compared_rows([], ["double_buffer_peer", "double_buffer_thread", "torchrl_async"], ["none", "decoupled"])
    assert list(rows) == ["double_buffer_peer", "double_buffer_thread/none", "double_buffer_thread/decoupled",
                          "torchrl_sync", "torchrl_async/none", "torchrl_async/decoupled"]
    assert rows["double_buffer_thread/decoupled"].correction == "decoupled"
    # each correction is judged against its own row's serial twin
    runs = {name: [run(s, [20.0] + [0.5] * 4, 0.5) for s in range(5)] for name in rows}
    goals = correction_goals(runs, regime_power(runs, rows), rows)
    assert {(g.ours, g.peer) for g in goals} == {
        ("double_buffer_thread/none", "double_buffer_peer"), ("double_buffer_thread/decoupled", "double_buffer_peer"),
        ("torchrl_async/none", "torchrl_sync"), ("torchrl_async/decoupled", "torchrl_sync")}


def test_a_layout_that_only_timed_its_cost_row_reads_not_trained_and_a_row_that_never_reached_not_reached():
    rows, runs = rows_and_runs()
    runs["double_buffer_peer"] = [run(s, [20.0, 2.0], 0.5, reached=False) for s in range(5)]
    cost = {"hybrid_k2": CostRow(0.001, 0.002)}
    regime = RegimeResult({}, layout_rows(cost, runs, rows), {}, runs)
    lines = format_table(TimeToTrainResult("x", {}, {}, True, regimes={"balanced": regime})).splitlines()
    row = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| ")}
    assert row["hybrid_k2"].endswith("| not trained |")  # timed, never trained here
    assert row["double_buffer_peer"].endswith("| not reached |")  # trained, never reached the target


def test_an_old_recorded_result_still_reads_and_plots(tmp_path):
    old = ROOT / "benchmarks" / "results" / "time_to_train_h200-balanced-224-peers.json"
    result = TimeToTrainResult.from_dict(json.loads(old.read_text()))
    assert not result.regimes["balanced"].power and not result.regimes["balanced"].goals
    plot(result, tmp_path / "old.png")
    assert (tmp_path / "old.png").read_bytes()[:4] == b"\x89PNG"


def test_a_judge_split_over_calls_merges_into_one_result_with_every_seed_and_refuses_two_models(tmp_path, capsys):
    from behavior1k_fast.tools.cli import main

    rows, runs = rows_and_runs()
    calibration = {"model_width": 64, "model_depth": 2}

    def part(seeds, width=64):
        part_runs = {n: [r for r in rs if r.seed in seeds] for n, rs in runs.items()}
        regime = RegimeResult({**calibration, "model_width": width}, layout_rows({}, part_runs, rows), {}, part_runs)
        data = TimeToTrainResult(f"call {seeds}", {"cpu_model": "test"}, {"target": 0.7, "seeds": len(seeds)}, True,
                                 regimes={"balanced": regime}).to_dict()
        name = tmp_path / f"part{min(seeds)}{width}.json"
        name.write_text(json.dumps(data))
        return str(name)

    first, second = part({0, 1, 2}), part({2, 3, 4})  # seed 2 twice: kept once
    assert main(["train-judge", "--merge", first, second, "--out-dir", str(tmp_path), "--tag", "joined"]) == 0
    joined = json.loads((tmp_path / "time_to_train_joined.json").read_text())
    regime = joined["regimes"]["balanced"]
    assert [r["seed"] for r in regime["training_runs"]["k1_skip"]] == [0, 1, 2, 3, 4]
    assert regime["power"]["k1_skip"]["seeds"] == 5 and joined["config"]["merged"] == ["call {0, 1, 2}",
                                                                                      "call {2, 3, 4}"]
    assert {g["name"]: g["verdict"] for g in regime["goals"]}["wall_vs_double_buffer"] == "met"
    assert (tmp_path / "time_to_train_joined.png").exists() and "wall to target, k1_skip+overlap" in (
        capsys.readouterr().out)
    other = part({3, 4}, width=128)
    assert main(["train-judge", "--merge", first, other, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--merge" in err and "(64, 2), (128, 2)" in err and len(err.strip().splitlines()) == 1


def test_each_correction_is_judged_against_the_serial_row_in_samples_and_wall():
    from behavior1k_fast.tools.train.goals import correction_goals

    rows = compared_rows(["k1_skip"], [], ["none", "first_epoch"])
    runs = {"k1_skip": [run(s, [9.0] + [1.0 + 0.05 * s] * 4, 0.5, samples_per_iteration=100 + 10 * s)
                        for s in range(5)],
            "k1_skip+overlap/none": [run(s, [9.0] + [0.3 + 0.02 * s] * 4, 0.5, samples_per_iteration=200 + 10 * s)
                                     for s in range(5)],
            "k1_skip+overlap/first_epoch": [run(s, [9.0] + [0.3 + 0.02 * s] * 4, 0.5,
                                                samples_per_iteration=105 + 10 * s) for s in range(5)]}
    goals = {g.name: g for g in correction_goals(runs, regime_power(runs, rows), rows)}
    assert goals["lag1_samples_within_serial:k1_skip+overlap/none"].verdict == "missed"  # 2x the samples
    assert goals["lag1_samples_within_serial:k1_skip+overlap/first_epoch"].verdict == "met"
    assert goals["wall_vs_serial:k1_skip+overlap/first_epoch"].verdict == "met"  # shorter waits, same iterations


def test_a_row_whose_runs_reached_the_target_in_one_iteration_has_no_seconds_per_sample_not_zero():
    from behavior1k_fast.tools.train.result import run_cost

    cost = run_cost([run(0, [3.0], 0.5), run(1, [2.5], 0.5)], update_as="k1_skip")
    assert cost.wait_s_per_sample is None and cost.s_per_sample is None and cost.of_bound is None
    assert CostRow.from_dict(json.loads(json.dumps(cost.to_dict()))).s_per_sample is None
    measured = run_cost([run(0, [3.0, 1.0, 1.0], 0.5)], update_as="k1_skip")
    assert measured.s_per_sample == pytest.approx((1.0 + 0.5) / 100)
