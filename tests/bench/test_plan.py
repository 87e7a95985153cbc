"""What a bench run measures: the cumulative profile rows, the layout checks and the backend it drives,
including ``--backend omnigibson`` with a stand-in for the engine runs (Isaac Sim is absent)."""

import argparse
import json

import pytest

from behavior1k_fast.core.profile import auto_lead_cap

from behavior1k_fast import backends
from behavior1k_fast.tools.bench import ablation, register
from behavior1k_fast.tools.measure.calibration import Calibration
from behavior1k_fast.tools.measure import config as measure_config
from behavior1k_fast.tools.measure.config import QUICK_RESOLUTION
from behavior1k_fast.tools.measure.record import RowMeasure
from behavior1k_fast.core.profile import RolloutProfile


def _parse(*argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def _changed(a, b):
    da, db = a.to_dict(), b.to_dict()
    return {k for k in da if da[k] != db[k]}


def test_rows_apply_the_optimisations_cumulatively():
    rows = ablation.ablation_rows(processes=4, envs_per_process=2, pipeline_stages=2, chunk_size=16)
    by = {r.name: r for r in rows}
    assert [r.name for r in rows] == ["stock", "slim", "skip_obs", "hybrid_serial", "hybrid_overlap", "hybrid_async",
                                      "process_serial", "process_overlap", "process_async", "lookahead",
                                      "lookahead_process"]
    assert by["stock"].profile == RolloutProfile.stock(num_env_processes=4, total_num_envs=8, chunk_size=16)
    assert _changed(by["stock"].profile, by["slim"].profile) <= set(ablation.SLIM_FIELDS)
    assert by["slim"].profile.obs_modalities == ("rgb", "proprio")
    assert by["slim"].profile.remove_headless_viewports
    assert _changed(by["slim"].profile, by["skip_obs"].profile) == {"skip_intermediate_obs"}
    for partition in ("hybrid", "process"):
        serial, overlap = by[f"{partition}_serial"], by[f"{partition}_overlap"]
        assert _changed(by["skip_obs"].profile, serial.profile) == {"pipeline_stages"} | (
            {"partition"} if partition == "process" else set())
        assert serial.profile.pipeline_stages == 2 and serial.profile.partition == partition
        assert overlap.profile == serial.profile
        assert overlap.overlap and not serial.overlap
        asynchronous = by[f"{partition}_async"]
        assert _changed(overlap.profile, asynchronous.profile) == {"schedule"} and asynchronous.overlap
        assert overlap.profile.schedule == "barrier" and asynchronous.profile.schedule == "async"
    lookahead = by["lookahead"]  # the pipeline in time: one stage at the same P x E, the lead measured
    assert _changed(by["skip_obs"].profile, lookahead.profile) == {"schedule", "lookahead_steps"}
    assert lookahead.profile.schedule == "lookahead" and lookahead.profile.lookahead_steps == "auto"
    assert lookahead.overlap and lookahead.prev == "skip_obs"
    staged = by["lookahead_process"]  # K stages of whole processes, each a pipeline in time
    assert _changed(lookahead.profile, staged.profile) == {"pipeline_stages", "partition"}
    assert (staged.profile.pipeline_stages, staged.profile.partition) == (2, "process") and staged.overlap
    assert [r.prev for r in rows[:3]] == [None, "stock", "slim"]
    assert ablation.ALL_ROW in by


def test_a_tuned_profile_adds_a_row_in_its_layout_with_every_optimisation_on(tmp_path):
    tuned = RolloutProfile.from_dict({"pipeline_stage_num": 2, "num_env_subprocess": 2, "total_num_envs": 8,
                                      "partition": "process", "schedule": "async", "num_action_chunks": 16})
    rows = ablation.ablation_rows(processes=4, envs_per_process=2, pipeline_stages=2, chunk_size=16, tuned=tuned)
    by = {r.name: r for r in rows}
    row = by["tuned"]
    assert rows[-1] is row and row.overlap and row.prev == "skip_obs"
    layout = ("pipeline_stages", "num_env_processes", "total_num_envs", "partition", "schedule")
    assert [getattr(row.profile, f) for f in layout] == [2, 2, 8, "process", "async"]
    assert _changed(by["skip_obs"].profile, row.profile) <= set(ablation.TUNED_FIELDS)
    assert row.label == "tuned: P=2 x E=4, K=2 process, async"
    with pytest.raises(ValueError, match="--tuned layout has total_num_envs=8.*the bench runs 4 envs"):
        ablation.BenchConfig(processes=2, envs_per_process=2, chunk_size=16, tuned=tuned)
    lookahead = RolloutProfile(schedule="lookahead", lookahead_steps="auto", num_env_processes=4, total_num_envs=8,
                               chunk_size=16)
    row = ablation.ablation_rows(4, 2, 2, 16, tuned=lookahead)[-1]
    assert (row.profile.schedule, row.profile.lookahead_steps, row.profile.pipeline_stages) == ("lookahead", "auto", 1)
    path = tmp_path / "tune.yaml"
    path.write_text("pipeline_stage_num: 2\nnum_env_subprocess: 2\ntotal_num_envs: 4\npartition: process\n")
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu", "--processes", "2", "--tuned", str(path)))
    assert config.tuned.partition == "process" and config.tuned.total_num_envs == 4


def test_quick_defaults_and_layout_checks(monkeypatch):
    monkeypatch.setattr(measure_config, "usable_cores", lambda: 4)
    config = ablation.BenchConfig.from_args(_parse("--quick", "--device", "cpu"))
    assert config.backend_options == {"resolution": QUICK_RESOLUTION}
    assert (config.processes, config.envs_per_process, config.pipeline_stages, config.chunk_size) == (2, 2, 2, 32)
    assert (config.rounds, config.repeats) == (1, 1)
    assert ablation.BenchConfig.from_args(_parse("--device", "cpu")).repeats == 3
    with pytest.raises(ValueError, match="envs_per_process=3.*num_env_processes=3"):  # neither partition holds it
        ablation.BenchConfig(processes=3, envs_per_process=3, pipeline_stages=2)
    with pytest.raises(ValueError, match="processes=4 is above the process budget max_processes=2"):
        ablation.BenchConfig(processes=4, max_processes=2)
    with pytest.raises(ValueError, match="rounds"):
        ablation.BenchConfig(rounds=0)
    with pytest.raises(ValueError, match="scaling"):
        ablation.BenchConfig(scaling=(0,))
    with pytest.raises(ValueError, match="device"):
        ablation.BenchConfig(device="tpu")


def test_a_bench_that_does_not_fit_this_machine_fails_in_the_config():
    with pytest.raises(ValueError, match=r"num_env_processes must be an int in \[1, \d+\] on this machine"):
        ablation.BenchConfig(processes=100000, envs_per_process=1, pipeline_stages=1, peers=False)
    with pytest.raises(ValueError, match=r"num_env_processes must be an int in \[1, \d+\] on this machine"):
        ablation.BenchConfig(scaling=(1, 100000), peers=False)
    with pytest.raises(ValueError, match=r"num_env_processes must be an int in \[1, \d+\] on this machine.*got 100000"):
        ablation.BenchConfig(max_processes=100000)  # the budget rows and peers would start that many
    ablation.BenchConfig(processes=100000, envs_per_process=1, pipeline_stages=1, peers=False, executor="ray")  # a cluster
    with pytest.raises(ValueError, match="model_width=64, model_depth=100000000, .* needs about 18,311 GiB"):
        ablation.BenchConfig(model_width=64, model_depth=10**8)
    with pytest.raises(ValueError, match=r"model_ms must be a finite number of ms in \(0, 60000\]"):
        ablation.BenchConfig(model_ms=1e300)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 4294967295\]"):
        ablation.BenchConfig(seed=2**70)


