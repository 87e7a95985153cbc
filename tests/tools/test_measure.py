"""The measurement kit bench and tune share: the core rule, run options and output, repeats, machine load, the
peers' spaces."""

import argparse
import json

import numpy as np
import pytest
from gymnasium import spaces

from behavior1k_fast.tools import cli
from behavior1k_fast.tools.measure import config as measure_config
from behavior1k_fast.tools.measure.config import (
    DEFAULT_OUT_DIR, RunConfig, add_run_arguments, policy_threads, process_budget, record_dir, run_options,
)
from behavior1k_fast.tools.measure.machine import LoadSample, busy_warning, sample_load
from behavior1k_fast.tools.measure.record import RowMeasure, median_run


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, quick_help="q", quick_rounds=4, reference="r", repeats=3, quick_repeats=1)
    return parser.parse_args(list(argv))


def test_a_cpu_policy_keeps_one_core_and_a_gpu_policy_none():
    assert [process_budget(c, "cpu") for c in (1, 2, 16)] == [1, 1, 15]
    assert [process_budget(c, d) for c, d in ((2, "cuda"), (16, "cuda:1"))] == [2, 16]
    assert [policy_threads(4, p) for p in (1, 3, 4, 8)] == [3, 1, 1, 1]


def test_the_budget_is_max_processes_or_the_core_rule(monkeypatch):
    monkeypatch.setattr(measure_config, "usable_cores", lambda: 8)
    assert RunConfig(device="cpu").process_budget == 7
    assert RunConfig(device="cuda").process_budget == 8
    assert RunConfig(device="cpu", max_processes=12).process_budget == 12
    with pytest.raises(ValueError, match="max_processes"):
        RunConfig(max_processes=0)
    with pytest.raises(ValueError, match="repeats"):
        RunConfig(repeats=0)


def test_run_options_resolve_quick_defaults_and_the_output_directory():
    options = run_options(_parse("--quick", "--device", "cpu"))
    assert (options["rounds"], options["repeats"], options["backend_options"]) == (4, 1, {"resolution": 64})
    options = run_options(_parse("--device", "cpu"))
    assert (options["rounds"], options["repeats"], options["out_dir"]) == (6, 3, DEFAULT_OUT_DIR)
    assert run_options(_parse("--device", "cpu", "--out-dir", "x", "--repeats", "5"))["repeats"] == 5
    assert run_options(_parse("--device", "cpu", "--record"))["out_dir"] == record_dir()
    with pytest.raises(ValueError, match="--record writes benchmarks/results/; it cannot go with --out-dir 'x'"):
        run_options(_parse("--device", "cpu", "--record", "--out-dir", "x"))


