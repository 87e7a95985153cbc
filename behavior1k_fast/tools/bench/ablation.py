"""The ablation: rows of profiles applied cumulatively, each run through the rollout engine and measured.

Rows (same layout P x E, chunk N, same policy): ``stock`` -> ``+ slim`` -> ``+ skip intermediate obs`` ->
``+ pipeline`` with K stages, in hybrid and in process partition, each without and with overlap of the
policy forward and env stepping, and async. ``hybrid_overlap`` is the all-optimisations row (the policy
is calibrated on it). A row whose layout the partition plan cannot hold is left out, with the reason.

The process budget (``BenchConfig.process_budget``) bounds every layout. Where it holds a wider layout
than the bench's (the most processes that divide the envs), the engine's K = 1 and pipeline rows run
there too (``budget_rows``), and the peers (:mod:`.peers`) run at both; the headline is the best engine
row against the best fair peer within the budget (:func:`plan_runs`, :func:`run_bench`).

Each run is one :func:`~..measure.runs.run_engine_row` (or :func:`~.peers.run_peer_row`), measured into a
:class:`~..measure.record.RowMeasure` (its docs say what every field is): end-to-end ms per step, T_env
(the busiest env worker's simulator spans per chunk; a peer's: its busiest sub-env's chunk stepping),
T_model (one batched forward for one stage), the pipeline model's bound
(:func:`~..measure.pipeline.pipeline_round`: ``max(C * T_env, K * T_model, T_env + T_model) / N`` with C
the chunks a worker steps per round, K in hybrid partition and 1 in process partition) and the pipeline
efficiency against it, CPU seconds per env-step, peak RSS per env process and GPU memory per env. Every
run is repeated ``repeats`` times, interleaved; a row is its median run. The stock-profile rows (``stock``
and the stock peer, 10-30x slower than the rest, most of a 2-core run's time) run once: a run-to-run spread
of tens of percent cannot change a ratio of that size, and the headline compares fast rows only.
"""
from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable


from ...backends import make_factory
from ...core.checks import MachineLimits, check_local_layout, check_positive_int
from ...core.profile import AUTO_LEAD, PARTITION_MODES, RolloutProfile, auto_lead_cap
from ...rollout.plan import PartitionPlan
from ..measure.calibration import calibrate
from ..measure.config import RunConfig, run_options
from ..measure.files import ResultWriteError, write_json
from ..measure.policy import WIDTHS, model_bytes
from ..measure.record import RowMeasure, with_speedups
from ..measure.runs import Row, run_engine_row
from . import report
from ..peers.gymnasium import Peer
from .result import BenchResult, Headline

#: Profile knobs that make up "slim" (their fast-path values come from ``RolloutProfile()``).
SLIM_FIELDS = (
    "remove_headless_viewports",
    "obs_modalities",
    "carb_tasking_threads",
    "tbb_max_threads",
    "physx_worker_threads",
    "intra_op_threads",
    "numba_cache",
    "gc_enable",
    "texture_streaming_budget",
    "rtx_descriptor_sets",
    "keep_launch_argv0",
)
#: The row with every optimisation on.
ALL_ROW = "hybrid_overlap"

#: Layout knobs a tuned profile (``behavior1k-fast tune``'s YAML) brings to the ``tuned`` row.
TUNED_FIELDS = ("pipeline_stages", "num_env_processes", "total_num_envs", "partition", "schedule",
                "async_min_batch", "async_max_wait_s", "lookahead_steps")


