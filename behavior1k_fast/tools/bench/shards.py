"""``behavior1k-fast bench --shards G1,G2,...``: scaling across policy GPUs, one engine per GPU.

For each G, G engines run side by side as Ray actors, as the README's "Several policy GPUs" section says:
:func:`~behavior1k_fast.rollout.engine_shard` gives engine i its share of the job (whole env workers, the
seeds one engine would use) and :func:`~behavior1k_fast.rollout.merge_stats` joins the engines' stats.
Every engine runs the same layout P x E x K: bench's all-optimisations row, or the layout of ``--tuned``
(a profile written by ``behavior1k-fast tune`` on one GPU). The policy is calibrated once, on the G = 1
layout on one GPU (:func:`~..measure.calibration.calibrate`, in a Ray task holding that GPU), and every
engine builds it at that size with the same weights. Each G's engines are timed ``--repeats`` times in a
row after one warm-up; its entry is the median run, with every run's env-steps/s.

Engine i is a Ray actor holding one GPU (Ray sets its ``CUDA_VISIBLE_DEVICES``): its policy runs there,
and its env workers are its own processes (the process executor, shared memory) bound to the same GPU by
the profile's ``gpu_ids=(0,)`` (:func:`~behavior1k_fast.rollout.placement.bind_gpus`: CUDA and MuJoCo's
EGL renderer). The engines are built, warmed up and timed in step (the driver waits for all of them at
every step), so their timed rounds overlap.

Per G the result holds: env-steps/s of the job (every env's own actions over the slowest engine's wall
time), the efficiency against G x the G = 1 figure (and per env, for a G run at fewer envs), CPU cores per
env (busy: CPU seconds of every engine and its workers over wall time and envs; host: cores over envs),
GPU memory per GPU (device-wide in use, from torch, with NVML's per-process split into policy and env
workers where present), the Ray node of every engine, the merged and per-engine stats, and each engine's
:class:`~..measure.record.RowMeasure`. Where the host's cores bind before the GPUs (cores / G per engine
hold fewer env processes than P under the core rule: a GPU policy keeps no core, a CPU one keeps one), the
run says so and runs that G at the largest P the cores allow. Writes ``shards_<machine>.json`` (rewritten
after every G with ``"complete": false``) and ``shards_<machine>.png`` to ``--out-dir``.

``--device cpu``: the G engines share the CPU and ask Ray for no GPU (the code path, not a scaling figure).
Ray: a local instance of the run's own, or the cluster this process is already connected to
(``ray.init(address=...)`` first), where Ray places the engine actors on its nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from ...core.profile import RolloutProfile
from ...rollout.plan import PartitionPlan
from ..measure.config import RunConfig, policy_threads, process_budget, usable_cores
from ..measure.files import result_stem, save_figure, write_json
from ..measure.runs import Row
from . import report

#: The efficiency of the largest G against G x the one-GPU figure that issue 25 asks for.
GOALS = {"shard_efficiency": ("env-steps/s of the largest G over G x the one-GPU figure", 0.90, "fraction")}


def engine_process_budget(cores: int, shards: int, device: str) -> int:
    """Env processes one of ``shards`` engines may run on its ``cores / shards`` cores: the core rule
    (:func:`~behavior1k_fast.tools.measure.config.process_budget`) on that share."""
    return process_budget(cores // shards, device)


def processes_within(row: Row, budget: int) -> int | None:
    """The most env processes, at most the row's and at most ``budget``, whose layout (the row's E, K and
    partition) is a valid plan; ``None`` when none is."""
    profile = row.profile
    for processes in range(min(profile.num_env_processes, budget), 0, -1):
        try:
            PartitionPlan(processes, profile.envs_per_process, profile.pipeline_stages, profile.partition)
        except ValueError:
            continue
        return processes
    return None


@dataclass(frozen=True)
class ShardsConfig(RunConfig):
    """One ``bench --shards`` run: the shared :class:`~..measure.config.RunConfig`, the engine counts and the
    one-GPU layout every engine runs.

    Args:
        shards: engine counts G to run, ascending, 1 first (the figure every efficiency is against).
        processes: env processes P of one engine (``tuned``: its P).
        envs_per_process: envs per process E.
        pipeline_stages: stages K.
        tuned: a ``behavior1k-fast tune`` profile whose layout every engine runs, or ``None``: bench's
            all-optimisations row at P x E x K.
    """

    shards: tuple[int, ...] = (1,)
    processes: int = 1
    envs_per_process: int = 2
    pipeline_stages: int = 2
    tuned: RolloutProfile | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if list(self.shards) != sorted(set(self.shards)) or not self.shards or self.shards[0] != 1:
            raise ValueError(f"--shards must list distinct engine counts in ascending order, starting with 1 (the "
                             f"one-GPU figure every efficiency is against), got {','.join(map(str, self.shards))}")
        if self.device.startswith("cuda:"):
            raise ValueError(f"--device {self.device} names one GPU; --shards puts engine i on GPU i of its own: "
                             f"pass --device cuda")
        if self.executor != "process":
            raise ValueError(f"--shards runs each engine as a Ray actor whose env workers are its own processes "
                             f"(bound to its GPU); --executor {self.executor} does not go with it")
        if self.tuned is not None and self.tuned.chunk_size != self.chunk_size:
            raise ValueError(f"--tuned layout has num_action_chunks={self.tuned.chunk_size}, the run has "
                             f"--chunk-size {self.chunk_size}: tune with the same chunk size")
        PartitionPlan.from_profile(engine_row(self).profile)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ShardsConfig":
        from .ablation import BenchConfig

        for option, given in (("--scaling", args.scaling), ("--trace", args.trace)):
            if given:
                raise ValueError(f"{option} is an option of bench's ablation; it does not go with --shards")
        # bench's run options and default layout (its layout options cleared: only its defaults are read)
        bench = BenchConfig.from_args(argparse.Namespace(**{**vars(args), "processes": None,
                                                            "envs_per_process": None, "tuned": None}))
        tuned = RolloutProfile.from_yaml(args.tuned) if args.tuned else None
        layout = (tuned.num_env_processes, tuned.envs_per_process, tuned.pipeline_stages) if tuned else (
            args.processes or bench.processes, args.envs_per_process or bench.envs_per_process, args.pipeline_stages)
        return cls(**{f.name: getattr(bench, f.name) for f in dataclasses.fields(RunConfig)},
                   shards=tuple(args.shards), processes=layout[0], envs_per_process=layout[1],
                   pipeline_stages=layout[2], tuned=tuned)


def engine_row(config: ShardsConfig) -> Row:
    """The row one engine runs (module docs), its profile binding the env workers to the engine's GPU."""
    from .ablation import ALL_ROW, ablation_rows

    rows = ablation_rows(config.processes, config.envs_per_process, config.pipeline_stages, config.chunk_size,
                         config.tuned)
    row = next(r for r in rows if r.name == ("tuned" if config.tuned is not None else ALL_ROW))
    gpu_ids = (0,) if config.device.startswith("cuda") else None  # the one GPU the engine's actor sees
    return replace(row, name="shard", profile=row.profile.replace(gpu_ids=gpu_ids))


