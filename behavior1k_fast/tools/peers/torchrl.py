"""The TorchRL peers: TorchRL's collectors over the same envs, run as their users run PPO on them.

One worker's env (:func:`torchrl_env`) is the gymnasium peer's sub-env (:class:`~.gymnasium.ChunkGymEnv`: E
envs of one backend, a chunk per step) through ``torchrl.envs.GymWrapper``. :func:`torchrl_collector` builds
``MultiSyncCollector`` / ``MultiAsyncCollector`` (one worker process per env process, each acting with its
copy of the policy), ``AsyncBatchedCollector`` (E one-env envs per worker process and one copy of the
policy served from a thread of the trainer's process by TorchRL's inference server) or, as a single-GPU user
runs TorchRL, one ``Collector`` whose one batched policy steps a ``ParallelEnv`` of the P workers;
:class:`TorchRLBatches` hands the trainer its PPO batches (:func:`batch_parts` TorchRL batches joined), and
:class:`TorchRLTraining` records them as ``Trajectory`` s, so that every collector trains its own seeds. The
policy is an engine policy as a TorchRL actor (:class:`TorchRLActor`), whose weights the trainer posts with
``update_policy_weights_()``. TorchRL records no weights version with a chunk: the actor outputs the version it
acted with (``weights_version``).
Needs ``torchrl`` (``pip install 'behavior1k_fast[peers]'``; :func:`torchrl_missing`).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
from typing import Any, Callable, Iterator

import gymnasium
import numpy as np
import torch

from ...core.profile import RolloutProfile
from ..train.learner import trained_state
from .gymnasium import ChunkGymEnv

#: TorchRL's multi-process collectors: a spawned worker reads its start arguments only after importing the
#: main module, so where they are more than a pipe holds (the env and policy factories hold the spaces, and a
#: 224 px camera's Box pickles to 603 kB: :func:`compact_space` makes it a few hundred bytes) each
#: ``proc.start()`` returns once its worker has imported, the workers start one after another, and the first
#: waits for its initial weights (sent once all have started) longer than TorchRL's 60 s (the H200, 8
#: workers: ``queue.Empty``). That wait's limit (torchrl 0.14.1: ``WEIGHT_SYNC_TIMEOUT``, seconds, read when
#: torchrl is imported) is also raised, unless set, by :func:`torchrl_missing`, where torchrl is first imported.
WEIGHT_SYNC_TIMEOUT = "900"


#: The keys :class:`TorchRLActor` writes, in its outputs' order.
ACTOR_OUT_KEYS = ["action", "logprob", "value", "weights_version"]
#: The extras key of a recorded row's worker (:class:`TorchRLTraining`: a batch's rows are runs of a worker's envs).
WORKER_KEY = "worker"
#: What a recording sub-env's chunk info (:func:`~.gymnasium.chunk_info`) becomes in TorchRL's step info:
#: per-step arrays ``[E, N]`` and per env whether its episode ended with success; ``ended::<key>`` holds the
#: final observations.
STEP_INFO = {"step_rewards": "rewards", "step_terminated": "terminated", "step_truncated": "truncated",
             "step_applied": "applied", "ended_success": "ended_success"}


class UniformBox(gymnasium.spaces.Box):
    """A ``Box`` with one low and one high bound for every element, pickled as those two, its shape and dtype
    (a ``Box`` pickles its full bound arrays)."""

    def __reduce__(self) -> tuple:
        return UniformBox, (self.low.flat[0], self.high.flat[0], self.shape, self.dtype)


def compact_space(space: Any) -> Any:
    """``space`` with each ``Box`` of uniform bounds, also inside a ``Dict``, as an equal :class:`UniformBox`
    (the spaces that TorchRL's spawned workers get in their start arguments: see :data:`WEIGHT_SYNC_TIMEOUT`)."""
    if isinstance(space, gymnasium.spaces.Dict):
        return gymnasium.spaces.Dict({k: compact_space(v) for k, v in space.spaces.items()})
    if isinstance(space, gymnasium.spaces.Box) and space.low.size and all(
            (bound == bound.flat[0]).all() for bound in (space.low, space.high)):
        return UniformBox(space.low.flat[0], space.high.flat[0], space.shape, space.dtype)
    return space


class TorchRLActor(torch.nn.Module):
    """An engine policy as a TorchRL actor: the observation tensors of ``obs_space``'s keys (in that order), envs
    stacked along any leading dims (a multi-process worker's E envs; the batched collector's requests of one
    env each) -> (the chunk as float64, log-prob, value, the weights version that chose it), with the same
    leading dims (:data:`ACTOR_OUT_KEYS`).

    Its only tensors are a CPU mirror of the policy's trained parameters (``trained``: the adapters and the
    head) and the mirror's version (a counter :meth:`refresh` raises), so TorchRL's weight sync carries those,
    as a LoRA user syncs a VLA. The policy itself is built by ``make_policy`` (picklable, no tensors: a spawned
    worker builds its own, the frozen transformer from its seed on its device) at the first forward; a forward
    copies the mirror into it only when a new version arrived."""

    def __init__(self, make_policy: Callable[[], Any], trained: dict, obs_space: Any) -> None:
        super().__init__()
        # not submodules: TorchRL syncs the mirror only; ``loaded``: the version copied into ``policy``
        self.__dict__.update(make_policy=make_policy, policy=None, loaded=-1)
        self.keys = tuple(obs_space.spaces)
        self.event_dims = {k: len(obs_space[k].shape) for k in self.keys}
        self.mirror = torch.nn.ParameterDict({
            self.key(name): torch.nn.Parameter(p.detach().cpu().clone(), requires_grad=False)
            for name, p in trained.items()})
        self.version = torch.nn.Parameter(torch.zeros(()), requires_grad=False)

    @staticmethod
    def key(name: str) -> str:
        """The mirror's key of a parameter name (a ParameterDict key holds no dots)."""
        return name.replace(".", "__")

    def __getstate__(self) -> dict:
        return {**self.__dict__, "policy": None, "loaded": -1}  # a worker builds its own

    def refresh(self, trained: dict) -> None:
        """The mirror takes ``trained``'s values (the trainer's, before posting them) as a new version."""
        with torch.no_grad():
            for name, p in trained.items():
                self.mirror[self.key(name)].copy_(p)
            self.version.add_(1)

    def forward(self, *values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.policy is None:
            self.__dict__["policy"] = self.make_policy()
        version = int(self.version)
        if version != self.loaded:  # a new version arrived (or the first forward): copy the mirror in
            with torch.no_grad():
                for name, p in trained_state(self.policy).items():
                    p.copy_(self.mirror[self.key(name)])
            self.__dict__["loaded"] = version
        lead = values[0].shape[:values[0].ndim - self.event_dims[self.keys[0]]]
        obs = {k: v.reshape(-1, *v.shape[v.ndim - self.event_dims[k]:]) for k, v in zip(self.keys, values)}
        chunk, extras = self.policy(obs)
        return (chunk.double().reshape(*lead, *chunk.shape[1:]), extras["logprob"].reshape(lead),
                extras["value"].reshape(lead), torch.full(lead, self.loaded, dtype=torch.int64))


class CountedChunkEnv(gymnasium.Wrapper):
    """A recording :class:`~.gymnasium.ChunkGymEnv` whose step info holds ``own_actions`` and
    ``env_wall_seconds`` as arrays (TorchRL reads arrays), its chunk info flat (:data:`STEP_INFO`,
    ``ended::<key>``) and ``worker``, the index of the worker whose envs took the chunk (a batch of
    ``MultiAsyncCollector`` is one worker's, whichever finished first; of ``AsyncBatchedCollector``, whichever
    envs stepped: each env is its own worker there)."""

    def __init__(self, env: ChunkGymEnv, worker: int) -> None:
        super().__init__(env)
        self.worker = worker

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(action)
        out = {"own_actions": np.asarray(info["own_actions"], np.int64),
               "env_wall_seconds": np.asarray(info["env_wall_seconds"], np.float64)}
        chunk = info["chunk"]
        out |= {key: chunk[name] for key, name in STEP_INFO.items()}
        out |= {f"ended::{k}": v for k, v in chunk["ended_obs"].items()}
        out["worker"] = np.asarray(self.worker, np.int64)
        return obs, reward, terminated, truncated, out


def torchrl_env(factory: Any, envs: int, seed: int, profile: RolloutProfile, spaces: tuple, worker: int) -> Any:
    """Worker ``worker``'s TorchRL env: :class:`~.gymnasium.ChunkGymEnv` (``envs`` envs of one backend, a chunk per
    step) through ``GymWrapper``, reading the actions the envs took (``own_actions``), the chunk's stepping
    seconds, what a trainer records of each chunk and the worker's index from the step info
    (:class:`CountedChunkEnv`)."""
    from torchrl.data import Unbounded
    from torchrl.envs import GymWrapper
    from torchrl.envs.gym_like import default_info_dict_reader

    chunk_env = CountedChunkEnv(ChunkGymEnv(factory, envs, seed, profile, profile.chunk_size, spaces, True), worker)
    env = GymWrapper(chunk_env, batch_size=torch.Size([]))
    n, obs_space = profile.chunk_size, spaces[0]
    # arrays: their specs given (a reader infers a scalar from the reset, which has none)
    spec = {"own_actions": Unbounded(shape=(), dtype=torch.int64),
            "env_wall_seconds": Unbounded(shape=(), dtype=torch.float64),
            "step_rewards": Unbounded(shape=(envs, n), dtype=torch.float64),
            **{k: Unbounded(shape=(envs, n), dtype=torch.bool) for k in STEP_INFO if k.startswith("step_")
               and k != "step_rewards"},
            "ended_success": Unbounded(shape=(envs,), dtype=torch.bool),
            "worker": Unbounded(shape=(), dtype=torch.int64),
            **{f"ended::{k}": Unbounded(shape=(envs, *obs_space[k].shape),
                                        dtype=torch.from_numpy(np.zeros(0, obs_space[k].dtype)).dtype)
               for k in obs_space.spaces}}
    env.set_info_dict_reader(default_info_dict_reader(list(spec), spec))
    return env


#: The collector kinds :func:`torchrl_collector` builds (each trains its own seeds: :class:`TorchRLTraining`).
KINDS = ("torchrl_sync", "torchrl_async", "torchrl_batched", "torchrl_parallel")


def torchrl_collector(kind: str, behaviour: Any, profile: RolloutProfile, factory: Any, spaces: tuple, seed: int,
                      rounds: int, batches: int) -> Any:
    """TorchRL's collector ``kind`` (``torchrl_sync``, ``torchrl_async``, ``torchrl_batched`` or
    ``torchrl_parallel``) over
    ``profile``'s process budget, for ``batches`` PPO batches of ``rounds`` chunks per env (each of
    :func:`batch_parts` TorchRL batches).
    ``MultiSyncCollector`` / ``MultiAsyncCollector``: one worker per env process, its E envs in one env,
    ``behaviour`` rebuilt in each worker (one policy copy per process, as those collectors run it); the async
    one's batches are one worker's ``rounds`` chunks. ``AsyncBatchedCollector``: E one-env envs per worker
    process and ``behaviour`` served from a thread of this process, whose inference server batches the
    requests that are ready (one policy copy; TorchRL's design for a policy too large to copy per worker).
    ``torchrl_parallel``: TorchRL as a single-GPU user runs it: one ``Collector`` in this process, its one
    batched policy over a ``ParallelEnv`` of the same P workers of E envs (each step one forward for every
    env, then every worker steps). No TorchRL device is set: the policy places its own work (the transformer
    on its device, the head on the CPU, as in the engine's rows). The sub-envs report what a trainer records
    of each chunk (:class:`CountedChunkEnv`)."""
    import torchrl.collectors as collectors

    workers, per = profile.num_env_processes, profile.envs_per_process
    total = workers * per * rounds * batches  # frames: env steps of TorchRL envs (one of E envs, or of one)
    if kind == "torchrl_batched":  # env i is its own "worker": its chunks are told apart by that index
        fns = [functools.partial(torchrl_env, factory, 1, seed + i, profile, spaces, i)
               for i in range(workers * per)]
        return collectors.AsyncBatchedCollector(
            fns, policy=behaviour, frames_per_batch=workers * per * rounds, total_frames=total,
            env_backend="multiprocessing", envs_per_worker=per, transport="driver", max_batch_size=workers * per)
    if kind == "torchrl_parallel":
        from torchrl.envs import ParallelEnv

        fns = [functools.partial(torchrl_env, factory, per, seed + i, profile, spaces, i)
               for i in range(workers)]
        return collectors.Collector(ParallelEnv(workers, fns, mp_start_method="spawn"), behaviour,
                                    frames_per_batch=workers * rounds, total_frames=total // per,
                                    auto_register_policy_transforms=False)  # the policy needs no InitTracker
    collector_class = {"torchrl_sync": collectors.MultiSyncCollector,
                       "torchrl_async": collectors.MultiAsyncCollector}[kind]
    fns = [functools.partial(torchrl_env, factory, per, seed + i, profile, spaces, i) for i in range(workers)]
    frames = workers * rounds // batch_parts(kind, profile)
    return collector_class(fns, behaviour, frames_per_batch=frames, total_frames=total // per)


def batch_parts(kind: str, profile: RolloutProfile) -> int:
    """TorchRL batches the trainer joins into one PPO batch: ``MultiAsyncCollector``'s workers each deliver
    batches of their own and keep one in flight (a worker starts its next batch, with the weights it has,
    when the trainer takes its last), so a PPO batch of one worker's batch would be chosen by weights up to P
    updates old; a PPO batch of one batch from each of the P workers acts one update behind. The other
    collectors' batches span every env: one."""
    return profile.num_env_processes if kind == "torchrl_async" else 1


@contextlib.contextmanager
def spawned_workers() -> Any:
    """The global multiprocessing start method is "spawn" inside: TorchRL starts its workers with it (the
    batched collector at its first batch), and the engine's use of multiprocessing sets "fork" on Linux, under
    which a worker forked after this process has rendered hangs in its renderer."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(previous, force=True)


class TorchRLBatches:
    """PPO batches from TorchRL's collector ``kind`` (:func:`torchrl_collector`, ``batches`` of them), each
    :func:`batch_parts` TorchRL batches joined, as an iterator. The collector starts, under
    :func:`spawned_workers`, when the first batch is asked for (its workers' start is in the first wait);
    :meth:`post` hands it the trainer's weights; :meth:`close` shuts it down."""

    def __init__(self, kind: str, behaviour: Any, profile: RolloutProfile, factory: Any, spaces: tuple, seed: int,
                 rounds: int, batches: int) -> None:
        self.start = functools.partial(torchrl_collector, kind, behaviour, profile, factory, spaces, seed, rounds,
                                       batches)
        self.parts, self.left = batch_parts(kind, profile), batches
        self.collector: Any = None
        self.stream: Iterator[Any] | None = None
        self.workers = contextlib.ExitStack()

    def __iter__(self) -> "TorchRLBatches":
        return self

    def __next__(self) -> Any:
        if not self.left:
            raise StopIteration
        if self.collector is None:
            self.workers.enter_context(spawned_workers())
            self.collector = self.start()
            self.stream = iter(self.collector)
        self.left -= 1
        return torch.cat([next(self.stream) for _ in range(self.parts)])

    def post(self, weights: Any) -> None:
        """The trainer's weights (a ``TensorDict`` of the actor's parameters) to the collector's policy."""
        self.collector.update_policy_weights_(weights)

    def close(self) -> None:
        try:
            if self.stream is not None:  # its generator ends now (left to the collector's finalizer at exit, its
                self.stream.close()  # shutdown ran again without the module globals: "Exception ignored")
        finally:
            try:
                if self.collector is not None:
                    self.collector.shutdown()
            finally:
                self.collector = self.stream = None
                self.workers.close()


class TorchRLTraining:
    """TorchRL's collector ``kind`` (one of :data:`KINDS`) as a trainer's batch source
    (:func:`~behavior1k_fast.tools.train.learner.fit`): ``batches`` batches, each recorded as the engine records
    a :class:`~behavior1k_fast.rollout.trajectory.Trajectory` (the sub-envs report each chunk's per-step arrays,
    final observations, success and worker; the actor the weights version that chose each chunk; the extras
    also name each row's worker, :data:`WORKER_KEY`). A batch is split into runs, each some consecutive chunks
    of one worker's envs and its own rows, bootstrapped at its own end; the episode sums run on across batches
    by env:

    - ``MultiSyncCollector`` and ``ParallelEnv``: P runs of ``rounds`` chunks, one per worker.
    - ``MultiAsyncCollector``: P runs of ``rounds`` chunks, of the workers that finished first (the same worker
      may hand in two, in their order).
    - ``AsyncBatchedCollector``: one run per env (each env is its own worker there), of the chunks it took in
      the batch's frames, whichever envs stepped: their counts differ, so the batch has as many rounds as the
      most any env took, and an env that took fewer sits out its first rounds (no step applied: PPO leaves those
      chunks out, and GAE runs over its own chunks only, as a TorchRL user splits such a batch by env).

    ``make_actor()`` builds the ``TensorDictModule`` of a :class:`TorchRLActor` (:data:`ACTOR_OUT_KEYS`): one acts
    in the collector, one is the trainer's copy whose mirror :meth:`post` refreshes and posts with
    ``update_policy_weights_()``. ``collect_s`` and ``model_s`` are not reported by TorchRL (NaN); the busiest
    worker process's stepping seconds are."""

    def __init__(self, kind: str, make_actor: Callable[[], Any], profile: RolloutProfile, factory: Any,
                 spaces: tuple, seed: int, rounds: int, batches: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.posting = make_actor()
        self.batches = TorchRLBatches(kind, make_actor(), profile, factory, spaces, seed, rounds, batches)
        self.spaces, self.chunk_size, self.per = spaces, profile.chunk_size, profile.envs_per_process
        self.rounds, self.by_env = rounds, kind == "torchrl_batched"
        envs = profile.num_env_processes * self.per
        self.returns, self.lengths = np.zeros(envs), np.zeros(envs, dtype=np.int64)
        self.version = 0
        self.last: Any = None

    def __enter__(self) -> "TorchRLTraining":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.batches.close()

    def __iter__(self) -> Iterator[Any]:
        for data in self.batches:
            yield self.trajectory(data)

    def runs(self, worker: np.ndarray) -> list[np.ndarray]:
        """The batch's runs (class docs) as the indices of their frames in order, from each frame's ``worker``:
        per env in env order (the batched collector), else ``rounds`` consecutive frames each."""
        if self.by_env:
            return [np.flatnonzero(worker == w) for w in range(len(self.returns))]
        return list(np.arange(len(worker)).reshape(-1, self.rounds))

    def sat_out(self, rows: np.ndarray, worker: int, arrays: dict) -> Any:
        """The ``ChunkResult`` of a round that ``rows`` (``worker``'s) sat out: nothing applied, no reward, no
        episode; zeros shaped as the batch's ``arrays``."""
        from ...rollout.chunk import ChunkResult
        from ...rollout.collector import WEIGHTS_VERSION_KEY

        n, obs_space = len(rows), self.spaces[0]
        none = np.zeros((n, self.chunk_size), dtype=bool)
        return ChunkResult(
            env_ids=rows, obs=None, rewards=np.zeros(none.shape), terminated=none, truncated=none, applied=none,
            infos=[{}] * n, policy_obs={k: np.zeros((n, *space.shape), space.dtype) for k, space in obs_space.items()},
            actions=np.zeros((n, *arrays["action"].shape[-2:])),
            extras={"logprob": np.zeros(n, arrays["logprob"].dtype), "value": np.zeros(n, arrays["value"].dtype),
                    WEIGHTS_VERSION_KEY: np.zeros(n, np.int64), WORKER_KEY: np.full(n, worker, dtype=np.int64)})

    def trajectory(self, data: Any) -> Any:
        """The TorchRL batch ``data`` as a ``Trajectory`` whose env rows ``j * E + e`` are run j's env e (E: the
        envs of one frame), each run's chunks in its last rounds (class docs); its measure kept for
        :meth:`measure`."""
        from ...rollout.chunk import ChunkResult
        from ...rollout.collector import WEIGHTS_VERSION_KEY
        from ...rollout.trajectory import TrajectoryBatch
        from ..train.learner import BatchMeasure

        arrays = data.reshape(-1).numpy()  # key -> array over the frames, "next" a dict of its own
        nxt = arrays["next"]
        runs = self.runs(nxt["worker"])
        keys, obs_space = list(self.spaces[0].spaces), self.spaces[0]
        per = 1 if self.by_env else self.per  # envs of one frame
        rounds = max(len(frames) for frames in runs)
        row_returns, row_lengths = np.zeros(len(runs) * per), np.zeros(len(runs) * per, dtype=np.int64)
        batch = TrajectoryBatch(obs_space, len(runs) * per, self.chunk_size, rounds, row_returns, row_lengths)
        env_s = np.zeros(len(self.returns) // self.per)
        last = {k: np.zeros((len(runs) * per, *obs_space[k].shape), obs_space[k].dtype) for k in keys}
        for j, frames in enumerate(runs):
            rows = np.arange(j * per, (j + 1) * per)
            worker = j if self.by_env else int(nxt["worker"][frames[0]])
            envs = np.arange(worker * per, (worker + 1) * per)
            row_returns[rows], row_lengths[rows] = self.returns[envs], self.lengths[envs]
            for _ in range(rounds - len(frames)):
                batch.add(0, self.sat_out(rows, worker, arrays))
            for f in frames:
                ended_obs = {k: nxt[f"ended::{k}"][f] for k in keys}
                steps = {name: nxt[key][f] for key, name in STEP_INFO.items() if name != "ended_success"}
                ended = steps["terminated"].any(axis=1) | steps["truncated"].any(axis=1)
                success = nxt["ended_success"][f]
                infos = [{"final_observation": {k: v[e] for k, v in ended_obs.items()},
                          "final_info": {"success": bool(success[e])}} if ended[e] else {} for e in range(per)]
                extras = {"logprob": arrays["logprob"][f].reshape(per), "value": arrays["value"][f].reshape(per),
                          WEIGHTS_VERSION_KEY: arrays["weights_version"][f].reshape(per).astype(np.int64),
                          WORKER_KEY: np.full(per, worker, dtype=np.int64)}
                batch.add(0, ChunkResult(
                    env_ids=rows, obs={k: nxt[k][f].reshape(per, *obs_space[k].shape) for k in keys}, infos=infos,
                    policy_obs={k: arrays[k][f].reshape(per, *obs_space[k].shape) for k in keys},
                    actions=arrays["action"][f].reshape(per, *arrays["action"].shape[-2:]), extras=extras,
                    **steps))
            if len(frames):
                for k in keys:
                    last[k][rows] = nxt[k][frames[-1]].reshape(per, *obs_space[k].shape)
            self.returns[envs], self.lengths[envs] = row_returns[rows], row_lengths[rows]
            env_s[worker * per // self.per] += nxt["env_wall_seconds"][frames].sum()

        def last_obs(out: dict) -> None:
            for k in keys:
                out[k][:] = last[k]

        trajectory = batch.finish(last_obs)
        self.last = BatchMeasure(int(nxt["own_actions"].sum()), float("nan"), float(env_s.max()), float("nan"),
                                 float("nan"))
        return trajectory

    def measure(self, batch: Any) -> Any:
        """The batch's :class:`~behavior1k_fast.tools.train.learner.BatchMeasure`, its lag behind the weights the
        trainer is about to update (from the versions the actor recorded for the chunks its envs took)."""
        from dataclasses import replace

        from ...rollout.collector import WEIGHTS_VERSION_KEY

        ran = batch.applied.any(axis=2)  # not the rounds an env sat out
        return replace(self.last, policy_lag=float(np.mean(self.version - batch.extras[WEIGHTS_VERSION_KEY][ran])))

    def update(self, run: Callable[[], Any]) -> Any:
        return run()

    def post(self, weights: Any) -> None:
        """The trainer's weights into the posting actor's mirror (a new version), then to the collector."""
        from tensordict import TensorDict

        self.posting.module.refresh(weights)
        self.batches.post(TensorDict.from_module(self.posting))
        self.version += 1


def torchrl_missing() -> str | None:
    """Why the TorchRL peers cannot run here (``None``: they can); imports torchrl, with its wait for a worker's
    initial weights raised to :data:`WEIGHT_SYNC_TIMEOUT` unless set."""
    os.environ.setdefault("WEIGHT_SYNC_TIMEOUT", WEIGHT_SYNC_TIMEOUT)
    try:
        import tensordict  # noqa: F401
        import torchrl  # noqa: F401
    except ImportError as exc:
        return f"torchrl is not installed ({exc}): pip install 'behavior1k_fast[peers]'"
    return None


