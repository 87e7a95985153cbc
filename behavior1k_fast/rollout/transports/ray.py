"""The Ray transport: env workers as Ray actors (one per process slot of the plan), so one config runs
across machines. Imported only when ``executor="ray"`` is asked for (``import ray`` is heavy).

Which node each actor starts on is :mod:`~..placement`'s business (a placement group, node pins or resource
labels); this module moves the requests and replies (the :class:`~..supervision.Supervisor` over it keeps
deadlines, restarts and placeholders, as for every transport). A worker whose node dies is reported as
:class:`~..errors.WorkerDiedError` naming that node and every worker that was on it (Ray notices a dead node
through its health checks: ``health_check_period_ms`` x ``health_check_failure_threshold`` of the head's
system config), or respawned where the placement allows with ``restart_workers``.

Before any actor is created, a demand the cluster cannot meet fails at once with the reason, instead of an
actor that waits for resources until the start-up deadline: a placement checks each node's capacity for its
bundle; without one (``ray_actor_options`` with a ``scheduling_strategy`` of its own) the actors' demand
(``num_cpus``, ``num_gpus``, ``memory``, ``resources``, times the number of workers) is checked against the
cluster's total resources. Deadlines per command apply (:mod:`~..supervision`); there is no
progress watch inside a chunk (an actor serves one call at a time).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Sequence

import ray
from ray.exceptions import ActorUnschedulableError, RayActorError

from ..errors import WorkerDiedError
from ..placement import RayPlacement, Setting, live_nodes
from ..protocol import Chunk, Command, Failure, Ok, Reply, Request
from ..serve import CLOSE_GRACE_S
from ..worker import EnvWorker, WorkerSpec
from .base import RESTART_HINT, Transport

#: Actor option -> the Ray resource it asks for.
_OPTION_RESOURCES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def check_actor_resources(options: dict, actors: int, cluster: dict) -> None:
    """ValueError naming what is missing when ``actors`` actors with ``options`` cannot all be placed on a
    cluster whose total resources are ``cluster`` (``ray.cluster_resources()``)."""
    demand: dict[str, float] = {}
    for option, resource in _OPTION_RESOURCES.items():
        if options.get(option):
            demand[resource] = float(options[option]) * actors
    for resource, amount in (options.get("resources") or {}).items():
        demand[resource] = float(amount) * actors
    missing = {r: (need, float(cluster.get(r, 0.0))) for r, need in demand.items() if need > cluster.get(r, 0.0)}
    if missing:
        what = ", ".join(f"{r} {need:g} (cluster total {have:g})" for r, (need, have) in missing.items())
        raise ValueError(
            f"executor='ray' cannot place {actors} actors with ray_actor_options={options!r}: they need {what}; "
            "lower the options or add nodes"
        )


class RayEnvHost:
    """Ray actor body: the same :class:`~..worker.EnvWorker` behind ``init()`` and ``call()``; the INIT
    payload also carries the id of the node the actor runs on. A chunk with a lead is two actor calls,
    ``call()`` (returns its LEAD reply once the lead observations are there) then ``finish()`` (its END): the
    actor serves one call after the other, so a chunk queued meanwhile starts right after the END."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.worker: EnvWorker | None = None
        self.rest: Iterator[Reply] = iter(())

    def init(self) -> Reply:
        try:
            self.worker = EnvWorker(self.spec)
        except Exception as exc:
            return Failure.from_exception(exc, Command.INIT, self.spec.env_ids)
        return Ok((self.worker.ready(), ray.get_runtime_context().get_node_id()))

    def call(self, request: Request) -> Reply:
        answer = self.worker.handle(request)
        if isinstance(answer, (Ok, Failure)):
            return answer
        self.rest = answer
        return next(answer)

    def finish(self) -> Reply | None:
        """The END reply of the lead chunk served last (``None`` when it failed before its lead: that failure
        was its only reply)."""
        return next(self.rest, None)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class RayTransport(Transport):
    """Workers as Ray actors; their boundary observations travel in the replies (Ray's object store).

    ``placement``: a setting checked by :func:`~..placement.check_placement` (``None``: Ray's scheduler, with
    ``actor_options``' own ``scheduling_strategy`` if any); it is reserved on the cluster when the first
    worker launches (``startup_timeout_s``: how long that may take)."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        startup_timeout_s: float | None,
        actor_options: dict | None = None,
        placement: Setting = None,
    ):
        super().__init__(specs)
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self.actor_cls = ray.remote(RayEnvHost)
        self.actor_options = {"num_cpus": 1, "max_restarts": 0, **(actor_options or {})}
        self.setting = placement
        self.startup_timeout_s = startup_timeout_s
        self.placement: RayPlacement | None = None
        if placement is None:  # a placement checks each node's capacity itself, which is stricter
            check_actor_resources(self.actor_options, len(self.specs), ray.cluster_resources())
        self.actors: list[Any] = [None] * len(self.specs)
        self.refs: list[deque] = [deque() for _ in self.specs]
        self.nodes: list[str | None] = [None] * len(self.specs)

    @property
    def worker_nodes(self) -> list[str | None]:
        return list(self.nodes)

    def launch(self, worker: int) -> None:
        if self.setting is not None and self.placement is None:
            self.placement = RayPlacement(self.setting, len(self.specs), self.actor_options, self.startup_timeout_s)
        if self.placement is None:
            options = self.actor_options
        else:
            why = self.placement.unreachable(worker)
            if why is not None:
                raise WorkerDiedError(worker, self.specs[worker].env_ids, "restart", f"cannot respawn it: {why}")
            options = self.placement.options(worker)
        actor = self.actor_cls.options(**options).remote(self.specs[worker])
        self.actors[worker] = actor
        self.refs[worker] = deque([actor.init.remote()])

    def setup(self, worker: int, payload: Any) -> tuple[tuple[Any, Any], None]:
        spaces, self.nodes[worker] = payload
        return spaces, None

    def send(self, worker: int, request: Request) -> None:
        actor = self.actors[worker]
        self.refs[worker].append(actor.call.remote(request))
        if isinstance(request, Chunk) and request.lead_steps is not None:
            self.refs[worker].append(actor.finish.remote())

    def poll(self, workers: Sequence[int], timeout_s: float | None) -> list[int]:
        """``ray.wait`` on every worker's oldest reply at once (a dead actor's reply is ready: its error). A
        reply counts once the actor produced it; fetching it is :meth:`receive`'s (the transfer cost)."""
        by_ref = {self.refs[w][0]: w for w in workers}
        refs = list(by_ref)
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout_s, fetch_local=False)
        if done:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)  # the others there too
        return sorted(by_ref[ref] for ref in done)

    def receive(self, worker: int, command: Command) -> Reply:
        ref = self.refs[worker].popleft()
        try:
            return ray.get(ref)
        except (RayActorError, ActorUnschedulableError) as exc:
            raise WorkerDiedError(
                worker, self.specs[worker].env_ids, str(command), self._death_detail(worker, exc), RESTART_HINT
            ) from None

    def who(self, worker: int) -> str:
        return "the Ray actor"

    def _death_detail(self, worker: int, exc: Exception) -> str:
        """Why ``worker``'s actor is gone: its node died (naming every worker that was on it), or Ray's word."""
        node = self.nodes[worker]
        if node is None or node in {n.node_id for n in live_nodes()}:
            return f"Ray actor died: {exc}"
        on_node = [w for w, n in enumerate(self.nodes) if n == node]
        env_ids = [int(e) for w in on_node for e in self.specs[w].env_ids]
        return f"its Ray node {node} died; workers {on_node} (envs {env_ids}) were on it"

    def discard(self, worker: int) -> None:
        if self.actors[worker] is not None:
            ray.kill(self.actors[worker])
        self.actors[worker] = None
        self.refs[worker] = deque()
        self.nodes[worker] = None

    def close(self) -> None:
        for w, actor in enumerate(self.actors):
            if actor is None:
                continue
            try:
                ray.get(actor.close.remote(), timeout=CLOSE_GRACE_S)
            except Exception:
                pass  # a dead or stuck actor is killed below either way
            self.discard(w)
        if self.placement is not None:
            self.placement.remove()
