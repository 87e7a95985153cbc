"""The time-to-train judge: wall clock until PPO reaches a target success rate, per layout and regime, each row
judged from training runs of its own (issue 42: "rates from the runs that learn").

- **Task and learner**: PPO on the reference reach-and-touch task (:mod:`.learner`) with a policy that costs
  what a VLA costs and trains the way one is fine-tuned (:class:`~.learner.VLAActorCritic`: the benchmark's
  transformer over the rgb camera with low-rank adapters in every block; the update per sample costs about
  three acting forwards, as a LoRA fine-tune of a VLA costs against its rollout).
- **Regimes** (:data:`~.layouts.REGIMES`): the transformer is sized (:func:`~..measure.calibration.calibrate`) so that
  one forward at the stage batch takes ``REGIMES[regime]`` x the env's ms per chunk.
- **Compared rows** (:func:`~.layouts.compared_rows`): the engine's profiles, each serial and collect-while-train
  (``+overlap``, with the learner's lag correction), the serial gymnasium double buffer and the double buffer
  with its update on a thread (:mod:`..peers.gymnasium`), TorchRL's ``MultiSyncCollector``,
  ``MultiAsyncCollector``, ``AsyncBatchedCollector`` and its single ``Collector`` over a ``ParallelEnv``
  (:class:`~..peers.torchrl.TorchRLTraining`). Each trains ``--seeds`` seeds through the one clock
  (:func:`~.learner.fit` over :func:`~.timing.timed_loop`) until the episode-weighted success rate of the last
  ``window`` iterations reaches ``target`` (:func:`training_run`): its samples to target and its wall to target
  are its own runs'. The start (workers spawned, envs reset, the first batch's excess over the run's median
  wait) is taken out of every row's wall equally and reported apart (:class:`~.result.TrainingRun`).
- **Power** (:func:`regime_power`, :mod:`.goals`): per row the mean samples and wall to target with 95 %
  bootstrap intervals over seeds, the mean success over the first samples of a fixed budget (the smallest of
  the rows' median samples to target) beside the first crossing; per goal of issue 42 the ratio (ours / each
  peer) with its interval and exact permutation p, and ``met`` / ``missed`` / ``not shown``.
- **Cost rows** (the breakdown, not the verdict): a few PPO iterations of each engine layout, the first one not
  counted, give its seconds per sample split into the trainer's wait and update, the busiest env worker, the
  behaviour forwards, the trainer's CPU thread in the update and, with the policy on a GPU and
  ``nvidia-ml-py``, the GPU's busy seconds: their max is the bound. A peer's comes from its training runs.
- ``--corrections``: each collect-while-train row of the layouts and peers given (an engine ``+overlap``, the
  double buffer with its update on a thread, ``MultiAsyncCollector``, ``AsyncBatchedCollector``) under each lag
  correction (:data:`~.layouts.CORRECTION_ROWS`), beside its serial twin, each its own seeds.
- ``lead_sweep``: samples to target, seconds per sample and their product per lookahead lead d.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...backends.reference import ReachFactory
from ...core.profile import RolloutProfile
from ..bench.report import format_model_cost
from ..measure.config import RunConfig, resolve_device
from ..measure.files import ResultWriteError, write_json
from ..measure.gpu import GPUBusy, gpu_busy_missing
from ..measure.trainable import AdaptedVLA
from . import learner
from .goals import correction_goals, regime_goals
from .layouts import (CORRECTION_ROWS, LAYOUTS, PEERS, REGIMES, TrainLayout, compare_row, compared_rows,
                      engine_layouts, layout_profiles)
from .result import (CostRow, DirectRun, LayoutRow, LeadRow, LeadSweep, RegimeProgress, RegimeResult, RowPower,
                     Spread, TimeToTrainResult, TrainingRun, layout_rows, row_power)
from .timing import per_sample

@dataclass(frozen=True)
class JudgeConfig:
    """What one judge run measures (``train-judge``'s options; sizes in envs, rounds and own actions)."""

    regimes: tuple[str, ...] = tuple(REGIMES)
    layouts: tuple[str, ...] = ("stock", "k1_skip", "hybrid_k2", "process_k2", "lookahead")
    target: float = 0.7
    window: int = 3
    iterations: int = 150
    seeds: int = 5
    #: The first seed (seeds ``first_seed`` .. ``first_seed + seeds - 1``: a run split over calls, merged after).
    first_seed: int = 0
    processes: int = 2
    envs: int = 16
    chunk_size: int = 8
    rounds: int = 16
    resolution: int = 64
    lookahead_steps: int | str = "auto"
    cost_iterations: int = 3
    model_width: int | None = None
    model_depth: int | None = None
    device: str = "auto"
    #: The peers to run (names of :data:`~.layouts.PEERS`).
    peers: tuple[str, ...] = PEERS
    #: ``--corrections``: compare these lag corrections (names of :data:`~.layouts.CORRECTION_ROWS`) over the
    #: collect-while-train rows of the layouts and peers, each against its serial twin
    #: (:func:`~.layouts.compared_rows`).
    corrections: tuple[str, ...] = ()


def reached(entries: list[learner.IterationEntry], target: float, window: int) -> bool:
    """The episode-weighted success rate of the last ``window`` iterations is at least ``target``."""
    recent = [e for e in entries[-window:] if e.success_rate is not None]
    episodes = sum(e.episodes for e in recent)
    return len(entries) >= window and episodes > 0 and (
        sum(e.success_rate * e.episodes for e in recent) / episodes >= target)


def training_run(config: learner.PPOConfig, train: Callable[[Callable[[Any], bool]], learner.LearningCurve],
                 target: float, window: int) -> TrainingRun:
    """One training run: ``train(stop)`` (a learning curve, :func:`~.learner.fit`'s) until :func:`reached` (or
    ``config.iterations``); env steps and wall then, and the trainer's clock of each iteration."""
    entries: list[learner.IterationEntry] = []

    def stop(entry: learner.IterationEntry) -> bool:
        entries.append(entry)
        return reached(entries, target, window)

    run = train(stop)  # train() seeds torch with config.seed first
    hit = reached(entries, target, window)
    return TrainingRun(seed=config.seed, reached=hit, samples=run.env_steps[-1] if hit else None,
                       direct_wall_s=run.wall_s[-1] if hit else None, iterations=len(run.env_steps),
                       success_rate=run.success_rate, env_steps=run.env_steps, wall_s=run.wall_s,
                       policy_lag=run.policy_lag, wait_s=run.rollout_s, update_s=run.update_s,
                       update_cpu_s=run.update_cpu_s, busiest_env_s=run.busiest_env_s)


def samples_to_target(config: learner.PPOConfig, profile: RolloutProfile, factory: Any, policy_class: Callable,
                      target: float, window: int) -> TrainingRun:
    """Train under the engine's ``profile`` (:func:`training_run`)."""
    return training_run(config, lambda stop: learner.train(config, profile=profile, factory=factory,
                                                           make_policy=policy_class, stop=stop)[0], target, window)


def peer_samples_to_target(layout: TrainLayout, config: learner.PPOConfig, profile: RolloutProfile, factory: Any,
                           policy_class: Callable, spaces: tuple, target: float, window: int) -> TrainingRun:
    """Train on the gymnasium peer ``layout``'s batches (:class:`~..peers.gymnasium.DoubleBufferBatches`:
    serial, or with the update on a thread where ``layout.overlap``) over ``profile``'s envs
    (:func:`training_run`)."""
    from ..peers.gymnasium import DoubleBufferBatches

    obs_dim = learner.obs_width(spaces[0])

    def source(policy: Any) -> DoubleBufferBatches:  # acts in this process: with a copy of the policy
        return DoubleBufferBatches(factory, profile, copy.deepcopy(policy), spaces, config.rounds, config.iterations,
                                   config.seed, learner.load_trained, on_thread=layout.overlap)

    return training_run(config, lambda stop: learner.train_on(config, source, obs_dim, int(np.prod(
        spaces[1].shape)), policy_class, stop=stop)[0], target, window)


def torchrl_samples_to_target(layout: TrainLayout, config: learner.PPOConfig, profile: RolloutProfile, factory: Any,
                              policy_class: Callable, spaces: tuple, target: float, window: int) -> TrainingRun:
    """Train on the batches of TorchRL's collector ``layout`` (:class:`~..peers.torchrl.TorchRLTraining`) over
    ``profile``'s envs, the trainer posting its weights after each update (:func:`training_run`)."""
    from tensordict.nn import TensorDictModule

    from ..peers.torchrl import ACTOR_OUT_KEYS, TorchRLActor, TorchRLTraining

    obs_dim = learner.obs_width(spaces[0])
    action_dim = int(np.prod(spaces[1].shape))
    make_policy = functools.partial(policy_class, obs_dim, action_dim, config.chunk_size)

    def source(policy: Any) -> TorchRLTraining:  # its workers act: the trainer holds no copy of the model
        def make_actor() -> Any:  # the policy's initial weights as the mirror
            return TensorDictModule(TorchRLActor(make_policy, learner.trained_state(policy), spaces[0]),
                                    in_keys=list(spaces[0].spaces), out_keys=ACTOR_OUT_KEYS)

        return TorchRLTraining(layout.name, make_actor, profile, factory, spaces, config.seed, config.rounds,
                               config.iterations)

    return training_run(config, lambda stop: learner.train_on(config, source, obs_dim, action_dim, policy_class,
                                                              stop=stop)[0], target, window)


def seconds_per_sample(config: learner.PPOConfig, profile: RolloutProfile, factory: Any, policy_class: Callable,
                       iterations: int, device: str = "cpu") -> CostRow:
    """An engine layout's seconds per own action under ``profile`` and ``config``'s lag (``iterations`` PPO
    iterations after a first, uncounted one, :func:`~.timing.per_sample`). On a GPU ``device`` with NVML also
    the GPU's busy seconds per own action (:class:`~..measure.gpu.GPUBusy`: kernel time of every stream, the
    forwards' and the update's)."""
    marks = [time.time()]
    missing = gpu_busy_missing(device)
    with GPUBusy(device) if missing is None else contextlib.nullcontext() as busy:
        run, _ = learner.train(replace(config, iterations=iterations + 1), profile=profile, factory=factory,
                               make_policy=policy_class,
                               on_iteration=lambda it, batch, entry: marks.append(time.time()))
    samples = np.diff([0, *run.env_steps])

    gpu_busy = None
    if busy is not None:
        gpu_busy = per_sample([busy.seconds(a, b) for a, b in zip(marks, marks[1:])], samples)
    lags = run.policy_lag[1:]
    return CostRow(per_sample(run.rollout_s, samples), per_sample(run.update_s, samples),
                   rollout_s_per_sample=per_sample(run.collect_s, samples),
                   env_busy_s_per_sample=per_sample(run.busiest_env_s, samples),
                   model_s_per_sample=per_sample(run.model_s, samples),
                   gpu_busy_s_per_sample=gpu_busy, gpu_busy_missing=missing,
                   policy_lag=float(np.mean(lags)) if lags else None,
                   trainer_cpu_s_per_sample=per_sample(run.update_cpu_s, samples))


#: Characters kept of the end of each message in a failed peer's line: a CUDA out-of-memory error names every
#: process that holds the card (the H100's model-bound run: the trainer and 8 TorchRL workers, about 900).
MESSAGE_TAIL = 1200


def failure(exc: BaseException) -> str:
    """A failed peer's line: ``exc`` and then each exception it came from (``__cause__``, else ``__context__``),
    each as its type and the end of its message (:data:`MESSAGE_TAIL`; a worker's own error comes last, after
    TorchRL's traceback)."""
    chain = [exc]
    while (chain[-1].__cause__ or chain[-1].__context__) not in (None, *chain):  # a chain can loop back
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return "failed: " + " <- ".join(f"{type(e).__name__}: ...{' '.join(str(e).split())[-MESSAGE_TAIL:]}" for e in chain)


def regime_power(runs: dict[str, list[TrainingRun]], rows: dict[str, Any]) -> dict[str, RowPower]:
    """Per compared row its :class:`~.result.RowPower`, the success area taken over the first ``budget``
    samples: the smallest of the rows' median samples to target (over the seeds that reached it; the
    shortest run where no row reached it)."""
    medians = [Spread.of([r.samples for r in runs[n]]).median for n in rows if runs.get(n)]
    reached = [m for m in medians if m is not None]
    lengths = [r.env_steps[-1] for n in rows for r in runs.get(n, []) if r.env_steps]
    budget = min(reached) if reached else (min(lengths) if lengths else None)
    power = {n: row_power(runs.get(n, []), budget) for n in rows}
    return {n: p for n, p in power.items() if p is not None}


def direct_run(layouts: dict[str, LayoutRow]) -> DirectRun | None:
    """The engine layout with the shortest median wall to target, with its own runs' wall clock (start
    included)."""
    engine = {n: r for n, r in layouts.items() if n in LAYOUTS and not LAYOUTS[n].is_peer and r.own_runs
              and r.wall_to_target_s.median is not None}
    if not engine:
        return None
    best = min(engine, key=lambda n: engine[n].wall_to_target_s.median)
    return DirectRun(best, engine[best].direct_wall_to_target_s or engine[best].wall_to_target_s, "training runs")


class Judge:
    """What every run of one judge invocation shares: the PPO config, the env factory, the layouts' profiles,
    the device and the env's measured ms per chunk (module docs). ``progress`` gets one line per step."""

    def __init__(self, config: JudgeConfig, progress: Callable[[str], None] = print) -> None:
        self.config, self.progress = config, progress
        self.base = learner.PPOConfig(iterations=config.iterations, processes=config.processes, envs=config.envs,
                                      chunk_size=config.chunk_size, rounds=config.rounds, executor="process")
        self.factory = ReachFactory(replace(learner.make_factory(self.base).config,
                                            resolution=(config.resolution, config.resolution)))
        profiles, missing = layout_profiles(config.processes, config.envs, config.chunk_size, config.lookahead_steps)
        keep = {"k1_skip", *config.layouts}
        self.profiles = {n: p for n, p in profiles.items() if n in keep}
        self.missing = {n: why for n, why in missing.items() if n in keep}
        self.device = resolve_device(config.device)
        if self.device.startswith("cuda"):  # the behaviour copy's forwards on a CUDA stream of their own
            self.base = replace(self.base, policy_device=self.device)
        self.env_ms: float | None = None

    def policy_for(self, regime: str) -> tuple[Callable, Any, dict]:
        """The VLA-cost policy class sized for ``regime``, the calibrated (frozen) model, its calibration (as a
        dict, with the regime and the env's ms per chunk); prints the calibration."""
        from ..measure.calibration import calibrate
        from ..measure.config import usable_cores
        from ..peers.torchrl import compact_space

        c = self.config
        self.progress(f"{regime}: sizing the VLA-cost policy (T_model = {REGIMES[regime]} T_env)")
        sizing = {"model_width": c.model_width, "model_depth": c.model_depth}
        run = RunConfig(chunk_size=c.chunk_size, rounds=2, warmup=1, device=self.device, seed=0, **sizing)
        probe = c.model_depth is None and self.env_ms is None
        if probe:  # the first calibration measures the env's ms per chunk and fits the balanced regime to it
            vla, calibration = calibrate(self.factory, self.profiles["k1_skip"], run, max_processes=usable_cores())
            self.env_ms = calibration.env_ms_per_stage_chunk
        if not probe or regime != "balanced":
            if c.model_depth is None:
                run = replace(run, model_ms=REGIMES[regime] * self.env_ms)
            vla, calibration = calibrate(self.factory, self.profiles["k1_skip"], run, max_processes=usable_cores())
        arguments = dict(observation_space=compact_space(vla.observation_space),
                         action_space=compact_space(vla.action_space),
                         chunk_size=c.chunk_size, width=calibration.model_width, depth=calibration.model_depth,
                         device=self.device, seed=0)
        info = {**calibration.to_dict(), "env_ms_per_stage_chunk": self.env_ms, "regime": regime,
                "model_ms_over_env_ms": REGIMES[regime], "adapter_rank": AdaptedVLA(**arguments).arguments["rank"]}
        self.progress(f"{regime}: " + format_model_cost(calibration))
        return functools.partial(learner.VLAActorCritic, arguments), vla, info

    def layout_config(self, layout: TrainLayout, seed: int | None = None,
                      correction: str | None = None) -> learner.PPOConfig:
        """The PPO config of ``layout``: its lag (serial, or collect-while-train with the learner's default lag
        correction, or ``correction``, a name of :data:`~.layouts.CORRECTION_ROWS`), and ``seed`` where given."""
        config = replace(self.base, max_lag=layout.max_lag)
        if correction is not None:
            objective, values = CORRECTION_ROWS[correction]
            config = replace(config, correction=objective, value_targets=values)
        return config if seed is None else replace(config, seed=seed)

    def trained(self, layout: TrainLayout, profile: RolloutProfile, policy_class: Callable, seed: int,
                spaces: tuple | None = None, correction: str | None = None, name: str | None = None) -> TrainingRun:
        """One training run of ``layout`` (the row ``name``) with ``seed``: an engine layout under ``profile``,
        a peer over its envs (``spaces``: one env's observation and action spaces)."""
        name = name or layout.name
        self.progress(f"{name} ({layout.semantics}, {_overlap(layout)}) seed {seed}: training to success "
                      f">= {self.config.target} (at most {self.config.iterations} iterations)")
        config = self.layout_config(layout, seed, correction)
        if layout.is_peer:
            trains = peer_samples_to_target if layout.family == "gymnasium" else torchrl_samples_to_target
            run = trains(layout, config, profile, self.factory, policy_class, spaces, self.config.target,
                         self.config.window)
        else:
            run = samples_to_target(config, profile, self.factory, policy_class, self.config.target,
                                    self.config.window)
        lag = np.mean(run.policy_lag) if run.policy_lag else float("nan")
        wall = "-" if run.wall_to_target_s is None else f"{run.wall_to_target_s:.1f} s"
        self.progress(f"{name} seed {seed}: samples to target {run.samples}, wall to target {wall} (start "
                      f"{run.startup_s:.1f} s apart; {run.iterations} iterations, measured policy lag {lag:.2f})")
        return run

    def regime(self, regime: str, checkpoint: Callable[[RegimeProgress], None]) -> RegimeResult:
        """Every compared row's samples and wall to target from its own training runs, in ``regime``: first the
        cost rows (the breakdown: every engine layout's seconds per sample), then the training runs seed by
        seed, each row per seed; then each row's intervals and the goals (:mod:`.goals`). ``--corrections``:
        each overlapped row under each correction beside its serial twin, no cost rows. ``checkpoint`` gets what
        is measured so far after each piece (a run cut short keeps it)."""
        policy_class, vla, calibration = self.policy_for(regime)
        missing = {**self.missing, **{f"{n}+overlap": why for n, why in self.missing.items()}}
        peers = list(self.config.peers)
        if self.config.processes % 2:
            missing.update({p: f"a double buffer needs an even process count, got {self.config.processes}"
                            for p in peers if LAYOUTS[p].family == "gymnasium"})
        from ..peers.torchrl import torchrl_missing

        why_not = torchrl_missing() if any(LAYOUTS[p].family == "torchrl" for p in peers) else None
        if why_not:
            missing.update({p: why_not for p in peers if LAYOUTS[p].family == "torchrl"})
        peers = [p for p in peers if p not in missing]
        asked = [n for n in self.config.layouts if n in self.profiles]
        rows = compared_rows(asked, peers, self.config.corrections)
        so_far = RegimeProgress(calibration, not_run=missing, training_runs={n: [] for n in rows})
        if not self.config.corrections:
            for layout in engine_layouts(asked):
                self.progress(f"{regime} {layout.name} ({_overlap(layout)}): timing {self.config.cost_iterations} "
                              f"PPO iterations after one uncounted")
                so_far.cost[layout.name] = seconds_per_sample(
                    self.layout_config(layout), self.profiles[layout.profile], self.factory, policy_class,
                    self.config.cost_iterations, self.device)
                self.progress(f"{regime} {layout.name}: {_cost_line(so_far.cost[layout.name])}")
                checkpoint(so_far)
        from ..peers.torchrl import compact_space

        spaces = (compact_space(vla.observation_space), compact_space(vla.action_space))
        for seed in range(self.config.first_seed, self.config.first_seed + self.config.seeds):
            for name, row in list(rows.items()):
                if name in so_far.not_run:
                    continue
                try:
                    run = self.trained(row.layout, self.profiles[row.layout.profile], policy_class, seed, spaces,
                                       row.correction, name)
                except Exception as exc:  # noqa: BLE001 - a peer's failure is reported, the other rows train on
                    if not row.layout.is_peer:
                        raise
                    so_far.not_run[name] = f"seed {seed}: {failure(exc)}"
                    self.progress(f"{regime} {name}: {so_far.not_run[name]}")
                    if not so_far.training_runs[name]:
                        del so_far.training_runs[name], rows[name]
                    continue
                so_far.training_runs[name].append(run)
                checkpoint(so_far)
        layouts = layout_rows(so_far.cost, so_far.training_runs, rows)
        power = regime_power(so_far.training_runs, rows)
        goals = (correction_goals(so_far.training_runs, power, rows) if self.config.corrections
                 else regime_goals(regime, so_far.training_runs, power, rows, layouts))
        for goal in goals:
            self.progress(f"{regime}: {goal.format()}")
        return RegimeResult(calibration, layouts, missing, so_far.training_runs, direct_run(layouts), power, goals)

    def lead_sweep(self, regime: str, checkpoint: Callable[[LeadSweep], None]) -> LeadSweep:
        """Samples to target, seconds per sample and wall to target per lookahead lead d (0, 1, 2, 4, N/2,
        N - 1); ``checkpoint`` gets the finished leads after each lead."""
        n = self.config.chunk_size
        leads = sorted({d for d in (0, 1, 2, 4, n // 2, n - 1) if 0 <= d < n})
        policy_class, _, calibration = self.policy_for(regime)
        sweep = LeadSweep(calibration)
        layout = LAYOUTS["lookahead"]
        for d in leads:
            profile = self.profiles["k1_skip"].replace(schedule="lookahead", lookahead_steps=d)
            self.progress(f"lead {d}: {self.config.seeds} training runs, then the seconds per sample")
            runs = [self.trained(layout, profile, policy_class, seed) for seed in range(self.config.seeds)]
            cost = seconds_per_sample(self.base, profile, self.factory, policy_class,
                                         self.config.cost_iterations, self.device)
            per_seed = [None if r.samples is None else r.samples * cost.s_per_sample for r in runs]
            sweep.leads[str(d)] = row = LeadRow(d, cost, Spread.of([r.samples for r in runs]), per_seed,
                                                Spread.of(per_seed), sum(r.reached for r in runs), runs)
            self.progress(f"lead {d}: samples to target {row.samples_to_target.median}, "
                          f"{cost.s_per_sample * 1e3:.3f} ms per sample")
            checkpoint(sweep)
        return sweep


def _overlap(layout: TrainLayout) -> str:
    """How ``layout`` collects, in a progress line."""
    return "overlap on: collect while PPO updates" if layout.overlap else "serial"


def _cost_line(cost: CostRow) -> str:
    lag = "" if cost.policy_lag is None else f", measured policy lag {cost.policy_lag:.2f}"
    if cost.s_per_sample is None:
        return f"ms per sample not measured (no iteration after the first){lag}"
    return f"{cost.s_per_sample * 1e3:.3f} ms per sample{lag}"


def command_line() -> str:
    """The command line this process was started with (a script through ``python``)."""
    import shlex
    import sys

    return ("python " if sys.argv[0].endswith(".py") else "") + shlex.join(sys.argv)


class Checkpoints:
    """Rewrites the result file after each measured piece (a run cut short keeps what it measured). A write
    that fails (a full disk) is said once and measuring goes on; the final write tries again and raises."""

    def __init__(self, result: TimeToTrainResult, path: Path) -> None:
        self.result, self.path, self.failed = result, path, False
        self.start = time.perf_counter()

    def save(self) -> None:
        self.result.wall_s = time.perf_counter() - self.start
        try:
            write_json(self.result.to_dict(), self.path)
        except ResultWriteError as exc:
            if not self.failed:
                print(f"train-judge: cannot save the partial result ({exc}); measuring on, the final write tries "
                      f"again")
            self.failed = True


def merged(results: list[TimeToTrainResult]) -> TimeToTrainResult:
    """One result of several runs of the same judge split over calls (``--first-seed``, ``--peers``): per regime
    the training runs of each row joined (a seed measured twice is kept once, the first), the cost rows of the
    first result that has each, and the intervals and goals computed again over the joined runs (the command
    line checked that every file trained the same model). A part cut short (its regime ``in_progress``) counts
    with the runs it finished; the result is ``complete`` when every row of every regime has the same seeds."""
    first = results[0]
    out = TimeToTrainResult(command_line(), first.machine, {**first.config, "merged": [r.command for r in results]},
                            True, first.load, sum(r.wall_s for r in results), profiles=first.profiles)
    for regime in dict.fromkeys(n for r in results for n in (*r.regimes, *r.in_progress)):
        parts = [r.regimes.get(regime) or r.in_progress.get(regime) for r in results]
        parts = [part for part in parts if part is not None]
        cost: dict[str, CostRow] = {}
        runs: dict[str, list[TrainingRun]] = {}
        not_run: dict[str, str] = {}
        for part in parts:
            costs = part.cost if isinstance(part, RegimeProgress) else {
                n: row.cost for n, row in part.layouts.items()
                if n in LAYOUTS and not LAYOUTS[n].is_peer}
            for name, row in costs.items():
                cost.setdefault(name, row)
            for name, rs in part.training_runs.items():
                seen = {r.seed for r in runs.setdefault(name, [])}
                runs[name] += [r for r in rs if r.seed not in seen]
            not_run.update(part.not_run)
        rows = {name: compare_row(name) for name in runs}
        not_run = {n: why for n, why in not_run.items() if n not in runs and n not in cost}
        layouts = layout_rows(cost, runs, rows)
        power = regime_power(runs, rows)
        goals = (correction_goals(runs, power, rows) if any(r.correction for r in rows.values())
                 else regime_goals(regime, runs, power, rows, layouts))
        out.regimes[regime] = RegimeResult(parts[0].calibration, layouts, not_run, runs, direct_run(layouts), power,
                                           goals)
        out.complete = out.complete and len({tuple(sorted(r.seed for r in rs)) for rs in runs.values()}) == 1
    return out


def run_judge(args: Any) -> int:
    """``train-judge`` after its checks (:func:`~behavior1k_fast.tools.train.check_args`): ``--plot`` draws a
    recorded result; otherwise every regime (or the lead sweep) is measured, the tables printed, and the JSON
    and PNG written, each announced with a ``wrote`` line."""
    from ..measure.files import result_stem
    from ..measure.machine import describe_machine, machine_tag, sample_load
    from .report import format_table, plot

    out = Path(args.out)
    if args.merge:
        result = merged(args.merged)
        print(format_table(result))
        stem = out / f"time_to_train_{args.tag or 'merged'}"
        return write_result(result.to_dict(), lambda path: plot(result, path), stem, [])
    if args.plot is not None:
        drawn = out / Path(args.plot).with_suffix(".png").name
        plot(args.result, drawn)
        print(f"wrote {drawn}")
        return 0
    loads = [sample_load()]
    machine = describe_machine(resolve_device(args.device))
    kind = "lead_sweep_" if args.lead_sweep else "corrections_" if args.corrections else ""
    stem = result_stem(f"time_to_train_{kind}".rstrip("_"), args.tag or machine_tag(machine), quick=args.quick)
    hidden = {"out", "func", "command", "quick_defaults", "result", "merged"}
    result = TimeToTrainResult(command_line(), machine, {k: v for k, v in vars(args).items() if k not in hidden})
    checkpoints = Checkpoints(result, out / f"{stem}.json")
    config = JudgeConfig(regimes=tuple(args.regime), layouts=tuple(args.layouts), target=args.target,
                         window=args.window, iterations=args.iterations, seeds=args.seeds,
                         first_seed=args.first_seed, processes=args.processes,
                         envs=args.envs, chunk_size=args.chunk_size, rounds=args.rounds, resolution=args.resolution,
                         lookahead_steps=args.lookahead_steps, cost_iterations=args.cost_iterations,
                         model_width=args.model_width, model_depth=args.model_depth, device=args.device,
                         peers=tuple(args.peers), corrections=tuple(args.corrections))
    judge = Judge(config)
    result.profiles = {n: p.to_dict() for n, p in judge.profiles.items()}
    if args.lead_sweep:
        what = f"the lead sweep in {args.regime[0]}"
    elif args.corrections:
        what = (f"the lag corrections {','.join(args.corrections)} over the collect-while-train rows of layouts "
                f"{','.join(args.layouts) or '(none)'} and peers {','.join(args.peers) or '(none)'}, each against "
                f"its serial twin, in {args.regime[0]}")
    else:
        what = (f"{', '.join(args.regime)}; layouts {','.join(judge.profiles)} (each serial and +overlap) and the "
                f"peers {','.join(args.peers) or '(none)'}")
    print(f"train-judge: {what}; {args.seeds} seed(s), target success {args.target}; {checkpoints.path} is "
          f"rewritten after each piece")
    if args.lead_sweep:
        def swept(sweep: LeadSweep) -> None:
            result.lead_sweep = sweep
            checkpoints.save()

        result.lead_sweep = judge.lead_sweep(args.regime[0], swept)
    else:
        for regime in args.regime[:1] if args.corrections else args.regime:
            def measured(so_far: RegimeProgress, regime: str = regime) -> None:
                result.in_progress = {regime: so_far}
                checkpoints.save()

            result.regimes[regime] = judge.regime(regime, measured)
            result.in_progress = {}
    loads.append(sample_load())
    result.complete, result.load = True, {"before": loads[0].to_dict(), "after": loads[1].to_dict()}
    result.wall_s = time.perf_counter() - checkpoints.start
    print(format_table(result))
    return write_result(result.to_dict(), lambda path: plot(result, path), out / stem, loads)


def write_result(data: dict, draw: Callable[[Path], None], stem: Path, loads: list) -> int:
    """A command's end: the busy warning of ``loads`` (if any), then ``stem.json`` (``data``) and ``stem.png``
    (``draw(path)``) written, each announced with a ``wrote`` line; 0."""
    from ..measure.machine import busy_warning

    warning = busy_warning(loads)
    if warning:
        print(warning)
    print(f"wrote {write_json(data, stem.parent / f'{stem.name}.json')}")
    draw(stem.parent / f"{stem.name}.png")
    print(f"wrote {stem.parent / f'{stem.name}.png'}")
    return 0