def test_record_writes_the_checkouts_committed_results():
    from pathlib import Path

    import behavior1k_fast

    assert Path(record_dir()) == Path(behavior1k_fast.__file__).resolve().parents[1] / "benchmarks" / "results"


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_record_with_out_dir_is_a_one_line_usage_error(command, capsys):
    assert cli.main([command, "--device", "cpu", "--record", "--out-dir", "elsewhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot go with --out-dir 'elsewhere'" in err


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_both_commands_take_the_shared_options(command):
    parser = cli.build_parser()
    args = parser.parse_args([command, "--max-processes", "3", "--repeats", "2", "--record", "--model-ms", "5"])
    assert (args.max_processes, args.repeats, args.record, args.model_ms) == (3, 2, True, 5.0)


def _run(ms):
    return RowMeasure(name="r", label="r", processes=1, envs_per_process=1, pipeline_stages=1, stages_sharing_physics=1,
                      chunk_size=10, rounds=10, own_actions=100, wall_s=ms * 100 / 1e3, model_s=0.1, t_model_ms=1.0,
                      t_env_ms=2.0, t_env_source="test", cpu_seconds=1.0, peak_rss_mib_per_env_process=1.0,
                      driver_peak_rss_mib=1.0)


def test_a_repeated_row_is_its_median_run_with_the_spread():
    row = median_run([_run(5.0), _run(3.0), _run(9.0)])
    assert row.ms_per_step == pytest.approx(5.0)
    assert (row.ms_per_step_min, row.ms_per_step_max) == pytest.approx((3.0, 9.0))
    assert row.repeat_ms_per_step == pytest.approx((5.0, 3.0, 9.0))  # in run order
    assert median_run([_run(4.0), _run(2.0)]).ms_per_step == pytest.approx(2.0)  # even count: lower middle run
    assert median_run([_run(4.0)]).to_dict()["repeat_ms_per_step"] == [pytest.approx(4.0)]
    with pytest.raises(ValueError, match="at least one run"):
        median_run([])


def test_the_machine_is_busy_when_other_processes_use_a_quarter_of_the_cores():
    quiet = LoadSample(cores=4, load_average=(0.5, 0.5, 0.5), other_cpu_cores=0.9, window_s=0.5)
    busy = LoadSample(cores=4, load_average=(4.8, 3.0, 2.0), other_cpu_cores=2.5, window_s=0.5,
                      top_other=({"pid": 7, "name": "make", "cpu_cores": 2.0},))
    assert not quiet.busy and busy.busy
    assert busy_warning([quiet]) is None
    line = busy_warning([quiet, busy])
    assert "\n" not in line and "load average 4.8" in line and "2.5 of 4 cores" in line and "make (2.0)" in line
    assert busy.to_dict()["busy"] is True


def test_a_load_sample_sees_a_busy_child_as_this_commands_own_work():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sample = sample_load(window_s=0.3)
    finally:
        child.kill()
        child.wait()
    assert sample.cores >= 1 and sample.window_s == 0.3
    assert child.pid not in {p["pid"] for p in sample.top_other}  # the child is this command's process tree
    assert all(p["cpu_cores"] > 0 for p in sample.top_other)


def test_a_peer_sub_env_batches_one_envs_spaces_over_its_envs():
    from behavior1k_fast.core.profile import RolloutProfile
    from behavior1k_fast.tools.peers.gymnasium import ChunkGymEnv, batched_space

    obs = spaces.Dict({"cam::rgb": spaces.Box(0, 255, (4, 4, 3), np.uint8),
                       "proprio": spaces.Box(-1.0, 1.0, (5,), np.float32)})
    act = spaces.Box(-2.0, 2.0, (3,), np.float32)
    batched = batched_space(obs, 2)
    assert batched["cam::rgb"].shape == (2, 4, 4, 3) and batched["cam::rgb"].dtype == np.uint8
    assert batched["proprio"].shape == (2, 5) and float(batched["proprio"].high.max()) == 1.0
    env = ChunkGymEnv(factory=None, envs=2, seed=0, profile=RolloutProfile(), chunk_size=8, single_spaces=(obs, act))
    assert env.backend is None  # in the process that owns the vector env nothing is built
    assert env.action_space.shape == (2, 8, 3)
    env.close()


@pytest.mark.parametrize("processes, buffers", [(3, 2), (2, 3), (4, 0)])
def test_a_peer_refuses_buffers_that_do_not_split_its_processes(processes, buffers):
    from behavior1k_fast.core.profile import RolloutProfile
    from behavior1k_fast.tools.peers.gymnasium import run_peer

    def factory(*args):
        raise AssertionError("no sub-env is built for a refused layout")

    with pytest.raises(ValueError, match=f"buffers={buffers} must be 1 or 2 and divide processes={processes}"):
        run_peer(factory, RolloutProfile(), lambda obs: None, (None, None), processes, 1, buffers, rounds=1)


def _span(stage, start_ms, dur_ms, pid, command=None):
    return (stage, int(start_ms * 1e6), int(dur_ms * 1e6), pid, 0, {"command": command} if command else None)


def _lookahead_spans(rounds, *, send=1.0, deliver=0.5, steps=2.0, render=3.0, collect=1.5, forward=40.0,
                     workers=(11, 12)):
    """Spans of ``rounds`` lookahead rounds laid out by hand: the driver is pid 1; worker w starts each
    chunk ``w - 11`` ms after the first one (the critical path follows the last)."""
    spans, t = [_span("model_forward", 0.0, forward, 1)], forward
    for _ in range(rounds):
        spans.append(_span("ipc", t, send, 1, "chunk"))
        for lag, pid in enumerate(workers):
            start = t + send + deliver + lag
            spans.append(_span("wait", start - 5.0, 5.0, pid, "stall"))
            spans.append(_span("physics", start, steps, pid))
            spans.append(_span("render", start + steps, render, pid))
            spans.append(_span("ipc", start + steps + render, 0.0, pid, "write_obs"))
        lead = t + send + deliver + len(workers) - 1 + steps + render
        spans.append(_span("model_forward", lead + collect, forward, 1))
        t = lead + collect + forward
    return spans


def test_a_lookahead_round_breaks_down_into_parts_that_add_up_to_it():
    from behavior1k_fast.tools.measure.critical_path import PARTS, lookahead_rounds, summarize

    rounds = lookahead_rounds(_lookahead_spans(4))
    assert len(rounds) == 4
    first = rounds[0]
    assert first["send"] == pytest.approx(1.0)
    assert first["deliver"] == pytest.approx(1.5)  # to the later of the two workers
    assert first["to_lead"] == pytest.approx(5.0)  # steps + render of that worker
    assert first["collect"] == pytest.approx(1.5)
    assert first["forward"] == pytest.approx(40.0)
    assert first["render"] == pytest.approx(3.0) and first["stall"] == pytest.approx(5.0)
    assert first["round"] == pytest.approx(sum(first[p] for p in PARTS))
    summary = summarize(rounds)
    assert summary["rounds"] == 4 and summary["forward"]["median_ms"] == pytest.approx(40.0)
    assert sum(summary["share_of_round"].values()) == pytest.approx(1.0)
    assert summarize([]) == {"rounds": 0}


def test_a_worker_starting_before_the_send_returns_counts_as_no_delivery_time():
    from behavior1k_fast.tools.measure.critical_path import lookahead_rounds

    rounds = lookahead_rounds(_lookahead_spans(2, deliver=-0.5, workers=(11,)))
    assert [r["deliver"] for r in rounds] == [0.0, 0.0]
    assert all(r["round"] == pytest.approx(r["send"] + r["to_lead"] + r["collect"] + r["forward"]) for r in rounds)


def test_spans_without_a_worker_lead_between_two_forwards_give_no_round():
    from behavior1k_fast.tools.measure.critical_path import lookahead_rounds

    spans = [s for s in _lookahead_spans(3) if not (s[0] == "ipc" and s[5]["command"] == "write_obs")]
    assert lookahead_rounds(spans) == []
    assert lookahead_rounds(_lookahead_spans(0)) == []


def test_a_result_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    import errno
    import os

    from behavior1k_fast.tools.measure.files import ResultWriteError, write_json, write_text

    path = tmp_path / "deep" / "result.json"
    assert write_json({"a": 1}, path) == path and json.loads(path.read_text()) == {"a": 1}  # folders made

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(ResultWriteError) as err:
        write_text(path, "x" * 10_000)
    assert str(err.value) == f"cannot write {path}: No space left on device"
    assert err.value.errno == errno.ENOSPC and isinstance(err.value, OSError)
    assert json.loads(path.read_text()) == {"a": 1}  # the old file, whole
    assert os.listdir(path.parent) == ["result.json"]  # the temporary file went


def test_a_result_file_in_a_folder_that_cannot_exist_is_a_result_write_error(tmp_path):
    from behavior1k_fast.tools.measure.files import ResultWriteError, write_text

    (tmp_path / "file").write_text("")
    with pytest.raises(ResultWriteError, match="cannot write .*file/out.yaml"):
        write_text(tmp_path / "file" / "out.yaml", "a: 1\n")


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_quick_run_does_not_replace_the_committed_full_run_without_force(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure_config, "record_dir", lambda: str(tmp_path))
    assert cli.main([command, "--quick", "--device", "cpu", "--record"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--record --quick would replace the committed full-run results" in err
    assert "--force-record" in err and list(tmp_path.iterdir()) == []
    options = run_options(_parse("--quick", "--device", "cpu", "--record", "--force-record"))
    assert options["out_dir"] == str(tmp_path)
    with pytest.raises(ValueError, match="--force-record only goes with --record --quick"):
        run_options(_parse("--device", "cpu", "--force-record"))