def check_shards(args: argparse.Namespace) -> ShardsConfig:
    """The :class:`ShardsConfig` of ``args`` after every check that can fail before a run: Ray is installed,
    the backend is, the device exists and there is a GPU for every engine of the largest G (``--device
    cpu``: no GPU needed), the layout's backend can be built, ``--out-dir`` is writable."""
    from ...backends import make_factory
    from ...core.checks import check_writable_dir
    from ...core.contract import check_backend_build
    from ..argtypes import usage_errors
    from ..measure.config import check_run

    with usage_errors():
        if importlib.util.find_spec("ray") is None:
            raise ValueError("--shards starts the engines as Ray actors: pip install 'behavior1k_fast[ray]'")
        config = ShardsConfig.from_args(args)
        if config.device == "cuda":
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if config.shards[-1] > gpus:
                fewer = f"list at most {gpus}, or " if gpus else ""
                raise ValueError(f"--shards {config.shards[-1]} needs {config.shards[-1]} GPUs (one engine per GPU), "
                                 f"this machine shows {gpus}: {fewer}pass --device cpu to share the CPU")
        check_run(config)
        profile = engine_row(config).profile
        plan = PartitionPlan.from_profile(profile)
        check_backend_build(make_factory(config.backend, **config.backend_options), plan.envs_per_process,
                            config.seed, profile)
        check_writable_dir("--out-dir", config.out_dir)
    return config


# --- inside the Ray actors -----------------------------------------------------------------------


