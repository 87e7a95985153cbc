"""``behavior1k-fast bench --shards``: G engines (one per policy GPU) as Ray actors, measured side by side.

End to end on the CPU (``--device cpu``: the engines share it) with a local Ray instance of the run's own:
G = 1 and 2 engines of 1 process x 2 envs at quick resolution; the JSON's structure, the merged stats
against the engines' own, and the efficiency against G x the one-engine figure. Bad input is a one-line
error (exit 2) before any work."""

import argparse
import dataclasses
import json
import os

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutStats
from behavior1k_fast.tools.bench import register
from behavior1k_fast.tools.bench.shards import (
    ShardsConfig, engine_process_budget, engine_row, median_entry, processes_within, shard_entry,
)
from behavior1k_fast.tools.cli import main
from behavior1k_fast.tools.measure.record import RowMeasure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = ["--processes", "1", "--envs-per-process", "2", "--pipeline-stages", "2"]


@pytest.fixture(scope="module")
def shards_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick", "--device", "cpu", "--shards", "1,2", *LAYOUT,
                              "--out-dir", str(out), "--tag", "ci"])
    assert args.func(args) == 0
    return out, json.loads((out / "shards_ci_quick.json").read_text())


@pytest.mark.slow
def test_shards_run_every_engine_count_with_the_one_layout(shards_result):
    out, result = shards_result
    assert result["complete"] and (out / "shards_ci_quick.png").stat().st_size > 0
    assert result["layout"] | {"label": None} == {"processes": 1, "envs_per_process": 2, "pipeline_stages": 2,
                                                  "partition": "hybrid", "schedule": "barrier", "overlap": True,
                                                  "label": None}
    calibration = result["calibration"]
    assert calibration["stage_batch"] == 1 and calibration["model_width"] > 0  # calibrated once, on G = 1
    entries = result["shards"]
    assert [e["shards"] for e in entries] == [1, 2] and result["skipped"] == []
    for e in entries:
        g = e["shards"]
        assert (e["processes_per_engine"], e["envs_per_engine"], e["total_envs"]) == (1, 2, 2 * g)
        assert not e["cores_bound"] and e["note"] is None
        assert len(e["engines"]) == len(e["engine_stats"]) == len(e["gpu_mib_per_gpu"]) == g
        for engine in e["engines"]:  # every engine ran the same layout with the calibrated policy's rounds
            assert (engine["processes"], engine["envs_per_process"], engine["pipeline_stages"]) == (1, 2, 2)
            assert engine["own_actions"] == engine["rounds"] * engine["chunk_size"] * 2
            assert engine["profile"]["gpu_ids"] is None  # on the CPU nothing is bound
        pids = [p for engine in e["engines"] for p in engine["worker_pids"]]
        assert len(set(pids)) == g  # each engine drove env workers of its own
        assert all(gpu["device_used_mib"] is None for gpu in e["gpu_mib_per_gpu"])
        assert e["repeat_env_steps_per_s"] == [e["env_steps_per_s"]]  # --quick: one run of each G
        assert e["cpu_cores_busy_per_env"] > 0 and e["host_cores_per_env"] == pytest.approx(e["cores"] / (2 * g))


@pytest.mark.slow
def test_merged_stats_are_the_engines_stats_joined(shards_result):
    _, result = shards_result
    for e in result["shards"]:
        merged, parts = e["merged_stats"], e["engine_stats"]
        assert merged["num_envs"] == sum(p["num_envs"] for p in parts) == e["total_envs"]
        for name in ("own_actions", "episodes", "total_reward", "lost_actions", "chunks_per_worker"):
            assert merged[name] == [v for p in parts for v in p[name]], name
        assert merged["wall_seconds"] == max(p["wall_seconds"] for p in parts) == e["wall_s"]
        assert sum(merged["own_actions"]) == sum(m["own_actions"] for m in e["engines"])
        assert e["env_steps_per_s"] == pytest.approx(sum(merged["own_actions"]) / merged["wall_seconds"])


