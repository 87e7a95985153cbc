"""Time to a trained policy: wall clock until PPO reaches a target success rate, per rollout layout and regime.

The question a user asks is "how long until my policy is trained", not env-steps per second. A layout can
buy env-steps by changing what each env sees (the hybrid partition makes an env act on an observation one
stage chunk old; collect-while-train acts with weights one update old), which can cost samples. This
measures both factors and their product:

    wall to target = samples to target x seconds per sample (rollout and PPO update)

- **Task and learner**: PPO on the reference reach-and-touch task, ``examples/train_ppo_reference.py``
  used as a library (its :func:`train`, GAE, clipped update and :class:`Collector` loop). The policy costs
  what a VLA costs and trains the way one is fine-tuned: :class:`VLAActorCritic`, the benchmark's
  transformer over the rgb camera with low-rank adapters in every block
  (:class:`~behavior1k_fast.tools.measure.trainable.AdaptedVLA`), whose output, flattened, joins
  proprioception and the task offset as the input of a trained actor-critic head. The acting forward
  runs the transformer at the stage batch; the PPO update runs it over the batch's samples with a backward
  through every block to the adapters (its first epoch; the head's other epochs reuse those features,
  ``PPOConfig.feature_epochs``), so the update per sample costs about three acting forwards, as a LoRA
  fine-tune of a VLA costs against its rollout (RLinf issue #777: 185 s training, 123 s rollout per step).
- **Regimes** (``--regime``): the transformer is sized (:func:`~behavior1k_fast.tools.measure.calibration.calibrate`)
  so that one forward at the stage batch takes :data:`REGIMES` x the env's ms per chunk: ``env-bound``
  (0.25), ``balanced`` (1), ``model-bound`` (4). Its cost grows with the batch (compute-bound at the
  bench's image sizes), recorded as T_model(batch).
- **Layouts** (same envs, chunk size, policy): ``stock`` (every optimisation off), ``k1_skip`` (K = 1,
  on-demand observation), ``hybrid_k2`` and ``process_k2`` (pipeline K = 2 in each partition),
  ``lookahead`` (lead ``--lookahead-steps``); each also as ``<layout>+overlap``: collect-while-train
  (``Collector`` ``max_lag=1``: batch b + 1 is collected while PPO updates on batch b). Peers:
  ``double_buffer_peer`` (two gymnasium ``AsyncVectorEnv`` s alternated, ``tools/bench/peers.py``, the
  update after each rollout) and, where ``torchrl`` is installed (``pip install behavior1k_fast[peers]``),
  ``torchrl_sync`` / ``torchrl_async``: TorchRL's ``MultiSyncCollector`` / ``MultiAsyncCollector`` (the
  0.14 names of ``MultiSyncDataCollector`` / ``MultiaSyncDataCollector``) over the same slim +
  on-demand-observation env wrapped as a gymnasium env (``peers.ChunkGymEnv``: one step = one chunk of
  one worker's envs, through ``torchrl.envs.GymWrapper``), one worker process per env process, each
  acting with its copy of the same policy, while the trainer runs the same PPO update on each batch and
  posts its weights with ``update_policy_weights_()`` (the sync collector's next batch acts with them; the
  async one's workers go on collecting meanwhile, each keeping a batch of its own envs in flight, and the
  trainer joins one from each worker into a PPO batch: a PPO batch of one worker's batch would act up to P
  updates behind); and ``torchrl_batched``: TorchRL's
  ``AsyncBatchedCollector`` over the same envs one per TorchRL env (E per worker process, the same process
  budget), with one copy of the policy on the trainer's device served from a thread of the trainer's
  process by TorchRL's inference server (it batches whatever requests are ready; collection goes on while
  the trainer updates), TorchRL's layout for a policy too large for a copy per worker.
- **Samples to target** depend only on what each env sees and does, its semantics: ``fresh`` (an env acts
  on its own observation at its chunk's start: stock, K = 1, process partition, the double buffer),
  ``hybrid`` (the other stage's slice holds its last action while this one steps), ``lookahead`` (the chunk
  is chosen from an observation d steps before the previous chunk ends, with the committed actions as
  input), each ``+lag1`` under collect-while-train (TorchRL's sync collector: ``fresh``, its async and
  batched ones: ``fresh+lag1``, each TorchRL row's measured lag in ``policy_lag``). Per semantics
  and seed, PPO trains under one layout of that semantics (:data:`TRAINED_UNDER`) until the
  episode-weighted success rate of the last ``--window`` iterations reaches ``--target``; samples to
  target = env steps (own actions) then, or none within ``--iterations``.
- **Seconds per sample** per layout: a few PPO iterations under it (the first one not counted), the
  trainer's wall per iteration (its wait for the batch plus the update) over the own actions; reported
  with the rollout's own seconds (``rollout_s_per_sample``: the collector's rollout wall, overlapped or
  not), the update's (``update_s_per_sample``), and the busiest env worker's stepping seconds
  (``env_busy_s_per_sample``, the env side of the bound max(GPU work, env work)) and the behaviour
  policy's forwards (``model_s_per_sample``: what the regime's T_model is in the rollout itself, where the
  adapted transformer runs without torch's fused inference path that calibration timed); with the policy on
  a GPU and ``nvidia-ml-py`` also the GPU's busy seconds (``gpu_busy_s_per_sample``, NVML's utilization
  samples: :mod:`behavior1k_fast.tools.measure.gpu`), the bound max(GPU busy, busiest env worker)
  (``bound_s_per_sample``) and the share of it the trainer's wall reaches (``of_bound``). The double-buffer
  peer's rollout seconds come from ``run_peer`` with the same policy acting, plus the update seconds per
  sample of ``k1_skip`` (the same batch); TorchRL's are the trainer's wall per batch with the update
  of a batch of the same size run on each, the PPO of the engine layout of the same semantics: serial
  (``k1_skip``'s batch) for the sync collector, decoupled (``k1_skip+overlap``'s, with its no-grad pass
  over the batch) for the async and batched ones, whose samples to target come from that layout's runs
  (``update_as`` names it).
- Per layout and seed the product, with the median and min-max over seeds; the training runs of the
  semantics' own layouts are direct measurements of the same quantity (``direct_wall_to_target_s``), and
  the best engine layout of each regime gets one direct run if it is not one of those (``direct``). The
  peers have no direct run (their batches are not ``Trajectory`` s the example's PPO reads).
- ``--lead-sweep``: the delay-sweep protocol for the lookahead lead: samples to target, seconds per sample
  and their product for d in 0, 1, 2, 4, N/2, N - 1 (committed actions as input), per seed.

The JSON is rewritten after each measured piece (``"complete": false``, the current regime's pieces under
``in_progress``; the seconds per sample of every layout and peer come first, then the training runs seed by
seed), so a run cut short keeps what it measured (``--plot RESULT.json`` draws its plot afterwards, into
the same output folder as a run).
Writes ``time_to_train_<tag>.json`` and ``.png`` (``--lead-sweep``: ``time_to_train_lead_sweep_<tag>``)
to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the checkout's ``benchmarks/results/``).
``--quick`` is a small run for 2 cores (a minute or two): 64-wide model, 16-pixel camera, few
iterations, one seed, the balanced regime, a low target. Bad arguments are one-line usage errors (exit
code 2) before any env starts.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import gymnasium
import numpy as np
import torch

from behavior1k_fast.core.profile import SCHEDULES, RolloutProfile
from behavior1k_fast.tools.argtypes import (Parser, chunk_steps, device, env_count, file_name, lead_steps, one_line,
                                            path, positive_int, positive_number, process_count)
from behavior1k_fast.tools.bench.report import format_model_cost
from behavior1k_fast.tools.measure.config import DEFAULT_OUT_DIR, RunConfig, record_dir, resolve_device
from behavior1k_fast.tools.measure.files import save_figure, write_json
from behavior1k_fast.tools.measure.gpu import GPUBusy, gpu_busy_missing
from behavior1k_fast.tools.measure.machine import busy_warning, describe_machine, machine_tag, sample_load
from behavior1k_fast.tools.measure.trainable import AdaptedVLA

#: The folder of ``train_ppo_reference.py``, the PPO this benchmark uses as a library.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
import train_ppo_reference as ppo  # noqa: E402  (the example, found through EXAMPLES)

#: Engine layout -> the semantics whose samples to target it shares (``+overlap`` layouts: ``+lag1``).
ENGINE_SEMANTICS = {"stock": "fresh", "k1_skip": "fresh", "hybrid_k2": "hybrid", "process_k2": "fresh",
                    "lookahead": "lookahead"}
#: Peer -> its semantics. Checked at torchrl 0.14.1 by matching each chunk's recorded log-prob against the
#: versions the trainer posted (:func:`acting_lags`, ``policy_lag``): ``MultiSyncCollector`` collects a batch
#: with the weights posted after the previous one (lag 0, serial); ``MultiAsyncCollector``'s workers each
#: keep one batch in flight, collecting on while the trainer updates, and the trainer joins one batch from
#: each worker into its PPO batch (:func:`batch_parts`), so it acts one update behind; ``AsyncBatchedCollector``
#: also collects on while the trainer updates and takes the posted weights between two batched forwards, so
#: a batch mixes the two latest versions.
PEER_SEMANTICS = {"double_buffer_peer": "fresh", "torchrl_sync": "fresh", "torchrl_async": "fresh+lag1",
                  "torchrl_batched": "fresh+lag1"}
#: The TorchRL collector peers (:func:`torchrl_collector`).
TORCHRL_PEERS = ("torchrl_sync", "torchrl_async", "torchrl_batched")
#: Suffix of a collect-while-train layout, and of its semantics.
OVERLAP, LAG = "+overlap", "+lag1"
#: Semantics -> the layout PPO trains under to count its samples to target.
TRAINED_UNDER = {**{s: layout for layout, s in (("k1_skip", "fresh"), ("hybrid_k2", "hybrid"),
                                                ("lookahead", "lookahead"))},
                 **{s + LAG: layout + OVERLAP for layout, s in (("k1_skip", "fresh"), ("hybrid_k2", "hybrid"),
                                                                ("lookahead", "lookahead"))}}
#: Regime -> one forward at the stage batch as a multiple of the env's ms per chunk.
REGIMES = {"env-bound": 0.25, "balanced": 1.0, "model-bound": 4.0}
#: TorchRL's multi-process collectors: a spawned worker reads its start arguments only after importing the
#: main module, so where they are more than a pipe holds (the env and policy factories hold the spaces, and a
#: 224 px camera's Box pickles to 603 kB: :func:`compact_space` makes it a few hundred bytes) each
#: ``proc.start()`` returns once its worker has imported, the workers start one after another, and the first
#: waits for its initial weights (sent once all have started) longer than TorchRL's 60 s (the H200, 8
#: workers: ``queue.Empty``). That wait's limit (torchrl 0.14.1: ``WEIGHT_SYNC_TIMEOUT``, seconds, read when
#: torchrl is imported) is also raised, unless set, by :func:`torchrl_missing`, where torchrl is first imported.
WEIGHT_SYNC_TIMEOUT = "900"
#: Modalities the VLA-cost policy reads.
MODALITIES = ("rgb", "proprio")


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


def semantics_of(layout: str) -> str:
    """The semantics (module docs) of an engine layout (``+overlap`` or not) or a peer."""
    if layout in PEER_SEMANTICS:
        return PEER_SEMANTICS[layout]
    return ENGINE_SEMANTICS[layout.removesuffix(OVERLAP)] + (LAG if layout.endswith(OVERLAP) else "")


def layout_profiles(processes: int, envs: int, chunk_size: int, lookahead_steps: int | str = "auto") -> tuple[
        dict[str, RolloutProfile], dict[str, str]]:
    """The engine layouts' profiles (``lookahead`` at lead ``lookahead_steps``; an ``+overlap`` layout runs its
    layout's profile), and the layouts this profile cannot run (name -> why)."""
    layout = dict(num_env_processes=processes, total_num_envs=envs, chunk_size=chunk_size)
    fast = RolloutProfile(obs_modalities=MODALITIES, **layout)
    profiles = {
        "stock": RolloutProfile.stock(**layout),
        "k1_skip": fast,
        "hybrid_k2": fast.replace(pipeline_stages=2, partition="hybrid", physics_rescale="preserve_sim_time"),
        "process_k2": fast.replace(pipeline_stages=2, partition="process"),
    }
    from behavior1k_fast.rollout.schedules import SCHEDULE_CLASSES

    missing = {}
    if "lookahead" in SCHEDULES and "lookahead" in SCHEDULE_CLASSES:
        try:
            profiles["lookahead"] = fast.replace(schedule="lookahead", lookahead_steps=lookahead_steps)
        except (TypeError, ValueError) as exc:
            missing["lookahead"] = f"the profile refuses it: {exc}"
    else:
        missing["lookahead"] = (f"not in this version: profile schedules {SCHEDULES}, engine drivers "
                                f"{sorted(SCHEDULE_CLASSES)}")
    return profiles, missing


