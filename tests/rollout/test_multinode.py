"""The Ray executor on a real multi-node cluster on one machine (``ray.cluster_utils.Cluster``): workers start
on the nodes the placement says, a rollout across nodes is bit-identical to local processes, and a node that
dies mid-rollout is reported (naming its workers) or its workers respawn on the remaining nodes.

Every node has its own raylet, object store and logical CPUs (more than the machine's cores; the workers here
are cheap point masses). Node death is detected by the head's health checks, made fast for the test."""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError

from .helpers import CHUNK, assert_same_trajectories, policy, record
from .pointmass import PointMassFactory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
#: Ray marks a node dead after health_check_failure_threshold missed checks, health_check_period_ms apart.
FAST_HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_failure_threshold": 3,
                      "health_check_initial_delay_ms": 0}
PROFILE = {"num_env_subprocess": 3, "total_num_envs": 6, "pipeline_stage_num": 2, "num_action_chunks": CHUNK}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """The cluster and its node ids: head (4 CPUs), b (4 CPUs, label zone_b), c (4 CPUs, 1 GPU, label
    zone_c); the test process is the driver, on the head."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS})
    try:
        b = cluster.add_node(num_cpus=4, resources={"zone_b": 1}, wait=False)
        c = cluster.add_node(num_cpus=4, num_gpus=1, resources={"zone_c": 1}, wait=False)
        cluster.wait_for_nodes()  # the two nodes start side by side
        ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([ROOT, EXAMPLES])}})
        yield SimpleNamespace(cluster=cluster, head=cluster.head_node.node_id, b=b.node_id, c=c.node_id)
    finally:
        ray.shutdown()
        cluster.shutdown()


def assert_no_placement_group_left():
    from ray.util.placement_group import placement_group_table

    assert {g["state"] for g in placement_group_table().values()} <= {"REMOVED"}


def worker_nodes_of(placement, workers=3, **actor_options):
    """Start an engine of ``workers`` hybrid workers (2 envs, 2 stages each) with ``placement``, step it once;
    the node each worker's actor reported."""
    profile = {**PROFILE, "num_env_subprocess": workers, "total_num_envs": 2 * workers}
    with RolloutEngine(PointMassFactory(), profile, executor="ray", timeout_s=60, placement=placement,
                       ray_actor_options=actor_options) as engine:
        nodes = engine.worker_nodes
        assert engine.step(0, np.zeros((workers, CHUNK, 2), np.float32)).applied.all()
    assert len(nodes) == workers  # one actor per worker: its two stage slices share it
    assert_no_placement_group_left()
    return nodes


def test_spread_puts_each_worker_on_a_node_of_its_own(cluster):
    assert sorted(worker_nodes_of("spread")) == sorted([cluster.head, cluster.b, cluster.c])


def test_pack_puts_the_workers_on_one_node(cluster):
    assert len(set(worker_nodes_of("pack"))) == 1


def test_gpu_shares_go_to_the_node_with_a_gpu(cluster):
    assert worker_nodes_of("pack", workers=2, num_gpus=0.5) == [cluster.c, cluster.c]


def test_node_ids_and_resource_labels_pin_each_worker(cluster):
    assert worker_nodes_of([cluster.c, "zone_b", cluster.head]) == [cluster.c, cluster.b, cluster.head]


def test_a_placement_the_cluster_cannot_satisfy_fails_before_any_worker_starts(cluster):
    dead = "f" * 56
    cases = [
        ([dead, "zone_b", "zone_c"], r"placement\[0\]='f{56}' is not the id of a live Ray node"),
        (["zone_b", "zone_x", "zone_c"], r"placement\[1\]='zone_x' is neither .*zone_b.*zone_c"),
    ]
    for placement, message in cases:
        with pytest.raises(ValueError, match=message):
            RolloutEngine(PointMassFactory(), PROFILE, executor="ray", placement=placement)
    with pytest.raises(ValueError, match=r"needs 3 workers of \{'CPU': 5.0\}; the live nodes hold 0"):
        RolloutEngine(PointMassFactory(), PROFILE, executor="ray", ray_actor_options={"num_cpus": 5})
    assert_no_placement_group_left()