@pytest.mark.slow
def test_efficiency_is_against_g_times_the_one_engine_figure(shards_result):
    _, result = shards_result
    one, two = result["shards"]
    assert one["efficiency"] == pytest.approx(1.0) and one["linear_env_steps_per_s"] == one["env_steps_per_s"]
    assert two["linear_env_steps_per_s"] == pytest.approx(2 * one["env_steps_per_s"])
    assert two["efficiency"] == pytest.approx(two["env_steps_per_s"] / (2 * one["env_steps_per_s"]))
    (goal,) = result["goals"]
    assert goal["name"] == "shard_efficiency" and goal["measured"] == two["efficiency"]
    assert goal["met"] == (goal["measured"] >= 0.9)


@pytest.mark.slow
def test_engines_on_a_two_node_cluster_run_one_per_node(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        other = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        args = parser.parse_args(["bench", "--quick", "--device", "cpu", "--shards", "1,2", *LAYOUT,
                                  "--out-dir", str(tmp_path), "--tag", "nodes"])
        assert args.func(args) == 0
        assert ray.is_initialized()  # the run used the cluster it found and left it connected
        nodes = {cluster.head_node.node_id, other.node_id}
    finally:
        ray.shutdown()
        cluster.shutdown()
    one, two = json.loads((tmp_path / "shards_nodes_quick.json").read_text())["shards"]
    assert set(one["engine_nodes"]) <= nodes
    assert sorted(two["engine_nodes"]) == sorted(nodes)  # a logical CPU per node: one engine actor on each
    assert two["merged_stats"]["own_actions"] == [v for p in two["engine_stats"] for v in p["own_actions"]]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--shards", "2"], ["--shards", "starting with 1", "got 2"]),
        (["--shards", "1,4,2"], ["ascending", "got 1,4,2"]),
        (["--shards", "1,2", "--device", "cuda:1"], ["--device cuda:1", "pass --device cuda"]),
        (["--shards", "1,2", "--executor", "ray"], ["--executor ray"]),
        (["--shards", "1,2", "--scaling", "1,2"], ["--scaling", "does not go with --shards"]),
    ],
)
def test_bad_shards_input_is_a_one_line_error_before_any_work(extra, words, tmp_path, capsys):
    code = main(["bench", "--quick", "--device", "cpu", *LAYOUT, "--out-dir", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    for word in words:
        assert word in err
    assert not (tmp_path / "out").exists()


def test_more_engines_than_gpus_is_a_one_line_error_before_any_work(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    code = main(["bench", "--quick", "--device", "cuda", "--shards", "1,2,4", *LAYOUT,
                 "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "--shards 4 needs 4 GPUs (one engine per GPU), this machine shows 2" in err
    assert not (tmp_path / "out").exists()


def test_a_tuned_profile_gives_every_engine_its_layout(tmp_path):
    tuned = RolloutProfile(num_env_processes=3, total_num_envs=12, pipeline_stages=2, partition="hybrid",
                           schedule="async", chunk_size=32)
    path = tmp_path / "tuned.yaml"
    tuned.to_yaml(path)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick", "--device", "cpu", "--shards", "1,2", "--tuned", str(path)])
    config = ShardsConfig.from_args(args)
    assert (config.processes, config.envs_per_process, config.pipeline_stages) == (3, 4, 2)
    profile = engine_row(config).profile
    assert (profile.num_env_processes, profile.total_num_envs, profile.pipeline_stages, profile.schedule) == (
        3, 12, 2, "async")
    assert profile.skip_intermediate_obs  # every optimisation on, in the tuned layout
    bad = parser.parse_args(["bench", "--quick", "--device", "cpu", "--shards", "1,2", "--tuned", str(path),
                             "--chunk-size", "16"])
    with pytest.raises(ValueError, match="num_action_chunks=32, the run has --chunk-size 16"):
        ShardsConfig.from_args(bad)


def test_engines_bind_their_workers_to_their_own_gpu_only_on_cuda():
    common = dict(shards=(1, 2), processes=2, envs_per_process=2, pipeline_stages=2)
    assert engine_row(ShardsConfig(device="cuda", **common)).profile.gpu_ids == (0,)
    assert engine_row(ShardsConfig(device="cpu", **common)).profile.gpu_ids is None


@pytest.mark.parametrize(
    "cores, shards, device, budget",
    [(16, 1, "cuda", 16), (16, 8, "cuda", 2), (16, 8, "cpu", 1), (16, 2, "cpu", 7), (2, 4, "cuda", 1)],
)
def test_each_engine_gets_the_cores_per_gpu_under_the_core_rule(cores, shards, device, budget):
    assert engine_process_budget(cores, shards, device) == budget


@pytest.mark.parametrize(
    "partition, budget, processes",
    [("hybrid", 16, 8), ("hybrid", 3, 3), ("process", 7, 6), ("process", 5, 4), ("process", 1, None)],
)
def test_a_g_whose_cores_bind_runs_the_largest_layout_they_hold(partition, budget, processes):
    config = ShardsConfig(shards=(1,), processes=8, envs_per_process=2, pipeline_stages=2)
    row = engine_row(config)
    row = dataclasses.replace(row, profile=row.profile.replace(partition=partition))
    assert processes_within(row, budget) == processes


def fake_part(engine, envs, wall, actions):
    """What one engine's actor gives back: stats of ``envs`` envs (one per worker) and their measure."""
    own = np.full(envs, actions)
    stats = RolloutStats(
        rounds=1, pipeline_stages=1, chunk_size=actions, num_envs=envs, wall_seconds=wall, model_seconds=0.1,
        wait_seconds=0.1, own_actions=own, episodes=np.zeros(envs, int), total_reward=np.zeros(envs),
        sim_seconds_per_own_action=np.zeros(envs), hold_steps_per_round=np.zeros(envs),
        env_wall_seconds_per_worker=np.ones(envs), chunks_per_worker=np.ones(envs, int),
        lost_actions=np.zeros(envs, int), slice_wait_seconds=np.zeros(envs))
    measure = RowMeasure(
        name="shard", label="shard", processes=envs, envs_per_process=1, pipeline_stages=1, stages_sharing_physics=1,
        chunk_size=actions, rounds=1, own_actions=int(own.sum()), wall_s=wall, model_s=0.1, t_model_ms=100.0,
        t_env_ms=None, t_env_source="none", cpu_seconds=wall * envs, peak_rss_mib_per_env_process=1.0,
        driver_peak_rss_mib=1.0, gpu_mib_per_env=10.0, policy_gpu_mib=100.0)
    return {"engine": engine, "node": f"node{engine}", "gpu": str(engine), "stats": stats, "measure": measure, "gpu_used_mib": 500.0 + engine}


def test_a_g_whose_cores_bind_says_so_and_is_compared_per_env_too():
    one = shard_entry(1, 4, 4, 8, [fake_part(0, 4, 1.0, 10)], None)
    assert one["efficiency"] == one["efficiency_per_env"] == 1.0 and one["note"] is None
    # 8 cores over 4 engines hold P=2 each, not P=4: half the envs per engine, at the same rate per env
    four = shard_entry(4, 2, 4, 8, [fake_part(i, 2, 1.0, 10) for i in range(4)], one)
    assert four["cores_bound"] and four["note"] == (
        "cores bind before GPUs: 8 cores / 4 engines = 2 per engine hold P=2 env processes, not P=4")
    assert four["env_steps_per_s"] == 80.0 and four["linear_env_steps_per_s"] == 160.0
    assert (four["efficiency"], four["efficiency_per_env"]) == (0.5, 1.0)
    assert four["max_gpu_used_mib"] == 503.0
    assert [g["env_workers_mib"] for g in four["gpu_mib_per_gpu"]] == [20.0] * 4
    assert four["cpu_cores_busy_per_env"] == pytest.approx(1.0)


def test_a_repeated_g_is_its_median_run_with_every_runs_rate():
    runs = [{"env_steps_per_s": rate, "run": i} for i, rate in enumerate((30.0, 10.0, 20.0, 40.0))]
    assert median_entry(runs) == {"env_steps_per_s": 30.0, "run": 0,
                                  "repeat_env_steps_per_s": [30.0, 10.0, 20.0, 40.0]}
    assert median_entry(runs[:3])["run"] == 2