def test_the_core_rule_sets_the_layout_and_rows_the_layout_cannot_hold_are_left_out(monkeypatch):
    monkeypatch.setattr(measure_config, "usable_cores", lambda: 2)
    # a CPU policy keeps one core: one env process on 2 cores, so no process partition of K = 2
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu"))
    assert (config.processes, config.envs_per_process, config.process_budget) == (1, 2, 1)
    plan = ablation.plan_runs(config)
    assert {r.name for r in plan.rows} == {"stock", "slim", "skip_obs", "hybrid_serial", "hybrid_overlap",
                                           "hybrid_async", "lookahead"}
    assert set(plan.left_out) == {"process_serial", "process_overlap", "process_async", "lookahead_process",
                                  "peer_double_buffer"}
    assert "process partition needs pipeline_stages=2" in plan.left_out["process_overlap"]
    assert [p.name for p in plan.peers] == ["peer_chunk", "peer_lookahead", "peer_stock"] and plan.budget_rows == []
    assert not plan.peers[-1].fair and "outside the process budget" in plan.peers[-1].label


def test_the_widest_layout_of_the_budget_gets_engine_rows_and_peers_of_its_own(monkeypatch):
    monkeypatch.setattr(measure_config, "usable_cores", lambda: 16)
    # a GPU policy keeps no core: 16 processes; the ablation runs at 8 x 2, the budget adds 16 x 1
    plan = ablation.plan_runs(ablation.BenchConfig.from_args(_parse("--device", "cuda")))
    assert plan.budget == 16
    assert {(r.profile.num_env_processes, r.profile.envs_per_process) for r in plan.rows} == {(8, 2)}
    budget = {r.name: r for r in plan.budget_rows}
    # E = 1 holds no hybrid K = 2: the widest layout's pipeline rows are the process partition's and lookahead
    assert set(budget) == {"skip_obs@P16xE1", "process_overlap@P16xE1", "process_async@P16xE1", "lookahead@P16xE1",
                           "lookahead_process@P16xE1"}
    assert budget["process_overlap@P16xE1"].prev == "skip_obs@P16xE1"
    assert all(r.profile.num_env_processes == 16 and r.profile.total_num_envs == 16 for r in budget.values())
    peers = {p.name: p for p in plan.peers}
    assert set(peers) == {"peer_chunk", "peer_double_buffer", "peer_lookahead", "peer_chunk@P16xE1",
                          "peer_double_buffer@P16xE1", "peer_lookahead@P16xE1", "peer_stock"}
    # the user-level lookahead takes the longest lead the engine's auto lead may pick
    lookahead = peers["peer_lookahead@P16xE1"]
    assert (lookahead.processes, lookahead.lead_steps, lookahead.fair) == (16, auto_lead_cap(32), True)
    double = peers["peer_double_buffer@P16xE1"]
    assert (double.processes, double.envs_per_process, double.buffers, double.fair) == (16, 1, 2, True)
    slim = plan.rows[2].profile  # the skip-obs row: the peers' profile (slim + on-demand observation)
    assert double.profile.replace(num_env_processes=8) == slim.replace(num_env_processes=8)
    assert peers["peer_stock"].profile.obs_modalities is None  # stock: every modality