class VLAActorCritic(ppo.ActorCritic):
    """The example's actor-critic head over [adapted VLA output, proprioception, task offset] (module docs):
    ``AdaptedVLA(**vla_arguments)`` is built here (its own adapters; the frozen transformer from its seed)
    and trains with the head."""

    def __init__(self, vla_arguments: dict, obs_dim: int, action_dim: int, chunk_size: int) -> None:
        vla = AdaptedVLA(**vla_arguments)
        super().__init__(obs_dim + vla.chunk_size * vla.action_dim, action_dim, chunk_size)
        self.vla = vla

    def features(self, obs: dict) -> torch.Tensor:
        own = ppo.ActorCritic.features(obs)
        adapted = self.vla(obs).cpu()
        return torch.cat([adapted.reshape(len(own), -1), own], dim=-1)


def reached(entries: list[dict], target: float, window: int) -> bool:
    """The episode-weighted success rate of the last ``window`` iterations is at least ``target``."""
    recent = [e for e in entries[-window:] if e["success_rate"] is not None]
    episodes = sum(e["episodes"] for e in recent)
    return len(entries) >= window and episodes > 0 and (
        sum(e["success_rate"] * e["episodes"] for e in recent) / episodes >= target)


def layout_config(config: Any, layout: str) -> Any:
    """``config`` for ``layout``: collect-while-train (``max_lag=1``) for an ``+overlap`` layout, else serial."""
    return replace(config, max_lag=int(layout.endswith(OVERLAP)))


