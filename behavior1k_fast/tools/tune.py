"""``behavior1k-fast tune``: measure the costs, predict every feasible layout, run the best, write the winner.

For one backend factory (the reference simulator by default, ``--backend omnigibson --backend-config`` too)
and the benchmark's VLA-like policy (:mod:`.measure.policy`), for a fixed total of envs N (``--envs``; several
totals may be given, and the layouts of all of them compete on env-steps per second):

1. **Measure** (each briefly). T_env: for every envs-per-process E, hybrid stage count K and process count
   P the candidate layouts need, one engine with ``executor="process"`` and P env processes of E envs in K
   hybrid stages is run for a warm-up and ``--probe-rounds`` rounds with a one-block policy (negligible
   forward); every stage chunk's wall time in every worker
   (:attr:`~behavior1k_fast.rollout.chunk.ChunkResult.env_wall_seconds`) is one sample. The P processes step
   side by side, so the samples hold what they cost each other (cores, memory bandwidth, the GPU's renders:
   on the H200 T_env at P = 8 was 1.71x that of one process, the main error of a one-process probe), and
   their spread stands for the spread over processes (below).
   T_model(b): the policy (calibrated by :func:`~.measure.calibration.calibrate`, the rule bench uses: one
   forward at the default layout's stage batch, all N envs, takes that layout's mean T_env per chunk; or
   sized by ``--model-ms`` / ``--model-width`` / ``--model-depth``), one forward per batch 1..N.
2. **Predict** every feasible layout (:func:`~.measure.layouts.enumerate_layouts`): P processes x E envs
   (P x E = N, E = 1 included), K stages, every partition and every schedule of
   :data:`~behavior1k_fast.core.profile.SCHEDULES` the profile accepts for the layout. Feasible: the
   partition plan is valid (:class:`~behavior1k_fast.rollout.plan.PartitionPlan`), P is within the process
   budget and the cores (the core rule bench uses, :func:`~.measure.config.process_budget`: cores - 1 with
   the policy on the CPU, cores with it on a GPU; ``--max-processes`` sets the budget), and on CUDA the
   policy's memory at the stage batch fits the free GPU memory (measured at batch 1 and N, linear between).
   The pipeline model (:mod:`.measure.pipeline`: bench's bound is the same function), per round of one
   chunk per env, in ms (:func:`~.measure.pipeline.predict`):

   - X: a stage's env time. Barrier: the stage waits for the slowest of its processes (all P in hybrid
     partition, P / K in process partition), so X = the expected largest of that many draws from the
     measured per-chunk times (:func:`~.measure.pipeline.expected_max`); async: no barrier across
     processes, X = their mean.
   - C = chunks a worker steps per round (the plan's ``stages_sharing_physics``: K in hybrid partition, 1 in
     process partition); T_m = T_model(N / K).
   - ``round = max(C * X, K * T_m, X + T_m, W / cores)``: the busiest worker's stepping, the driver's K
     forwards, each stage's own env -> forward cycle (with K = 1: X + T_m, nothing overlaps), and the CPU
     work of a round spread over the free cores, W = P * C * mean chunk time (+ K * T_m * the policy's
     threads when the policy runs on the CPU); free cores = the cores of this process's affinity minus
     what other processes used over half a second when tune starts (:func:`~.measure.machine.sample_load`),
     at least 1.
   - predicted ms/step = round / chunk size; env-steps/s = N * 1000 / (ms/step).
3. **Run** ``--top`` layouts for real, one at a time, each the best by the prediction corrected with the
   measured error of the runs before it (:class:`Feedback`: the median measured / predicted ratio of its
   family, one stage or the partition, and the schedule; else of all runs), plus the default layout, for the
   speedup over it: ``RolloutEngine(executor="process")`` with the calibrated policy, one warm-up round and
   ``--rounds`` timed rounds (:func:`~.measure.runs.run_engine_row`); then ``--repeats`` - 1 more runs of
   each, interleaved. A layout's measure is its median run, with the min-max. ``--exhaustive`` runs every
   feasible layout (at most ``--max-layouts``, in the same corrected order) to check the pick (the best of
   the first ``--top``) against the best measured one. Predicted (raw and corrected) against measured is
   reported for every layout run.
4. **Write** the measured winner as a profile YAML (RLinf's key names where they exist:
   ``pipeline_stage_num``, ``num_env_subprocess``, ``total_num_envs``, ``skip_intermediate_obs_in_chunk``,
   ``num_action_chunks``; ours for ``partition``, ``schedule``...; written by
   :meth:`~behavior1k_fast.core.profile.RolloutProfile.to_yaml`, loadable by ``from_yaml``), and the table of
   predicted against measured (printed, and as JSON next to the YAML: ``tune_<tag>.yaml`` /
   ``tune_<tag>.json``, a ``--quick`` run's ``tune_<tag>_quick.*`` so it never replaces a full one
   (:func:`~.measure.files.result_stem`), in ``./behavior1k_fast_results`` unless ``--out-dir`` or
   ``--record`` says otherwise),
   with the machine's load before and after and a warning when it was busy. ``--format rlinf`` also writes
   ``tune_<tag>.rlinf.yaml``: the winner's layout as RLinf's nested config keys
   (:func:`~.rlinf_keys.rlinf_overrides`), to merge into an RLinf config.

The default layout (what runs without tuning): the profile's defaults (K = 1, barrier) over the most
env processes within the budget that divide N. Importing this module is light: the work imports its
dependencies when it runs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..core.profile import RolloutProfile
from .argtypes import env_list, int_list, positive_int
from .measure.config import RunConfig, add_run_arguments, run_options, usable_cores
from .measure.layouts import Layout, default_layout, enumerate_layouts

if TYPE_CHECKING:
    from .measure.calibration import Calibration
    from .measure.machine import LoadSample
    from .measure.record import RowMeasure

@dataclass(frozen=True)
class TuneConfig:
    """One ``tune`` run (``from_args`` fills the defaults)."""

    run: RunConfig
    total_envs: tuple[int, ...]
    max_processes: int
    cores: int
    #: Stage counts K to consider (``None``: every K a layout can hold).
    pipeline_stages: tuple[int, ...] | None = None
    probe_rounds: int = 3
    top: int = 3
    exhaustive: bool = False
    max_layouts: int = 16
    #: ``profile``: the winner as a profile YAML; ``rlinf``: also as RLinf's nested config keys.
    format: str = "profile"
    layouts: list = field(default_factory=list)
    #: Layouts of the space the backend cannot build (name -> why), with ``pipeline_stages`` not given.
    left_out: dict = field(default_factory=dict)


# --- what a run gives --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutRun:
    """One layout run for real: what the model predicted, the prediction corrected by the runs before it,
    and the median of its measured runs.

    Args:
        layout: the layout.
        predicted_ms_per_step: the pipeline model's prediction.
        predicted_env_steps_per_s: the same as a rate.
        corrected_ms_per_step: the prediction times the feedback of the runs before it (:class:`Feedback`).
        measured: the median run (with every run's ms per step).
        is_default: the default layout (what runs without tuning).
        ran_as: ``top`` or ``exhaustive``.
        predicted_rank: 1 for the best predicted layout.
        run_order: 1 for the first layout run, ``None`` for a default run only for the comparison.
    """

    layout: Layout
    predicted_ms_per_step: float
    predicted_env_steps_per_s: float
    corrected_ms_per_step: float
    measured: RowMeasure
    is_default: bool = False
    ran_as: str = "top"
    predicted_rank: int = 1
    run_order: int | None = None

    @property
    def name(self) -> str:
        return self.layout.name

    @property
    def measured_env_steps_per_s(self) -> float:
        return self.measured.env_steps_per_s

    @property
    def prediction_error(self) -> float:
        """Predicted over measured ms per step, minus 1 (> 0: predicted too slow)."""
        return self.predicted_ms_per_step / self.measured.ms_per_step - 1.0

    @property
    def corrected_error(self) -> float:
        return self.corrected_ms_per_step / self.measured.ms_per_step - 1.0

    def to_dict(self) -> dict[str, Any]:
        m = self.measured
        return self.layout.to_dict() | {
            "predicted_ms_per_step": self.predicted_ms_per_step,
            "predicted_env_steps_per_s": self.predicted_env_steps_per_s,
            "corrected_ms_per_step": self.corrected_ms_per_step,
            "measured_ms_per_step": m.ms_per_step, "measured_env_steps_per_s": m.env_steps_per_s,
            "measured_ms_per_step_min": m.ms_per_step_min, "measured_ms_per_step_max": m.ms_per_step_max,
            "prediction_error": self.prediction_error, "corrected_error": self.corrected_error,
            "is_default": self.is_default, "ran_as": self.ran_as, "predicted_rank": self.predicted_rank,
            "run_order": self.run_order, "measured": m.to_dict(),
        }


@dataclass
class TuneSummary:
    """The measured winner, the pick (the best of the first ``--top`` selected), their speedups over each
    default layout, the mean prediction errors, and (``--exhaustive``) how the pick compares with the best."""

    winner: LayoutRun
    pick: LayoutRun
    pick_over_default: list[float]
    winner_over_default: list[float]
    mean_abs_prediction_error: float
    mean_abs_corrected_error: float
    exhaustive: dict | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"winner": self.winner.to_dict(), "pick": self.pick.to_dict(),
                "pick_over_default": self.pick_over_default, "winner_over_default": self.winner_over_default,
                "mean_abs_prediction_error": self.mean_abs_prediction_error,
                "mean_abs_corrected_error": self.mean_abs_corrected_error}
        return data | ({"exhaustive": self.exhaustive} if self.exhaustive else {})


@dataclass(frozen=True)
class RlinfChoice:
    """What ``--format rlinf`` writes: ``run``, the measured winner where RLinf can run it, else the fastest
    measured layout RLinf can run; ``reasons`` why it cannot run the winner (empty: it can)."""

    run: LayoutRun
    winner: LayoutRun
    reasons: tuple[str, ...] = ()

    def header(self, tag: str) -> str:
        """The comment lines of the RLinf file: the layout it holds, with its own measured speed."""
        lines = [f"behavior1k-fast tune: {self.run.name}, {self.run.measured_env_steps_per_s:.0f} env-steps/s "
                 f"measured on {tag}"]
        if self.reasons:
            lines.append(f"not the measured winner {self.winner.name} ({self.winner.measured_env_steps_per_s:.0f} "
                         f"env-steps/s): RLinf cannot run it ({'; '.join(self.reasons)})")
        lines.append("RLinf config keys (merge into an RLinf config; tools/rlinf_keys.py); not a profile: "
                     "BEHAVIOR1K_FAST takes the flat tune_<tag>.yaml")
        return "".join(f"# {line}\n" for line in lines)

    def format(self) -> str:
        """One line: what the RLinf file holds and why."""
        rate = self.run.measured_env_steps_per_s
        if not self.reasons:
            return f"RLinf: the winner {self.run.name} ({rate:.0f} env-steps/s) is a layout RLinf runs as written"
        share = rate / self.winner.measured_env_steps_per_s
        return (f"RLinf cannot run the winner {self.winner.name} ({'; '.join(self.reasons)}); the RLinf file holds "
                f"the best layout it can run, {self.run.name}: {rate:.0f} env-steps/s measured ({share:.0%} of the "
                f"winner)")

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.run.name, "measured_env_steps_per_s": self.run.measured_env_steps_per_s,
                "winner": self.winner.name, "winner_runs_in_rlinf": not self.reasons,
                "winner_not_in_rlinf_because": list(self.reasons)}


#: How tune measures T_env (recorded in its JSON).
T_ENV_SOURCE = ("P env processes side by side (executor='process'), per (E, K hybrid, P): wall ms of each stage chunk "
                "in each worker, one-block policy")


@dataclass
class TuneResult:
    """One ``tune`` run, filled as it goes; :meth:`to_dict` is ``tune_<tag>.json``."""

    machine: dict
    config: dict
    load_before: LoadSample
    cores_free: float
    left_out: dict
    #: Total envs -> the default layout.
    defaults: dict
    load_after: LoadSample | None = None
    #: ``(E, K, P)`` -> wall ms of every probed stage chunk.
    t_env_chunk_ms: dict = field(default_factory=dict)
    calibration: Calibration | None = None
    reference_layout: str | None = None
    gpu_memory: dict | None = None
    #: ``(layout, prediction)`` pairs, best predicted first (the defaults last where the space lacks them).
    predicted: list = field(default_factory=list)
    runs: list[LayoutRun] = field(default_factory=list)
    feedback: Feedback = field(default_factory=lambda: Feedback())
    summary: TuneSummary | None = None
    rlinf: RlinfChoice | None = None
    profile_yaml: str | None = None
    rlinf_yaml: str | None = None
    complete: bool = False

    @property
    def winner(self) -> LayoutRun | None:
        return self.summary.winner if self.summary else None

    @property
    def loads(self) -> list[LoadSample]:
        return [s for s in (self.load_before, self.load_after) if s is not None]

    def to_dict(self) -> dict[str, Any]:
        data = {
            "complete": self.complete, "machine": self.machine, "config": self.config,
            "load": {"before": self.load_before.to_dict(),
                     "after": self.load_after.to_dict() if self.load_after else None},
            "t_env_source": T_ENV_SOURCE,
            "t_env_chunk_ms": [{"envs_per_process": e, "pipeline_stages": k, "processes": p, "samples_ms": s}
                               for (e, k, p), s in sorted(self.t_env_chunk_ms.items())],
            "calibration": (self.calibration.to_dict() | {"reference_layout": self.reference_layout,
                                                          "gpu_memory": self.gpu_memory}) if self.calibration else None,
            "default_layouts": [d.to_dict() for d in self.defaults.values()],
            "predicted": [lay.to_dict() | {"predicted": pred} for lay, pred in self.predicted],
            "left_out": self.left_out,
            "runs": [r.to_dict() for r in self.runs],
            "feedback": self.feedback.to_dict(),
        }
        data |= self.summary.to_dict() if self.summary else {}
        data["profile_yaml"] = self.profile_yaml
        if self.rlinf is not None:
            data |= {"rlinf_yaml": self.rlinf_yaml, "rlinf": self.rlinf.to_dict()}
        return data


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` sub-command."""
    p = subparsers.add_parser("tune", help="pick the layout (P x E x K, partition, schedule) by measuring",
                              description=__doc__.split("\n\n")[0])
    add_run_arguments(p, quick_help="low resolution, four rounds, K <= 2: under 2 minutes on 2 cores; writes "
                                    "tune_<tag>_quick.*, never replacing a full run's tune_<tag>.*",
                      quick_rounds=4, reference="the default layout", repeats=1, quick_repeats=1)
    p.add_argument("--envs", type=env_list, default=None, metavar="N1,N2,...",
                   help="total envs N to lay out (several: their layouts compete; default: 2 x cores)")
    p.add_argument("--pipeline-stages", type=int_list, default=None, metavar="K1,K2,...",
                   help="pipeline stage counts to consider (default: all that divide; quick: 1,2)")
    p.add_argument("--top", type=positive_int, default=3, help="best predicted layouts run for real (default: 3)")
    p.add_argument("--exhaustive", action="store_true",
                   help="run every feasible layout for real (at most --max-layouts) to check the pick")
    p.add_argument("--max-layouts", type=positive_int, default=16, help="cap of --exhaustive (default: 16)")
    p.add_argument("--probe-rounds", type=positive_int, default=None,
                   help="rounds of each T_env measure (default: 3)")
    p.add_argument("--format", choices=("profile", "rlinf"), default="profile",
                   help="profile: the winner as a profile YAML (bench --tuned, BEHAVIOR1K_FAST); rlinf: also "
                        "tune_<tag>.rlinf.yaml, its layout as RLinf's nested config keys to merge into an RLinf "
                        "config (default: profile)")
    p.set_defaults(func=run)
    return p


def check_args(args: argparse.Namespace) -> TuneConfig:
    """The ``TuneConfig`` of ``args`` after every check that can fail before work starts: backend installed,
    device present, model options consistent, ``--out-dir`` writable, at least one feasible layout, and
    every worker's backend buildable (raises :class:`~.argtypes.UsageError`). Without ``--pipeline-stages``
    a layout whose backend refuses its stages (the reference simulator's frequencies allow only some K in
    hybrid partition) leaves the space, with the reason in the result's ``left_out``; a K that was asked for
    is an error."""
    from ..backends import make_factory
    from ..core.checks import check_local_layout
    from ..core.contract import check_backend_build
    from .argtypes import usage_errors
    from .backend_args import check_image_memory
    from .measure.config import check_out_dir, check_run

    with usage_errors():
        config = RunConfig(**run_options(args), executor="process")
        check_run(config)
        cores = usable_cores()
        totals = tuple(args.envs or (2 * cores,))
        max_processes = min(config.process_budget, cores)
        check_local_layout(max_processes, max(totals), config.chunk_size)
        check_image_memory(args, max(totals))
        stages = tuple(args.pipeline_stages) if args.pipeline_stages else ((1, 2) if args.quick else None)
        layouts = enumerate_layouts(totals, max_processes, stages)
        if not layouts:
            raise ValueError(f"no feasible layout for --envs {','.join(map(str, totals))} with at most "
                             f"{max_processes} env processes and stages {stages or 'any'}")
        factory = make_factory(config.backend, **config.backend_options)
        refused = {}
        for e, k in sorted({(lay.envs_per_process, lay.stages_sharing_physics) for lay in layouts}):
            try:
                check_backend_build(factory, e, config.seed, RolloutProfile(pipeline_stages=k,
                                                                            chunk_size=config.chunk_size))
            except ValueError as exc:
                refused[(e, k)] = exc
        buildable = [lay for lay in layouts if (lay.envs_per_process, lay.stages_sharing_physics) not in refused]
        if refused and (stages is not None or not buildable):  # asked for, or nothing left: the first reason
            raise next(iter(refused.values()))
        left_out = {lay.name: str(refused[(lay.envs_per_process, lay.stages_sharing_physics)])
                    for lay in layouts if lay not in buildable}
        check_out_dir(config)
    return TuneConfig(run=config, total_envs=totals, max_processes=max_processes, cores=cores, pipeline_stages=stages,
                      probe_rounds=args.probe_rounds or 3, top=args.top, exhaustive=args.exhaustive,
                      max_layouts=args.max_layouts, format=args.format,
                      layouts=buildable, left_out=left_out)


def run(args: argparse.Namespace) -> int:
    """Tune; print the table; write YAML and JSON. 0 on success."""
    result = run_tune(check_args(args))
    return 0 if result.winner else 1


# --- the work ----------------------------------------------------------------------------------------


def _base_profile(config: TuneConfig) -> RolloutProfile:
    """Every layout's profile before its layout: the fast path with the run's chunk size."""
    return RolloutProfile(chunk_size=config.run.chunk_size)


def measure_env_chunks(factory: Any, base: RolloutProfile, envs: int, stages: int, processes: int,
                       policy: Callable, config: TuneConfig) -> list[float]:
    """Wall ms of every stage chunk of each of ``processes`` env processes stepping side by side, each holding
    ``envs`` envs in ``stages`` hybrid stages (after the warm-up rounds; ``probe_rounds`` rounds: ``stages``
    samples per process each)."""
    import numpy as np

    from ..rollout import RolloutEngine

    profile = base.replace(num_env_processes=processes, total_num_envs=processes * envs, pipeline_stages=stages,
                           partition="hybrid")
    samples: list[float] = []

    def per_worker(stage: int, result: Any) -> None:
        # the rows of one worker share its wall time: one sample per worker of the stage
        _, first = np.unique(np.asarray(result.env_ids) // envs, return_index=True)
        samples.extend(float(result.env_wall_seconds[row]) * 1e3 for row in first)

    with RolloutEngine(factory, profile, executor="process", seed=config.run.seed) as engine:
        if config.run.warmup:
            engine.rollout(policy, config.run.warmup)
        engine.rollout(policy, config.probe_rounds, reset=config.run.warmup == 0, on_chunk=per_worker)
    return samples


def _policy_memory_bytes(policy: Any, rows: Sequence[Mapping[str, Any]], batch: int) -> int:
    """Peak CUDA memory (bytes) allocated while ``policy`` runs one forward of ``batch`` observations."""
    import torch

    from .measure.policy import batch_of

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    policy(batch_of(rows, batch))
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def _max_stage_batch_on_gpu(policy: Any, rows: Sequence[Mapping[str, Any]], max_batch: int) -> tuple[int, dict]:
    """The largest batch whose forward fits the free GPU memory (footprint linear in the batch between the
    measured footprints at batch 1 and ``max_batch``), and what was measured."""
    import torch

    one, top = _policy_memory_bytes(policy, rows, 1), _policy_memory_bytes(policy, rows, max_batch)
    free, total = torch.cuda.mem_get_info()
    budget = free + torch.cuda.memory_allocated()
    per_sample = max(top - one, 0) / max(max_batch - 1, 1)
    fits = max_batch if top <= budget else int((budget - one) // per_sample) + 1 if per_sample else 0
    return max(fits, 0), {"bytes_at_batch_1": one, f"bytes_at_batch_{max_batch}": top, "free_bytes": free,
                          "total_bytes": total}


def _family(layout: Layout) -> tuple[str, str]:
    """Layouts the pipeline model errs on alike: one stage, or the partition of K > 1; and the schedule."""
    return ("one stage" if layout.pipeline_stages == 1 else layout.partition, layout.schedule)


@dataclass
class Feedback:
    """Measured over predicted ms per step of the layouts run so far, by :func:`_family`: the correction the
    next predictions get (the family's median ratio, else the median of all, else 1)."""

    ratios: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, layout: Layout, predicted_ms: float, measured_ms: float) -> None:
        self.ratios.setdefault(_family(layout), []).append(measured_ms / predicted_ms)

    def factor(self, layout: Layout) -> float:
        import statistics

        own = self.ratios.get(_family(layout))
        every = [r for rs in self.ratios.values() for r in rs]
        return statistics.median(own or every) if (own or every) else 1.0

    def to_dict(self) -> dict[str, list[float]]:
        return {" ".join(key): values for key, values in self.ratios.items()}


def _start(config: TuneConfig) -> TuneResult:
    """The result before any run: the machine, the settings, the load, the default layouts."""
    from .measure.machine import describe_machine, machine_tag, sample_load

    settings = config.run
    machine = describe_machine(settings.device)
    tag = settings.tag or machine_tag(machine)
    load = sample_load()
    cores_free = max(1.0, config.cores - load.other_cpu_cores)
    return TuneResult(
        machine=machine, load_before=load, cores_free=cores_free, left_out=dict(config.left_out),
        defaults={n: default_layout(n, config.max_processes) for n in config.total_envs},
        config={"backend": settings.backend, "backend_options": settings.backend_options, "quick": settings.quick,
                "total_envs": list(config.total_envs), "max_processes": config.max_processes,
                "cores": config.cores, "cores_free": cores_free,
                "pipeline_stages": list(config.pipeline_stages) if config.pipeline_stages else None,
                "chunk_size": settings.chunk_size, "probe_rounds": config.probe_rounds, "rounds": settings.rounds,
                "repeats": settings.repeats, "warmup": settings.warmup, "top": config.top,
                "exhaustive": config.exhaustive, "max_layouts": config.max_layouts, "device": settings.device,
                "seed": settings.seed, "tag": tag, "format": config.format})


def _probe_env(result: TuneResult, config: TuneConfig, factory: Any, spaces: tuple, bar: Any) -> None:
    """T_env of every (E, K, P) the layouts and the defaults need, with a one-block policy."""
    from .measure.policy import WIDTHS, ChunkPolicy

    settings = config.run
    _, obs_space, act_space = spaces
    probe_policy = ChunkPolicy(obs_space, act_space, chunk_size=settings.chunk_size, width=WIDTHS[0], depth=1,
                               device=settings.device, seed=settings.seed)
    for e, k, p in sorted({lay.cost_key for lay in [*config.layouts, *result.defaults.values()]}):
        bar.set_description(f"T_env P={p} E={e} K={k}")
        result.t_env_chunk_ms[(e, k, p)] = measure_env_chunks(factory, _base_profile(config), e, k, p, probe_policy,
                                                              config)
        bar.update()


def _calibrate(result: TuneResult, config: TuneConfig, factory: Any, spaces: tuple) -> tuple[Any, list[Layout]]:
    """The policy, calibrated on the default layout of the most envs, and the layouts whose stage batch fits
    the GPU (all of them on the CPU)."""
    from .measure.calibration import calibrate

    settings = config.run
    reference = result.defaults[max(config.total_envs)]
    samples = result.t_env_chunk_ms[reference.cost_key]
    policy, result.calibration = calibrate(factory, reference.profile(_base_profile(config)), settings,
                                           config.max_processes, env_ms=sum(samples) / len(samples), spaces=spaces)
    result.reference_layout = reference.name
    layouts = list(config.layouts)
    if settings.device.startswith("cuda"):
        fits, result.gpu_memory = _max_stage_batch_on_gpu(policy, spaces[0], max(config.total_envs))
        layouts = [lay for lay in layouts if lay.stage_batch <= fits]
    return policy, layouts


def _predict(result: TuneResult, config: TuneConfig, layouts: list[Layout]) -> None:
    """Every layout's prediction, best first; the defaults appended where the space does not hold them."""
    from .measure.pipeline import Costs, predict, rank

    settings, calibration = config.run, result.calibration
    costs = Costs(settings.chunk_size, result.t_env_chunk_ms, calibration.model_ms_by_batch, result.cores_free,
                  calibration.policy_threads if settings.device == "cpu" else 0)
    result.predicted = rank(layouts, costs)
    for layout in result.defaults.values():
        if layout not in layouts:
            result.predicted.append((layout, predict(layout, costs)))  # the reference runs even outside the budget


def _run_layouts(result: TuneResult, config: TuneConfig, factory: Any, policy: Any, bar: Any) -> None:
    """The best corrected prediction next, corrected by the runs so far, ``top`` (or every, at most
    ``max_layouts``) of them; then the defaults; then the further repeats, interleaved (a burst of load hits
    several layouts). Their median runs into ``result.runs``."""
    from .measure.record import median_run
    from .measure.runs import Row, run_engine_row

    settings, base = config.run, _base_profile(config)

    def measure(layout: Layout) -> Any:
        bar.set_description(f"run {layout.name}")
        measured = run_engine_row(factory, Row(layout.name, layout.name, layout.profile(base), overlap=True), policy,
                                  settings)
        bar.update()
        return measured

    predicted = dict(result.predicted)
    runs: dict[Layout, list[Any]] = {}
    corrected: dict[Layout, float] = {}
    remaining = list(result.predicted)
    while remaining and len(runs) < _layouts_to_run(config, len(result.predicted)):
        layout, pred = max(remaining, key=lambda lp: lp[1]["env_steps_per_s"] / result.feedback.factor(lp[0]))
        remaining.remove((layout, pred))
        corrected[layout] = pred["ms_per_step"] * result.feedback.factor(layout)
        runs[layout] = [measure(layout)]
        result.feedback.add(layout, pred["ms_per_step"], runs[layout][0].ms_per_step)
    selected = list(runs)
    for layout in result.defaults.values():
        if layout not in runs:
            corrected[layout] = predicted[layout]["ms_per_step"] * result.feedback.factor(layout)
            runs[layout] = [measure(layout)]
    for _ in range(settings.repeats - 1):
        for layout in runs:
            runs[layout].append(measure(layout))
    order = [lay for lay, _ in result.predicted]
    result.runs = [LayoutRun(
        layout, predicted[layout]["ms_per_step"], predicted[layout]["env_steps_per_s"], corrected[layout],
        median_run(measured), is_default=layout in result.defaults.values(),
        ran_as="exhaustive" if config.exhaustive else "top", predicted_rank=order.index(layout) + 1,
        run_order=selected.index(layout) + 1 if layout in selected else None) for layout, measured in runs.items()]


def _layouts_to_run(config: TuneConfig, predicted: int) -> int:
    return min(predicted, config.max_layouts) if config.exhaustive else config.top


def _rlinf_choice(result: TuneResult, base: RolloutProfile) -> RlinfChoice:
    """The layout the RLinf file gets: the measured winner where RLinf can run it, else the fastest measured
    layout it can run (the default layout always is one), with why the winner is not."""
    from .rlinf_keys import rlinf_unsupported

    winner = result.summary.winner
    reasons = tuple(rlinf_unsupported(winner.layout.profile(base)))
    runnable = [r for r in result.runs if not rlinf_unsupported(r.layout.profile(base))]
    chosen = winner if not reasons else max(runnable, key=lambda r: r.measured_env_steps_per_s, default=None)
    if chosen is None:
        raise ValueError(f"no measured layout is one RLinf can run (the winner {winner.name}: {'; '.join(reasons)})")
    return RlinfChoice(chosen, winner, reasons)


def _write(result: TuneResult, config: TuneConfig) -> list[Path]:
    """The winner as a profile YAML (and, ``--format rlinf``, the best RLinf can run as RLinf's keys), then the
    JSON; each atomically. The paths written."""
    import yaml

    from .measure.files import result_stem, write_json, write_text
    from .rlinf_keys import rlinf_overrides

    base, tag = _base_profile(config), result.config["tag"]
    out_dir, stem = Path(config.run.out_dir), result_stem("tune", tag, quick=config.run.quick)
    winner = result.summary.winner
    header = (f"behavior1k-fast tune: measured winner {winner.name}, {winner.measured_env_steps_per_s:.0f} "
              f"env-steps/s on {tag}")
    written = [write_text(out_dir / f"{stem}.yaml", winner.layout.profile(base).to_yaml(None, header))]
    result.profile_yaml = str(written[0])
    if result.rlinf is not None:
        keys = rlinf_overrides(result.rlinf.run.layout.profile(base))
        written.append(write_text(out_dir / f"{stem}.rlinf.yaml",
                                  result.rlinf.header(tag) + yaml.safe_dump(keys, sort_keys=False)))
        result.rlinf_yaml = str(written[1])
    result.complete = True
    return [*written, write_json(result.to_dict(), out_dir / f"{stem}.json")]


def _print(result: TuneResult, config: TuneConfig) -> None:
    """The runs, the summary, the RLinf choice and its keys, the warnings."""
    from .measure.machine import busy_warning
    from .rlinf_keys import rlinf_dotted

    print(_format_runs(result.runs))
    print(_format_summary(result.summary))
    if result.rlinf is not None:
        print(result.rlinf.format())
        print("RLinf keys: " + " ".join(rlinf_dotted(result.rlinf.run.layout.profile(_base_profile(config)))))
    for warning in (result.calibration.miss(), busy_warning(result.loads)):
        if warning:
            print(warning)


def run_tune(config: TuneConfig, progress: bool = True) -> TuneResult:
    """Measure, predict, run the best, write YAML and JSON (module docs); the result. What was measured is
    printed before the files are written, so a full disk (:class:`~.measure.files.ResultWriteError`) loses
    no figure."""
    from tqdm import tqdm

    from ..backends import isolate_sides, make_factory
    from ..rollout.bootstrap import call_with_profile
    from .measure.machine import sample_load
    from .measure.runs import backend_spaces

    settings = config.run
    factory = make_factory(settings.backend, **settings.backend_options)
    result = _start(config)
    probes = len({lay.cost_key for lay in [*config.layouts, *result.defaults.values()]})
    bar = tqdm(total=probes + 1, desc="measure T_env", unit="run", disable=not progress)
    spaces = call_with_profile(isolate_sides(settings.backend), backend_spaces, _base_profile(config), factory,
                               settings.seed)
    _probe_env(result, config, factory, spaces, bar)
    bar.set_description("T_model")
    policy, layouts = _calibrate(result, config, factory, spaces)
    bar.update()
    bar.close()
    _predict(result, config, layouts)
    count = _layouts_to_run(config, len(result.predicted))
    bar = tqdm(total=(count + len(result.defaults)) * settings.repeats, desc="run", unit="run", disable=not progress)
    _run_layouts(result, config, factory, policy, bar)
    bar.close()
    result.load_after = sample_load()
    result.summary = summarize(result.runs, config.exhaustive, config.top)
    if config.format == "rlinf":
        result.rlinf = _rlinf_choice(result, _base_profile(config))
    _print(result, config)
    written = _write(result, config)
    print(f"wrote {', '.join(map(str, written[:-1]))} and {written[-1]}")
    return result


def summarize(runs: Sequence[LayoutRun], exhaustive: bool, top: int) -> TuneSummary:
    """Winner (most measured env-steps/s), the pick (what ``tune`` without ``--exhaustive`` writes: the best
    measured of the first ``top`` layouts it selected) and how they compare with each default layout and,
    for an exhaustive run, with the best of all run; the mean prediction errors, raw and corrected."""
    def measured(run: LayoutRun) -> float:
        return run.measured_env_steps_per_s

    winner = max(runs, key=measured)
    selected = [r for r in runs if r.run_order is not None and r.run_order <= top] or list(runs)
    pick = max(selected, key=measured)
    defaults = [r for r in runs if r.is_default]
    summary = TuneSummary(
        winner=winner, pick=pick,
        pick_over_default=[measured(pick) / measured(d) for d in defaults],
        winner_over_default=[measured(winner) / measured(d) for d in defaults],
        mean_abs_prediction_error=sum(abs(r.prediction_error) for r in runs) / len(runs),
        mean_abs_corrected_error=sum(abs(r.corrected_error) for r in runs) / len(runs),
    )
    if exhaustive:
        summary.exhaustive = {"layouts_run": len(runs), "pick_vs_best": measured(pick) / measured(winner),
                              "pick_within_5_percent": measured(pick) >= 0.95 * measured(winner),
                              "pick_over_default_at_least_1_2x": all(x >= 1.2 for x in summary.pick_over_default)}
    return summary


def _format_runs(runs: Sequence[LayoutRun]) -> str:
    """Markdown table of the layouts run: predicted (raw and corrected by the runs before it) against measured
    (median, min-max)."""
    lines = ["| layout | run | rank pred | pred ms/step | corrected | meas ms/step | min-max | meas env-steps/s | "
             "error | corrected error |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(runs, key=lambda r: -r.measured_env_steps_per_s):
        m = r.measured
        name = r.name + (" (default)" if r.is_default else "")
        lines.append(f"| {name} | {r.run_order or '-'} | {r.predicted_rank} | {r.predicted_ms_per_step:.2f} | "
                     f"{r.corrected_ms_per_step:.2f} | {m.ms_per_step:.2f} | "
                     f"{m.ms_per_step_min:.2f}-{m.ms_per_step_max:.2f} | {m.env_steps_per_s:.0f} | "
                     f"{r.prediction_error:+.0%} | {r.corrected_error:+.0%} |")
    return "\n".join(lines)


def _format_summary(summary: TuneSummary) -> str:
    lines = [f"winner (measured): {summary.winner.name}; pick (best of the top selected): {summary.pick.name}; pick "
             f"over default: {', '.join(f'{x:.2f}x' for x in summary.pick_over_default)}; mean |prediction error| "
             f"{summary.mean_abs_prediction_error:.0%} (corrected by earlier runs: "
             f"{summary.mean_abs_corrected_error:.0%})"]
    if summary.exhaustive:
        ex = summary.exhaustive
        lines.append(f"exhaustive: {ex['layouts_run']} layouts; pick at {ex['pick_vs_best']:.1%} of the best")
    return "\n".join(lines)