@pytest.mark.parametrize("argv, message", [
    (["--model-width", "100"], "model_width must be a multiple of 64 (the attention head size), got 100"),
    (["--model-width", "0"], "argument --model-width: must be an int >= 1, got 0"),
    (["--model-width", "128", "--model-depth", "0"], "argument --model-depth: must be an int >= 1, got 0"),
    (["--model-depth", "4"], "model_depth=4 needs model_width too"),
    (["--model-width", "128", "--model-depth", "4", "--model-ms", "20"], "nothing is calibrated"),
    (["--model-ms", "-5"], "argument --model-ms: must be a finite number > 0, got -5.0"),
    (["--behavior-like", "--backend", "omnigibson"], "--behavior-like applies to the reference simulator"),
])
def test_bad_model_options_are_one_line_usage_errors(capsys, monkeypatch, argv, message):
    from behavior1k_fast.tools import cli

    monkeypatch.setattr(backends, "check_installed", lambda backend: None)  # any backend counts as installed
    try:
        code = cli.main(["bench", "--device", "cpu", *argv])
    except SystemExit as exc:  # argparse's own type checks exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1  # one line, before any run
    assert message in err


def test_model_size_options_reach_the_config():
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu", "--model-width", "256", "--model-depth", "6"))
    assert (config.model_width, config.model_depth, config.model_ms) == (256, 6, None)
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu", "--model-width", "512", "--model-ms", "30"))
    assert (config.model_width, config.model_depth, config.model_ms) == (512, None, 30.0)


def test_behavior_like_turns_on_the_reference_costs_and_keeps_explicit_values(tmp_path):
    from behavior1k_fast.backends.reference import ReferenceConfig

    preset = ReferenceConfig.behavior_like()
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu", "--behavior-like"))
    assert config.backend_options == {"reset_settle_steps": preset.reset_settle_steps,
                                      "contact_iterations": preset.contact_iterations}
    yaml_path = tmp_path / "ref.yaml"
    yaml_path.write_text("contact_iterations: 3\n")
    config = ablation.BenchConfig.from_args(_parse("--device", "cpu", "--behavior-like", "--backend-config",
                                                   str(yaml_path)))
    assert config.backend_options["contact_iterations"] == 3
    assert ablation.BenchConfig.from_args(_parse("--device", "cpu")).backend_options == {}