def samples_to_target(config: Any, profile: RolloutProfile, factory: Any, policy_class: Callable,
                      target: float, window: int) -> dict[str, Any]:
    """Train under ``profile`` until :func:`reached` (or ``config.iterations``); env steps and wall then."""
    entries: list[dict] = []

    def stop(entry: dict) -> bool:
        entries.append(entry)
        return reached(entries, target, window)

    torch.manual_seed(config.seed)
    run, _ = ppo.train(config, profile=profile, factory=factory, make_policy=policy_class, stop=stop)
    hit = reached(entries, target, window)
    return {"seed": config.seed, "reached": hit, "samples": run["env_steps"][-1] if hit else None,
            "direct_wall_s": run["wall_s"][-1] if hit else None, "iterations": len(run["env_steps"]),
            "success_rate": run["success_rate"], "env_steps": run["env_steps"], "wall_s": run["wall_s"],
            "policy_lag": run["policy_lag"]}


def per_sample(run: dict[str, Any], key: str) -> float | None:
    """Median over the iterations after the first of ``run[key]`` per own action of the iteration."""
    values = run[key][1:]
    if not values or any(v is None for v in values):
        return None
    samples = np.diff([0, *run["env_steps"]])[1:]
    return float(statistics.median(np.array(values, dtype=float) / samples))


def seconds_per_sample(config: Any, profile: RolloutProfile, factory: Any, policy_class: Callable,
                       iterations: int, device: str = "cpu") -> tuple[dict[str, Any], tuple[Any, Any]]:
    """Seconds per own action under ``profile`` and ``config``'s lag: medians over ``iterations`` PPO iterations
    after a first, uncounted one (module docs), and (the trained model, its last batch). On a GPU ``device``
    with NVML also the GPU's busy seconds per own action (:class:`~behavior1k_fast.tools.measure.gpu.GPUBusy`:
    kernel time of every stream, the forwards' and the update's), the bound max(GPU busy, busiest env
    worker) and the share of it the trainer's wall reaches (``of_bound``)."""
    last: list = []
    marks = [time.time()]

    def seen(it: int, batch: Any, entry: dict) -> None:
        last[:] = [batch]
        marks.append(time.time())

    missing = gpu_busy_missing(device)
    with GPUBusy(device) if missing is None else contextlib.nullcontext() as busy:
        run, model = ppo.train(replace(config, iterations=iterations + 1), profile=profile, factory=factory,
                               make_policy=policy_class, on_iteration=seen)
    wait, update = per_sample(run, "rollout_s"), per_sample(run, "update_s")
    env_busy = per_sample(run, "busiest_env_s")
    gpu_busy = None
    if busy is not None:
        run["gpu_busy_s"] = [busy.seconds(a, b) for a, b in zip(marks, marks[1:])]
        gpu_busy = per_sample(run, "gpu_busy_s")
    return cost_row(wait, update, rollout=per_sample(run, "collect_s"), env_busy=env_busy,
                    model=per_sample(run, "model_s"), gpu_busy=gpu_busy, gpu_busy_missing=missing), (model, last[0])


def cost_row(wait: float, update: float, rollout: float | None = None, env_busy: float | None = None,
             model: float | None = None, gpu_busy: float | None = None,
             gpu_busy_missing: str | None = "not measured for a peer") -> dict[str, Any]:
    """One layout's or peer's seconds per own action (module docs): the trainer's wait for a batch and its
    update (their sum is ``s_per_sample``), the rollout's own wall, the busiest env worker's stepping, the
    behaviour forwards, the GPU's busy time, and the bound max(GPU busy, env busy) with the share of it the
    trainer's wall reaches (``of_bound``: 1.0 is the bound)."""
    sides = [v for v in (gpu_busy, env_busy) if v is not None]
    bound = max(sides) if sides else None
    return {"rollout_s_per_sample": rollout, "wait_s_per_sample": wait, "update_s_per_sample": update,
            "env_busy_s_per_sample": env_busy, "model_s_per_sample": model, "gpu_busy_s_per_sample": gpu_busy,
            "gpu_busy_missing": gpu_busy_missing, "bound_s_per_sample": bound,
            "of_bound": None if bound is None else bound / (wait + update), "s_per_sample": wait + update}


def peer_seconds_per_sample(policy: Any, spaces: tuple, profile: RolloutProfile, factory: Any, config: Any,
                            update_s_per_sample: float, repeats: int) -> dict[str, float]:
    """The double-buffer peer's rollout seconds per own action with ``policy`` acting (median of ``repeats``
    runs of ``config.rounds`` rounds; ``spaces``: one env's observation and action spaces), plus
    ``update_s_per_sample`` (the same PPO update, after the rollout)."""
    from behavior1k_fast.tools.bench.peers import run_peer

    def act(obs: dict) -> np.ndarray:
        return policy(obs)[0].numpy().astype(np.float64)

    rates = []
    for _ in range(repeats):
        raw = run_peer(factory, profile, act, spaces, profile.num_env_processes, profile.envs_per_process, 2,
                       config.rounds, warmup=1, seed=config.seed)
        rates.append(raw["wall_s"] / raw["own_actions"])
    rollout = float(statistics.median(rates))
    return cost_row(rollout, update_s_per_sample, rollout=rollout)


