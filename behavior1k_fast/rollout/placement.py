"""Where the env workers run: the one home of placement, for every executor.

- **Process workers, GPU binding** (:func:`bind_gpus`): the profile's ``gpu_ids`` place worker w on one GPU
  (:mod:`behavior1k_fast.core.gpus`), set in its environment before it imports anything; its profile then
  names that GPU as CUDA 0 (the only one it sees). Ray places actors on GPUs itself
  (``ray_actor_options={"num_gpus": ...}``); the inline executor starts no process to bind.
- **Ray actors, nodes**: the ``placement`` setting, checked, then reserved on the cluster.

Placement is kept apart from what a worker does (:mod:`.worker`) and from how the driver talks to it
(:mod:`.transports`): this module only decides where each worker starts.

``placement`` (Ray) is one of

- ``"spread"`` (the default on Ray): one placement group with one bundle per worker, strategy ``SPREAD``:
  the workers go over the live nodes as evenly as their resources allow;
- ``"pack"``: the same group with strategy ``PACK``: as few nodes as possible;
- a sequence with one entry per worker. A Ray node id (56 hex digits, as ``ray.nodes()`` and
  ``ray list nodes`` print it) pins the worker to that node (node-affinity scheduling, not soft). Any other
  entry is a resource label: a custom resource the worker's node must have (``ray start
  --resources='{"sim_a": 8}'``, or Ray's own ``node:<ip>``); the worker asks for :data:`LABEL_SHARE` of it,
  so the label says where, and the worker's CPUs and GPUs say how many workers a node takes.

A worker's bundle is its actor's resources: ``num_cpus`` (1 unless ``ray_actor_options`` says otherwise),
``num_gpus`` (a GPU share where asked, e.g. 0.5) and custom ``resources``. The K slices of a hybrid worker
are one process, hence one actor and one bundle.

The setting is checked twice, each time with a one-line ``ValueError`` or ``TypeError``: its form when the
engine is built (:func:`check_placement`, nothing started yet), and against the live nodes before any
worker starts (:class:`RayPlacement`): unknown node ids or labels, and more workers than the nodes can
hold. Node ids are printed in full, as Ray takes them.

Ray is imported only by :class:`RayPlacement` and :func:`live_nodes` (the engine imports this module to
check the setting, and ``import behavior1k_fast`` stays light).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..core import gpus

SPREAD = "spread"
PACK = "pack"
#: Placement-group strategies by setting name.
STRATEGIES = {SPREAD: "SPREAD", PACK: "PACK"}
#: Amount of a resource label a worker asks for: enough to need the label, too little to count capacity.
LABEL_SHARE = 0.001
#: A Ray node id: 28 bytes in hex.
NODE_ID = re.compile(r"[0-9a-f]{56}")

Setting = str | tuple[str, ...] | None


def bind_gpus(gpu_ids: Sequence[int] | None, num_workers: int, executor: str) -> list[dict[str, str]] | None:
    """Per worker, the environment variables binding it to its GPU of ``gpu_ids`` (round robin, indices into
    the GPUs this process sees), checked against the GPUs present; ``None`` without ``gpu_ids``. ValueError
    for an executor that starts no worker process of its own (module docs)."""
    if gpu_ids is None:
        return None
    if executor != "process":
        raise ValueError(f"gpu_ids bind worker processes: executor={executor!r} does not start any "
                         "(Ray: ray_actor_options={'num_gpus': ...}; inline: bind this process yourself)")
    physical = gpus.worker_gpus(gpu_ids, num_workers, os.environ)
    gpus.check_gpus_present(physical, *gpus.nvidia_smi_gpus())
    return [gpus.binding_env(p) for p in physical]


def check_placement(
    placement: Any, num_workers: int, executor: str, actor_options: Mapping[str, Any] | None = None
) -> Setting:
    """The placement the executor uses: ``"spread"`` / ``"pack"``, a tuple of one entry per worker, or
    ``None`` (workers are not Ray actors, or ``actor_options`` carries its own ``scheduling_strategy``).

    ``placement=None`` means ``"spread"`` on Ray. Only the form is checked here (no cluster needed)."""
    options = actor_options or {}
    if placement is None:
        return SPREAD if executor == "ray" and "scheduling_strategy" not in options else None
    if executor != "ray":
        raise ValueError(f"placement applies to executor='ray' only, got placement={placement!r} with executor={executor!r}")
    if "scheduling_strategy" in options:
        raise ValueError(
            f"placement={placement!r} and ray_actor_options['scheduling_strategy'] both say where workers run; pass one"
        )
    what = f"'{SPREAD}', '{PACK}' or a sequence of node ids / resource labels, one per env worker"
    if isinstance(placement, str):
        if placement not in STRATEGIES:
            raise ValueError(f"placement must be {what}, got {placement!r}")
        return placement
    if not isinstance(placement, Sequence):
        raise TypeError(f"placement must be {what}, got {placement!r}")
    if len(placement) != num_workers:
        raise ValueError(
            f"placement lists {len(placement)} entries, needs one per env worker: num_env_processes={num_workers}"
        )
    for i, entry in enumerate(placement):
        if not isinstance(entry, str) or not entry:
            raise TypeError(f"placement[{i}] must be a node id or resource label (a non-empty str), got {entry!r}")
    return tuple(placement)


def worker_bundle(actor_options: Mapping[str, Any]) -> dict[str, float]:
    """The resources one worker's actor asks for, as a placement-group bundle (zero amounts left out)."""
    bundle = {"CPU": float(actor_options.get("num_cpus", 1)), "GPU": float(actor_options.get("num_gpus", 0))}
    bundle.update({k: float(v) for k, v in (actor_options.get("resources") or {}).items()})
    return {k: v for k, v in bundle.items() if v > 0}