def test_omnigibson_needs_an_env_config(tmp_path):
    config = ablation.BenchConfig.from_args(_parse("--backend", "omnigibson", "--device", "cpu"))
    with pytest.raises(ValueError, match="--backend-config"):
        ablation.plan_runs(config)
    yaml_path = tmp_path / "env.yaml"
    yaml_path.write_text("env: {action_frequency: 30}\n")
    args = _parse("--backend", "omnigibson", "--backend-config", str(yaml_path), "--resolution", "64")
    with pytest.raises(ValueError, match="resolution"):
        ablation.plan_runs(ablation.BenchConfig.from_args(args))


def test_omnigibson_backend_runs_the_same_ablation(tmp_path, monkeypatch):
    """Stand-ins for calibration and the engine runs record which factory and profiles they are given."""
    from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackendFactory

    yaml_path = tmp_path / "env.yaml"
    yaml_path.write_text("env: {action_frequency: 30}\nrobots: [{type: R1}]\n")
    args = _parse("--backend", "omnigibson", "--backend-config", str(yaml_path), "--device", "cpu",
                  "--processes", "2", "--envs-per-process", "2", "--rounds", "2", "--repeats", "1", "--no-peers",
                  "--scaling", "1,2", "--out-dir", str(tmp_path / "results"), "--tag", "og")
    calls = []

    def fake_calibrate(factory, profile, config, max_processes):
        calls.append(("calibrate", factory, profile))
        return _stand_in_calibrate(factory, profile, config, max_processes)

    def fake_run(factory, row, policy, config, trace_path=None):
        calls.append((row.name, factory, row.profile))
        return _stand_in_run(factory, row, policy, config, ms=10.0 / (1 + len(calls)))  # each faster than the last

    monkeypatch.setattr(ablation, "calibrate", fake_calibrate)
    monkeypatch.setattr(ablation, "run_engine_row", fake_run)
    monkeypatch.setattr(backends, "check_installed", lambda backend: None)  # Isaac Sim is a stand-in too
    assert args.func(args) == 0

    factories = {id(c[1]) for c in calls}
    assert len(factories) == 1
    factory = calls[0][1]
    assert isinstance(factory, OmniGibsonBackendFactory)
    assert factory.config == {"env": {"action_frequency": 30}, "robots": [{"type": "R1"}]}
    names = [c[0] for c in calls]
    assert names == ["calibrate", "stock", "slim", "skip_obs", "hybrid_serial", "hybrid_overlap", "hybrid_async",
                     "process_serial", "process_overlap", "process_async", "lookahead", "lookahead_process",
                     "hybrid_overlap", "hybrid_overlap"]
    assert calls[0][2].pipeline_stages == 2 and calls[0][2].partition == "hybrid"  # the all-optimisations row
    profiles = [c[2] for c in calls[1:]]
    assert profiles[0] == RolloutProfile.stock(num_env_processes=2, total_num_envs=4)
    assert [p.num_env_processes for p in profiles[-2:]] == [1, 2]
    result = json.loads((tmp_path / "results" / "bench_og.json").read_text())
    assert result["complete"] and result["config"]["backend"] == "omnigibson"
    assert [s["processes"] for s in result["scaling"]] == [1, 2]
    assert (tmp_path / "results" / "bench_og.png").exists()


def _stand_in_calibrate(factory, profile, config, max_processes):
    curve = [{"batch": b, "ms": 1.0 * b, "ms_per_sample": 1.0} for b in (1, 2, 3, 4)]
    return (lambda obs: None), Calibration(
        env_ms_per_stage_chunk=1.0, target_model_ms=1.0, model_width=64, model_depth=1, model_parameters=100_000,
        model_tokens_per_sample=10, model_dtype="float32", forward_ms_at_stage_batch=1.0, stage_batch=2,
        policy_device="cpu", policy_threads=1, t_model_by_batch=curve)


def _stand_in_run(factory, row, policy, config, trace_path=None, ms=10.0):
    """What a run of ``row`` would measure, at ``ms`` per step."""
    p = row.profile
    return RowMeasure(
        name=row.name, label=row.label, processes=p.num_env_processes, envs_per_process=p.envs_per_process,
        pipeline_stages=p.pipeline_stages, stages_sharing_physics=1, chunk_size=config.chunk_size, rounds=config.rounds,
        own_actions=64, wall_s=ms * config.rounds * config.chunk_size / 1e3, model_s=0.002, t_model_ms=1.0,
        t_env_ms=2.0, t_env_source="stand-in", cpu_seconds=1.0, peak_rss_mib_per_env_process=100.0,
        driver_peak_rss_mib=100.0, overlap=row.overlap, prev=row.prev)