def _calibrate_size(factory: Any, row: Row, config: ShardsConfig) -> Any:
    """The :class:`~..measure.calibration.Calibration` of the one-GPU layout (a Ray task on one GPU)."""
    from ..measure.calibration import calibrate

    return calibrate(factory, row.profile, config, max_processes=row.profile.num_env_processes)[1]


class _ShardEngine:
    """Engine ``index`` of ``count`` and its policy, inside a Ray actor (``ray.remote(_ShardEngine)``).

    The job is ``row``'s profile run by ``count`` engines; this engine runs its :func:`engine_shard` share
    (measured as a :class:`~..measure.runs.RowRun`) with the policy at the calibrated ``width`` x ``depth``;
    ``threads``: the policy's intra-op threads on the CPU (``None``: left as they are)."""

    def __init__(self, factory: Any, row: Row, config: ShardsConfig, index: int, count: int, width: int,
                 depth: int, threads: int | None):
        import torch

        from ...rollout import engine_shard
        from ..measure.policy import ChunkPolicy
        from ..measure.runs import RowRun

        shard = engine_shard(row.profile, index, count, config.seed)
        if threads is not None:
            torch.set_num_threads(threads)
        self.index = index
        self.run = RowRun(factory, replace(row, profile=shard.profile), replace(config, seed=shard.seed))
        engine = self.run.engine
        self.policy = ChunkPolicy(engine.observation_space, engine.action_space, chunk_size=config.chunk_size,
                                  width=width, depth=depth, device=config.device, seed=config.seed)

    def warm_up(self) -> None:
        self.run.warm_up(self.policy)

    def timed(self) -> dict[str, Any]:
        """The timed rounds: this engine's stats and row measure, the Ray node it ran on, its GPU and what that
        GPU holds right after them."""
        import ray
        import torch

        stats, measure = self.run.timed(self.policy)
        used = None
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            used = (total - free) / 2**20
        return {"engine": self.index, "node": ray.get_runtime_context().get_node_id(),
                "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "stats": stats, "measure": measure,
                "gpu_used_mib": used}

    def close(self) -> None:
        self.run.close()


# --- the driver ----------------------------------------------------------------------------------


def _run_in_step(factory: Any, row: Row, config: ShardsConfig, count: int, size: tuple[int, int],
                threads: int | None) -> list[list[dict[str, Any]]]:
    """``count`` :class:`_ShardEngine` actors of ``row``'s job, built, warmed up and timed ``config.repeats``
    times in step; per repeat, what each engine's :meth:`_ShardEngine.timed` gave, in engine order. Every
    actor is closed and killed after."""
    import ray

    options = {"num_cpus": 1, "num_gpus": 1 if config.device == "cuda" else 0}
    actor = ray.remote(_ShardEngine).options(**options)
    actors = [actor.remote(factory, row, config, i, count, *size, threads) for i in range(count)]
    try:
        ray.get([a.warm_up.remote() for a in actors])
        runs = [ray.get([a.timed.remote() for a in actors]) for _ in range(config.repeats)]
        ray.get([a.close.remote() for a in actors])
        return runs
    except BaseException:  # close the engines that still answer (their workers and shared memory), then raise
        ray.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=60)
        raise
    finally:
        for a in actors:
            ray.kill(a)


def shard_entry(count: int, processes: int, wanted: int, cores: int, parts: Sequence[dict[str, Any]],
                one: dict[str, Any] | None) -> dict[str, Any]:
    """The result of one G (module docs) from its engines' ``parts``; ``one`` is G = 1's entry (``None``: this
    is it)."""
    from ...rollout import merge_stats

    merged = merge_stats([p["stats"] for p in parts])
    measures = [p["measure"] for p in parts]
    envs, wall = merged.num_envs, merged.wall_seconds
    rate = merged.env_steps_per_second
    one_rate, one_envs = (one["env_steps_per_s"], one["total_envs"]) if one else (rate, envs)
    gpus = [{"engine": p["engine"], "gpu": p["gpu"], "device_used_mib": p["gpu_used_mib"],
             "policy_mib": m.policy_gpu_mib,
             "env_workers_mib": None if m.gpu_mib_per_env is None else m.gpu_mib_per_env * m.total_envs}
            for p, m in zip(parts, measures)]
    used = [g["device_used_mib"] for g in gpus if g["device_used_mib"] is not None]
    bound = processes < wanted
    return {
        "shards": count,
        "processes_per_engine": processes,
        "envs_per_engine": envs // count,
        "total_envs": envs,
        "cores": cores,
        "cores_per_gpu": cores / count,
        "cores_bound": bound,
        "note": (f"cores bind before GPUs: {cores} cores / {count} engines = {cores // count} per engine hold "
                 f"P={processes} env processes, not P={wanted}") if bound else None,
        "wall_s": wall,
        "env_steps_per_s": rate,
        "linear_env_steps_per_s": count * one_rate,
        "efficiency": rate / (count * one_rate),
        "efficiency_per_env": (rate / envs) / (one_rate / one_envs),
        "cpu_cores_busy_per_env": sum(m.cpu_seconds for m in measures) / wall / envs,
        "host_cores_per_env": cores / envs,
        "max_gpu_used_mib": max(used) if used else None,
        "engine_nodes": [p["node"] for p in parts],
        "gpu_mib_per_gpu": gpus,
        "merged_stats": merged.to_dict(),
        "engine_stats": [p["stats"].to_dict() for p in parts],
        "engines": [m.to_dict() for m in measures],
    }


