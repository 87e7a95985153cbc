"""``behavior1k-fast tune``: layout enumeration, the pipeline model, the profile YAML, CLI input, one quick run."""

import argparse
import itertools
import json

import pytest

from behavior1k_fast.core.profile import PARTITION_MODES, SCHEDULES, RolloutProfile
from behavior1k_fast.rollout.plan import PartitionPlan
from behavior1k_fast.tools import tune
from behavior1k_fast.tools.cli import main
from behavior1k_fast.tools.measure.layouts import Layout, default_layout, enumerate_layouts
from behavior1k_fast.tools.measure.pipeline import Costs, expected_max, predict, rank
from behavior1k_fast.tools.tune import summarize


def plan_accepts(p, e, k, partition):
    try:
        PartitionPlan(p, e, k, partition)
    except ValueError:
        return False
    return True


def runnable(layout):
    """The engine has a driver for the layout's schedule and the profile accepts the layout."""
    from behavior1k_fast.rollout.schedules import SCHEDULE_CLASSES

    try:
        layout.profile(RolloutProfile())
    except ValueError:
        return False
    return layout.schedule in SCHEDULE_CLASSES


@pytest.mark.parametrize("total, max_processes", [(4, 4), (4, 1), (6, 4), (8, 3), (12, 16)])
def test_enumeration_is_every_valid_plan_within_the_process_budget_once(total, max_processes):
    layouts = enumerate_layouts([total], max_processes)
    assert len(set(layouts)) == len(layouts)
    expected = set()
    for p, k, partition, schedule in itertools.product(range(1, total + 1), range(1, total + 1), PARTITION_MODES,
                                                       SCHEDULES):
        if total % p or p > max_processes or not plan_accepts(p, total // p, k, partition):
            continue
        # one stage: both partitions run the same way; one process: no barrier for async to drop
        if (k == 1 and partition == "process") or (p == 1 and schedule == "async"):
            continue
        if runnable(Layout(p, total // p, k, partition, schedule)):
            expected.add(Layout(p, total // p, k, partition, schedule))
    assert set(layouts) == expected
    assert all(lay.processes <= max_processes and lay.total_envs == total for lay in layouts)


def test_enumeration_leaves_out_stage_counts_the_partition_cannot_hold():
    layouts = enumerate_layouts([4], 4)
    assert not [lay for lay in layouts if lay.pipeline_stages == 3]
    # K = 4 in hybrid partition needs 4 envs per process; in process partition 4 processes
    assert {(lay.processes, lay.partition) for lay in layouts if lay.pipeline_stages == 4} == {(1, "hybrid"), (4, "process")}


def test_enumeration_honours_stage_list_and_stage_batch_cap():
    layouts = enumerate_layouts([8], 8, pipeline_stages=(1, 2), max_stage_batch=4)
    assert layouts and {lay.pipeline_stages for lay in layouts} == {2}
    assert enumerate_layouts([3], 1, pipeline_stages=(2,)) == []


def test_several_totals_compete_in_one_listing():
    totals = {lay.total_envs for lay in enumerate_layouts([2, 4], 2)}
    assert totals == {2, 4}


def test_default_layout_is_the_profiles_defaults_over_most_processes_that_divide():
    assert default_layout(6, 4) == Layout(3, 2, 1, "hybrid", "barrier")
    assert default_layout(4, 1) == Layout(1, 4, 1, "hybrid", "barrier")
    assert default_layout(7, 4) == Layout(1, 7, 1, "hybrid", "barrier")


def test_expected_max_of_empirical_draws():
    assert expected_max([1.0, 3.0], 1) == pytest.approx(2.0)
    assert expected_max([1.0, 3.0], 2) == pytest.approx(1.0 * 0.25 + 3.0 * 0.75)
    assert expected_max([3.0, 1.0, 2.0], 50) == pytest.approx(3.0, abs=1e-6)
    assert expected_max([5.0], 7) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="at least one sample"):
        expected_max([], 2)


COSTS = Costs(chunk_size=10, env_chunk_ms={(2, 2, 2): [10.0, 30.0], (2, 1, 2): [40.0, 40.0], (4, 1, 1): [70.0, 90.0],
                                           (1, 1, 4): [20.0, 20.0]},
              model_ms={1: 5.0, 2: 15.0, 4: 25.0}, cores=8)


def test_hybrid_barrier_waits_for_the_expected_slowest_process():
    pred = predict(Layout(2, 2, 2, "hybrid", "barrier"), COSTS)
    x = 10.0 * 0.25 + 30.0 * 0.75  # the larger of two draws from {10, 30}
    assert pred["t_env_stage_ms"] == pytest.approx(x)
    assert pred["terms_ms"] == pytest.approx({"workers": 2 * x, "driver": 2 * 15.0, "stage_cycle": x + 15.0,
                                              "cpu": 2 * 2 * 20.0 / 8})
    assert pred["round_ms"] == pytest.approx(2 * x) and pred["limit"] == "workers"
    assert pred["ms_per_step"] == pytest.approx(2 * x / 10)
    assert pred["env_steps_per_s"] == pytest.approx(4 * 1e3 / (2 * x / 10))


def test_async_replaces_the_barriers_max_by_the_mean():
    barrier = predict(Layout(2, 2, 2, "hybrid", "barrier"), COSTS)
    pred = predict(Layout(2, 2, 2, "hybrid", "async"), COSTS)
    assert pred["t_env_stage_ms"] == pytest.approx(20.0)
    assert pred["round_ms"] == pytest.approx(max(2 * 20.0, 2 * 15.0, 20.0 + 15.0))
    assert pred["round_ms"] < barrier["round_ms"]


def test_unpipelined_round_is_env_plus_model():
    pred = predict(Layout(1, 4, 1), COSTS)
    assert pred["round_ms"] == pytest.approx(80.0 + 25.0) and pred["limit"] == "stage_cycle"


def test_process_partition_steps_one_chunk_per_round_and_runs_k_forwards():
    pred = predict(Layout(2, 2, 2, "process", "barrier"), COSTS)
    # one process per stage: its own chunk time, no max over processes; batch 2 per forward
    assert pred["terms_ms"]["workers"] == pytest.approx(40.0)
    assert pred["round_ms"] == pytest.approx(max(40.0, 2 * 15.0, 40.0 + 15.0))


def test_cpu_work_over_free_cores_bounds_an_oversubscribed_layout():
    costs = Costs(10, {(1, 1, 4): [20.0]}, {1: 5.0, 4: 10.0}, cores=1.0, policy_cpu_threads=1)
    pred = predict(Layout(4, 1, 1, "hybrid", "async"), costs)
    assert pred["terms_ms"]["cpu"] == pytest.approx(4 * 20.0 + 10.0)
    assert pred["limit"] == "cpu" and pred["round_ms"] == pytest.approx(90.0)


def test_rank_orders_by_predicted_throughput():
    layouts = enumerate_layouts([4], 4, pipeline_stages=(1, 2))
    costs = Costs(10, {(4, 1, 1): [80.0], (4, 2, 1): [41.0], (2, 1, 2): [40.0], (2, 2, 2): [21.0], (1, 1, 4): [20.0]},
                  {1: 5.0, 2: 10.0, 4: 20.0}, cores=16)
    ranked = rank(layouts, costs)
    rates = [pred["env_steps_per_s"] for _, pred in ranked]
    assert rates == sorted(rates, reverse=True) and len(ranked) == len(layouts)


def layout_run(layout, env_steps_per_s, predicted_error, corrected_error, rank, order, default=False):
    """A :class:`~behavior1k_fast.tools.tune.LayoutRun` measured at ``env_steps_per_s`` (4 envs, 10 rounds of
    N = 10) whose predictions err by the given fractions."""
    from behavior1k_fast.tools.measure.record import RowMeasure

    wall = 400 / env_steps_per_s
    measured = RowMeasure(name=layout.name, label=layout.name, processes=layout.processes,
                          envs_per_process=layout.envs_per_process, pipeline_stages=layout.pipeline_stages,
                          stages_sharing_physics=1, chunk_size=10, rounds=10, own_actions=400, wall_s=wall, model_s=0.1,
                          t_model_ms=1.0, t_env_ms=None, t_env_source="none", cpu_seconds=1.0,
                          peak_rss_mib_per_env_process=100.0, driver_peak_rss_mib=100.0)
    ms = measured.ms_per_step
    return tune.LayoutRun(layout, ms * (1 + predicted_error), 4e3 / (ms * (1 + predicted_error)),
                          ms * (1 + corrected_error), measured, is_default=default, predicted_rank=rank,
                          run_order=order)


def test_summary_names_the_measured_winner_and_compares_the_pick():
    runs = [layout_run(Layout(2, 2, 2), 90.0, 0.1, 0.1, 1, 1), layout_run(Layout(1, 4, 2), 100.0, -0.2, -0.05, 2, 2),
            layout_run(Layout(2, 2, 1), 60.0, 0.0, 0.0, 5, None, default=True)]
    a, b, _ = (r.name for r in runs)
    out = summarize(runs, exhaustive=True, top=1)
    # the pick is what tune without --exhaustive writes: the best measured of the first --top it selected
    assert out.winner.name == b and out.pick.name == a
    assert summarize(runs, exhaustive=True, top=2).pick.name == b
    assert out.mean_abs_corrected_error == pytest.approx(0.05)
    assert out.pick_over_default == [pytest.approx(1.5)]
    assert out.exhaustive["pick_vs_best"] == pytest.approx(0.9)
    assert out.exhaustive["pick_within_5_percent"] is False
    assert out.exhaustive["pick_over_default_at_least_1_2x"] is True
    assert out.mean_abs_prediction_error == pytest.approx(0.1)
    assert summarize(runs, exhaustive=False, top=1).exhaustive is None
    data = out.to_dict()
    assert data["winner"]["name"] == b and data["winner"]["measured_env_steps_per_s"] == pytest.approx(100.0)
    assert data["winner"]["prediction_error"] == pytest.approx(-0.2) and "exhaustive" in data
    assert "exhaustive" not in summarize(runs, exhaustive=False, top=1).to_dict()


def test_an_rlinf_file_holds_the_best_layout_rlinf_can_run_with_its_own_speed():
    """A lookahead winner RLinf cannot express is named as such; the file gets the best barrier hybrid run."""
    from behavior1k_fast.tools.rlinf_keys import rlinf_unsupported

    lookahead = layout_run(Layout(1, 2, 1, "hybrid", "lookahead"), 120.0, 0.0, 0.0, 1, 1)
    staged = layout_run(Layout(2, 1, 2, "process", "barrier"), 110.0, 0.0, 0.0, 2, 2)
    barrier = layout_run(Layout(1, 2, 2, "hybrid", "barrier"), 95.0, 0.0, 0.0, 3, 3)
    default = layout_run(Layout(2, 1, 1), 80.0, 0.0, 0.0, 4, None, default=True)
    result = tune.TuneResult(machine={}, config={}, load_before=None, cores_free=2.0, left_out={}, defaults={})
    result.runs = [lookahead, staged, barrier, default]
    result.summary = summarize(result.runs, exhaustive=False, top=3)
    base = RolloutProfile(chunk_size=10)
    choice = tune._rlinf_choice(result, base)
    assert choice.winner is lookahead and choice.run is barrier
    assert choice.reasons and "schedule 'lookahead'" in choice.reasons[0]
    assert rlinf_unsupported(staged.layout.profile(base)) and not rlinf_unsupported(barrier.layout.profile(base))
    header = choice.header("ci")
    assert header.splitlines()[0] == f"# behavior1k-fast tune: {barrier.name}, 95 env-steps/s measured on ci"
    assert f"not the measured winner {lookahead.name} (120 env-steps/s): RLinf cannot run it" in header
    assert "RLinf cannot run the winner" in choice.format() and "95 env-steps/s measured (79% of the winner)" in choice.format()
    assert choice.to_dict()["winner_runs_in_rlinf"] is False
    result.runs = [barrier, default]
    result.summary = summarize(result.runs, exhaustive=False, top=3)
    plain = tune._rlinf_choice(result, base)
    assert plain.run is barrier and plain.reasons == () and "not the measured winner" not in plain.header("ci")


def test_feedback_corrects_a_family_by_its_measured_ratio_and_others_by_all_runs():
    feedback = tune.Feedback()
    hybrid, process = Layout(2, 2, 2, "hybrid", "barrier"), Layout(2, 2, 2, "process", "barrier")
    assert feedback.factor(hybrid) == 1.0  # nothing measured yet
    feedback.add(hybrid, predicted_ms=10.0, measured_ms=12.0)
    feedback.add(Layout(4, 1, 2, "hybrid", "barrier"), predicted_ms=10.0, measured_ms=14.0)
    assert feedback.factor(hybrid) == pytest.approx(1.3)  # median of its family
    assert feedback.factor(process) == pytest.approx(1.3)  # no run of its family: all runs
    feedback.add(process, predicted_ms=10.0, measured_ms=9.0)
    assert feedback.factor(process) == pytest.approx(0.9)
    assert feedback.factor(Layout(2, 2, 1)) == pytest.approx(1.2)  # one stage: median of all three
    assert tune._family(Layout(2, 2, 1, "hybrid", "async")) == ("one stage", "async")


@pytest.mark.parametrize("layout", [Layout(2, 4, 2, "hybrid", "async"), Layout(4, 1, 2, "process", "barrier")])
def test_profile_yaml_round_trips_with_rlinf_key_names(layout, tmp_path):
    profile = layout.profile(RolloutProfile(chunk_size=16, obs_modalities=("rgb",)))
    path = tmp_path / "tuned.yaml"
    text = profile.to_yaml(path, header="tuned\nsecond line")
    assert path.read_text() == text
    assert RolloutProfile.from_yaml(path) == profile
    for key in ("pipeline_stage_num", "num_env_subprocess", "total_num_envs", "skip_intermediate_obs_in_chunk",
                "num_action_chunks", "partition", "schedule", "obs_modalities"):
        assert f"\n{key}:" in text, key
    assert text.startswith("# tuned\n# second line\n")
    assert "pipeline_stages:" not in text and "numba_cache_dir" not in text


# --- the command line ----------------------------------------------------------------------------


def run_cli(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


BAD_INPUT = [
    (["tune", "--envs", "0"], "argument --envs: expected comma-separated ints >= 1, got '0'"),
    (["tune", "--top", "0"], "argument --top: must be an int >= 1, got 0"),
    (["tune", "--max-processes", "x"], "argument --max-processes: expected an int, got 'x'"),
    (["tune", "--device", "tpu"], "argument --device: expected auto, cpu, cuda or cuda:<index>, got 'tpu'"),
    (["tune", "--envs", "3", "--max-processes", "1", "--pipeline-stages", "2"],
     "no feasible layout for --envs 3 with at most 1 env processes and stages (2,)"),
    (["tune", "--envs", "16", "--max-processes", "2", "--pipeline-stages", "2,8"],
     "stages=8 is impossible with physics_rescale='divide_physics'"),
    (["tune", "--model-depth", "4"], "model_depth=4 needs model_width too"),
    (["tune", "--model-width", "100"], "model_width must be a multiple of 64"),
    (["tune", "--backend-config", "{tmp}/typo.yaml"], "did you mean 'resolution'?"),
    (["tune", "--out-dir", "{tmp}/not_a_dir"], "is not a writable directory"),
]


@pytest.mark.parametrize("argv, text", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_code_2_before_any_work(argv, text, tmp_path, monkeypatch, capsys):
    (tmp_path / "typo.yaml").write_text("resolutoin: 32\n")
    (tmp_path / "not_a_dir").write_text("")

    def heavy(*args, **kwargs):
        raise AssertionError("heavy work started before the input was checked")

    monkeypatch.setattr(tune, "run_tune", heavy)
    code = run_cli([a.format(tmp=tmp_path) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("behavior1k-fast tune: error: ") and text.format(tmp=tmp_path) in err, err


@pytest.mark.slow
def test_quick_tune_through_the_cli_writes_a_loadable_winner_and_the_table(tmp_path, capsys):
    import os

    old_umask = os.umask(0o027)
    try:
        assert main(["tune", "--quick", "--device", "cpu", "--envs", "2", "--max-processes", "2", "--top", "2",
                     "--rounds", "2", "--out-dir", str(tmp_path), "--tag", "ci", "--format", "rlinf"]) == 0
    finally:
        os.umask(old_umask)
    written = ["tune_ci_quick.yaml", "tune_ci_quick.rlinf.yaml", "tune_ci_quick.json"]  # a quick run's own names
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(written)
    assert {(tmp_path / name).stat().st_mode & 0o777 for name in written} == {0o640}  # the umask's, as a plain write
    result = json.loads((tmp_path / "tune_ci_quick.json").read_text())
    assert result["complete"]
    keys = ("processes", "envs_per_process", "pipeline_stages", "partition", "schedule")
    predicted = [tuple(p[k] for k in keys) for p in result["predicted"]]
    assert sorted(predicted) == sorted(tuple(lay.to_dict()[k] for k in keys)
                                       for lay in enumerate_layouts([2], 2, (1, 2)))
    rates = [p["predicted"]["env_steps_per_s"] for p in result["predicted"]]
    assert rates == sorted(rates, reverse=True)
    runs = result["runs"]
    assert runs[0]["predicted_rank"] == 1 and runs[0]["run_order"] == 1  # the best predicted runs first
    # the first run's prediction has nothing to correct it; the second is corrected by the first's error
    assert runs[0]["corrected_ms_per_step"] == pytest.approx(runs[0]["predicted_ms_per_step"])
    first_ratio = runs[0]["measured_ms_per_step"] / runs[0]["predicted_ms_per_step"]
    assert runs[1]["run_order"] == 2
    assert runs[1]["corrected_ms_per_step"] == pytest.approx(runs[1]["predicted_ms_per_step"] * first_ratio)
    assert any(r["is_default"] for r in runs)
    for r in runs:
        assert r["measured_ms_per_step"] > 0 and r["predicted_ms_per_step"] > 0
        assert r["prediction_error"] == pytest.approx(r["predicted_ms_per_step"] / r["measured_ms_per_step"] - 1)
        assert r["corrected_error"] == pytest.approx(r["corrected_ms_per_step"] / r["measured_ms_per_step"] - 1)
        assert r["measured_ms_per_step_min"] <= r["measured_ms_per_step"] <= r["measured_ms_per_step_max"]
    assert result["load"]["before"]["cores"] >= 1 and result["load"]["after"] is not None
    winner = max(runs, key=lambda r: r["measured_env_steps_per_s"])
    assert result["winner"]["name"] == winner["name"]
    profile = RolloutProfile.from_yaml(tmp_path / "tune_ci_quick.yaml")
    assert (profile.num_env_processes, profile.envs_per_process, profile.pipeline_stages, profile.partition,
            profile.schedule) == (winner["processes"], winner["envs_per_process"], winner["pipeline_stages"],
                                  winner["partition"], winner["schedule"])
    import yaml

    from behavior1k_fast.tools.rlinf_keys import rlinf_overrides

    # the RLinf file holds the layout its JSON names (the winner where RLinf can run it), with its speed
    chosen = next(r for r in runs if r["name"] == result["rlinf"]["layout"])
    rlinf_text = (tmp_path / "tune_ci_quick.rlinf.yaml").read_text()
    assert yaml.safe_load(rlinf_text) == rlinf_overrides(Layout(chosen["processes"], chosen["envs_per_process"],
                                                                chosen["pipeline_stages"], chosen["partition"],
                                                                chosen["schedule"]).profile(RolloutProfile(chunk_size=profile.chunk_size)))
    assert chosen["schedule"] == "barrier" and f"{chosen['measured_env_steps_per_s']:.0f} env-steps/s" in rlinf_text
    assert result["rlinf"]["winner_runs_in_rlinf"] == (chosen["name"] == winner["name"])
    curve = result["calibration"]["t_model_by_batch"]
    assert [c["batch"] for c in curve] == [1, 2] and all(c["ms"] > 0 for c in curve)
    out = capsys.readouterr().out
    assert winner["name"] in out and "RLinf keys: rollout.pipeline_stage_num=" in out
    assert out.splitlines()[-1] == "wrote " + ", ".join(str(tmp_path / n) for n in written[:-1]) + " and " + str(
        tmp_path / written[-1])  # the "wrote" line names every file


@pytest.mark.slow
def test_a_full_results_disk_prints_the_measurement_then_one_line_and_exit_74(tmp_path, monkeypatch, capsys):
    """``tune --format rlinf`` on a disk that refuses every write: the table is printed, the error is one line
    naming the file, and no empty or temporary file is left."""
    import errno
    import os

    from behavior1k_fast.tools.measure.files import EXIT_WRITE_FAILED

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    code = main(["tune", "--quick", "--device", "cpu", "--envs", "2", "--max-processes", "1", "--top", "1",
                 "--rounds", "1", "--out-dir", str(tmp_path), "--tag", "full", "--format", "rlinf"])
    out, err = capsys.readouterr()
    assert code == EXIT_WRITE_FAILED
    assert "| layout | run |" in out and "winner (measured):" in out and "RLinf keys: " in out
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"behavior1k-fast tune: error: cannot write {tmp_path / 'tune_full_quick.yaml'}: No space left on device (the "
        f"results above were measured but not saved)")
    assert list(tmp_path.iterdir()) == []


def test_a_lead_hides_the_forward_up_to_all_but_one_step_of_the_chunk():
    from behavior1k_fast.tools.measure.pipeline import pipeline_round

    # K = 1, X = 40, T_m = 30: no lead, nothing overlaps; a lead of 25 ms leaves 5 ms of the forward exposed
    assert pipeline_round(40.0, 30.0, 1, 1).round_ms == pytest.approx(70.0)
    lead = pipeline_round(40.0, 30.0, 1, 1, lead_ms=25.0)
    assert lead.terms_ms["stage_cycle"] == pytest.approx(45.0) and lead.limit == "stage_cycle"
    assert pipeline_round(40.0, 30.0, 1, 1, lead_ms=35.0).round_ms == pytest.approx(40.0)  # env-bound


def test_the_space_lists_only_schedules_the_engine_can_run():
    from behavior1k_fast.rollout.schedules import SCHEDULE_CLASSES

    listed = {lay.schedule for lay in enumerate_layouts([4], 4)}
    assert listed == {s for s in SCHEDULES if s in SCHEDULE_CLASSES}


def test_stage_counts_the_backend_cannot_build_leave_the_space_when_not_asked_for(tmp_path):
    """The reference simulator's frequencies (30 Hz rendering, 120 Hz physics) allow hybrid K in {1, 2, 4}:
    without ``--pipeline-stages`` the other K leave the space with their reason; the rest is the whole space."""
    parser = argparse.ArgumentParser()
    tune.register(parser.add_subparsers())
    config = tune.check_args(parser.parse_args(["tune", "--envs", "16", "--max-processes", "2", "--device", "cpu",
                                                "--out-dir", str(tmp_path)]))
    assert {lay.stages_sharing_physics for lay in config.layouts} == {1, 2, 4}
    assert config.left_out and all("is impossible with physics_rescale" in why for why in config.left_out.values())
    every = enumerate_layouts([16], 2)
    assert sorted(config.left_out) == sorted(lay.name for lay in every if lay.stages_sharing_physics not in (1, 2, 4))
    assert len(config.layouts) + len(config.left_out) == len(every)


def test_the_env_probe_steps_its_processes_side_by_side_and_samples_every_worker():
    from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceFactory
    from behavior1k_fast.tools.measure.config import RunConfig
    from behavior1k_fast.tools.measure.policy import ChunkPolicy

    factory = ReferenceFactory(ReferenceConfig(resolution=(16, 16), num_objects=2))
    base = RolloutProfile(chunk_size=4)
    backend = factory(1, 0, base)
    policy = ChunkPolicy(backend.observation_space, backend.action_space, chunk_size=4, width=64, depth=1)
    backend.close()
    config = tune.TuneConfig(run=RunConfig(chunk_size=4, warmup=0, device="cpu"), total_envs=(4,), max_processes=2,
                             cores=2, probe_rounds=3)
    samples = tune.measure_env_chunks(factory, base, 2, 2, 2, policy, config)
    assert len(samples) == 3 * 2 * 2  # rounds x stages x workers
    assert all(s > 0 for s in samples)


def test_the_rlinf_file_given_as_a_profile_is_refused_with_the_flat_yaml_named(tmp_path):
    import yaml

    from behavior1k_fast.tools.rlinf_keys import rlinf_overrides

    nested = tmp_path / "tune_ci.rlinf.yaml"
    nested.write_text(yaml.safe_dump(rlinf_overrides(RolloutProfile(pipeline_stages=2, total_num_envs=4)), sort_keys=False))
    with pytest.raises(ValueError) as err:
        RolloutProfile.from_yaml(nested)
    message = str(err.value)
    assert "unknown profile key 'rollout'" in message and "RLinf's nested config keys" in message
    assert "BEHAVIOR1K_FAST, take the flat YAML (tune's tune_<tag>.yaml)" in message and "\n" not in message