def test_a_full_results_disk_after_the_first_row_prints_that_row_and_exits_74(tmp_path, monkeypatch, capsys):
    """The JSON rewritten after the first row meets a full disk: the row measured is printed, then one error
    line naming the file and the cause; no traceback, no truncated or temporary file."""
    import errno
    import os

    from behavior1k_fast.tools.cli import main
    from behavior1k_fast.tools.measure.files import EXIT_WRITE_FAILED

    runs = []

    def run_then_fill_the_disk(*args, **kwargs):
        runs.append(args[1].name)
        monkeypatch.setattr(os, "fsync", full_disk)
        return _stand_in_run(*args, **kwargs)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ablation, "calibrate", _stand_in_calibrate)
    monkeypatch.setattr(ablation, "run_engine_row", run_then_fill_the_disk)
    out = tmp_path / "results"
    code = main(["bench", "--quick", "--device", "cpu", "--no-peers", "--out-dir", str(out), "--tag", "full"])
    printed = capsys.readouterr()
    assert code == EXIT_WRITE_FAILED and runs == ["stock"]
    lines = printed.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("row "))
    measured = lines[header + 2:]  # the one row measured, then (on a small machine) the rows left out
    assert measured[0].startswith("stock ") and all(line.startswith("left out") for line in measured[1:])
    assert "Traceback" not in printed.err
    error = printed.err.strip().splitlines()[-1]
    assert error == (f"behavior1k-fast bench: error: cannot write {out / 'bench_full.json'}: No space left on device "
                     f"(the results above were measured but not saved)")
    assert list(out.iterdir()) == []


def test_the_process_budget_bounds_the_scaling_sweep(capsys):
    """``--max-processes 1 --scaling 3`` would run 3 processes: refused, as ``--processes 2`` is."""
    from behavior1k_fast.tools.cli import main

    with pytest.raises(ValueError, match=r"scaling process count 3 is above the process budget max_processes=1"):
        ablation.BenchConfig(processes=1, envs_per_process=2, pipeline_stages=1, max_processes=1, scaling=(1, 3))
    assert main(["bench", "--quick", "--device", "cpu", "--max-processes", "1", "--scaling", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scaling process count 3 is above the process budget" in err
    assert ablation.BenchConfig(processes=1, envs_per_process=2, pipeline_stages=1, max_processes=1,
                                scaling=(1,)).scaling == (1,)


def test_the_stock_profile_rows_run_once_and_every_other_row_repeats(tmp_path, monkeypatch):
    """The stock row and the stock peer dominate a run's time and are 10-30x off the rest: one run each."""
    import types

    from behavior1k_fast.tools.peers import gymnasium as peers

    calls = []

    def calibrate(*args, **kwargs):
        _, calibration = _stand_in_calibrate(*args, **kwargs)
        return types.SimpleNamespace(observation_space=None, action_space=None), calibration

    def run_row(factory, row, policy, config, trace_path=None):
        calls.append(row.name)
        return _stand_in_run(factory, row, policy, config)

    def run_peer(factory, peer, policy, spaces, config):
        calls.append(peer.name)
        return _stand_in_run(factory, ablation.Row(peer.name, peer.label, peer.profile), policy, config)

    monkeypatch.setattr(ablation, "calibrate", calibrate)
    monkeypatch.setattr(ablation, "run_engine_row", run_row)
    monkeypatch.setattr(peers, "run_peer_row", run_peer)
    args = _parse("--device", "cpu", "--processes", "2", "--envs-per-process", "2", "--max-processes", "2",
                  "--repeats", "3", "--rounds", "1", "--out-dir", str(tmp_path), "--tag", "once")
    assert args.func(args) == 0
    counts = {name: calls.count(name) for name in calls}
    assert counts.pop("stock") == 1 and counts.pop("peer_stock") == 1
    assert counts and set(counts.values()) == {3}, counts
    result = json.loads((tmp_path / "bench_once.json").read_text())
    stock = next(r for r in result["rows"] if r["name"] == "stock")
    assert len(stock["repeat_ms_per_step"]) == 1
    assert all(len(r["repeat_ms_per_step"]) == 3 for r in result["rows"] if r["name"] != "stock")