def median_entry(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median of one G's repeated runs by env-steps/s (for an even count the faster middle one, as
    bench's :func:`~..measure.record.median_run`), with ``repeat_env_steps_per_s`` of them all, in run order."""
    ordered = sorted(entries, key=lambda e: -e["env_steps_per_s"])
    return ordered[(len(ordered) - 1) // 2] | {"repeat_env_steps_per_s": [e["env_steps_per_s"] for e in entries]}


#: (key in a G's entry, column title, format) of the printed table.
COLUMNS = (
    ("shards", "G", "{}"),
    ("processes_per_engine", "P/engine", "{}"),
    ("total_envs", "envs", "{}"),
    ("env_steps_per_s", "env-steps/s", "{:.0f}"),
    ("linear_env_steps_per_s", "G x one GPU", "{:.0f}"),
    ("efficiency", "eff", "{:.0%}"),
    ("efficiency_per_env", "eff/env", "{:.0%}"),
    ("cpu_cores_busy_per_env", "busy cores/env", "{:.2f}"),
    ("host_cores_per_env", "host cores/env", "{:.2f}"),
    ("max_gpu_used_mib", "GPU MiB/GPU", "{:.0f}"),
)


def _start_ray(config: ShardsConfig, cores: int, progress: bool) -> bool:
    """A Ray instance of the run's own where none is connected (a logical CPU per engine actor, the GPUs
    torch sees: told, not detected, since an actor asking for an undetected GPU would wait for ever);
    whether it was started here."""
    import ray

    if ray.is_initialized():
        return False
    gpus = 0
    if config.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    ray.init(address="local", num_cpus=max(cores, config.shards[-1]), num_gpus=gpus, include_dashboard=False,
             log_to_driver=progress)
    return True


def _run_count(factory: Any, row: Row, config: ShardsConfig, count: int, size: tuple[int, int], cores: int,
               one: dict[str, Any] | None) -> dict[str, Any]:
    """G = ``count`` engines run in step (``config.repeats`` times): its entry, or ``{"shards", "why"}`` where
    the cores hold no layout of the row for that many engines."""
    processes = processes_within(row, engine_process_budget(cores, count, config.device))
    if processes is None:
        return {"shards": count, "why": (f"{cores} cores / {count} engines hold no {row.profile.partition} layout "
                                         f"of E={row.profile.envs_per_process}, K={row.profile.pipeline_stages}")}
    job = row.profile.replace(num_env_processes=count * processes,
                              total_num_envs=count * processes * row.profile.envs_per_process)
    threads = policy_threads(cores // count, processes) if config.device == "cpu" else None
    runs = _run_in_step(factory, replace(row, profile=job), config, count, size, threads)
    wanted = row.profile.num_env_processes
    return median_entry([shard_entry(count, processes, wanted, cores, parts, one) for parts in runs])


def run_shards(config: ShardsConfig, progress: bool = True) -> dict[str, Any]:
    """Calibrate once, run every G of ``config.shards``; print, write JSON and PNG; return the result."""
    import ray
    from tqdm import tqdm

    from ...backends import make_factory
    from ..measure.machine import describe_machine, machine_tag

    factory = make_factory(config.backend, **config.backend_options)
    row = engine_row(config)
    wanted = row.profile.num_env_processes
    cores = usable_cores()
    machine = describe_machine(config.device)
    tag = config.tag or machine_tag(machine)
    json_path = Path(config.out_dir) / f"{result_stem('shards', tag, quick=config.quick)}.json"
    result: dict[str, Any] = {
        "complete": False, "machine": machine,
        "config": dict(config.__dict__) | {"tag": tag, "tuned": config.tuned.to_dict() if config.tuned else None},
        "layout": {"processes": wanted, "envs_per_process": row.profile.envs_per_process,
                   "pipeline_stages": row.profile.pipeline_stages, "partition": row.profile.partition,
                   "schedule": row.profile.schedule, "overlap": row.overlap, "label": row.label},
        "calibration": None, "shards": [], "skipped": [], "goals": [],
    }
    started = _start_ray(config, cores, progress)
    bar = tqdm(total=1 + len(config.shards), desc="calibrate", unit="run", disable=not progress)
    try:
        task = ray.remote(_calibrate_size).options(num_gpus=1 if config.device == "cuda" else 0)
        calibration = ray.get(task.remote(factory, row, config))
        result["calibration"] = calibration.to_dict()
        bar.write(report.format_model_cost(calibration))
        if calibration.miss():
            bar.write(calibration.miss())
        for count in config.shards:
            bar.update()
            bar.set_description(f"G={count}")
            entry = _run_count(factory, row, config, count, (calibration.model_width, calibration.model_depth),
                               cores, result["shards"][0] if result["shards"] else None)
            if "why" in entry:
                result["skipped"].append(entry)
                continue
            if entry["note"]:
                bar.write(entry["note"])
            result["shards"].append(entry)
            write_json(result, json_path)
        bar.update()
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return _finish(result, row, json_path.with_suffix(".png"))


def _finish(result: dict[str, Any], row: Row, png_path: Path) -> dict[str, Any]:
    """The goal, the table and the skipped G; then the JSON and the PNG."""
    largest = result["shards"][-1] if len(result["shards"]) > 1 else None
    goals = report.check_goals({"shard_efficiency": largest["efficiency"] if largest else None}, GOALS)
    result["goals"] = [g.to_dict() for g in goals]
    result["complete"] = True
    print(f"Engine shards, each {row.label} (P={row.profile.num_env_processes} x E={row.profile.envs_per_process}):")
    print(report.format_table(result["shards"], COLUMNS))
    for skipped in result["skipped"]:
        print(f"G={skipped['shards']} not run: {skipped['why']}")
    print(report.format_goals(goals))
    json_path = write_json(result, png_path.with_suffix(".json"))
    write_plot(result, png_path)
    print(f"wrote {json_path} and {png_path}")
    return result


def write_plot(result: dict[str, Any], path: str | os.PathLike) -> Path:
    """Env-steps/s against G (measured and G x one GPU), and the efficiency per G against the goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = result["shards"]
    counts = [e["shards"] for e in entries]
    fig, (rate, eff) = plt.subplots(1, 2, figsize=(11, 4.5))
    rate.plot(counts, [e["env_steps_per_s"] for e in entries], "o-", label="measured")
    rate.plot(counts, [e["linear_env_steps_per_s"] for e in entries], ":", color="grey", label="G x one GPU")
    for e in entries:
        if e["cores_bound"]:
            rate.annotate(f"P={e['processes_per_engine']} (cores bind)", (e["shards"], e["env_steps_per_s"]),
                          fontsize=8, ha="left", va="top")
    rate.set_xlabel("engines G (one per policy GPU)")
    rate.set_ylabel("env-steps / s")
    rate.set_xticks(counts)
    rate.legend()
    eff.bar(counts, [e["efficiency"] for e in entries], label="of G x one GPU")
    eff.plot(counts, [e["efficiency_per_env"] for e in entries], "x", color="C1", label="per env")
    eff.axhline(GOALS["shard_efficiency"][1], color="C2", ls=":", label="goal")
    eff.set_xlabel("engines G")
    eff.set_ylabel("efficiency")
    eff.set_xticks(counts)
    eff.set_ylim(0, max(1.1, *(e["efficiency"] for e in entries)))
    eff.legend(fontsize=8)
    layout, m = result["layout"], result["machine"]
    gpu = f"{m['gpu']['count']} x {m['gpu']['name']}" if m.get("gpu") else "no GPU (engines share the CPU)"
    fig.suptitle(f"behavior1k-fast bench --shards: each engine {layout['label']}, P={layout['processes']} x "
                 f"E={layout['envs_per_process']}; {m['logical_cores']} cores, {gpu}", fontsize=9)
    return save_figure(fig, path)