class TorchRLActor(torch.nn.Module):
    """An engine policy as a TorchRL actor: the observation tensors of ``obs_space``'s keys (in that order), envs
    stacked along any leading dims (a multi-process worker's E envs; the batched collector's requests of one
    env each) -> (the chunk as float64, log-prob, value), with the same leading dims.

    Its only tensors are a CPU mirror of the policy's trained parameters (``trained``: the adapters and the
    head), so TorchRL's weight sync carries those, as a LoRA user syncs a VLA. The policy itself is built by
    ``make_policy`` (picklable, no tensors: a spawned worker builds its own, the frozen transformer from its
    seed on its device) at the first forward, which, as each one, first copies the mirror into it."""

    def __init__(self, make_policy: Callable[[], Any], trained: dict, obs_space: Any) -> None:
        super().__init__()
        self.__dict__.update(make_policy=make_policy, policy=None)  # not submodules: TorchRL syncs the mirror only
        self.keys = tuple(obs_space.spaces)
        self.event_dims = {k: len(obs_space[k].shape) for k in self.keys}
        self.mirror = torch.nn.ParameterDict({
            self.key(name): torch.nn.Parameter(p.detach().cpu().clone(), requires_grad=False)
            for name, p in trained.items()})

    @staticmethod
    def key(name: str) -> str:
        """The mirror's key of a parameter name (a ParameterDict key holds no dots)."""
        return name.replace(".", "__")

    def __getstate__(self) -> dict:
        return {**self.__dict__, "policy": None}  # a worker builds its own

    def refresh(self, trained: dict) -> None:
        """The mirror takes ``trained``'s values (the trainer's, before posting them)."""
        with torch.no_grad():
            for name, p in trained.items():
                self.mirror[self.key(name)].copy_(p)

    def forward(self, *values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.policy is None:
            self.__dict__["policy"] = self.make_policy()
        with torch.no_grad():
            for name, p in ppo.trained_state(self.policy).items():
                p.copy_(self.mirror[self.key(name)])
        lead = values[0].shape[:values[0].ndim - self.event_dims[self.keys[0]]]
        obs = {k: v.reshape(-1, *v.shape[v.ndim - self.event_dims[k]:]) for k, v in zip(self.keys, values)}
        chunk, extras = self.policy(obs)
        return (chunk.double().reshape(*lead, *chunk.shape[1:]), extras["logprob"].reshape(lead),
                extras["value"].reshape(lead))


class CountedChunkEnv(gymnasium.Wrapper):
    """``peers.ChunkGymEnv`` whose step info holds ``own_actions`` as an int64 array (TorchRL reads arrays)."""

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "own_actions": np.asarray(info["own_actions"], np.int64)}


def torchrl_env(factory: Any, envs: int, seed: int, profile: RolloutProfile, spaces: tuple) -> Any:
    """One TorchRL worker's env: ``peers.ChunkGymEnv`` (``envs`` envs of one backend, a chunk per step) through
    ``GymWrapper``, reading the actions the envs took (``own_actions``) from the step info."""
    from torchrl.envs import GymWrapper
    from torchrl.envs.gym_like import default_info_dict_reader

    from behavior1k_fast.tools.bench.peers import ChunkGymEnv

    chunk_env = CountedChunkEnv(ChunkGymEnv(factory, envs, seed, profile, profile.chunk_size, spaces))
    env = GymWrapper(chunk_env, batch_size=torch.Size([]))
    env.set_info_dict_reader(default_info_dict_reader(["own_actions"]))
    return env


def torchrl_collector(kind: str, behaviour: Any, profile: RolloutProfile, factory: Any, spaces: tuple, seed: int,
                      rounds: int, batches: int) -> Any:
    """TorchRL's collector ``kind`` (:data:`PEER_SEMANTICS`) over ``profile``'s process budget, for ``batches``
    PPO batches of ``rounds`` chunks per env (each of :func:`batch_parts` TorchRL batches).
    ``MultiSyncCollector`` / ``MultiAsyncCollector``: one worker per env process, its E envs in one env,
    ``behaviour`` rebuilt in each worker (one policy copy per process, as those collectors run it); the async
    one's batches are one worker's ``rounds`` chunks. ``AsyncBatchedCollector``: E one-env envs per worker
    process and ``behaviour`` served from a thread of this process, whose inference server batches the
    requests that are ready (one policy copy; TorchRL's design for a policy too large to copy per worker). No
    TorchRL device is set: the policy places its own work (the transformer on its device, the head on the
    CPU, as in the engine's rows)."""
    import torchrl.collectors as collectors

    workers, per = profile.num_env_processes, profile.envs_per_process
    total = workers * per * rounds * batches  # frames: env steps of TorchRL envs (one of E envs, or of one)
    if kind == "torchrl_batched":
        fns = [functools.partial(torchrl_env, factory, 1, seed + i, profile, spaces) for i in range(workers * per)]
        return collectors.AsyncBatchedCollector(
            fns, policy=behaviour, frames_per_batch=workers * per * rounds, total_frames=total,
            env_backend="multiprocessing", envs_per_worker=per, transport="driver", max_batch_size=workers * per)
    collector_class = {"torchrl_sync": collectors.MultiSyncCollector,
                       "torchrl_async": collectors.MultiAsyncCollector}[kind]
    fns = [functools.partial(torchrl_env, factory, per, seed + i, profile, spaces) for i in range(workers)]
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


def torchrl_seconds_per_sample(kind: str, trained: tuple[Any, Any], make_policy: Callable[[], Any], spaces: tuple,
                               profile: RolloutProfile, factory: Any, config: Any, iterations: int) -> dict[str, float]:
    """Seconds per own action of TorchRL's collector ``kind`` (:func:`torchrl_collector`): per PPO batch of
    ``config.rounds`` chunks per env (:func:`batch_parts` TorchRL batches joined) the trainer runs the PPO
    update on ``trained``'s batch (the same size) with ``trained``'s model and posts the weights; the
    trainer's wall per PPO batch over the batch's own actions, median over ``iterations`` batches after a
    first, uncounted one. Also the seconds from the collector's construction to its first batch
    (``first_batch_s``: its workers' start) and the mean lag of the weights that chose each chunk behind the
    version posted when the trainer asked for its batch (``policy_lag``, :func:`acting_lags`; ``lag_unmatched``:
    the share of chunks no posted version chose, where the measure fails)."""
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    model, batch = trained
    keys = tuple(spaces[0].spaces)

    def actor() -> Any:
        return TensorDictModule(TorchRLActor(make_policy, ppo.trained_state(model), spaces[0]), in_keys=list(keys),
                                out_keys=["action", "logprob", "value"])

    # the collector's policy, and the trainer's copy whose mirror it posts (the batched collector serves the
    # former from this process: refreshing it in place would race its forwards)
    behaviour, posting = actor(), actor()
    optimizer = torch.optim.Adam(list(ppo.trained_state(model).values()), lr=config.lr, eps=1e-5)
    rng = np.random.default_rng(config.seed)
    parts = batch_parts(kind, profile)
    rollout, update, kept = [], [], []
    posted = [clone_trained(model)]  # version v: the weights after v updates
    with spawned_workers():
        began = time.perf_counter()
        collector = torchrl_collector(kind, behaviour, profile, factory, spaces, config.seed, config.rounds,
                                      iterations + 1)
        try:
            batches = iter(collector)
            for i in range(iterations + 1):
                data = torch.cat([next(batches) for _ in range(parts)])
                got = time.perf_counter()
                if not i:
                    first = got - began  # the workers' start and the first batch
                samples = int(data["next", "own_actions"].sum())
                ppo.ppo_update(model, optimizer, batch, config, rng)
                posting.module.refresh(ppo.trained_state(model))
                collector.update_policy_weights_(TensorDict.from_module(posting))
                done = time.perf_counter()
                if i:
                    rollout.append((got - began) / samples)
                    update.append((done - got) / samples)
                kept.append(data)
                posted.append(clone_trained(model))
                began = time.perf_counter()
        finally:
            collector.shutdown()
    lags = torch.cat(acting_lags(model, kept, posted, keys))
    matched = ~lags.isnan()
    return {**cost_row(float(statistics.median(rollout)), float(statistics.median(update))), "first_batch_s": first,
            "policy_lag": float(lags[matched].mean()) if matched.any() else None,
            "lag_unmatched": float(1 - matched.double().mean())}


