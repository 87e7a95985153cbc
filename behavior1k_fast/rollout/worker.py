"""Env workers: one backend per worker, serving the requests of :mod:`.protocol`.

:class:`EnvWorker` holds the backend and answers :class:`~.protocol.Attach`, :class:`~.protocol.Reset` and
:class:`~.protocol.Chunk`; it is hosted by a spawned process (:func:`env_worker_main` runs the serving loop
of :mod:`.serve`), a Ray actor or, in-process, the inline executor. Boundary observations go into the
worker's rows of the shared-memory buffers when they are attached (the reply's ``obs`` is then ``None``),
else they travel in the reply as stacked arrays. With arrays in shared memory pipe messages stay small, so
neither side blocks on a full pipe while the other one waits for it (images of an episode that ended, in
``final_observation``, are the exception).

The requests do not assume a stage order: any subset of a worker's envs can be stepped in any order. A
worker trusts what the engine sends (the engine validates a chunk once, where it enters).

A chunk with a lead (``Chunk.lead_steps``, the ``lookahead`` schedule) is answered twice, LEAD then END
(:mod:`.protocol`): :meth:`EnvWorker.handle` returns an iterator of the two replies, and the LEAD reply is
produced as soon as the lead observations are published, before the remaining actions run. The worker
keeps the rows that sit out their next chunk (:mod:`.chunk`) and the time its last chunk or reset reply
was produced, from which each chunk's stall is measured.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..core.contract import BackendFactory, VectorBackend
from ..core.profile import RolloutProfile
from ..core.tracing import IPC, WAIT, get_profiler
from .bootstrap import bootstrap_process
from .chunk import ChunkResult, ChunkRun
from .protocol import Attach, Chunk, Failure, Ok, Reply, Request, Reset
from .serve import serve
from .shm import ACTIONS_KEY, SharedBuffers, check_observation_space, stack_as_space
from .waiting import ChunkProgress


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to build its backend (picklable)."""

    worker: int
    #: The pickled :class:`BackendFactory`. Unpickled in the worker only after the profile was applied,
    #: since unpickling imports the factory's module (and often the simulator with it).
    factory: bytes
    num_envs: int
    seed: int
    #: ``RolloutProfile.to_dict()`` (its ``stages_sharing_physics``: stages sharing this worker's physics).
    profile: dict
    auto_reset: bool
    tracing: bool = False
    #: Environment variables the worker process starts with (its GPU binding, ``core.gpus``).
    env: dict = field(default_factory=dict)
    #: The patch set the factory names (``core.contract.patch_set_of``), applied before it is unpickled.
    patch_set: str | None = None

    @property
    def env_ids(self) -> np.ndarray:
        """Global ids of this worker's envs."""
        return np.arange(self.worker * self.num_envs, (self.worker + 1) * self.num_envs)


