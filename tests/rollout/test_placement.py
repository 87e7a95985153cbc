"""The placement setting: its form is checked before anything starts, and against a snapshot of the
cluster's nodes before any worker starts (one-line errors naming the entry and what the cluster has)."""

import psutil
import pytest

from behavior1k_fast.rollout import RolloutEngine
from behavior1k_fast.rollout.placement import (
    LABEL_SHARE,
    NodeView,
    check_capacity,
    check_placement,
    resolve_targets,
    worker_bundle,
)

from .pointmass import PointMassFactory

A, B, C = "a" * 56, "b" * 56, "c" * 56
NODES = [
    NodeView(A, "10.0.0.1", {"CPU": 4.0, "memory": 1e9}),
    NodeView(B, "10.0.0.2", {"CPU": 2.0, "GPU": 1.0, "zone_b": 1.0}),
]


@pytest.mark.parametrize(
    "placement, expected",
    [(None, "spread"), ("spread", "spread"), ("pack", "pack"), ([A, "zone_b", A], (A, "zone_b", A))],
)
def test_a_good_setting_is_returned_in_its_checked_form(placement, expected):
    assert check_placement(placement, 3, "ray") == expected


def test_no_setting_leaves_workers_to_ray_when_actor_options_carry_a_strategy_or_workers_are_local():
    assert check_placement(None, 3, "ray", {"scheduling_strategy": "SPREAD"}) is None
    assert check_placement(None, 3, "process") is None


@pytest.mark.parametrize(
    "placement, executor, options, error, words",
    [
        ("spred", "ray", None, ValueError, ["placement must be 'spread', 'pack'", "got 'spred'"]),
        (3, "ray", None, TypeError, ["placement must be", "got 3"]),
        ([A, B], "ray", None, ValueError, ["2 entries", "num_env_processes=3"]),
        ([A, "", B], "ray", None, TypeError, ["placement[1]", "got ''"]),
        ("spread", "process", None, ValueError, ["executor='ray' only", "executor='process'"]),
        ("pack", "ray", {"scheduling_strategy": "SPREAD"}, ValueError, ["scheduling_strategy", "pass one"]),
    ],
)
def test_a_bad_setting_is_a_one_line_error(placement, executor, options, error, words):
    with pytest.raises(error) as info:
        check_placement(placement, 3, executor, options)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_a_bad_setting_fails_in_the_engine_before_any_worker_starts():
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match="executor='ray' only"):
        RolloutEngine(PointMassFactory(), {"num_env_subprocess": 2}, placement="pack")
    with pytest.raises(ValueError, match="placement lists 1 entries"):
        RolloutEngine(PointMassFactory(), {"num_env_subprocess": 2}, executor="ray", placement=[A])
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before


def test_a_bundle_is_the_actors_cpus_gpu_share_and_custom_resources():
    assert worker_bundle({}) == {"CPU": 1.0}
    assert worker_bundle({"num_cpus": 2, "num_gpus": 0.5, "resources": {"sim": 1}}) == {"CPU": 2.0, "GPU": 0.5, "sim": 1.0}
    assert worker_bundle({"num_cpus": 0}) == {}


def test_node_ids_and_labels_resolve_to_the_nodes_that_match():
    targets = resolve_targets([B, "zone_b", A], NODES)
    assert [(t.kind, t.nodes) for t in targets] == [("node", (B,)), ("label", (B,)), ("node", (A,))]
    with pytest.raises(ValueError, match=rf"placement\[1\]='{C}' is not the id of a live Ray node \(live: \['{A}', '{B}'\]\)"):
        resolve_targets([A, C], NODES)
    with pytest.raises(ValueError, match=r"placement\[0\]='zone_x' is neither .* \(resources: \['zone_b'\]\)"):
        resolve_targets(["zone_x"], NODES)


def test_capacity_counts_whole_bundles_on_the_nodes_the_setting_allows():
    check_capacity("spread", {"CPU": 1.0}, 6, NODES)
    with pytest.raises(ValueError, match=rf"needs 7 workers of {{'CPU': 1.0}}; the live nodes hold 6 \({A}: 4, {B}: 2\)"):
        check_capacity("spread", {"CPU": 1.0}, 7, NODES)
    gpu = {"CPU": 1.0, "GPU": 0.5}
    check_capacity("pack", gpu, 2, NODES)
    with pytest.raises(ValueError, match="hold 2"):
        check_capacity("pack", gpu, 3, NODES)
    pins = [B, B, B]
    with pytest.raises(ValueError, match=rf"pins 3 workers of {{'CPU': 1.0}} on node {B}, which holds 2"):
        check_capacity(tuple(pins), {"CPU": 1.0}, 3, NODES, resolve_targets(pins, NODES))
    labels = ["zone_b"] * 3
    with pytest.raises(ValueError, match="puts 3 workers of .* on nodes with 'zone_b'; they hold 2"):
        check_capacity(tuple(labels), {"CPU": 1.0}, 3, NODES, resolve_targets(labels, NODES))
    assert NODES[1].holds({"CPU": 1.0, "zone_b": LABEL_SHARE}) == 2