@dataclass(frozen=True)
class NodeView:
    """One live Ray node as the checks see it: its id, address and total resources."""

    node_id: str
    address: str
    resources: Mapping[str, float]

    def holds(self, bundle: Mapping[str, float]) -> int:
        """How many ``bundle`` fit in this node's total resources."""
        return min((math.floor(self.resources.get(k, 0.0) / v + 1e-9) for k, v in bundle.items()), default=0)


@dataclass(frozen=True)
class Target:
    """Where one worker of a placement list must run: a node id, or any node with a resource label."""

    entry: str
    #: ``"node"`` or ``"label"``.
    kind: str
    #: Ids of the live nodes that satisfy it.
    nodes: tuple[str, ...]


def resolve_targets(entries: Sequence[str], nodes: Sequence[NodeView]) -> list[Target]:
    """One :class:`Target` per entry; ValueError for an entry no live node matches."""
    ids = {n.node_id for n in nodes}
    labels = sorted({r for n in nodes for r in n.resources if r not in ("CPU", "GPU", "memory", "object_store_memory")})
    targets = []
    for i, entry in enumerate(entries):
        if NODE_ID.fullmatch(entry):
            if entry not in ids:
                raise ValueError(f"placement[{i}]={entry!r} is not the id of a live Ray node (live: {sorted(ids)})")
            targets.append(Target(entry, "node", (entry,)))
            continue
        having = tuple(n.node_id for n in nodes if n.resources.get(entry, 0.0) > 0)
        if not having:
            raise ValueError(
                f"placement[{i}]={entry!r} is neither a live Ray node's id nor a resource of a live node "
                f"(resources: {labels})"
            )
        targets.append(Target(entry, "label", having))
    return targets


def check_capacity(
    setting: str | tuple[str, ...], bundle: Mapping[str, float], num_workers: int, nodes: Sequence[NodeView],
    targets: Sequence[Target] | None = None,
) -> None:
    """ValueError when the live nodes cannot hold ``num_workers`` workers of ``bundle`` where ``setting``
    puts them (``targets``: those of a list). Counted against the nodes' total resources: what other jobs
    use is not known here, and a busy cluster makes the workers wait rather than fail."""
    if targets is None:
        held = {n.node_id: n.holds(bundle) for n in nodes}
        if sum(held.values()) < num_workers:
            raise ValueError(
                f"placement={setting!r} needs {num_workers} workers of {bundle}; the live nodes hold "
                f"{sum(held.values())} ({', '.join(f'{k}: {v}' for k, v in held.items())})"
            )
        return
    by_id = {n.node_id: n for n in nodes}
    for node_id, count in Counter(t.entry for t in targets if t.kind == "node").items():
        if by_id[node_id].holds(bundle) < count:
            raise ValueError(
                f"placement pins {count} workers of {bundle} on node {node_id}, which holds {by_id[node_id].holds(bundle)}"
            )
    for label, count in Counter(t.entry for t in targets if t.kind == "label").items():
        room = sum(n.holds({**bundle, label: LABEL_SHARE}) for n in nodes)
        if room < count:
            raise ValueError(f"placement puts {count} workers of {bundle} on nodes with {label!r}; they hold {room}")


