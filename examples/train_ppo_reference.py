"""PPO on the reference simulator's reach-and-touch task, through the rollout engine, in minutes on a CPU.

    python examples/train_ppo_reference.py                 # K = 2 hybrid pipeline + skip-obs; prints the curve
    python examples/train_ppo_reference.py --schedule lookahead  # K = 1, each chunk chosen d steps early
    python examples/train_ppo_reference.py --overlap       # collect the next batch while PPO updates on this one
    python examples/train_ppo_reference.py --compare       # every profile x seeds -> JSON + PNG

Task (``behavior1k_fast.reference.ReachFactory``): drive the base and arms until a grip point touches the
red can (proprioception + the can's offset from each grip point; no images). Reward per own action: minus
the grip-to-can distance in m, +5 on touching, which ends the episode; truncated after
``PPOConfig.horizon`` (80) own actions.

Policy: a small torch actor-critic (MLP 64-64, tanh). Each forward samples one action per env from a
diagonal Gaussian and repeats it over the chunk of N steps (an open-loop chunk); it returns
``(chunk, {"logprob", "value"})``, which the engine keeps with the chunk and
:class:`~behavior1k_fast.rollout.TrajectoryRecorder` returns as ``[rounds, envs]`` arrays. PPO treats a
chunk as one decision: its reward is the chunk's summed applied rewards (masked steps after an episode
ended inside the chunk carry 0), discounted by gamma**N per chunk; a truncated episode is bootstrapped
from the value of its final observation; GAE(lambda) over rounds.

Collection: a :class:`~behavior1k_fast.rollout.collector.Collector` drives the engine from a thread of its
own and hands out one batch of ``rounds`` rounds per iteration; the trainer's model and the behaviour
policy that acts are two objects, the behaviour copy getting the trained weights after each update
(:func:`trained_state`). By default the schedule is serial (``max_lag=0``: batch b is collected after the
update from batch b - 1); ``--overlap`` (``max_lag=1``) collects batch b + 1 while PPO updates on batch
b, so a batch may hold chunks chosen by the previous weights. Then PPO is decoupled (:func:`ppo_update`):
its ratio is clipped around the policy at the update's start and each sample weighted by that policy's
probability over the behaviour log-prob recorded with its chunk (``extras["logprob"]``), which corrects the
lag; each chunk's weights version is in ``extras[WEIGHTS_VERSION_KEY]`` and the curve records the mean lag
(``policy_lag``, in updates).

Profiles (``--profile``): ``k2_skip`` (hybrid partition, K = 2, on-demand observation; physics rescale
``preserve_sim_time`` so every own action spans 1/30 s of simulated time as with K = 1), ``k1_skip`` (no
pipeline, on-demand observation), ``stock`` (``RolloutProfile.stock``: every optimisation off, skip-obs
off and K = 1; modalities limited to proprioception, which is all the policy reads) and ``lookahead``
(``--schedule lookahead``: K = 1 + on-demand observation, each chunk chosen from the lead observation read
``--lookahead-steps`` d steps before the current chunk ends, :mod:`behavior1k_fast.rollout.schedules.lookahead`).

Under ``lookahead`` the policy also reads the d actions of the current chunk still to run after the lead
observation (``COMMITTED_KEY``, zeros where they do not run), flattened into the actor's and critic's
input next to proprioception and the task offset: with them the lead observation determines the state
the new chunk starts from. PPO trains on exactly that input (``Trajectory.obs``: the lead observations,
``Trajectory.committed``: the committed actions of each chunk); a chunk that an env sat out (its episode
ended after the lead: no step applied) is left out of the loss. Bootstrap values (the boundary
observations after a rollout, the final observation of a truncated episode) see no committed action
(zeros), as the first chunk of a rollout does. The default d is 7 = N - 1: what ``"auto"`` picks for this
task on the 2-core machine (a reference step of 8 envs is shorter than the lead report plus the forward:
every chunk after the first carried 7 committed actions), and the lead that hides a policy forward as
long as the chunk's env time (T_model ~ T_env, the setting of issue 21's goal). A fixed d keeps runs
deterministic (``"auto"`` derives d from measured times, so it could change run to run).

``--compare`` trains every profile (``--profiles``) for ``--seeds`` seeds (``--runs-from`` adds the runs of
an earlier ``--compare``, such as another lead's), compares the curves (:func:`compare`: a measure
agrees when the profiles' means differ by no more than one profile's spread over seeds), evaluates the
seed-0 policies trained under K = 2 and K = 1 under both profiles (the same policy, so the difference is
the task's), and writes ``ppo_reach_<machine>.json`` and ``.png`` to ``./behavior1k_fast_results``
(``--out-dir``; ``--record``: the checkout's committed ``benchmarks/results/``; ``cpu2`` on a 2-core machine).
Bad arguments are one-line usage errors (exit code 2) before any env starts.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from behavior1k_fast import RolloutProfile
from behavior1k_fast.reference import ReachFactory, ReferenceConfig
from behavior1k_fast.rollout import COMMITTED_KEY, RolloutEngine, TrajectoryRecorder, committed_width
from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY, Collector
from behavior1k_fast.tools.argtypes import Parser, lead_steps, positive_int
from behavior1k_fast.tools.argtypes import seed as seed_number
from behavior1k_fast.tools.measure import machine as report
from behavior1k_fast.tools.measure.config import DEFAULT_OUT_DIR, record_dir
from behavior1k_fast.tools.measure.machine import busy_warning, sample_load

#: Observation keys the policy reads.
OBS_KEYS = ("proprio", "task::target")
PROFILES = ("k2_skip", "k1_skip", "stock", "lookahead")


@dataclass(frozen=True)
class PPOConfig:
    """One training run. Sizes in envs, rounds (one chunk per env each) and own actions."""

    profile: str = "k2_skip"
    seed: int = 0
    iterations: int = 100
    processes: int = 2
    envs: int = 16
    chunk_size: int = 8
    rounds: int = 16
    horizon: int = 80
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    lr: float = 1e-3
    epochs: int = 8
    #: Epochs (the first ones) whose minibatches recompute the policy's input features with gradient; later
    #: epochs reuse the last computed, detached ones. Features without trained parameters (this example's)
    #: are the same either way; a policy with a trained encoder trains it in these epochs only.
    feature_epochs: int = 1
    minibatches: int = 4
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    #: Chunk rewards are divided by this before PPO (keeps values near 1).
    reward_scale: float = 10.0
    executor: str = "process"
    #: Lead d of the ``lookahead`` profile (an int < ``chunk_size`` or ``"auto"``; module docs).
    lookahead_steps: int | str = 7
    #: Weight versions a batch's chunks may lag the trainer (``Collector``'s ``max_lag``): 0 serial, 1 overlap.
    max_lag: int = 0
    #: The behaviour policy's CUDA device (``Collector``'s ``device``: its forwards on a stream of their own),
    #: or ``None`` for a policy on the CPU.
    policy_device: str | None = None


def make_profile(config: PPOConfig) -> RolloutProfile:
    layout = dict(
        num_env_processes=config.processes, total_num_envs=config.envs, chunk_size=config.chunk_size,
        obs_modalities=("proprio",),
    )
    if config.profile == "k2_skip":
        return RolloutProfile(pipeline_stages=2, partition="hybrid", physics_rescale="preserve_sim_time", **layout)
    if config.profile == "k1_skip":
        return RolloutProfile(pipeline_stages=1, **layout)
    if config.profile == "stock":
        return RolloutProfile.stock(**layout)
    if config.profile == "lookahead":
        return RolloutProfile(pipeline_stages=1, schedule="lookahead", lookahead_steps=config.lookahead_steps,
                              **layout)
    raise ValueError(f"profile must be one of {PROFILES}, got {config.profile!r}")


def make_factory(config: PPOConfig) -> ReachFactory:
    return ReachFactory(ReferenceConfig(num_objects=1, cameras=("head",), resolution=(16, 16), horizon=config.horizon))


class ActorCritic(nn.Module):
    """obs dict -> (chunk [B, N, A], {"logprob": [B], "value": [B]}) when called; :meth:`evaluate` for PPO.
    ``obs_dim``: the width of :meth:`features` (the committed actions' ``d * action_dim`` included)."""

    def __init__(self, obs_dim: int, action_dim: int, chunk_size: int, hidden: int = 64):
        super().__init__()
        self.chunk_size = chunk_size
        self.actor = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                   nn.Linear(hidden, action_dim))
        self.critic = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                    nn.Linear(hidden, 1))
        self.log_std = nn.Parameter(torch.full((action_dim,), -0.5))
        #: Act with the mean action instead of sampling (evaluation).
        self.deterministic = False
        with torch.no_grad():
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()

    @staticmethod
    def features(obs: dict) -> torch.Tensor:
        """[B, obs_dim]: the :data:`OBS_KEYS`, then the committed actions ``[B, d, A]`` flattened where
        ``obs`` holds them (``lookahead``)."""
        parts = [torch.as_tensor(obs[k]).float() for k in OBS_KEYS]
        if COMMITTED_KEY in obs:
            committed = torch.as_tensor(obs[COMMITTED_KEY]).float()
            parts.append(committed.reshape(len(committed), -1))
        return torch.cat(parts, dim=-1)

    def distribution(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.actor(x), self.log_std.exp())

    @torch.no_grad()
    def forward(self, obs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = self.features(obs)
        dist = self.distribution(x)
        action = dist.mean if self.deterministic else dist.sample()
        chunk = action[:, None, :].expand(-1, self.chunk_size, -1).contiguous()
        return chunk, {"logprob": dist.log_prob(action).sum(-1), "value": self.critic(x).squeeze(-1)}

    def evaluate(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob of ``action``, entropy and value, from the :meth:`features` ``x``."""
        dist = self.distribution(x)
        return dist.log_prob(action).sum(-1), dist.entropy().sum(-1), self.critic(x).squeeze(-1)


def trained_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters training changes (``requires_grad``), by name: what the behaviour copy is sent."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def load_trained(policy: nn.Module, weights: dict) -> None:
    """Load :func:`trained_state` into the behaviour copy (its frozen parts are its own already)."""
    policy.load_state_dict(weights, strict=False)


def with_no_commitment(obs: dict, batch: Any) -> dict:
    """``obs`` (key -> [n, ...]) as a policy input of ``batch``'s kind: under ``lookahead`` (the batch has
    ``committed``) with zero committed actions, as at a chunk boundary after a lead-0 chunk."""
    if getattr(batch, "committed", None) is None:
        return obs
    n = len(next(iter(obs.values())))
    return {**obs, COMMITTED_KEY: np.zeros((n, *batch.committed.shape[2:]), batch.committed.dtype)}


def advantages(batch: Any, policy: ActorCritic, config: PPOConfig) -> tuple[np.ndarray, np.ndarray]:
    """GAE over rounds at chunk level: ``(advantages, returns)``, each ``[rounds, envs]``. Bootstrap values
    see no committed action (:func:`with_no_commitment`)."""
    gamma_chunk = config.gamma ** config.chunk_size
    reward = batch.rewards.sum(axis=2) / config.reward_scale  # masked steps hold 0
    done = (batch.terminated | batch.truncated).any(axis=2)
    values = batch.extras["value"].astype(np.float64)
    eps = batch.episodes
    with torch.no_grad():
        last_value = policy.critic(policy.features(with_no_commitment(batch.last_obs, batch))).squeeze(-1).numpy()
        cut = eps.truncated & ~eps.terminated  # time limit: the episode would have gone on
        if cut.any():
            final = policy.features(with_no_commitment({k: v[cut] for k, v in eps.final_obs.items()}, batch))
            reward[eps.round[cut], eps.env[cut]] += gamma_chunk * policy.critic(final).squeeze(-1).numpy()
    adv = np.zeros_like(reward)
    running = np.zeros(reward.shape[1])
    for r in reversed(range(reward.shape[0])):
        next_value = last_value if r == reward.shape[0] - 1 else values[r + 1]
        delta = reward[r] + gamma_chunk * next_value * ~done[r] - values[r]
        running = delta + gamma_chunk * config.gae_lambda * ~done[r] * running
        adv[r] = running
    return adv, adv + values


def ppo_update(policy: ActorCritic, optimizer: torch.optim.Optimizer, batch: Any, config: PPOConfig,
               rng: np.random.Generator) -> dict[str, float]:
    """``config.epochs`` epochs of clipped PPO over the batch's chunks, on the input each chunk was chosen
    from (observations, and committed actions under ``lookahead``), leaving out chunks no step of which ran
    (sat out under ``lookahead``); mean losses of the last epoch.

    Serial (``config.max_lag == 0``) the ratio is against the behaviour log-probs, which are the current
    policy's. Under collect-while-train it is decoupled PPO (Hilton et al. 2021, "Batch size-invariance for
    policy optimization"): the ratio is clipped around the proximal policy, the policy at this update's start
    (one no-grad pass over the batch), and each sample is weighted by proximal / behaviour probability, so a
    chunk chosen by older weights corrects its bias without starting the update half clipped."""
    adv, returns = advantages(batch, policy, config)
    seen = dict(batch.obs)
    if getattr(batch, "committed", None) is not None:
        seen[COMMITTED_KEY] = batch.committed
    ran = batch.applied.any(axis=2).reshape(-1)
    # explicit rows: the committed actions of lead 0 are [R, E, 0, A], which reshape(-1, ...) cannot size
    inputs = {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])[ran] for k, v in seen.items()}
    action = torch.as_tensor(batch.actions[:, :, 0].reshape(-1, batch.actions.shape[-1])[ran])
    old_logprob = torch.as_tensor(batch.extras["logprob"].reshape(-1)[ran])
    adv = torch.as_tensor(adv.reshape(-1)[ran], dtype=torch.float32)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    returns = torch.as_tensor(returns.reshape(-1)[ran], dtype=torch.float32)
    n = len(adv)
    prox_logprob = old_logprob
    if config.max_lag > 0:
        with torch.no_grad():
            prox_logprob = torch.cat([policy.evaluate(policy.features({k: v[idx] for k, v in inputs.items()}),
                                                      action[idx])[0]
                                      for idx in np.array_split(np.arange(n), config.minibatches)])
    weight = (prox_logprob - old_logprob).exp()  # 1 where the behaviour's weights are the current ones
    x = None
    for epoch in range(config.epochs):
        losses = []
        for idx in np.array_split(rng.permutation(n), config.minibatches):
            if epoch < config.feature_epochs:
                features = policy.features({k: v[idx] for k, v in inputs.items()})
                if x is None:
                    x = torch.empty(n, features.shape[1])
                x[idx] = features.detach().to(x.device)
            else:
                features = x[idx]
            logprob, entropy, value = policy.evaluate(features, action[idx])
            ratio = (logprob - prox_logprob[idx]).exp()
            clipped = torch.min(ratio * adv[idx], ratio.clamp(1 - config.clip, 1 + config.clip) * adv[idx])
            policy_loss = -(weight[idx] * clipped).mean()
            value_loss = (value - returns[idx]).pow(2).mean()
            loss = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(list(trained_state(policy).values()), 0.5)
            optimizer.step()
            losses.append((policy_loss.item(), value_loss.item(), entropy.mean().item()))
    policy_loss, value_loss, entropy = np.mean(losses, axis=0)
    return {"policy_loss": float(policy_loss), "value_loss": float(value_loss), "entropy": float(entropy)}


def train(config: PPOConfig, on_iteration: Callable[[int, Any, dict], None] | None = None,
          profile: RolloutProfile | None = None, factory: Any = None,
          make_policy: Callable[[int, int, int], ActorCritic] | None = None,
          stop: Callable[[dict], bool] | None = None) -> tuple[dict[str, Any], ActorCritic]:
    """Train one policy; returns its learning curve (one entry per iteration) and the policy.
    ``on_iteration(it, batch, entry)`` sees every recorded batch and the curve entry just added. For other
    layouts and policies (``benchmarks/time_to_train.py``): ``profile`` and ``factory`` replace
    :func:`make_profile` and :func:`make_factory`, ``make_policy(obs_dim, action_dim, chunk_size)`` the
    ``ActorCritic`` (``obs_dim`` counts the :data:`OBS_KEYS` it reads and, under the ``lookahead`` schedule,
    the committed actions' ``d * action_dim``), and training ends early after the iteration whose entry
    ``stop`` accepts.

    Batches come from a :class:`Collector` with ``max_lag=config.max_lag`` (module docs) acting with a copy
    of the policy; an entry's ``rollout_s`` is the trainer's wait for its batch, ``collect_s`` the
    wall seconds of that batch's rollout less its wait for weights (the two differ when collection overlaps the update),
    ``busiest_env_s`` the busiest env worker's stepping seconds in it, ``model_s`` the behaviour policy's
    forwards in it, ``update_s`` the PPO update and the
    weights' posting, ``policy_lag`` the batch's mean weight versions
    behind the model it trains."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(config.seed)
    profile = profile or make_profile(config)
    curve: dict[str, list] = {k: [] for k in ("env_steps", "success_rate", "mean_return", "mean_length", "episodes",
                                              "wall_s", "rollout_s", "collect_s", "busiest_env_s", "model_s",
                                              "update_s", "policy_lag",
                                              "policy_loss", "value_loss", "entropy")}
    start = time.perf_counter()
    with RolloutEngine(factory or make_factory(config), profile, seed=config.seed, executor=config.executor) as engine:
        obs_dim = sum(int(np.prod(engine.observation_space[k].shape)) for k in OBS_KEYS)
        if profile.schedule == "lookahead":
            obs_dim += committed_width(profile) * engine.action_dim
        policy = (make_policy or ActorCritic)(obs_dim, engine.action_dim, config.chunk_size)
        optimizer = torch.optim.Adam(list(trained_state(policy).values()), lr=config.lr, eps=1e-5)
        behaviour = copy.deepcopy(policy)
        collector = Collector(engine, behaviour, config.rounds, max_lag=config.max_lag,
                              total_batches=config.iterations, load_weights=load_trained,
                              device=config.policy_device)
        env_steps, waited = 0, 0.0
        with collector:
            began = time.perf_counter()
            for it, batch in enumerate(collector):
                rolled = time.perf_counter()
                stats = collector.last_stats
                # the rollout's wall less its wait for the weights (serial: the whole update before it)
                collect_s = max(0.0, stats.wall_seconds - (collector.times.wait_weights_s - waited))
                waited = collector.times.wait_weights_s
                env_steps += int(stats.own_actions.sum())
                lag = float(np.mean(collector.version - batch.extras[WEIGHTS_VERSION_KEY]))
                losses = ppo_update(policy, optimizer, batch, config, rng)
                collector.update_policy_weights(trained_state(policy))
                entry = iteration_entry(batch, stats, env_steps, time.perf_counter() - start, began, rolled,
                                        collect_s, lag, losses)
                for key, value in entry.items():
                    curve[key].append(value)
                if on_iteration is not None:
                    on_iteration(it, batch, entry)
                if stop is not None and stop(entry):
                    break
                began = time.perf_counter()
    return {"config": asdict(config), "profile": profile.to_dict(), **curve}, policy


def iteration_entry(batch: Any, stats: Any, env_steps: int, wall_s: float, began: float, rolled: float,
                    collect_s: float, policy_lag: float, losses: dict) -> dict[str, Any]:
    """One learning-curve entry (:func:`train`): the batch's episodes, the clock, the losses. ``busiest_env_s``:
    the most wall seconds one env worker spent stepping in the batch (``None`` where the executor reports
    none)."""
    eps = batch.episodes
    busiest = stats.env_wall_seconds_per_worker
    return {
        "env_steps": env_steps,
        "success_rate": float(eps.success.mean()) if len(eps.env) else None,
        "mean_return": float(eps.returns.mean()) if len(eps.env) else None,
        "mean_length": float(eps.lengths.mean()) if len(eps.env) else None,
        "episodes": int(len(eps.env)),
        "wall_s": wall_s,
        "rollout_s": rolled - began,
        "collect_s": collect_s,
        "busiest_env_s": float(np.max(busiest)) if len(busiest) else None,
        "model_s": stats.model_seconds,
        "update_s": time.perf_counter() - rolled,
        "policy_lag": policy_lag,
        **losses,
    }


def evaluate_policy(policy: ActorCritic, config: PPOConfig, rounds: int = 60) -> dict[str, Any]:
    """Success rate and mean return of ``policy``'s mean actions over ``rounds`` rounds under
    ``config.profile`` (seed ``config.seed + 1000``: episodes no training run saw)."""
    policy.deterministic = True
    try:
        with RolloutEngine(make_factory(config), make_profile(config), seed=config.seed + 1000,
                           executor=config.executor) as engine:
            eps = TrajectoryRecorder(engine).rollout(policy, rounds)[1].episodes
    finally:
        policy.deterministic = False
    return {"profile": config.profile, "episodes": int(len(eps.env)), "success_rate": float(eps.success.mean()),
            "mean_return": float(eps.returns.mean()), "mean_length": float(eps.lengths.mean())}


def _weighted(run: dict[str, Any], key: str, first: int) -> float:
    """Episode-weighted mean of ``run[key]`` over iterations ``first`` to the end."""
    values, counts = run[key][first:], run["episodes"][first:]
    pairs = [(v, c) for v, c in zip(values, counts) if v is not None]
    return sum(v * c for v, c in pairs) / sum(c for _, c in pairs)


#: Measures of a learning curve compared across profiles: name -> (curve key, first iteration as a fraction).
MEASURES = {
    "final_success": ("success_rate", 0.75),  # the last quarter of the run: what was learned
    "final_return": ("mean_return", 0.75),
    "success_over_run": ("success_rate", 0.0),  # the whole run: how fast it was learned
}


def label(run: dict[str, Any]) -> str:
    """A run's curve name: its profile, with the lead for ``lookahead`` (``lookahead_d1``)."""
    config = run["config"]
    return f"lookahead_d{config['lookahead_steps']}" if config["profile"] == "lookahead" else config["profile"]


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each measure per curve (:func:`label`; per seed, mean, spread = max - min over seeds) and the verdict: two
    curves agree on a measure when their means differ by no more than the largest spread of one curve over
    seeds (run-to-run noise); ``against_k1_skip``: each curve against K = 1 alone (mean difference, the larger
    spread of the two as noise). At equal samples: every run is cut after its last iteration within the
    fewest env steps any run reached (``equal_samples``; a lookahead run has fewer per iteration: sat-out
    chunks). ``k1_skip_equals_stock``: the curves of the same seed are identical."""
    cap = min(run["env_steps"][-1] for run in runs)
    cut = []
    for run in runs:  # the curves (lists, one entry per iteration) up to the cap; config and profile as they are
        n = max(1, sum(steps <= cap for steps in run["env_steps"]))
        cut.append({k: v[:n] if isinstance(v, list) else v for k, v in run.items()})
    iterations = {f"{label(run)} seed {run['config']['seed']}": len(run["env_steps"]) for run in cut}
    out: dict[str, Any] = {"equal_samples": {"env_steps": cap, "iterations": iterations}}
    for measure, (key, start) in MEASURES.items():
        by_profile: dict[str, list[float]] = {}
        for run in cut:
            first = int(len(run[key]) * start)
            by_profile.setdefault(label(run), []).append(_weighted(run, key, first))
        means = {name: float(np.mean(v)) for name, v in by_profile.items()}
        noise = max(float(np.ptp(v)) for v in by_profile.values())
        out[measure] = {
            "per_seed": by_profile,
            "mean": means,
            "spread": {name: float(np.ptp(v)) for name, v in by_profile.items()},
            "run_to_run_noise": noise,
            "largest_difference_of_means": float(np.ptp(list(means.values()))),
            "agree_within_noise": bool(np.ptp(list(means.values())) <= noise),
        }
        if "k1_skip" in means:
            pairs = {}
            for name in means.keys() - {"k1_skip"}:
                pair_noise = max(float(np.ptp(by_profile[name])), float(np.ptp(by_profile["k1_skip"])))
                difference = means[name] - means["k1_skip"]
                pairs[name] = {"difference": difference, "noise": pair_noise,
                               "agree_within_noise": bool(abs(difference) <= pair_noise)}
            out[measure]["against_k1_skip"] = pairs
    out["k1_skip_equals_stock"] = {
        str(a["config"]["seed"]): all(a[k] == b[k] for k in ("env_steps", "success_rate", "mean_return", "value_loss"))
        for a in runs if a["config"]["profile"] == "k1_skip"
        for b in runs if b["config"]["profile"] == "stock" and b["config"]["seed"] == a["config"]["seed"]
    }
    return out


def smoothed(run: dict[str, Any], key: str, window: int = 5) -> np.ndarray:
    """Episode-weighted moving average of ``run[key]`` over ``window`` iterations, or the run's length if shorter
    (NaN where no episode ended); one value per iteration."""
    values = np.array([np.nan if v is None else v for v in run[key]], dtype=float)
    counts = np.where(np.isnan(values), 0, np.array(run["episodes"], dtype=float))
    kernel = np.ones(max(1, min(window, len(values))))  # a window longer than the run: the run's own length
    total = np.convolve(np.nan_to_num(values) * counts, kernel, mode="same")
    weight = np.convolve(counts, kernel, mode="same")
    return np.divide(total, weight, out=np.full_like(total, np.nan), where=weight > 0)


def plot(result: dict[str, Any], path: Path) -> None:
    """Success rate and return vs env steps, one line per run (5-iteration moving average), and the verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({label(run) for run in result["runs"]})
    palette = iter(["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive"])
    colors = {"k2_skip": "tab:blue", "k1_skip": "tab:orange", "stock": "black"}
    colors.update({name: next(palette) for name in names if name not in colors})
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    for run in result["runs"]:
        name, seed = label(run), run["config"]["seed"]
        steps = np.array(run["env_steps"]) / 1e3
        for ax, key in zip(axes, ("success_rate", "mean_return")):
            ax.plot(steps, smoothed(run, key), ":" if name == "stock" else "-", color=colors[name], linewidth=1.4,
                    label=name if seed == 0 else None)
    axes[0].set_ylabel("success rate (episodes ended per iteration)")
    axes[1].set_ylabel("episode return")
    for ax in axes:
        ax.set_xlabel("env steps (thousands of own actions)")
        ax.grid(alpha=0.3)
    seeds = len({run["config"]["seed"] for run in result["runs"]})
    axes[0].legend(title=f"{seeds} seeds each", fontsize=8)
    comparison = result["comparison"]
    lines = []
    for measure in MEASURES:
        c = comparison[measure]
        means = ", ".join(f"{name} {value:.2f}" for name, value in c["mean"].items())
        lines.append(f"{measure}: {means} (noise {c['run_to_run_noise']:.2f}; "
                     f"{'agree' if c['agree_within_noise'] else 'differ'})")
        if c.get("against_k1_skip"):
            lines.append("    against k1_skip: " + ", ".join(
                f"{name} {p['difference']:+.2f} (noise {p['noise']:.2f}; {'agree' if p['agree_within_noise'] else 'differ'})"
                for name, p in sorted(c["against_k1_skip"].items())))
    if comparison["k1_skip_equals_stock"]:
        lines.append(f"k1_skip == stock, curve for curve: {all(comparison['k1_skip_equals_stock'].values())}")
    fig.suptitle("PPO on the reference reach-and-touch task: " + ", ".join(names))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.04 + 0.02 * len(lines), 1, 1))
    fig.savefig(path, dpi=110)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default, except where it is ``None`` (the help says what "not given" means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0], formatter_class=DefaultsHelp)
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="the profile of one training run (not given: k2_skip)")
    parser.add_argument("--schedule", choices=("barrier", "lookahead"), default="barrier",
                        help="lookahead: the lookahead profile (K = 1, each chunk chosen d steps early)")
    parser.add_argument("--lookahead-steps", type=lead_steps, default=None, metavar="D",
                        help=f"lead d of the lookahead profile: an int < the chunk size or 'auto' (not given: "
                             f"{PPOConfig.lookahead_steps}); only with --schedule lookahead or lookahead in --profiles")
    parser.add_argument("--overlap", action="store_true",
                        help="collect the next batch while PPO updates on this one (Collector max_lag=1)")
    parser.add_argument("--seed", type=seed_number, default=0, help="the seed of one training run")
    parser.add_argument("--iterations", type=positive_int, default=PPOConfig.iterations,
                        help="PPO iterations per training run")
    parser.add_argument("--compare", action="store_true", help="run every profile for --seeds seeds; JSON + PNG")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="--compare: comma-separated profiles")
    parser.add_argument("--seeds", type=positive_int, default=2, help="--compare: seeds per profile (0, 1, ...)")
    parser.add_argument("--runs-from", action="append", default=[], metavar="JSON",
                        help="--compare: add the runs (and cross evaluations) of an earlier --compare's JSON")
    parser.add_argument("--out-dir", default=None, help=f"--compare: where the JSON and PNG go (not given: "
                                                        f"./{DEFAULT_OUT_DIR})")
    parser.add_argument("--record", action="store_true",
                        help="--compare: write into the source checkout's committed benchmarks/results/ instead")
    args = parser.parse_args(argv)
    if args.schedule == "lookahead" and args.profile not in (None, "lookahead"):
        parser.error(f"--schedule lookahead runs the lookahead profile, got --profile {args.profile}")
    profile_name = "lookahead" if args.schedule == "lookahead" else args.profile or "k2_skip"
    lead = PPOConfig.lookahead_steps if args.lookahead_steps is None else args.lookahead_steps
    names = [n for n in args.profiles.split(",") if n]
    for name in names:
        if name not in PROFILES:
            parser.error(f"--profiles: {name!r} is not one of {','.join(PROFILES)}")
    runs_lookahead = "lookahead" in names if args.compare else profile_name == "lookahead"
    if args.lookahead_steps is not None and not runs_lookahead:
        parser.error(f"--lookahead-steps {args.lookahead_steps} sets the lead of the lookahead schedule, which "
                     f"this run does not use (--schedule lookahead, or lookahead in --profiles with --compare)")
    if args.record and args.out_dir is not None:
        parser.error(f"--record writes benchmarks/results/; it cannot go with --out-dir {args.out_dir}")
    try:
        out = Path(record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR))
    except ValueError as exc:
        parser.error(str(exc))
    earlier = []
    for path in args.runs_from:
        try:
            earlier.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            parser.error(f"--runs-from {path}: not a --compare JSON ({exc})")
    try:  # bad layouts fail here, before any env starts
        make_profile(PPOConfig(profile="lookahead", lookahead_steps=lead))
    except ValueError as exc:
        parser.error(f"--lookahead-steps {args.lookahead_steps}: {exc}")

    def progress(config: PPOConfig) -> Callable:
        def show(it: int, batch: Any, entry: dict) -> None:
            rate = "-" if entry["success_rate"] is None else f"{entry['success_rate']:.2f}"
            ret = "-" if entry["mean_return"] is None else f"{entry['mean_return']:.1f}"
            print(f"{config.profile} seed {config.seed} iter {it + 1:3d}  env steps {entry['env_steps']:7d}  "
                  f"success {rate:>4}  return {ret:>6}  ({entry['wall_s']:.0f} s)", flush=True)
        return show

    if not args.compare:
        config = PPOConfig(profile=profile_name, seed=args.seed, iterations=args.iterations, lookahead_steps=lead,
                           max_lag=int(args.overlap))
        train(config, progress(config))
        return 0
    loads = [sample_load()]
    runs, policies = [run for e in earlier for run in e["runs"]], {}
    for seed in range(args.seeds):
        for name in names:
            config = PPOConfig(profile=name, seed=seed, iterations=args.iterations, lookahead_steps=lead,
                               max_lag=int(args.overlap))
            run, policies[name, seed] = train(config, progress(config))
            runs.append(run)
    # The same trained policy under each profile: what the profile changes in the task itself (a lookahead
    # policy reads committed actions, which only the lookahead profile gives: evaluated under it alone).
    barrier = [n for n in ("k2_skip", "k1_skip") if n in names]
    pairs = [(trained, profile) for trained in barrier for profile in barrier]
    pairs += [("lookahead", "lookahead")] if "lookahead" in names else []
    # one --compare has one lead: an earlier JSON's cross evaluations ran at the lead of its runs
    cross = [{**c, "lookahead_steps": e["runs"][0]["config"]["lookahead_steps"]} if c["profile"] == "lookahead" else c
             for e in earlier for c in e["cross_evaluation"]] + [
        {"trained_under": trained, **({"lookahead_steps": lead} if profile == "lookahead" else {}),
         **evaluate_policy(policies[trained, 0], PPOConfig(profile=profile, lookahead_steps=lead))}
        for trained, profile in pairs
    ]
    loads.append(sample_load())
    machine = report.describe_machine("cpu")
    notes = []
    if args.iterations < PPOConfig.iterations:
        notes.append(f"{args.iterations} iterations per run instead of {PPOConfig.iterations}: the time left on "
                     f"the shared 2-core machine")
    result = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "load": {"before": loads[0].to_dict(), "after": loads[1].to_dict()},
        "notes": notes,
        "profiles": sorted({label(run) for run in runs}),
        # the runs of --runs-from: what ran them (deterministic runs: the same command gives the same curves)
        "runs_from": [{"command": e["command"], "load": e.get("load"), "notes": e.get("notes", [])} for e in earlier],
        "runs": runs,
        "comparison": compare(runs),
        "cross_evaluation": cross,
    }
    out.mkdir(parents=True, exist_ok=True)
    stem = f"ppo_reach_{report.machine_tag(machine)}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    plot(result, out / f"{stem}.png")
    print(json.dumps({"comparison": result["comparison"], "cross_evaluation": cross}, indent=1))
    warning = busy_warning(loads)
    if warning:
        print(warning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