class EnvWorker:
    """One backend and the handlers of the request protocol (a :class:`~.serve.Handler`).

    Construction applies the spec's profile to this process first (:func:`~.bootstrap.bootstrap_process`),
    then unpickles the factory and builds the backend."""

    def __init__(self, spec: WorkerSpec):
        bootstrap_process(spec.profile, spec.tracing, spec.patch_set)
        self.spec = spec
        self.env_ids = spec.env_ids
        self.profile = RolloutProfile.from_dict(spec.profile)
        factory: BackendFactory = pickle.loads(spec.factory)
        self.backend = factory(spec.num_envs, spec.seed, self.profile)
        if not isinstance(self.backend, VectorBackend):
            raise TypeError(f"factory returned {type(self.backend).__name__}, which is not a VectorBackend")
        if self.backend.num_envs != spec.num_envs:
            raise ValueError(f"factory built num_envs={self.backend.num_envs}, asked for num_envs={spec.num_envs}")
        check_observation_space(self.backend.observation_space)
        self.obs_buffers: SharedBuffers | None = None
        self.action_buffers: SharedBuffers | None = None
        self.progress: ChunkProgress | None = None
        #: bool ``[num_envs]``: local rows that sit out their next chunk (their episode ended after a lead).
        self.sit_out = np.zeros(spec.num_envs, dtype=bool)
        #: ``time.perf_counter_ns()`` when the last chunk or reset reply was produced (``None``: none yet).
        self.idle_since_ns: int | None = None

    def ready(self) -> tuple[Any, Any]:
        """The INIT payload: ``(observation_space, action_space)`` of one env."""
        return self.backend.observation_space, self.backend.action_space

    def handle(self, request: Request) -> Reply | Iterator[Reply]:
        """Serve one request; never raises (an exception becomes a :class:`~.protocol.Failure`). A chunk
        with a lead is answered by an iterator of its replies, LEAD then END (a failure ends it)."""
        if isinstance(request, Chunk) and request.lead_steps is not None:
            return self._lead_replies(request)
        env_ids = self.env_ids[list(request.rows)]
        try:
            if isinstance(request, Attach):
                self.obs_buffers = SharedBuffers.attach(request.observations)
                self.action_buffers = SharedBuffers.attach(request.actions)
                if request.progress is not None:
                    self.progress = ChunkProgress.attach(request.progress)
                payload = None
            elif isinstance(request, Reset):
                self.sit_out[list(request.rows)] = False
                obs, infos = self.backend.reset(list(request.rows))
                payload = (infos, self._publish_obs(request.rows, obs))
                self.idle_since_ns = time.perf_counter_ns()
            elif isinstance(request, Chunk):
                stall, run = self._start(request)
                obs, _ = run.to_lead()
                payload = (self._finish(request, run, stall), self._publish_obs(request.rows, obs))
            else:
                raise TypeError(f"env workers do not serve {type(request).__name__} requests")
            return Ok(payload, get_profiler().drain())
        except Exception as exc:
            return Failure.from_exception(exc, request.command, env_ids)

    def _lead_replies(self, request: Chunk) -> Iterator[Reply]:
        """LEAD ``(lead, obs)`` once the lead observations are published, then END ``result``."""
        env_ids = self.env_ids[list(request.rows)]
        try:
            stall, run = self._start(request)
            obs, lead = run.to_lead()
            lead.env_ids = env_ids
            lead_reply = Ok((lead, self._publish_obs(request.rows, obs)), get_profiler().drain())
        except Exception as exc:
            yield Failure.from_exception(exc, request.command, env_ids)
            return
        yield lead_reply
        try:
            end_reply = Ok(self._finish(request, run, stall), get_profiler().drain())
        except Exception as exc:
            end_reply = Failure.from_exception(exc, request.command, env_ids)
        yield end_reply

    def _start(self, request: Chunk) -> tuple[float, ChunkRun]:
        """The stall before ``request`` (seconds since the last chunk or reset reply, a ``wait`` span of the
        trace) and its chunk run, with the rows that sit it out taken from :attr:`sit_out`."""
        stall = 0.0
        if self.idle_since_ns is not None:
            now = time.perf_counter_ns()
            get_profiler().add(WAIT, self.idle_since_ns, now - self.idle_since_ns,
                               {"worker": self.spec.worker, "command": "stall"})
            stall = (now - self.idle_since_ns) / 1e9
        actions = request.actions
        if actions is None:
            actions = self.action_buffers.read(request.rows)[ACTIONS_KEY]
        rows = list(request.rows)
        sit_out = self.sit_out[rows]
        self.sit_out[rows] = False
        if self.progress is not None:
            self.progress.begin(request.steps)
        run = ChunkRun(
            self.backend,
            actions,
            np.asarray(request.rows),
            lead_steps=request.lead_steps or 0,
            sit_out=sit_out,
            skip_intermediate_obs=self.profile.skip_intermediate_obs,
            auto_reset=self.spec.auto_reset,
            on_step=None if self.progress is None else self.progress.step,
        )
        return stall, run

    def _finish(self, request: Chunk, run: ChunkRun, stall: float) -> ChunkResult:
        """The result of ``run`` after its last step, in global env ids with its stall; remembers the rows
        that sit out their next chunk."""
        result = run.finish()
        self.sit_out[np.asarray(request.rows)[run.ended_after_lead]] = True
        result.env_ids = self.env_ids[list(request.rows)]
        result.stall_seconds = np.full(len(request.rows), stall)
        self.idle_since_ns = time.perf_counter_ns()
        return result

    def _publish_obs(self, rows: Sequence[int], obs: Sequence[Mapping[str, np.ndarray]]) -> dict | None:
        """Boundary observations of ``rows``: into shared memory (returns ``None``) or stacked for the reply."""
        with get_profiler().section(IPC, worker=self.spec.worker, command="write_obs"):
            if self.obs_buffers is not None:
                self.obs_buffers.write(rows, obs)
                return None
            return stack_as_space(obs, self.backend.observation_space)

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            for buffers in (self.obs_buffers, self.action_buffers, self.progress and self.progress.buffers):
                if buffers is not None:
                    buffers.close()
            self.obs_buffers = self.action_buffers = self.progress = None


def env_worker_main(conn: Any, owner_pid: int, spec: WorkerSpec) -> None:
    """Entry point of a spawned env worker process."""
    serve(conn, owner_pid, lambda: EnvWorker(spec), spec.env_ids)