def live_nodes() -> list[NodeView]:
    """The live nodes of the connected Ray cluster."""
    import ray

    return [
        NodeView(n["NodeID"], n.get("NodeManagerAddress", "?"), dict(n.get("Resources", {})))
        for n in ray.nodes()
        if n.get("Alive")
    ]


class RayPlacement:
    """A checked placement on the connected Ray cluster.

    ``"spread"`` / ``"pack"``: a placement group of one bundle per worker, reserved when this is built
    (``TimeoutError`` after ``timeout_s`` seconds, the engine's start-up deadline, if the cluster is too
    busy; ``None``: wait) and released by :meth:`remove`; Ray moves the bundles of a dead node to live ones, so a respawned worker starts on a
    live node. A list: each worker's actor is pinned to its node, or asks for its label."""

    def __init__(
        self, setting: str | tuple[str, ...], num_workers: int, actor_options: Mapping[str, Any],
        timeout_s: float | None,
    ):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self.setting = setting
        self.actor_options = dict(actor_options)
        self.bundle = worker_bundle(self.actor_options)
        nodes = live_nodes()
        self.group = None
        if isinstance(setting, str):
            if not self.bundle:
                raise ValueError(f"placement={setting!r} reserves each worker's resources; ray_actor_options ask for none")
            self.targets = None
            check_capacity(setting, self.bundle, num_workers, nodes)
            self.group = placement_group([self.bundle] * num_workers, strategy=STRATEGIES[setting])
            ready, _ = ray.wait([self.group.ready()], timeout=timeout_s)
            if not ready:
                remove_placement_group(self.group)
                self.group = None
                raise TimeoutError(
                    f"placement={setting!r}: the cluster could not reserve {num_workers} workers of {self.bundle} "
                    f"within startup_timeout_s={timeout_s} (available: {ray.available_resources()})"
                )
        else:
            self.targets = resolve_targets(setting, nodes)
            check_capacity(setting, self.bundle, num_workers, nodes, self.targets)

    def options(self, worker: int) -> dict[str, Any]:
        """Ray actor options that start ``worker`` where the placement says (its resources included)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        if self.group is not None:
            strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=worker)
            return {**self.actor_options, "scheduling_strategy": strategy}
        target = self.targets[worker]
        if target.kind == "node":
            return {**self.actor_options, "scheduling_strategy": NodeAffinitySchedulingStrategy(target.entry, soft=False)}
        resources = {**(self.actor_options.get("resources") or {}), target.entry: LABEL_SHARE}
        return {**self.actor_options, "resources": resources}

    def unreachable(self, worker: int) -> str | None:
        """Why ``worker`` cannot start again now (its node is gone, or no live node has its label), else None."""
        if self.targets is None:
            return None
        target = self.targets[worker]
        live = live_nodes()
        if target.kind == "node" and target.entry not in {n.node_id for n in live}:
            return f"the placement pins it to node {target.entry}, which is gone"
        if target.kind == "label" and not any(n.resources.get(target.entry, 0.0) > 0 for n in live):
            return f"no live node has its placement label {target.entry!r}"
        return None

    def planned_nodes(self) -> list[tuple[str, ...]]:
        """Per worker, the ids of the nodes it may start on now (one for a group's bundle or a pinned node)."""
        if self.group is None:
            return [t.nodes for t in self.targets]
        from ray.util.placement_group import placement_group_table

        bundles = placement_group_table(self.group)["bundles_to_node_id"]
        return [(bundles[w],) for w in range(len(bundles))]

    def remove(self) -> None:
        """Release the placement group (if any). Idempotent."""
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
            self.group = None