def test_rollout_across_nodes_is_bit_identical_to_local_processes(cluster):
    profile = {**PROFILE, "pipeline_stage_num": 3, "partition": "process"}
    factory = PointMassFactory(episode_lengths=(5, 9))
    with RolloutEngine(factory, profile, timeout_s=60) as local:
        expected, _ = record(local, rounds=3)
    with RolloutEngine(factory, profile, executor="ray", timeout_s=60, placement="spread") as remote:
        assert len(set(remote.worker_nodes)) == 3
        got, stats = record(remote, rounds=3)
    assert stats.episodes.sum() > 0
    assert_same_trajectories(expected, got)


def kill_node_after_first_chunk(cluster, node, timeout_s=10.0):
    """An ``on_chunk`` callback that SIGKILLs ``node``'s raylet and everything on it after the first chunk,
    and returns once Ray's health checks marked the node dead (until then its actors may still answer)."""
    import ray

    def on_chunk(stage, result):
        if node not in cluster.worker_nodes:
            return
        cluster.remove_node(node, allow_graceful=False)
        deadline = time.monotonic() + timeout_s
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            assert time.monotonic() < deadline, f"Ray did not mark node {node.node_id} dead within {timeout_s} s"
    return on_chunk


def test_a_node_that_dies_mid_rollout_names_the_workers_on_it(cluster):
    head = cluster.head
    victim = cluster.cluster.add_node(num_cpus=2, resources={"doomed": 1}, wait=True)
    # timeout_s=10: a death Ray did not notice would surface as TimeoutError, not WorkerDiedError
    engine = RolloutEngine(PointMassFactory(), PROFILE, executor="ray", timeout_s=10,
                           placement=[head, "doomed", victim.node_id])
    assert engine.worker_nodes == [head, victim.node_id, victim.node_id]
    # the first of its workers the driver waits on is reported; the message names both
    with pytest.raises(WorkerDiedError, match=rf"worker [12] \(envs \[\d, \d\]\) died .*its Ray node {victim.node_id} "
                                              rf"died; workers \[1, 2\] \(envs \[2, 3, 4, 5\]\) were on it") as info:
        engine.rollout(policy, 4, on_chunk=kill_node_after_first_chunk(cluster.cluster, victim))
    assert info.value.env_ids == {1: [2, 3], 2: [4, 5]}[info.value.worker]
    with pytest.raises(RuntimeError, match="closed"):
        engine.reset()
    assert_no_placement_group_left()


def test_restart_workers_respawns_a_dead_nodes_workers_on_the_remaining_nodes(cluster):
    victim = cluster.cluster.add_node(num_cpus=1, wait=True)
    profile = {**PROFILE, "num_env_subprocess": 4, "total_num_envs": 8}
    with RolloutEngine(PointMassFactory(), profile, executor="ray", timeout_s=30, placement="spread",
                       restart_workers=True) as engine:
        on_victim = [w for w, n in enumerate(engine.worker_nodes) if n == victim.node_id]
        assert len(on_victim) == 1  # spread: one worker per node
        restarted = []
        kill = kill_node_after_first_chunk(cluster.cluster, victim)

        def on_chunk(stage, result):
            kill(stage, result)
            restarted.extend(int(e) for e, info in zip(result.env_ids, result.infos) if info.get("worker_restarted"))

        stats = engine.rollout(policy, 3, on_chunk=on_chunk)
        (w,) = on_victim
        assert engine.restarts == 1 and engine.worker_nodes[w] in {cluster.head, cluster.b, cluster.c}
        # the chunks pending on the dead worker (one or both stages) come back as placeholders, once each
        assert restarted and set(restarted) <= {2 * w, 2 * w + 1} and len(set(restarted)) == len(restarted)
        own = np.full(8, 3 * CHUNK)
        own[restarted] -= CHUNK  # a placeholder chunk applied nothing
        assert stats.own_actions.tolist() == own.tolist()
    assert_no_placement_group_left()