def clone_trained(model: Any) -> dict:
    """A copy of ``model``'s trained parameters."""
    return {name: p.detach().clone() for name, p in ppo.trained_state(model).items()}


def acting_lags(model: Any, batches: list, posted: list[dict], keys: tuple[str, ...]) -> list[torch.Tensor]:
    """Per TorchRL PPO batch ``i`` after the first (asked for when the trainer had posted version ``i``: the
    weights ``posted[i]``), each chunk's lag ``i - v``: ``v`` the newest version whose log-prob of the chunk's
    action is the one recorded (TorchRL's multi-process collectors record no version), NaN where none is
    (all 0: serial; 1: collected while the trainer made the update before)."""
    checker = copy.deepcopy(model)
    lags = []
    for i, data in enumerate(batches[1:], start=1):
        flat = data.reshape(-1)
        obs = {k: flat[k].reshape(-1, *flat[k].shape[2:]) for k in keys}
        action = flat["action"][:, :, 0].reshape(-1, flat["action"].shape[-1]).float()
        recorded = flat["logprob"].reshape(-1).float()
        lag = torch.full_like(recorded, float("nan"))
        for version in range(i, -1, -1):
            checker.load_state_dict(posted[version], strict=False)
            with torch.no_grad():
                logprob = checker.evaluate(checker.features(obs), action)[0]
            lag[lag.isnan() & torch.isclose(logprob, recorded, rtol=0, atol=1e-3)] = i - version
            if not lag.isnan().any():
                break
        lags.append(lag)
    return lags


