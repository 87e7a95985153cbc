"""The Ray executor: env workers as Ray actors (one per process slot of the plan), so one config runs
across machines. Imported only when ``executor="ray"`` is asked for (``import ray`` is heavy).

Before any actor is created, the actors' resource demand (``num_cpus``, ``num_gpus``, ``memory``,
``resources`` of the actor options, times the number of workers) is checked against the cluster's total
resources: a demand the cluster cannot meet fails at once with the reason, instead of an actor that waits
for resources until the start-up deadline. Deadlines per command apply (:mod:`.supervision`); there is no
progress watch inside a chunk (an actor serves one call at a time).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from .errors import WorkerDiedError, WorkerHungError
from .executors import CLOSE_GRACE_S, RESTART_HINT, Executor
from .protocol import Command, Failure, Ok, Reply, Request, unwrap
from .supervision import Supervision
from .worker import EnvWorker, WorkerSpec

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
    """Ray actor body: the same :class:`~.worker.EnvWorker` behind ``init()`` and ``call()``."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.worker: EnvWorker | None = None

    def init(self) -> Reply:
        try:
            self.worker = EnvWorker(self.spec)
        except Exception as exc:
            return Failure.from_exception(exc, Command.INIT, self.spec.env_ids)
        return Ok(self.worker.ready())

    def call(self, request: Request) -> Reply:
        return self.worker.handle(request)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


class RayExecutor(Executor):
    """Workers as Ray actors; their boundary observations travel in the replies (Ray's object store)."""

    def __init__(
        self,
        specs: Sequence[WorkerSpec],
        supervision: Supervision,
        actor_options: dict | None = None,
    ):
        super().__init__(specs, supervision)
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self._actor_cls = ray.remote(RayEnvHost)
        self._actor_options = {"num_cpus": 1, "max_restarts": 0, **(actor_options or {})}
        check_actor_resources(self._actor_options, len(self.specs), ray.cluster_resources())
        self._actors: list[Any] = [None] * len(self.specs)
        self._refs: list[deque] = [deque() for _ in self.specs]

    def _launch(self, worker: int) -> None:
        actor = self._actor_cls.options(**self._actor_options).remote(self.specs[worker])
        self._actors[worker] = actor
        self._refs[worker] = deque([actor.init.remote()])

    def _await_init(self, worker: int) -> tuple[Any, Any]:
        return unwrap(self._receive(worker, Command.INIT), worker)

    def _send(self, worker: int, request: Request) -> None:
        self._refs[worker].append(self._actors[worker].call.remote(request))

    def _receive(self, worker: int, command: Command) -> Reply:
        ref = self._refs[worker][0]
        seconds, name = self.supervision.deadline(command)
        try:
            reply = ray.get(ref, timeout=seconds)
        except GetTimeoutError:
            raise WorkerHungError(
                worker, self.specs[worker].env_ids, str(command), f"the Ray actor gave no reply within {name}={seconds:g} s"
            ) from None
        except RayActorError as exc:
            raise WorkerDiedError(
                worker, self.specs[worker].env_ids, str(command), f"Ray actor died: {exc}", RESTART_HINT
            ) from None
        self._refs[worker].popleft()
        return reply

    def _discard(self, worker: int) -> None:
        if self._actors[worker] is not None:
            ray.kill(self._actors[worker])
        self._actors[worker] = None
        self._refs[worker] = deque()

    def close(self) -> None:
        for w, actor in enumerate(self._actors):
            if actor is None:
                continue
            try:
                ray.get(actor.close.remote(), timeout=CLOSE_GRACE_S)
            except Exception:
                pass  # a dead or stuck actor is killed below either way
            self._discard(w)