def test_a_pinned_worker_whose_node_died_cannot_respawn_elsewhere(cluster):
    victim = cluster.cluster.add_node(num_cpus=1, wait=True)
    engine = RolloutEngine(PointMassFactory(), PROFILE, executor="ray", timeout_s=10, restart_workers=True,
                           placement=[cluster.head, cluster.b, victim.node_id])
    with pytest.raises(WorkerDiedError, match=rf"worker 2 .*cannot respawn it: the placement pins it to node "
                                              rf"{victim.node_id}, which is gone"):
        engine.rollout(policy, 3, on_chunk=kill_node_after_first_chunk(cluster.cluster, victim))
    with pytest.raises(RuntimeError, match="closed"):
        engine.reset()


def test_doctor_prints_where_each_worker_would_start(cluster, capsys, monkeypatch, tmp_path):
    from behavior1k_fast.tools import doctor
    from behavior1k_fast.tools.cli import main

    # the OmniGibson probe is not what this test is about (tests/omnigibson cover it)
    monkeypatch.setattr(doctor, "_omnigibson_state", lambda: {
        "installed": False, "imported": False, "cpu_import_hook": False, "error": None})
    head, b, c = cluster.head, cluster.b, cluster.c
    profile = tmp_path / "profile.yaml"
    profile.write_text("num_env_subprocess: 3\ntotal_num_envs: 6\n")
    address = ["--profile", str(profile), "--ray", cluster.cluster.address]
    assert main(["doctor", "--json", *address, "--placement", f"{c},zone_b,{head}"]) == 0
    report = json.loads(capsys.readouterr().out)["ray"]
    assert report["error"] is None and report["bundle"] == {"CPU": 1.0}
    # the fixture's three nodes, plus any live node an earlier test added and did not remove
    assert {head, b, c} <= {n["node_id"] for n in report["nodes"]}
    assert [(w["worker"], w["nodes"], w["env_ids"]) for w in report["workers"]] == [
        (0, [c], [0, 1]), (1, [b], [2, 3]), (2, [head], [4, 5])]
    assert main(["doctor", *address, "--placement", "spread", "--worker-gpus", "0.25"]) == 0
    text = capsys.readouterr().out
    assert "each worker asks for {'CPU': 1.0, 'GPU': 0.25}" in text
    assert text.count(f": {c} (") == 3  # three GPU shares, one GPU node
    assert_no_placement_group_left()
    assert main(["doctor", *address, "--placement", "zone_x,zone_b,zone_c"]) == 1
    assert "NOT POSSIBLE: ValueError: placement[0]='zone_x' is neither" in capsys.readouterr().out


def test_two_engines_in_one_ray_job_merge_their_statistics(cluster):
    sys.path.insert(0, EXAMPLES)
    try:
        import two_engines_ray
    finally:
        sys.path.remove(EXAMPLES)
    job = {"num_env_subprocess": 4, "total_num_envs": 8, "pipeline_stage_num": 2, "num_action_chunks": CHUNK}
    merged, parts, nodes = two_engines_ray.run_engines(
        PointMassFactory(), job, 2, 2, lambda *spaces: policy, engine_options={"num_cpus": 0.5})
    assert [p.num_envs for p in parts] == [4, 4] and merged.num_envs == 8
    assert merged.own_actions.tolist() == [2 * CHUNK] * 8
    assert merged.chunks_per_worker.tolist() == [2 * 2] * 4  # hybrid: one slice per stage per round
    assert [len(n) for n in nodes] == [2, 2] and all(len(set(n)) == 2 for n in nodes)  # each engine spreads
