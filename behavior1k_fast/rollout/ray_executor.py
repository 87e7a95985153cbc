"""The Ray executor: env workers as Ray actors (one per process slot of the plan), so one config runs
across machines. Imported only when ``executor="ray"`` is asked for (``import ray`` is heavy)."""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from .errors import WorkerDiedError
from .executors import CLOSE_GRACE_S, RESTART_HINT, Executor
from .protocol import Command, Failure, Ok, Reply, Request, unwrap
from .worker import EnvWorker, WorkerSpec


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
        timeout_s: float | None,
        restart_workers: bool,
        actor_options: dict | None = None,
    ):
        super().__init__(specs, timeout_s, restart_workers)
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self._actor_cls = ray.remote(RayEnvHost)
        self._actor_options = {"num_cpus": 1, "max_restarts": 0, **(actor_options or {})}
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
        try:
            reply = ray.get(ref, timeout=self.timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"worker {worker} (Ray actor) gave no reply to {str(command)!r} within timeout_s={self.timeout_s}"
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
