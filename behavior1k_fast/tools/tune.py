"""``behavior1k-fast tune``: measure the costs, predict every feasible layout, run the best, write the winner.

For one backend factory (the reference simulator by default, ``--backend omnigibson --backend-config`` too)
and the benchmark's VLA-like policy (:mod:`.bench.policy`), for a fixed total of envs N (``--envs``; several
totals may be given, and the layouts of all of them compete on env-steps per second):

1. **Measure** (each briefly). T_env: for every envs-per-process E and hybrid stage count K the candidate
   layouts need, one engine with ``executor="process"`` and ONE env process of E envs in K hybrid stages is
   run for a warm-up and ``--probe-rounds`` rounds with a one-block policy (negligible forward); every
   stage chunk's wall time in the worker (:attr:`~behavior1k_fast.rollout.chunk.ChunkResult.env_seconds`)
   is one sample. This is a single-process measure: layouts of P processes reuse it, with its spread
   standing for the spread over processes (below), and a CPU-work term for the cores they share.
   T_model(b): the policy (calibrated so one forward of all N envs takes the T_env of the default layout's
   chunk, or sized by ``--model-ms`` / ``--model-width`` / ``--model-depth``), one forward per batch
   1..N (:func:`~.bench.policy.model_cost_curve`).
2. **Predict** every feasible layout (:func:`enumerate_layouts`): P processes x E envs (P x E = N), K stages,
   partition ``hybrid`` / ``process``, schedule ``barrier`` / ``async``. Feasible: the partition plan is
   valid (:class:`~behavior1k_fast.rollout.plan.PartitionPlan`), P fits the cores (one core per env process
   plus one for the driver and the policy: P <= cores - 1, ``--max-processes`` overrides), and on CUDA the
   policy's memory at the stage batch fits the free GPU memory (measured at batch 1 and N, linear between).
   The pipeline model (``../shared/docs/DESIGN.md``, "Performance model", and the bench's bound), per
   round of one chunk per env, in ms:

   - X: a stage's env time. Barrier: the stage waits for the slowest of its processes (all P in hybrid
     partition, P / K in process partition), so X = the expected largest of that many draws from the
     measured per-chunk times (:func:`expected_max`); async: no barrier across processes, X = their mean.
   - C = chunks a worker steps per round (K in hybrid partition, 1 in process partition); T_m = T_model(N / K).
   - ``round = max(C * X, K * T_m, X + T_m, W / cores)``: the busiest worker's stepping, the driver's K
     forwards, each stage's own env -> forward cycle (with K = 1: X + T_m, nothing overlaps), and the CPU
     work of a round spread over the free cores, W = P * C * mean chunk time (+ K * T_m * the policy's
     threads when the policy runs on the CPU); free cores = the cores of this process's affinity minus
     what other work used of them over half a second when tune starts (psutil), at least 1.
   - predicted ms/step = round / chunk size; env-steps/s = N * 1000 / (ms/step).
3. **Run** the ``--top`` best predicted layouts for real (plus the default layout, for the speedup over it):
   ``RolloutEngine(executor="process")`` with the calibrated policy, one warm-up round and ``--rounds``
   timed rounds (:func:`~.bench.ablation.run_engine_row`), ``--repeats`` times interleaved; the fastest
   repeat counts (the least disturbed by other work on the machine). ``--exhaustive`` runs every feasible layout
   (at most ``--max-layouts``, best predicted first) to check the pick against the best measured one.
4. **Write** the measured winner as a profile YAML (RLinf's key names where they exist:
   ``pipeline_stage_num``, ``num_env_subprocess``, ``total_num_envs``, ``skip_intermediate_obs_in_chunk``,
   ``num_action_chunks``; ours for ``partition``, ``schedule``...; loadable by
   :meth:`~behavior1k_fast.core.profile.RolloutProfile.from_yaml`), and the table of predicted against
   measured (printed, and as JSON next to the YAML: ``tune_<tag>.yaml`` / ``tune_<tag>.json``).

The default layout (what runs without tuning): the profile's defaults (K = 1, barrier) over the most
env processes that fit the cores and divide N. Importing this module is light: the work imports its
dependencies when it runs.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..backends import BACKENDS
from ..core.profile import PARTITION_MODES, RLINF_ALIASES, SCHEDULES, RolloutProfile
from .argtypes import (chunk_steps, device, env_list, file_name, int_list, nonnegative_int, path, positive_int,
                       positive_number, process_count, seed)
from .backend_args import add_backend_arguments

#: Camera pixels in ``--quick`` runs of the reference simulator.
QUICK_RESOLUTION = 64


# --- layouts -------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Layout:
    """P env processes x E envs each, K pipeline stages, a partition and a schedule."""

    processes: int
    envs_per_process: int
    stages: int
    partition: str = "hybrid"
    schedule: str = "barrier"

    @property
    def total_envs(self) -> int:
        return self.processes * self.envs_per_process

    @property
    def name(self) -> str:
        return (f"P{self.processes}xE{self.envs_per_process} K{self.stages} "
                f"{self.partition} {self.schedule}")

    @property
    def worker_stages(self) -> int:
        """Stages sharing one worker's physics: the K of each worker's backend (and its T_env measure)."""
        return self.stages if self.partition == "hybrid" else 1

    @property
    def chunks_per_round(self) -> int:
        """Chunks a worker steps per round: K in hybrid partition, 1 in process partition."""
        return self.worker_stages

    @property
    def processes_per_stage(self) -> int:
        return self.processes if self.partition == "hybrid" else self.processes // self.stages

    def profile(self, base: RolloutProfile) -> RolloutProfile:
        """``base`` with this layout."""
        return base.replace(num_env_processes=self.processes, total_num_envs=self.total_envs,
                            pipeline_stages=self.stages, partition=self.partition, schedule=self.schedule)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": self.processes, "envs_per_process": self.envs_per_process, "stages": self.stages,
                "partition": self.partition, "schedule": self.schedule, "total_envs": self.total_envs,
                "name": self.name}


def enumerate_layouts(total_envs: Iterable[int], max_processes: int, stages: Sequence[int] | None = None,
                      max_stage_batch: int | None = None) -> list[Layout]:
    """Every distinct feasible layout for each total of envs, in a fixed order.

    P divides the total and is at most ``max_processes``; K is any of ``stages`` (default: every K up to
    the total) for which :class:`~behavior1k_fast.rollout.plan.PartitionPlan` accepts the layout; a stage
    batch (total / K) above ``max_stage_batch`` is left out. Layouts that run the same way are listed once:
    K = 1 in hybrid partition only (one stage: the partitions do not differ), and ``async`` only with more
    than one process (one process has no barrier to drop).
    """
    from ..rollout.plan import PartitionPlan

    out = []
    for n in total_envs:
        for p in range(1, min(n, max_processes) + 1):
            if n % p:
                continue
            for k in (stages or range(1, n + 1)):
                if max_stage_batch is not None and n // k > max_stage_batch:
                    continue
                for partition in PARTITION_MODES:
                    if k == 1 and partition != "hybrid":
                        continue
                    try:
                        PartitionPlan(p, n // p, k, partition)
                    except ValueError:
                        continue
                    for schedule in SCHEDULES:
                        if schedule == "async" and p == 1:
                            continue
                        out.append(Layout(p, n // p, k, partition, schedule))
    return out


def default_layout(total_envs: int, max_processes: int) -> Layout:
    """The layout without tuning: the profile's defaults (K = 1, barrier) over the most processes that fit
    ``max_processes`` and divide ``total_envs``."""
    p = max(d for d in range(1, min(total_envs, max_processes) + 1) if total_envs % d == 0)
    defaults = RolloutProfile()
    return Layout(p, total_envs // p, defaults.pipeline_stages, defaults.partition, defaults.schedule)


# --- the pipeline model --------------------------------------------------------------------------


def expected_max(samples: Sequence[float], draws: int) -> float:
    """Expected largest of ``draws`` independent draws from the empirical distribution of ``samples``:
    with the samples sorted, x_(i) is the largest with probability (i/n)^draws - ((i-1)/n)^draws."""
    xs = sorted(float(s) for s in samples)
    if not xs:
        raise ValueError("expected_max needs at least one sample")
    n = len(xs)
    return sum(x * (((i + 1) / n) ** draws - (i / n) ** draws) for i, x in enumerate(xs))


@dataclass(frozen=True)
class Costs:
    """What the prediction needs, measured (ms)."""

    #: Actions per chunk N.
    chunk_size: int
    #: ``(E, K)`` -> wall ms of every measured stage chunk of one worker holding E envs in K hybrid stages.
    env_chunk_ms: Mapping[tuple[int, int], Sequence[float]]
    #: Batch -> ms of one policy forward.
    model_ms: Mapping[int, float]
    #: Cores free for the run (may be fractional: cores minus other work's load).
    cores: float
    #: Intra-op threads of the policy when it runs on the CPU; 0 when it runs on a GPU.
    policy_cpu_threads: int = 0


def predict(layout: Layout, costs: Costs) -> dict[str, Any]:
    """The pipeline model's round time for ``layout`` (module docs), with its terms; ms."""
    samples = costs.env_chunk_ms[(layout.envs_per_process, layout.worker_stages)]
    mean = sum(samples) / len(samples)
    if layout.schedule == "barrier":
        stage_env = expected_max(samples, layout.processes_per_stage)
    else:
        stage_env = mean
    t_model = costs.model_ms[layout.total_envs // layout.stages]
    c, k = layout.chunks_per_round, layout.stages
    cpu_work = layout.processes * c * mean + k * t_model * costs.policy_cpu_threads
    terms = {
        "workers": c * stage_env,
        "driver": k * t_model,
        "stage_cycle": stage_env + t_model,
        "cpu": cpu_work / costs.cores,
    }
    round_ms = max(terms.values())
    ms_per_step = round_ms / costs.chunk_size
    return {
        "t_env_stage_ms": stage_env,
        "t_env_mean_ms": mean,
        "t_model_ms": t_model,
        "terms_ms": terms,
        "limit": max(terms, key=terms.get),
        "round_ms": round_ms,
        "ms_per_step": ms_per_step,
        "env_steps_per_s": layout.total_envs * 1e3 / ms_per_step,
    }


def rank(layouts: Sequence[Layout], costs: Costs) -> list[tuple[Layout, dict[str, Any]]]:
    """``(layout, prediction)`` pairs, most predicted env-steps per second first (ties: listing order)."""
    predicted = [(layout, predict(layout, costs)) for layout in layouts]
    return sorted(predicted, key=lambda lp: -lp[1]["env_steps_per_s"])


# --- the winner as a profile -------------------------------------------------------------------------

#: Our field -> RLinf's key, for the keys RLinf has.
RLINF_KEYS = {ours: theirs for theirs, ours in RLINF_ALIASES.items()} | {"total_num_envs": "total_num_envs"}


def profile_yaml(profile: RolloutProfile, header: str = "") -> str:
    """``profile`` as YAML for :meth:`RolloutProfile.from_yaml`: the layout keys and every field that differs
    from ``RolloutProfile()``, under RLinf's names where RLinf has the key; ``header`` as comment lines."""
    import yaml

    defaults = RolloutProfile().to_dict()
    layout = {"skip_intermediate_obs", "pipeline_stages", "num_env_processes", "total_num_envs", "chunk_size",
              "partition", "schedule"}
    data = {RLINF_KEYS.get(k, k): v for k, v in profile.to_dict().items() if k in layout or v != defaults[k]}
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + yaml.safe_dump(data, sort_keys=False)


# --- the command -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TuneConfig:
    """One ``tune`` run (``from_args`` fills the defaults)."""

    bench: Any  # BenchConfig: backend, options, chunk size, rounds, warm-up, model sizing, device, seed
    total_envs: tuple[int, ...]
    max_processes: int
    cores: int
    stages: tuple[int, ...] | None = None
    probe_rounds: int = 3
    top: int = 3
    exhaustive: bool = False
    max_layouts: int = 16
    repeats: int = 1
    out_dir: str = "."
    tag: str | None = None
    quick: bool = False
    layouts: list = field(default_factory=list)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` sub-command."""
    p = subparsers.add_parser("tune", help="pick the layout (P x E x K, partition, schedule) by measuring",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=BACKENDS, default="reference", help="simulator (default: reference)")
    p.add_argument("--quick", action="store_true",
                   help="low resolution, four rounds, K <= 2: under 2 minutes on 2 cores")
    p.add_argument("--envs", type=env_list, default=None, metavar="N1,N2,...",
                   help="total envs N to lay out (several: their layouts compete; default: 2 x cores)")
    p.add_argument("--max-processes", type=process_count, default=None,
                   help="most env processes (default: cores - 1, one core left for driver and policy)")
    p.add_argument("--stages", type=int_list, default=None, metavar="K1,K2,...",
                   help="pipeline stage counts to consider (default: all that divide; quick: 1,2)")
    p.add_argument("--top", type=positive_int, default=3, help="best predicted layouts run for real (default: 3)")
    p.add_argument("--exhaustive", action="store_true",
                   help="run every feasible layout for real (at most --max-layouts) to check the pick")
    p.add_argument("--max-layouts", type=positive_int, default=16, help="cap of --exhaustive (default: 16)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="real runs per layout, interleaved; the fastest counts (default: 1)")
    p.add_argument("--chunk-size", type=chunk_steps, default=32, help="N actions per chunk (default: 32)")
    p.add_argument("--probe-rounds", type=positive_int, default=None,
                   help="rounds of each T_env measure (default: 3)")
    p.add_argument("--rounds", type=positive_int, default=None,
                   help="timed rounds of each real run (default: 6, quick: 4)")
    p.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed rounds before each (default: 1)")
    p.add_argument("--model-ms", type=positive_number, default=None,
                   help="target ms of one policy forward of all envs (default: the default layout's T_env)")
    p.add_argument("--model-width", type=positive_int, default=None,
                   help="fix the policy's width (a multiple of 64; depth calibrated unless --model-depth)")
    p.add_argument("--model-depth", type=positive_int, default=None, help="fix the policy's depth (needs --model-width)")
    p.add_argument("--behavior-like", action="store_true",
                   help="reference backend: BEHAVIOR's reset and contact costs on (ReferenceConfig.behavior_like)")
    p.add_argument("--device", type=device, default="auto", help="policy device: cpu, cuda or auto (default: auto)")
    p.add_argument("--out-dir", type=path, default=".", help="where tune_<tag>.yaml and tune_<tag>.json go (default: .)")
    p.add_argument("--tag", type=file_name, default=None, help="tag in the file names (default: derived, e.g. cpu2)")
    p.add_argument("--seed", type=seed, default=0, help="seed of worker 0 (worker w: seed + w)")
    add_backend_arguments(p)
    p.set_defaults(func=run)
    return p


def check_args(args: argparse.Namespace) -> TuneConfig:
    """The ``TuneConfig`` of ``args`` after every check that can fail before work starts: backend installed,
    device present, model options consistent, ``--out-dir`` writable, at least one feasible layout, and
    every worker's backend buildable (raises :class:`~.argtypes.UsageError`)."""
    from ..backends import check_installed, make_factory
    from ..core.checks import check_creatable_dir, check_local_layout
    from ..core.contract import check_backend_build
    from .argtypes import check_device, usage_errors
    from .backend_args import backend_options, check_image_memory
    from .bench.ablation import BenchConfig, behavior_like_options

    with usage_errors():
        check_installed(args.backend)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        options = backend_options(args)
        if args.behavior_like:
            options = behavior_like_options(args.backend) | options
        if args.quick and args.backend == "reference":
            options.setdefault("resolution", QUICK_RESOLUTION)
        dev = args.device
        if dev == "auto":
            import torch

            dev = "cuda" if torch.cuda.is_available() else "cpu"
        check_device(dev)
        bench = BenchConfig(
            backend=args.backend, backend_options=options, quick=args.quick, chunk_size=args.chunk_size,
            rounds=args.rounds or (4 if args.quick else 6), warmup=args.warmup, model_ms=args.model_ms,
            model_width=args.model_width, model_depth=args.model_depth, device=dev, executor="process",
            seed=args.seed, baseline=False,
        )
        totals = tuple(args.envs or (2 * cores,))
        max_processes = args.max_processes or max(1, cores - 1)
        check_local_layout(max_processes, max(totals), args.chunk_size)
        check_image_memory(args, max(totals))
        stages = tuple(args.stages) if args.stages else ((1, 2) if args.quick else None)
        layouts = enumerate_layouts(totals, max_processes, stages)
        if not layouts:
            raise ValueError(f"no feasible layout for --envs {','.join(map(str, totals))} with at most "
                             f"{max_processes} env processes and stages {stages or 'any'}")
        check_creatable_dir("--out-dir", args.out_dir)
        factory = make_factory(args.backend, **options)
        for e, k in sorted({(lay.envs_per_process, lay.worker_stages) for lay in layouts}):
            check_backend_build(factory, e, args.seed, RolloutProfile(pipeline_stages=k, chunk_size=args.chunk_size))
    return TuneConfig(bench=bench, total_envs=totals, max_processes=max_processes, cores=cores, stages=stages,
                      probe_rounds=args.probe_rounds or 3, top=args.top,
                      exhaustive=args.exhaustive, max_layouts=args.max_layouts, repeats=args.repeats,
                      out_dir=args.out_dir, tag=args.tag,
                      quick=args.quick, layouts=layouts)


def run(args: argparse.Namespace) -> int:
    """Tune; print the table; write YAML and JSON. 0 on success."""
    result = run_tune(check_args(args))
    return 0 if result["winner"] else 1


# --- the work ----------------------------------------------------------------------------------------


def base_profile(config: TuneConfig) -> RolloutProfile:
    """Every layout's profile before its layout: the fast path with the run's chunk size."""
    return RolloutProfile(chunk_size=config.bench.chunk_size)


def measure_env_chunks(factory: Any, base: RolloutProfile, envs: int, stages: int, policy: Callable,
                       config: TuneConfig) -> list[float]:
    """Wall ms of every stage chunk of one env process holding ``envs`` envs in ``stages`` hybrid stages
    (after the warm-up rounds; ``probe_rounds`` rounds: ``stages`` samples each)."""
    from ..rollout import RolloutEngine

    profile = base.replace(num_env_processes=1, total_num_envs=envs, pipeline_stages=stages, partition="hybrid")
    samples: list[float] = []
    with RolloutEngine(factory, profile, executor="process", seed=config.bench.seed) as engine:
        if config.bench.warmup:
            engine.rollout(policy, config.bench.warmup)
        engine.rollout(policy, config.probe_rounds, reset=config.bench.warmup == 0,
                       on_chunk=lambda stage, result: samples.append(float(result.env_seconds[0]) * 1e3))
    return samples


def policy_memory_bytes(policy: Any, rows: Sequence[Mapping[str, Any]], batch: int) -> int:
    """Peak CUDA memory (bytes) allocated while ``policy`` runs one forward of ``batch`` observations."""
    import torch

    from .bench.policy import batch_of

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    policy(batch_of(rows, batch))
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def max_stage_batch_on_gpu(policy: Any, rows: Sequence[Mapping[str, Any]], max_batch: int) -> tuple[int, dict]:
    """The largest batch whose forward fits the free GPU memory (footprint linear in the batch between the
    measured footprints at batch 1 and ``max_batch``), and what was measured."""
    import torch

    one, top = policy_memory_bytes(policy, rows, 1), policy_memory_bytes(policy, rows, max_batch)
    free, total = torch.cuda.mem_get_info()
    budget = free + torch.cuda.memory_allocated()
    per_sample = max(top - one, 0) / max(max_batch - 1, 1)
    fits = max_batch if top <= budget else int((budget - one) // per_sample) + 1 if per_sample else 0
    return max(fits, 0), {"bytes_at_batch_1": one, f"bytes_at_batch_{max_batch}": top, "free_bytes": free,
                          "total_bytes": total}


def free_cores(cores: int, window_s: float = 0.5) -> float:
    """``cores`` minus the cores other work keeps busy (psutil's system-wide CPU use over ``window_s``, while
    this process waits), at least 1."""
    import psutil

    return max(1.0, cores - psutil.cpu_percent(interval=window_s) / 100.0 * (os.cpu_count() or cores))


def run_tune(config: TuneConfig, progress: bool = True) -> dict[str, Any]:
    """Measure, predict, run the best, write YAML and JSON (module docs); the result."""
    import torch
    from tqdm import tqdm

    from ..backends import isolate_sides, make_factory
    from ..rollout.bootstrap import call_with_profile
    from .bench import report
    from .bench.ablation import Row, backend_spaces, run_engine_row
    from .bench.policy import WIDTHS, ChunkPolicy, batch_of, calibrate_model_size, model_cost_curve

    bench = config.bench
    factory = make_factory(bench.backend, **bench.backend_options)
    base = base_profile(config)
    layouts = config.layouts
    defaults = {n: default_layout(n, config.max_processes) for n in config.total_envs}
    probes = sorted({(lay.envs_per_process, lay.worker_stages) for lay in layouts})
    machine = report.describe_machine(bench.device)
    tag = config.tag or report.machine_tag(machine)
    out_dir = Path(config.out_dir)
    json_path, yaml_path = out_dir / f"tune_{tag}.json", out_dir / f"tune_{tag}.yaml"
    policy_threads = max(1, config.cores - config.max_processes)
    if bench.device == "cpu":
        torch.set_num_threads(policy_threads)
    max_n = max(config.total_envs)
    cores_free = free_cores(config.cores)
    bar = tqdm(total=len(probes) + 1, desc="measure T_env", unit="run", disable=not progress)

    obs, obs_space, act_space = call_with_profile(isolate_sides(bench.backend), backend_spaces, base, factory,
                                                  bench.seed)

    def build(width: int, depth: int) -> ChunkPolicy:
        return ChunkPolicy(obs_space, act_space, chunk_size=bench.chunk_size, width=width, depth=depth,
                           device=bench.device, seed=bench.seed)

    probe_policy = build(WIDTHS[0], 1)
    env_chunk_ms: dict[tuple[int, int], list[float]] = {}
    for e, k in probes:
        bar.set_description(f"T_env E={e} K={k}")
        env_chunk_ms[(e, k)] = measure_env_chunks(factory, base, e, k, probe_policy, config)
        bar.update()

    bar.set_description("T_model")
    width, depth, target = bench.model_width, bench.model_depth, None
    if depth is None:
        first = defaults[max_n]
        samples = env_chunk_ms[(first.envs_per_process, first.worker_stages)]
        target = bench.model_ms or sum(samples) / len(samples)
        width, depth = calibrate_model_size(build, batch_of(obs, max_n), target,
                                            widths=WIDTHS if width is None else (width,))
    policy = build(width, depth)
    curve = model_cost_curve(policy, obs, max_n)
    memory = None
    if bench.device.startswith("cuda"):
        fits, memory = max_stage_batch_on_gpu(policy, obs, max_n)
        layouts = [lay for lay in layouts if lay.total_envs // lay.stages <= fits]
    bar.update()
    bar.close()
    costs = Costs(bench.chunk_size, env_chunk_ms, {c["batch"]: c["ms"] for c in curve}, cores_free,
                  policy_threads if bench.device == "cpu" else 0)
    ranked = rank(layouts, costs)
    for layout in defaults.values():
        if layout not in layouts:
            ranked.append((layout, predict(layout, costs)))  # the reference runs even if outside the budget
    count = min(len(ranked), config.max_layouts) if config.exhaustive else config.top
    chosen = [lay for lay, _ in ranked[:count]]
    to_run = chosen + [d for d in defaults.values() if d not in chosen]

    result: dict[str, Any] = {
        "complete": False,
        "machine": machine,
        "config": {"backend": bench.backend, "backend_options": bench.backend_options, "quick": config.quick,
                   "total_envs": list(config.total_envs), "max_processes": config.max_processes,
                   "cores": config.cores, "cores_free": cores_free, "stages": list(config.stages) if config.stages else None,
                   "chunk_size": bench.chunk_size, "probe_rounds": config.probe_rounds, "rounds": bench.rounds,
                   "repeats": config.repeats,
                   "warmup": bench.warmup, "top": config.top, "exhaustive": config.exhaustive,
                   "max_layouts": config.max_layouts, "device": bench.device, "seed": bench.seed, "tag": tag},
        "t_env_source": "one env process (executor='process'), per (E, K hybrid): wall ms of each stage chunk "
                        "in the worker, one-block policy",
        "t_env_chunk_ms": [{"envs_per_process": e, "stages": k, "samples_ms": s} for (e, k), s in
                           sorted(env_chunk_ms.items())],
        "model": {"target_ms": target, "width": width, "depth": depth, "parameters": policy.num_parameters,
                  "tokens_per_sample": policy.tokens, "device": bench.device,
                  "cpu_threads": costs.policy_cpu_threads, "t_model_by_batch": curve, "gpu_memory": memory},
        "default_layouts": [d.to_dict() for d in defaults.values()],
        "predicted": [lay.to_dict() | {"predicted": pred} for lay, pred in ranked],
        "runs": [],
    }
    predictions = dict(ranked)
    order = [lay for lay, _ in ranked]
    repeats: dict[Layout, list[dict[str, Any]]] = {lay: [] for lay in to_run}
    bar = tqdm(total=len(to_run) * config.repeats, desc="run", unit="run", disable=not progress)
    for _ in range(config.repeats):  # repeats interleaved, so a burst of other load hits several layouts
        for layout in to_run:
            bar.set_description(f"run {layout.name}")
            row = Row(layout.name, layout.name, layout.profile(base), overlap=True)
            repeats[layout].append(run_engine_row(factory, row, policy, bench))
            bar.update()
    bar.close()
    for layout in to_run:
        pred, runs = predictions[layout], repeats[layout]
        best = min(runs, key=lambda m: m["ms_per_step"])  # the least disturbed by other load
        result["runs"].append(layout.to_dict() | {
            "predicted_ms_per_step": pred["ms_per_step"], "predicted_env_steps_per_s": pred["env_steps_per_s"],
            "measured_ms_per_step": best["ms_per_step"], "measured_env_steps_per_s": best["env_steps_per_s"],
            "measured_ms_per_step_repeats": [m["ms_per_step"] for m in runs],
            "prediction_error": pred["ms_per_step"] / best["ms_per_step"] - 1.0,
            "is_default": layout in defaults.values(), "ran_as": "exhaustive" if config.exhaustive else "top",
            "predicted_rank": order.index(layout) + 1,
            "measured": {k: best[k] for k in ("wall_s", "t_model_ms", "t_env_ms", "t_env_worker_ms",
                                              "cpu_s_per_env_step", "own_actions")},
        })
    result |= summarize(result["runs"], config.exhaustive)
    winner = next(lay for lay in to_run if lay.name == result["winner"]["name"])
    header = (f"behavior1k-fast tune: measured winner {winner.name}, "
              f"{result['winner']['measured_env_steps_per_s']:.0f} env-steps/s on {tag}")
    out_dir.mkdir(parents=True, exist_ok=True)
    yaml_path.write_text(profile_yaml(winner.profile(base), header), encoding="utf-8")
    result["profile_yaml"] = str(yaml_path)
    result["complete"] = True
    report.write_json(result, json_path)
    print(format_runs(result["runs"]))
    print(format_summary(result))
    print(f"wrote {yaml_path} and {json_path}")
    return result


def summarize(runs: Sequence[Mapping[str, Any]], exhaustive: bool) -> dict[str, Any]:
    """Winner (most measured env-steps/s), the predicted pick (rank 1 among those run) and how they compare
    with each default layout and, for an exhaustive run, with the best of all run."""
    def measured(run: Mapping[str, Any]) -> float:
        return run["measured_env_steps_per_s"]

    winner = max(runs, key=measured)
    pick = min(runs, key=lambda r: r["predicted_rank"])
    defaults = [r for r in runs if r["is_default"]]
    out: dict[str, Any] = {
        "winner": winner,
        "pick": pick,
        "pick_over_default": [measured(pick) / measured(d) for d in defaults],
        "winner_over_default": [measured(winner) / measured(d) for d in defaults],
        "mean_abs_prediction_error": sum(abs(r["prediction_error"]) for r in runs) / len(runs),
    }
    if exhaustive:
        out["exhaustive"] = {"layouts_run": len(runs), "pick_vs_best": measured(pick) / measured(winner),
                             "pick_within_5_percent": measured(pick) >= 0.95 * measured(winner),
                             "pick_over_default_at_least_1_2x": all(x >= 1.2 for x in out["pick_over_default"])}
    return out


def format_runs(runs: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of the layouts run: predicted against measured."""
    lines = ["| layout | rank pred | pred ms/step | meas ms/step | pred env-steps/s | meas env-steps/s | error |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(runs, key=lambda r: -r["measured_env_steps_per_s"]):
        name = r["name"] + (" (default)" if r["is_default"] else "")
        lines.append(f"| {name} | {r['predicted_rank']} | {r['predicted_ms_per_step']:.2f} | "
                     f"{r['measured_ms_per_step']:.2f} | {r['predicted_env_steps_per_s']:.0f} | "
                     f"{r['measured_env_steps_per_s']:.0f} | {r['prediction_error']:+.0%} |")
    return "\n".join(lines)


def format_summary(result: Mapping[str, Any]) -> str:
    lines = [f"winner (measured): {result['winner']['name']}; pick (predicted): {result['pick']['name']}; "
             f"pick over default: {', '.join(f'{x:.2f}x' for x in result['pick_over_default'])}; "
             f"mean |prediction error| {result['mean_abs_prediction_error']:.0%}"]
    if "exhaustive" in result:
        ex = result["exhaustive"]
        lines.append(f"exhaustive: {ex['layouts_run']} layouts; pick at {ex['pick_vs_best']:.1%} of the best")
    return "\n".join(lines)