def ablation_rows(
    processes: int, envs_per_process: int, pipeline_stages: int, chunk_size: int,
    tuned: RolloutProfile | None = None,
) -> list[Row]:
    """The rows, in table order, for P = ``processes`` x E = ``envs_per_process`` envs and K =
    ``pipeline_stages``; with ``tuned`` (a profile written by ``behavior1k-fast tune`` for the same number
    of envs) also a row with every optimisation on in that layout."""
    stock = RolloutProfile.stock(
        num_env_processes=processes, total_num_envs=processes * envs_per_process, chunk_size=chunk_size
    )
    fast = RolloutProfile()
    slim = stock.replace(**{name: getattr(fast, name) for name in SLIM_FIELDS})
    skip = slim.replace(skip_intermediate_obs=True)
    rows = [
        Row("stock", "stock", stock),
        Row("slim", "+ slim", slim, prev="stock"),
        Row("skip_obs", "+ skip intermediate obs", skip, prev="slim"),
    ]
    for partition in PARTITION_MODES:
        piped = skip.replace(pipeline_stages=pipeline_stages, partition=partition)
        tag = f"+ pipeline K={pipeline_stages} {partition}"
        rows.append(Row(f"{partition}_serial", f"{tag}, no overlap", piped, prev="skip_obs"))
        rows.append(Row(f"{partition}_overlap", f"{tag}, overlap", piped, overlap=True, prev="skip_obs"))
        rows.append(Row(f"{partition}_async", f"{tag}, async", piped.replace(schedule="async"), overlap=True,
                        prev="skip_obs"))
    # The pipeline in time (issue 21): K = 1 at the same P x E, the next chunk chosen from lead observations
    # while the current one ends, the lead measured on the first round; then K stages of whole processes,
    # each its own pipeline in time, so one stage's lead render and transfer overlap the others' forwards.
    lookahead = skip.replace(pipeline_stages=1, schedule="lookahead", lookahead_steps=AUTO_LEAD)
    rows.append(Row("lookahead", "+ lookahead (K=1, lead auto)", lookahead, overlap=True, prev="skip_obs"))
    staged = lookahead.replace(pipeline_stages=pipeline_stages, partition="process")
    rows.append(Row("lookahead_process", f"+ lookahead (K={pipeline_stages} process, lead auto)", staged,
                    overlap=True, prev="skip_obs"))
    if tuned is not None:
        layout = skip.replace(**{name: getattr(tuned, name) for name in TUNED_FIELDS})
        label = (f"tuned: P={layout.num_env_processes} x E={layout.envs_per_process}, K={layout.pipeline_stages} "
                 f"{layout.partition}, {layout.schedule}")
        rows.append(Row("tuned", label, layout, overlap=True, prev="skip_obs"))
    return rows


def _default_processes(budget: int, pipeline_stages: int, quick: bool) -> int:
    """P of the bench layout: the most processes within ``budget`` (and 8; ``quick``: K) that K divides, so
    both partitions hold the layout; ``budget`` itself where it is below K."""
    cap = min(budget, pipeline_stages if quick else 8)
    fits = range(pipeline_stages, cap + 1, pipeline_stages)
    return fits[-1] if fits else cap


def _largest_divisor(total: int, at_most: int) -> int:
    """The most processes, at most ``at_most``, that ``total`` envs spread over evenly."""
    return max(d for d in range(1, min(total, at_most) + 1) if total % d == 0)