def layout_rows(cost: dict[str, dict], trained: dict[str, list]) -> dict[str, dict]:
    """Per layout or peer of ``cost`` (its seconds per sample): its semantics' samples to target from the
    training runs ``trained`` (semantics -> runs, one per seed), and their product, the wall to target,
    per seed and as :func:`spread`; a layout that the semantics trained under also gets the runs' own wall."""
    layouts = {}
    for name, c in cost.items():
        runs = trained.get(semantics_of(name), [])
        per_seed = [None if r["samples"] is None else r["samples"] * c["s_per_sample"] for r in runs]
        layouts[name] = {"semantics": semantics_of(name), "trained_under": TRAINED_UNDER[semantics_of(name)], **c,
                         "samples_to_target": spread([r["samples"] for r in runs]),
                         "wall_to_target_s_per_seed": per_seed, "wall_to_target_s": spread(per_seed)}
        if name == TRAINED_UNDER[semantics_of(name)]:
            layouts[name]["direct_wall_to_target_s"] = spread([r["direct_wall_s"] for r in runs])
    return layouts


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median and min-max of the values that exist (``None`` where no seed reached the target)."""
    have = [v for v in values if v is not None]
    if not have:
        return {"median": None, "min": None, "max": None, "seeds_reached": 0}
    return {"median": float(statistics.median(have)), "min": float(min(have)), "max": float(max(have)),
            "seeds_reached": len(have)}


def failure(exc: BaseException) -> str:
    """A failed peer's line: ``exc`` and then each exception it came from (``__cause__``, else ``__context__``),
    each as its type and the end of its message (a worker's own error comes last, after TorchRL's traceback)."""
    chain = [exc]
    while (chain[-1].__cause__ or chain[-1].__context__) not in (None, *chain):  # a chain can loop back
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return "failed: " + " <- ".join(f"{type(e).__name__}: ...{' '.join(str(e).split())[-400:]}" for e in chain)


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


class Judge:
    """What every run of one benchmark invocation shares: the PPO config, the env factory, the layouts'
    profiles, the device and the env's measured ms per chunk (module docs)."""

    def __init__(self, args: argparse.Namespace, progress: Callable[[str], None]) -> None:
        from behavior1k_fast.reference import ReachFactory

        self.args, self.progress = args, progress
        self.base = ppo.PPOConfig(iterations=args.iterations, processes=args.processes, envs=args.envs,
                                  chunk_size=args.chunk_size, rounds=args.rounds, executor="process")
        self.factory = ReachFactory(replace(ppo.make_factory(self.base).config,
                                            resolution=(args.resolution, args.resolution)))
        profiles, self.missing = layout_profiles(args.processes, args.envs, args.chunk_size, args.lookahead_steps)
        keep = {"k1_skip", *args.layouts}
        self.profiles = {n: p for n, p in profiles.items() if n in keep}
        self.missing = {n: why for n, why in self.missing.items() if n in keep}
        self.device = resolve_device(args.device)
        if self.device.startswith("cuda"):  # the behaviour copy's forwards on a CUDA stream of their own
            self.base = replace(self.base, policy_device=self.device)
        self.env_ms: float | None = None

    def policy_for(self, regime: str) -> tuple[Callable, Any, dict]:
        """The VLA-cost policy class sized for ``regime``, the calibrated (frozen) model, its calibration (as a
        dict, with the regime and the env's ms per chunk); prints the calibration."""
        from behavior1k_fast.tools.measure.calibration import calibrate
        from behavior1k_fast.tools.measure.config import usable_cores

        args = self.args
        sizing = {"model_width": args.model_width, "model_depth": args.model_depth}
        config = RunConfig(chunk_size=args.chunk_size, rounds=2, warmup=1, device=self.device, seed=0, **sizing)
        probe = args.model_depth is None and self.env_ms is None
        if probe:  # the first calibration measures the env's ms per chunk and fits the balanced regime to it
            vla, calibration = calibrate(self.factory, self.profiles["k1_skip"], config, max_processes=usable_cores())
            self.env_ms = calibration.env_ms_per_stage_chunk
        if not probe or regime != "balanced":
            if args.model_depth is None:
                config = replace(config, model_ms=REGIMES[regime] * self.env_ms)
            vla, calibration = calibrate(self.factory, self.profiles["k1_skip"], config, max_processes=usable_cores())
        arguments = dict(observation_space=compact_space(vla.observation_space),
                         action_space=compact_space(vla.action_space),
                         chunk_size=args.chunk_size, width=calibration.model_width, depth=calibration.model_depth,
                         device=self.device, seed=0)
        info = {**calibration.to_dict(), "env_ms_per_stage_chunk": self.env_ms, "regime": regime,
                "model_ms_over_env_ms": REGIMES[regime], "adapter_rank": AdaptedVLA(**arguments).arguments["rank"]}
        self.progress(f"{regime}: " + format_model_cost(calibration))
        return functools.partial(VLAActorCritic, arguments), vla, info

    def trained(self, layout: str, profile: RolloutProfile, policy_class: Callable, seed: int) -> dict:
        """One training run under ``layout`` with ``seed`` (samples to target)."""
        config = replace(layout_config(self.base, layout), seed=seed)
        run = samples_to_target(config, profile, self.factory, policy_class, self.args.target, self.args.window)
        self.progress(f"{semantics_of(layout)} ({layout}) seed {seed}: samples to target {run['samples']} "
                      f"({run['iterations']} iterations)")
        return run

    def regime(self, regime: str, checkpoint: Callable[[dict], None]) -> dict[str, Any]:
        """Every layout's samples to target, seconds per sample and their product in ``regime``: the seconds per
        sample first (every layout, then the peers), then the training runs seed by seed, each semantics per
        seed; ``checkpoint`` gets what is measured so far after each piece (a run cut short keeps it)."""
        args = self.args
        policy_class, vla, calibration = self.policy_for(regime)
        cost: dict[str, dict] = {}
        missing = dict(self.missing)
        missing.update({name + OVERLAP: why for name, why in self.missing.items()})
        trained: dict[str, list] = {s: [] for s, layout in TRAINED_UNDER.items()
                                    if layout.removesuffix(OVERLAP) in self.profiles}
        so_far = {"calibration": calibration, "cost": cost, "not_run": missing, "training_runs": trained}
        runs: dict[str, tuple] = {}  # layout -> (its trained model, its last batch)
        for name in [name + suffix for suffix in ("", OVERLAP) for name in self.profiles]:
            config = layout_config(self.base, name)
            cost[name], runs[name] = seconds_per_sample(config, self.profiles[name.removesuffix(OVERLAP)],
                                                        self.factory, policy_class, args.cost_iterations, self.device)
            self.progress(f"{regime} {name}: {cost[name]['s_per_sample'] * 1e3:.3f} ms per sample")
            checkpoint(so_far)
        spaces = (compact_space(vla.observation_space), compact_space(vla.action_space))
        obs_dim = sum(int(np.prod(vla.observation_space[k].shape)) for k in ppo.OBS_KEYS)
        make_policy = functools.partial(policy_class, obs_dim, int(np.prod(vla.action_space.shape)), args.chunk_size)
        if args.processes % 2 == 0:
            policy = make_policy()
            cost["double_buffer_peer"] = peer_seconds_per_sample(policy, spaces, self.profiles["k1_skip"],
                                                                 self.factory, self.base,
                                                                 cost["k1_skip"]["update_s_per_sample"],
                                                                 args.cost_iterations)
        else:
            missing["double_buffer_peer"] = f"a double buffer needs an even process count, got {args.processes}"
        why_not = torchrl_missing()
        for kind in TORCHRL_PEERS:
            if why_not:
                missing[kind] = why_not
                continue
            # the PPO of the engine layout whose samples to target the peer shares: decoupled where it lags
            twin = TRAINED_UNDER[semantics_of(kind)]
            try:
                cost[kind] = {**torchrl_seconds_per_sample(kind, runs[twin], make_policy, spaces,
                                                           self.profiles["k1_skip"], self.factory,
                                                           layout_config(self.base, twin), args.cost_iterations),
                              "update_as": twin}
            except Exception as exc:  # noqa: BLE001 - a peer's failure is reported (not_run), the rest still runs
                missing[kind] = failure(exc)
                self.progress(f"{regime} {kind}: {missing[kind]}")
        for name in PEER_SEMANTICS:
            if name in cost:
                self.progress(f"{regime} {name}: {cost[name]['s_per_sample'] * 1e3:.3f} ms per sample")
        checkpoint(so_far)
        for seed in range(args.seeds):
            for semantics, runs in trained.items():
                layout = TRAINED_UNDER[semantics]
                runs.append(self.trained(layout, self.profiles[layout.removesuffix(OVERLAP)], policy_class, seed))
                checkpoint(so_far)
        result = {"calibration": calibration, "layouts": layout_rows(cost, trained), "not_run": missing,
                  "training_runs": trained}
        result["direct"] = self.direct_run(result, policy_class)
        return result

    def direct_run(self, result: dict[str, Any], policy_class: Callable) -> dict[str, Any] | None:
        """One direct run (seed 0) of the engine layout with the shortest median wall to target, where that
        layout is not one the semantics trained under (whose runs are direct already)."""
        engine = {n: r for n, r in result["layouts"].items()
                  if n not in PEER_SEMANTICS and r["wall_to_target_s"]["median"] is not None}
        if not engine:
            return None
        best = min(engine, key=lambda n: engine[n]["wall_to_target_s"]["median"])
        if "direct_wall_to_target_s" in engine[best]:
            return {"layout": best, "wall_s": engine[best]["direct_wall_to_target_s"], "from": "training runs"}
        run = samples_to_target(layout_config(self.base, best), self.profiles[best.removesuffix(OVERLAP)],
                                self.factory, policy_class, self.args.target, self.args.window)
        self.progress(f"direct run of {best}: {run['direct_wall_s']} s to the target")
        return {"layout": best, "wall_s": run["direct_wall_s"], "samples": run["samples"], "from": "its own run"}

    def lead_sweep(self, regime: str, checkpoint: Callable[[dict], None]) -> dict[str, Any]:
        """Samples to target, seconds per sample and wall to target per lookahead lead d (module docs);
        ``checkpoint`` gets the finished leads' rows after each lead."""
        n = self.args.chunk_size
        leads = sorted({d for d in (0, 1, 2, 4, n // 2, n - 1) if 0 <= d < n})
        policy_class, _, calibration = self.policy_for(regime)
        rows = {}
        for d in leads:
            profile = self.profiles["k1_skip"].replace(schedule="lookahead", lookahead_steps=d)
            runs = [self.trained("lookahead", profile, policy_class, seed) for seed in range(self.args.seeds)]
            cost, _ = seconds_per_sample(self.base, profile, self.factory, policy_class, self.args.cost_iterations,
                                         self.device)
            per_seed = [None if r["samples"] is None else r["samples"] * cost["s_per_sample"] for r in runs]
            rows[str(d)] = {"lead": d, **cost, "samples_to_target": spread([r["samples"] for r in runs]),
                            "wall_to_target_s_per_seed": per_seed, "wall_to_target_s": spread(per_seed),
                            "seeds_reached": sum(r["reached"] for r in runs), "training_runs": runs}
            self.progress(f"lead {d}: samples to target {rows[str(d)]['samples_to_target']['median']}, "
                          f"{cost['s_per_sample'] * 1e3:.3f} ms per sample")
            checkpoint({"calibration": calibration, "leads": rows})
        return {"calibration": calibration, "leads": rows}


def measure(args: argparse.Namespace, progress: Callable[[str], None] = print,
            checkpoint: Callable[[dict], None] = lambda partial: None) -> dict[str, Any]:
    """Per regime, every layout's samples to target, seconds per sample and their product (module docs); with
    ``--lead-sweep`` the lead sweep of the first regime instead. ``checkpoint`` gets the result so far after
    each measured piece: the finished regimes and, under ``in_progress``, the current one's pieces."""
    judge = Judge(args, progress)
    profiles = {n: p.to_dict() for n, p in judge.profiles.items()}
    if args.lead_sweep:
        sweep = judge.lead_sweep(args.regime[0], lambda rows: checkpoint({"lead_sweep": rows, "profiles": profiles}))
        return {"lead_sweep": sweep, "profiles": profiles}
    done: dict[str, Any] = {}
    for regime in args.regime:
        done[regime] = judge.regime(regime, lambda so_far: checkpoint(
            {"regimes": done, "in_progress": {regime: so_far}, "profiles": profiles}))
    return {"regimes": done, "profiles": profiles}


def plot(result: dict[str, Any], path: Path) -> None:
    """Per regime: wall clock to the target per layout (median, min-max over seeds) and seconds per sample
    (rollout and update), a regime of a run cut short (``in_progress``) with what it measured;
    ``--lead-sweep``: samples, seconds per sample and wall to target against the lead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "lead_sweep" in result:
        rows = list(result["lead_sweep"]["leads"].values())
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        leads = [r["lead"] for r in rows]
        for ax, key, label in ((axes[0], "samples_to_target", "samples to target"),
                               (axes[2], "wall_to_target_s", "wall s to target")):
            ax.plot(leads, [r[key]["median"] or np.nan for r in rows], "o-")
            ax.set_ylabel(label)
        axes[1].plot(leads, [r["s_per_sample"] * 1e3 for r in rows], "o-")
        axes[1].set_ylabel("ms per sample")
        for ax in axes:
            ax.set_xlabel("lookahead lead d (steps)")
    else:
        regimes = {**result["regimes"], **{f"{regime} (cut short)": {"layouts": layout_rows(data["cost"],
                                                                                           data["training_runs"])}
                                           for regime, data in result.get("in_progress", {}).items()}}
        fig, axes = plt.subplots(len(regimes), 2, figsize=(14, 4.5 * len(regimes)), squeeze=False)
        for (regime, data), (left, right) in zip(regimes.items(), axes):
            names = list(data["layouts"])
            rows = [data["layouts"][n] for n in names]
            wall = [r["wall_to_target_s"]["median"] or 0.0 for r in rows]
            low = [w - (r["wall_to_target_s"]["min"] or w) for w, r in zip(wall, rows)]
            high = [(r["wall_to_target_s"]["max"] or w) - w for w, r in zip(wall, rows)]
            left.bar(names, wall, yerr=[low, high], capsize=3)
            left.set_ylabel(f"{regime}: wall s to success >= {result['config']['target']} (0: not reached)",
                            fontsize=8)
            right.bar(names, [r["s_per_sample"] * 1e3 for r in rows], label="ms per sample (trainer's wall)")
            right.plot(names, [(r["rollout_s_per_sample"] or np.nan) * 1e3 for r in rows], "o", label="rollout")
            right.plot(names, [r["update_s_per_sample"] * 1e3 for r in rows], "x", label="update")
            right.legend(fontsize=7)
            for ax in (left, right):
                ax.tick_params(axis="x", rotation=40, labelsize=7)
    fig.suptitle(f"time to a trained policy ({result['machine']['cpu_model']}, {result['config']['seeds']} seeds)",
                 fontsize=9)
    save_figure(fig, path)


def format_table(result: dict[str, Any]) -> str:
    """The result as markdown tables: per regime, one row per layout (``--lead-sweep``: one per lead)."""
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.3f}"

    def wall(w: dict) -> str:
        return "not reached" if w["median"] is None else f"{w['median']:.1f} ({w['min']:.1f}-{w['max']:.1f})"

    def samples(s: dict) -> str:
        return "-" if s["median"] is None else f"{s['median']:.0f}"

    if "lead_sweep" in result:
        lines = ["| lead d | ms/sample | samples to target | seeds reached | wall to target s (min-max) |",
                 "| ---: | ---: | ---: | ---: | ---: |"]
        for r in result["lead_sweep"]["leads"].values():
            lines.append(f"| {r['lead']} | {ms(r['s_per_sample'])} | {samples(r['samples_to_target'])} | "
                         f"{r['seeds_reached']} | {wall(r['wall_to_target_s'])} |")
        return "\n".join(lines)
    lines = []
    for regime, data in result["regimes"].items():
        lines += [f"{regime} (T_model / T_env = {REGIMES[regime]}):",
                  "| layout | semantics | ms/sample | rollout ms/sample | update ms/sample | samples to target | "
                  "wall to target s (min-max) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in data["layouts"].items():
            lines.append(f"| {name} | {r['semantics']} | {ms(r['s_per_sample'])} | {ms(r['rollout_s_per_sample'])} | "
                         f"{ms(r['update_s_per_sample'])} | {samples(r['samples_to_target'])} | "
                         f"{wall(r['wall_to_target_s'])} |")
        if data["direct"]:
            lines.append(f"direct run of the best layout, {data['direct']['layout']}: {data['direct']['wall_s']}")
    return "\n".join(lines)


QUICK = {"iterations": 3, "processes": 2, "envs": 4, "chunk_size": 4, "rounds": 4, "resolution": 16, "seeds": 1,
         "target": 0.05, "window": 1, "cost_iterations": 2, "model_width": 64, "model_depth": 2,
         "regime": ["balanced"], "layouts": ["k1_skip", "hybrid_k2"]}
#: The engine layouts (each also ``+overlap``).
LAYOUTS = ("stock", "k1_skip", "hybrid_k2", "process_k2", "lookahead")


def layout_list(text: str) -> list[str]:
    """``--layouts``: comma-separated names of :data:`LAYOUTS`."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(n not in LAYOUTS for n in names):
        raise argparse.ArgumentTypeError(f"expected comma-separated layouts of {','.join(LAYOUTS)}, got {text!r}")
    return list(dict.fromkeys(names))


def regime_list(text: str) -> list[str]:
    """``--regime``: comma-separated names of :data:`REGIMES`."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in REGIMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected comma-separated regimes of {','.join(REGIMES)}, got {text!r}")
    return list(dict.fromkeys(names))


def success_rate(text: str) -> float:
    """``--target``: a success rate in (0, 1]."""
    value = positive_number(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a success rate in (0, 1], got {text!r}")
    return value


def recorded_result(parser: argparse.ArgumentParser, name: str) -> dict[str, Any]:
    """The result JSON ``name`` of this benchmark (``--plot``), or a usage error naming it."""
    import json

    try:
        result = json.loads(Path(name).read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"argument --plot: cannot read {name!r}: {one_line(exc)}")
    if not isinstance(result, dict) or not ({"regimes", "lead_sweep"} & set(result)) or "config" not in result:
        parser.error(f"argument --plot: {name!r} is not a time_to_train result (no regimes or lead_sweep)")
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(description=__doc__.split("\n\n")[0], formatter_class=ppo.DefaultsHelp)
    parser.add_argument("--quick", action="store_true", help="small run for 2 cores: " + ", ".join(
        f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--regime", type=regime_list, default=list(REGIMES),
                        help="comma-separated regimes (" + ", ".join(f"{k}: T_model = {v} T_env"
                                                                     for k, v in REGIMES.items()) + ")")
    parser.add_argument("--lead-sweep", action="store_true",
                        help="the delay sweep of the lookahead lead (d = 0, 1, 2, 4, N/2, N-1) in the first --regime")
    parser.add_argument("--layouts", type=layout_list, default=list(LAYOUTS),
                        help="comma-separated engine layouts, each run serial and +overlap (k1_skip is always run: "
                             "the peers take its update)")
    parser.add_argument("--target", type=success_rate, default=0.7, help="success rate to reach")
    parser.add_argument("--window", type=positive_int, default=3, help="iterations the success rate is averaged over")
    parser.add_argument("--iterations", type=positive_int, default=150, help="most PPO iterations per training run")
    parser.add_argument("--seeds", type=positive_int, default=3, help="training runs per semantics (seeds 0, 1, ...)")
    parser.add_argument("--processes", type=process_count, default=2, help="env processes")
    parser.add_argument("--envs", type=env_count, default=16, help="envs in all (a multiple of --processes)")
    parser.add_argument("--chunk-size", type=chunk_steps, default=8, help="N actions per chunk")
    parser.add_argument("--rounds", type=positive_int, default=16, help="rounds (chunks per env) per PPO iteration")
    parser.add_argument("--resolution", type=positive_int, default=64, help="camera pixels per side")
    parser.add_argument("--lookahead-steps", type=lead_steps, default="auto",
                        help="the lookahead layout's lead d (an int below --chunk-size) or auto (the smallest d "
                             "that hides the forward)")
    parser.add_argument("--cost-iterations", type=positive_int, default=3,
                        help="PPO iterations that time each layout's seconds per sample (after one uncounted)")
    parser.add_argument("--model-width", type=positive_int, default=None,
                        help="fix the VLA's width (not given: calibrated)")
    parser.add_argument("--model-depth", type=positive_int, default=None,
                        help="fix the VLA's depth (needs --model-width; every regime then gets this size)")
    parser.add_argument("--device", type=device, default="auto", help="VLA device: cpu, cuda[:i] or auto")
    parser.add_argument("--out-dir", type=path, default=None, help=f"not given: ./{DEFAULT_OUT_DIR}")
    parser.add_argument("--record", action="store_true", help="write into the checkout's benchmarks/results/")
    parser.add_argument("--tag", type=file_name, default=None, help="machine tag in the file names")
    parser.add_argument("--plot", type=path, default=None, metavar="JSON",
                        help="only draw the .png of a recorded result (a run cut short too: what it measured) "
                             "into the output folder and exit")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if parser.get_default(key) == getattr(args, key):
                setattr(args, key, value)
    if args.record and args.out_dir:
        parser.error("--record writes benchmarks/results/; it cannot go with --out-dir")
    if args.model_depth is not None and args.model_width is None:
        parser.error(f"--model-depth {args.model_depth} needs --model-width")
    if args.lookahead_steps != "auto" and args.lookahead_steps >= args.chunk_size:
        parser.error(f"argument --lookahead-steps: must be below --chunk-size {args.chunk_size}, "
                     f"got {args.lookahead_steps}")
    if args.window > args.iterations:
        parser.error(f"--window {args.window} is longer than --iterations {args.iterations}: the target could "
                     f"never be reached")
    try:  # the layouts and the camera, before any env starts
        layout_profiles(args.processes, args.envs, args.chunk_size, args.lookahead_steps)
        from behavior1k_fast.reference import ReferenceConfig
        from behavior1k_fast.tools.argtypes import check_device
        from behavior1k_fast.tools.measure.policy import check_image_size

        ReferenceConfig(resolution=(args.resolution, args.resolution))
        check_image_size("--resolution", args.resolution)
        check_device(resolve_device(args.device))
        args.out = record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    if args.plot is not None:
        args.result = recorded_result(parser, args.plot)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.plot is not None:
        drawn = out / Path(args.plot).with_suffix(".png").name
        plot(args.result, drawn)
        print(f"wrote {drawn}")
        return 0
    loads = [sample_load()]
    start = time.perf_counter()
    machine = describe_machine(resolve_device(args.device))
    kind = "lead_sweep_" if args.lead_sweep else ""
    stem = f"time_to_train_{kind}{args.tag or machine_tag(machine)}"
    header = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "machine": machine, "config": {k: v for k, v in vars(args).items() if k != "out"}}

    def checkpoint(partial: dict) -> None:  # what is measured so far: a run cut short keeps it
        write_json({**header, "complete": False, "wall_s": time.perf_counter() - start, **partial},
                   out / f"{stem}.json")

    result = measure(args, checkpoint=checkpoint)
    loads.append(sample_load())
    result = {**header, "complete": True, "load": {"before": loads[0].to_dict(), "after": loads[1].to_dict()},
              "wall_s": time.perf_counter() - start, **result}
    write_json(result, out / f"{stem}.json")
    plot(result, out / f"{stem}.png")
    print(format_table(result))
    for regime, data in result.get("regimes", {}).items():
        if data["not_run"]:
            print(f"{regime}: not run: " + "; ".join(f"{k}: {v}" for k, v in data["not_run"].items()))
    warning = busy_warning(loads)
    if warning:
        print(warning)
    print(f"wrote {out / stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