@dataclass(frozen=True)
class BenchConfig(RunConfig):
    """One ``bench`` run: the shared :class:`~..measure.config.RunConfig` plus the bench's layout and rows
    (``from_args`` fills the defaults). The process budget is ``max_processes``, or the core rule's
    (:func:`~..measure.config.process_budget`) raised to ``processes`` where those are more."""

    processes: int = 2
    envs_per_process: int = 2
    pipeline_stages: int = 2
    scaling: tuple[int, ...] = ()
    #: Run the peers (gymnasium ``AsyncVectorEnv`` s, :mod:`.peers`).
    peers: bool = True
    trace: bool = False
    #: A profile from ``behavior1k-fast tune`` (its layout becomes the ``tuned`` row), or ``None``.
    tuned: RolloutProfile | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("processes", self.processes)
        check_positive_int("envs_per_process", self.envs_per_process)
        check_positive_int("pipeline_stages", self.pipeline_stages)
        errors = []
        for partition in PARTITION_MODES:  # at least one partition must hold the pipeline rows' layout
            try:
                PartitionPlan(self.processes, self.envs_per_process, self.pipeline_stages, partition)
            except ValueError as exc:
                errors.append(str(exc))
        if len(errors) == len(PARTITION_MODES):
            raise ValueError("; ".join(errors))
        if self.max_processes is not None and self.processes > self.max_processes:
            raise ValueError(f"processes={self.processes} is above the process budget max_processes="
                             f"{self.max_processes}")
        for p in self.scaling:
            check_positive_int("scaling process count", p)
            if self.max_processes is not None and p > self.max_processes:
                raise ValueError(f"scaling process count {p} is above the process budget max_processes="
                                 f"{self.max_processes} (the budget bounds the sweep too)")
        self._check_machine()
        if self.tuned is not None:
            total = self.processes * self.envs_per_process
            if self.tuned.total_num_envs != total or self.tuned.chunk_size != self.chunk_size:
                raise ValueError(
                    f"--tuned layout has total_num_envs={self.tuned.total_num_envs}, num_action_chunks="
                    f"{self.tuned.chunk_size}; the bench runs {total} envs, chunk_size={self.chunk_size} (every row "
                    f"must have the same envs and chunks: tune with --envs {total})"
                )

    def _check_machine(self) -> None:
        """Every run fits this machine (``core.checks.MachineLimits``): the processes, envs and chunks of the
        bench layout and of a ``max_processes`` budget (the peers' always run here; the engine's with the
        process executor: Ray places its workers on a cluster), of the scaling sweep (process executor), and
        the policy. (The budget of the core rule, from this machine's cores, always fits.)"""
        limits = MachineLimits.here()
        e, n = self.envs_per_process, self.chunk_size
        local = self.executor == "process"
        budget = [] if self.max_processes is None else [self.max_processes]
        counts = ([self.processes, *budget] if local or self.peers else []) + (list(self.scaling) if local else [])
        for p in counts:
            check_local_layout(p, p * e, n)
        width, depth = self.model_width or WIDTHS[0], self.model_depth or 1
        batch = max(1, self.processes * e // self.pipeline_stages)
        limits.check_memory(f"the policy with model_width={width}, model_depth={depth}, chunk_size={n} at a "
                            f"stage batch of {batch}", model_bytes(width, depth, n, batch))

    @property
    def process_budget(self) -> int:
        if self.max_processes is not None:
            return self.max_processes
        return max(super().process_budget, self.processes)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "BenchConfig":
        options = run_options(args)
        stages = args.pipeline_stages
        budget = RunConfig(**options).process_budget
        return cls(
            **options,
            processes=args.processes if args.processes is not None else _default_processes(budget, stages, args.quick),
            envs_per_process=args.envs_per_process if args.envs_per_process is not None else stages,
            pipeline_stages=stages,
            scaling=tuple(args.scaling or ()),
            peers=not args.no_peers,
            executor=args.executor,
            trace=args.trace,
            tuned=RolloutProfile.from_yaml(args.tuned) if args.tuned is not None else None,
        )


# --- what a run measures -------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The runs of one bench: the factory, the rows at the bench layout, the engine rows and peers at the
    process budget, the scaling sweep, and the rows the layout cannot hold (name -> why)."""

    factory: Any
    rows: list[Row]
    budget_rows: list[Row]
    peers: list[Peer]
    sweep: list[tuple[int, Row]]
    left_out: dict[str, str]
    budget: int

    @property
    def engine_rows(self) -> list[Row]:
        return self.rows + self.budget_rows


def _holds(row: Row) -> str | None:
    """Why the plan cannot hold ``row``'s layout, or ``None``."""
    try:
        PartitionPlan.from_profile(row.profile)
    except ValueError as exc:
        return str(exc)
    return None


def _at(row: Row, processes: int, envs_per_process: int, prev: str | None) -> Row:
    """``row`` at P = ``processes`` x E = ``envs_per_process`` (a budget row: its name and label say where)."""
    where = f"P{processes}xE{envs_per_process}"
    return Row(f"{row.name}@{where}", f"{where}: {row.label}",
               row.profile.replace(num_env_processes=processes, total_num_envs=processes * envs_per_process),
               row.overlap, prev)


def plan_runs(config: BenchConfig) -> Plan:
    """What a run of ``config`` measures (module docs of :mod:`.peers` for the peers)."""
    factory = make_factory(config.backend, **config.backend_options)
    every = ablation_rows(config.processes, config.envs_per_process, config.pipeline_stages, config.chunk_size,
                          config.tuned)
    left_out = {row.name: why for row in every if (why := _holds(row))}
    rows = [row for row in every if row.name not in left_out]
    by_name = {row.name: row for row in rows}
    skip = by_name["skip_obs"]
    total, budget = config.processes * config.envs_per_process, config.process_budget
    widest = _largest_divisor(total, budget)
    budget_rows: list[Row] = []
    if widest != config.processes:
        e = total // widest
        base = _at(skip, widest, e, None)
        budget_rows.append(base)
        for row in rows:
            if row.name.endswith(("_overlap", "_async")) or row.name.startswith("lookahead"):
                moved = _at(row, widest, e, base.name)
                if not _holds(moved):
                    budget_rows.append(moved)
    peers: list[Peer] = []
    if config.peers:
        for p in sorted({config.processes, widest}):
            e = total // p
            where = "" if p == config.processes else f"@P{p}xE{e}"
            profile = skip.profile.replace(num_env_processes=p, total_num_envs=total)
            peers.append(Peer(f"peer_chunk{where}", f"gymnasium AsyncVectorEnv, chunk step, {p} x {e} envs",
                              profile, p, e, 1))
            if p % 2 == 0:
                peers.append(Peer(f"peer_double_buffer{where}",
                                  f"two AsyncVectorEnvs alternated, 2 x {p // 2} x {e} envs", profile, p, e, 2))
            else:
                left_out[f"peer_double_buffer{where}"] = f"a double buffer needs an even process count, got {p}"
            lead = auto_lead_cap(config.chunk_size)
            peers.append(Peer(f"peer_lookahead{where}", f"user-level lookahead (lead {lead}) over one "
                              f"AsyncVectorEnv, {p} x {e} envs", profile, p, e, 1, lead_steps=lead))
        stock = RolloutProfile.stock(num_env_processes=total, total_num_envs=total, chunk_size=config.chunk_size)
        outside = ", outside the process budget" if total > budget else ""
        peers.append(Peer("peer_stock", f"gymnasium AsyncVectorEnv, stock profile, {total} x 1 env{outside}",
                          stock, total, 1, 1, fair=False))
    reference = next(r for r in rows if r.name in (ALL_ROW, "process_overlap"))
    sweep = [(p, replace(reference, profile=reference.profile.replace(
        num_env_processes=p, total_num_envs=p * config.envs_per_process))) for p in config.scaling]
    return Plan(factory, rows, budget_rows, peers, sweep, left_out, budget)


# --- the whole benchmark -------------------------------------------------------------------------


def gpu_memory(rows: list[RowMeasure], machine: dict[str, Any]) -> dict[str, Any] | None:
    """GPU memory of one env process (NVML; the skip-obs row's, whose profile every fast row and fair peer
    shares, and the stock row's) and the env processes the GPU holds at that figure; ``None`` without one."""
    by_name = {row.name: row for row in rows}
    fast, stock = by_name["skip_obs"].gpu_mib_per_process, by_name["stock"].gpu_mib_per_process
    if fast is None:
        return None
    gpu = machine.get("gpu") or {}
    total = gpu.get("memory_gib", 0) * 1024
    return {"per_process_mib": fast, "stock_per_process_mib": stock, "gpu_total_mib": total or None,
            "processes_that_fit": int(total // fast) if total and fast else None}


def _fastest(rows: list[RowMeasure | None]) -> RowMeasure | None:
    rows = [m for m in rows if m is not None]
    return min(rows, key=lambda m: m.ms_per_step) if rows else None


def _reference(plan: Plan) -> Row:
    """The row the policy is calibrated on: the all-optimisations row (or the process one where the layout
    has no hybrid pipeline)."""
    return next(r for r in plan.rows if r.name in (ALL_ROW, "process_overlap"))


def _files(config: BenchConfig, tag: str) -> tuple[Path, Path]:
    out_dir = Path(config.out_dir)
    return out_dir / f"bench_{tag}.json", out_dir / f"bench_{tag}.png"


def _start(config: BenchConfig, plan: Plan) -> BenchResult:
    """The result before any run: the machine, the config, the load, the rows left out."""
    from ..measure.machine import describe_machine, machine_tag, sample_load

    machine = describe_machine(config.device)
    tag = config.tag or machine_tag(machine)
    settings = dict(config.__dict__) | {"tag": tag, "all_row": _reference(plan).name, "process_budget": plan.budget,
                                        "tuned": config.tuned.to_dict() if config.tuned else None}
    return BenchResult(machine=machine, config=settings, load_before=sample_load(), left_out=dict(plan.left_out))


@dataclass(frozen=True)
class _Run:
    """One row's run: its name, the section of the result it goes to, the call that measures it, and whether
    it runs once whatever ``repeats`` says (the stock-profile rows: module docs)."""

    name: str
    section: str
    measure: Callable[[], RowMeasure]
    once: bool = False


def _count_runs(runs: list[_Run], repeats: int) -> int:
    return sum(1 if run.once else repeats for run in runs)


def _runs(plan: Plan, config: BenchConfig, policy: Any, tag: str) -> list[_Run]:
    """Every row's run at the bench layout and the budget's, then every peer's (traces where asked)."""
    from ..peers.gymnasium import run_peer_row

    reference = _reference(plan)
    json_path, _ = _files(config, tag)
    runs = []
    for section, rows in (("rows", plan.rows), ("budget_rows", plan.budget_rows)):
        for row in rows:
            traced = config.trace and (row is reference or row.profile.schedule == "lookahead")
            suffix = "" if row is reference else "." + row.name
            trace = str(json_path.with_name(f"bench_{tag}{suffix}.trace.json")) if traced else None
            runs.append(_Run(row.name, section, functools.partial(run_engine_row, plan.factory, row, policy, config,
                                                                   trace_path=trace), once=row.name == "stock"))
    for peer in plan.peers:
        spaces = (policy.observation_space, policy.action_space)
        runs.append(_Run(peer.name, "peers", functools.partial(run_peer_row, plan.factory, peer, policy, spaces,
                                                               config), once=not peer.fair))
    return runs


def _record(result: BenchResult, runs: list[_Run], measured: dict[str, list[RowMeasure]]) -> dict[str, RowMeasure]:
    """Every row measured so far as its median run, speedups filled, into ``result``'s sections; by name."""
    from ..measure.record import median_run

    medians = [median_run(measured[run.name]) for run in runs if measured[run.name]]
    by_name = {m.name: m for m in with_speedups(medians)}
    for section in ("rows", "budget_rows", "peers"):
        setattr(result, section, [by_name[r.name] for r in runs if r.section == section and r.name in by_name])
    return by_name


def _measure_rows(result: BenchResult, runs: list[_Run], config: BenchConfig, bar: Any) -> dict[str, RowMeasure]:
    """Every run ``config.repeats`` times (a stock-profile run once), interleaved (a burst of other load hits
    several rows), the JSON rewritten after each; the rows by name."""
    json_path, _ = _files(config, result.config["tag"])
    measured: dict[str, list[RowMeasure]] = {run.name: [] for run in runs}
    for repeat in range(config.repeats):
        for run in (r for r in runs if not (r.once and repeat)):
            bar.set_description(run.name)
            measured[run.name].append(run.measure())
            _record(result, runs, measured)
            write_json(result.to_dict(), json_path)
            bar.update()
    return _record(result, runs, measured)


def _measure_sweep(result: BenchResult, plan: Plan, policy: Any, config: BenchConfig, bar: Any) -> None:
    """The scaling sweep over env processes (every optimisation on), into ``result.scaling``."""
    json_path, _ = _files(config, result.config["tag"])
    for p, row in plan.sweep:
        bar.set_description(f"scaling P={p}")
        piped = run_engine_row(plan.factory, row, policy, config)
        bar.update()
        result.scaling.append(piped.replace(label=f"{row.label}, E={config.envs_per_process}"))
        write_json(result.to_dict(), json_path)


def _summarize(result: BenchResult, plan: Plan, by_name: dict[str, RowMeasure]) -> None:
    """The best row, the headline, GPU memory and the goals, from the measured rows."""
    engine = [by_name[r.name] for r in plan.engine_rows]
    at_layout = [by_name[r.name] for r in plan.rows]
    barrier = _fastest([m for m in at_layout if m.name.endswith("_overlap")])
    asynchronous = _fastest([m for m in at_layout if m.name.endswith("_async")])
    lookahead = _fastest([by_name.get("lookahead"), by_name.get("lookahead_process")])
    best = _fastest([barrier, asynchronous, lookahead, by_name.get("tuned")])
    best_engine = _fastest([m for m in engine if m.processes <= plan.budget])
    best_peer = _fastest([by_name[p.name] for p in plan.peers if p.fair and p.processes <= plan.budget])
    stock_peer = by_name.get("peer_stock")
    result.best_row = best.name
    result.headline = Headline.of(plan.budget, best_engine, best_peer)
    result.gpu_memory = gpu_memory(engine, result.machine)
    result.goals = report.check_goals({
        "speedup_stock_to_all": best.speedup_vs_stock,
        "speedup_skip_obs_to_all": by_name["skip_obs"].ms_per_step / best.ms_per_step,
        "pipeline_efficiency": best.pipeline_efficiency,
        "speedup_async_over_barrier": barrier.ms_per_step / asynchronous.ms_per_step,
        "speedup_over_best_peer": result.headline.speedup,
        "speedup_over_stock_peer": stock_peer.ms_per_step / best.ms_per_step if stock_peer else None,
        "speedup_lookahead_over_hybrid": (by_name["hybrid_overlap"].ms_per_step / lookahead.ms_per_step
                                          if lookahead and "hybrid_overlap" in by_name else None),
        "lookahead_efficiency": lookahead.pipeline_efficiency if lookahead else None,
        "speedup_lookahead_over_user_lookahead": (by_name["peer_lookahead"].ms_per_step
                                                  / by_name["lookahead"].ms_per_step
                                                  if {"lookahead", "peer_lookahead"} <= set(by_name) else None),
    })


def _print_warnings(result: BenchResult) -> None:
    """The calibration's miss and the busy machine, where there was one."""
    from ..measure.machine import busy_warning

    for warning in (result.calibration.miss() if result.calibration else None, busy_warning(result.loads)):
        if warning:
            print(warning)


def run_bench(config: BenchConfig, progress: bool = True) -> BenchResult:
    """Run the ablation, the engine rows at the process budget and the peers (each ``config.repeats`` times,
    interleaved), then the scaling sweep; print, write JSON and PNG; return the result.

    The JSON is rewritten (atomically) after every run with ``"complete": false`` so an interrupted run
    keeps what it measured. Where a file cannot be written (:class:`~..measure.files.ResultWriteError`: a
    full disk), what was measured so far is printed before the error goes up.
    """
    from tqdm import tqdm

    from ..measure.machine import sample_load

    plan = plan_runs(config)
    result = _start(config, plan)
    json_path, png_path = _files(config, result.config["tag"])
    bar = tqdm(total=1, desc="calibrate", unit="run", disable=not progress)
    try:
        policy, result.calibration = calibrate(plan.factory, _reference(plan).profile, config,
                                               max_processes=config.processes)
        bar.write(report.format_model_cost(result.calibration))
        runs = _runs(plan, config, policy, result.config["tag"])
        bar.total += _count_runs(runs, config.repeats) + len(plan.sweep)
        bar.update()
        by_name = _measure_rows(result, runs, config, bar)
        _measure_sweep(result, plan, policy, config, bar)
    except ResultWriteError:
        bar.close()
        print(report.format_result(result))
        raise
    bar.close()
    result.load_after = sample_load()
    _summarize(result, plan, by_name)
    result.complete = True
    print(report.format_result(result))
    _print_warnings(result)
    write_json(result.to_dict(), json_path)
    report.write_plot(result, png_path)
    print(f"wrote {json_path} and {png_path}")
    return result
