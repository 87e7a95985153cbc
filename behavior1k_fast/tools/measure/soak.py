"""Soaks: an engine run for many minutes with workers killed now and then, and what its processes hold.

Shared by ``benchmarks/soak.py`` (rollouts back to back) and ``benchmarks/collector_soak.py`` (the
:class:`~behavior1k_fast.rollout.collector.Collector`, broken out of and started again):

- :func:`sample`: per process (the driver and each worker slot, whose pid changes on a respawn) resident
  memory (MiB), open file descriptors and the ``b1kf_*`` segments it has mapped, and the driver's
  segments in ``/dev/shm``; :func:`growth` says whether a series stayed flat (:data:`RSS_TOLERANCE`,
  :data:`FD_TOLERANCE`, the same segments); :func:`leftovers` counts what is left after ``close()``.
- The collector soak (:func:`collector_soak`): one engine on the reference simulator; batches of a
  :class:`~behavior1k_fast.rollout.collector.Collector` (``max_lag=1``, a weights post after every batch);
  every ``kill_every_s`` one worker, in turn, gets SIGKILL while a batch is collected (the engine respawns
  it); every ``restart_every_s`` the trainer breaks out of its loop (mid-batch: with ``max_lag=1`` the next
  batch is in flight) and starts a new ``Collector`` on the same engine, which must be idle then. Every
  backend writes each action it applies to a log of its own (:class:`ActionLogFactory`: one file per worker
  process, flushed every step, so a SIGKILL loses nothing written), and :func:`check_action_logs` checks the
  batches against those logs: every action a batch says was applied is in its env's log, in the log's
  order; none is in two batches; and an applied action in no batch is one of the dropped: the tail of a
  worker's log (its chunk in flight when it was killed, or the last collector's drop before the engine
  closed) or a run right before the next collector's first action (the unfinished and queued batches a
  break-out drops).
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

#: Resident memory that counts as flat: the last sample at most this share above the first, plus 16 MiB.
RSS_TOLERANCE = (0.10, 16.0)
#: Open file descriptors that count as flat: the last sample at most this many above the first.
FD_TOLERANCE = 2


# --- what the processes hold -------------------------------------------------------------------------------
def segments(owner: int) -> list[str]:
    """The ``b1kf_*`` segments in ``/dev/shm`` that process ``owner`` created."""
    from ...rollout.shm import SHM_DIR, segment_owner

    return sorted(n for n in os.listdir(SHM_DIR) if segment_owner(n) == owner)


def mapped_segments(pid: int) -> int:
    """``b1kf_*`` segments process ``pid`` has mapped (distinct names in ``/proc/<pid>/maps``)."""
    from ...rollout.shm import SHM_PREFIX

    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as fh:
            return len({line.split("/dev/shm/")[1].split()[0] for line in fh if f"/dev/shm/{SHM_PREFIX}" in line})
    except OSError:
        return 0


def sample(engine: Any, start: float) -> dict:
    """What the driver and every worker of ``engine`` hold now (module docs); ``t_s`` since ``start`` (a
    ``time.monotonic()``). Take it while every worker is alive (``engine.restarts`` caught up with the kills)."""
    import psutil

    def usage(pid: int) -> dict:
        proc = psutil.Process(pid)
        return {"pid": pid, "rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds(),
                "segments": mapped_segments(pid)}

    return {
        "t_s": time.monotonic() - start,
        "driver": usage(os.getpid()),
        "workers": [usage(pid) for pid in engine.worker_pids],
        "segments": len(segments(os.getpid())),
        "restarts": engine.restarts,
    }


def growth(samples: Sequence[dict], pick: Callable[[dict], float], kind: str) -> dict:
    """First, last, max and least-squares slope per hour of ``pick(sample)``, and whether the last sample is
    flat against the first (``kind``: ``rss``, ``fds`` or ``segments``; module docs)."""
    t = np.array([s["t_s"] for s in samples])
    y = np.array([pick(s) for s in samples], dtype=float)
    slope = float(np.polyfit(t, y, 1)[0]) * 3600 if len(samples) > 2 else 0.0
    first, last = float(y[0]), float(y[-1])
    share, mib = RSS_TOLERANCE
    limit = {"rss": first * (1 + share) + mib, "fds": first + FD_TOLERANCE, "segments": first}[kind]
    return {"first": first, "last": last, "max": float(y.max()), "per_hour": slope, "flat": last <= limit}


def summary(samples: Sequence[dict]) -> dict:
    """:func:`growth` of every series a soak watches: the driver's and the largest worker's."""
    return {
        "driver_rss_mib": growth(samples, lambda s: s["driver"]["rss_mib"], "rss"),
        "driver_fds": growth(samples, lambda s: s["driver"]["fds"], "fds"),
        "driver_mapped_segments": growth(samples, lambda s: s["driver"]["segments"], "segments"),
        "worker_rss_mib_max": growth(samples, lambda s: max(w["rss_mib"] for w in s["workers"]), "rss"),
        "worker_fds_max": growth(samples, lambda s: max(w["fds"] for w in s["workers"]), "fds"),
        "worker_mapped_segments_max": growth(samples, lambda s: max(w["segments"] for w in s["workers"]), "segments"),
        "segments": growth(samples, lambda s: s["segments"], "segments"),
    }


def leftovers() -> dict:
    """What this process has left: child processes (but multiprocessing's resource tracker, which lives
    until the interpreter exits), its segments, its open file descriptors."""
    import psutil

    children = [c for c in psutil.Process().children(recursive=True) if not _is_resource_tracker(c)]
    return {"children": len(children), "segments": len(segments(os.getpid())), "driver_fds": psutil.Process().num_fds()}


def _is_resource_tracker(proc: Any) -> bool:
    import psutil

    try:
        return any("resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def per_minute(times_s: Sequence[float], minutes: float) -> list[int]:
    """How many of ``times_s`` (seconds) fall in each started minute of a run of ``minutes``."""
    counts = [0] * max(1, int(np.ceil(minutes)))
    for t in times_s:
        counts[min(int(t // 60), len(counts) - 1)] += 1
    return counts


# --- each env's own log of the actions it applied ----------------------------------------------------------
def action_key(row: np.ndarray) -> str:
    """A 64-bit digest of one action row as the backend got it (float32 bytes): what the logs and the
    batches are matched on (the soak's policy draws random rows, so two rows never share one)."""
    return hashlib.blake2b(np.ascontiguousarray(row, dtype=np.float32).tobytes(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class ActionLogFactory:
    """Backends of ``base`` whose every applied action is appended to ``directory``/``w<worker>_<ns>_<pid>.log``
    as a line ``<global env id> <action_key>``, flushed after each step. ``first_seed``: the engine's seed
    (worker ``w`` is built with ``first_seed + w``)."""

    base: Any
    directory: str
    first_seed: int = 0

    def __call__(self, num_envs: int, seed: int, profile: Any) -> "ActionLogBackend":
        worker = seed - self.first_seed
        path = Path(self.directory) / f"w{worker}_{time.time_ns():020d}_{os.getpid()}.log"
        return ActionLogBackend(self.base(num_envs, seed, profile), path, worker * num_envs)

    def check(self, num_envs: int, seed: int, profile: Any) -> None:
        """The base factory's check, where it has one."""
        check = getattr(self.base, "check", None)
        if callable(check):
            check(num_envs, seed, profile)


class ActionLogBackend:
    """A backend that logs every action it applies (:class:`ActionLogFactory`) and forwards everything."""

    def __init__(self, inner: Any, path: Path, first_env: int):
        self.inner = inner
        self.num_envs = inner.num_envs
        self.action_space = inner.action_space
        self.observation_space = inner.observation_space
        self.first_env = first_env
        self.log = open(path, "a", encoding="ascii")  # noqa: SIM115 - open for the backend's life

    @property
    def sim_time(self) -> float:
        return self.inner.sim_time

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        out = self.inner.step(actions, env_indices, get_obs, render)
        envs = range(self.num_envs) if env_indices is None else env_indices
        self.log.write("".join(f"{self.first_env + int(e)} {action_key(row)}\n" for e, row in zip(envs, actions)))
        self.log.flush()
        return out

    def reset(self, env_indices=None, get_obs=True):
        return self.inner.reset(env_indices, get_obs)

    def observe(self, env_indices=None, render=True):
        return self.inner.observe(env_indices, render)

    def close(self):
        self.log.close()
        self.inner.close()


def read_action_logs(directory: str | os.PathLike) -> dict[int, list[list[str]]]:
    """Global env id -> the action keys of each worker process that stepped it, in order (one list per log
    file, the files of a worker slot in the order its processes started)."""
    logs: dict[int, list[list[str]]] = {}
    for path in sorted(Path(directory).glob("w*.log"), key=lambda p: (int(p.name[1:].split("_")[0]), p.name)):
        per_env: dict[int, list[str]] = {}
        for line in path.read_text(encoding="ascii").splitlines():
            env, key = line.split()
            per_env.setdefault(int(env), []).append(key)
        for env, keys in per_env.items():
            logs.setdefault(env, []).append(keys)
    return logs


#: The file (in the log folder) where the collector soak writes the applied actions of every batch it got.
BATCH_LOG = "batches.txt"


def write_batch_actions(log: Any, generation: int, batch: Any) -> None:
    """Append to ``log`` a line ``<generation> <global env id> <action_key>`` per action ``batch`` (handed out
    by collector ``generation``) says was applied, in the order they ran (on disk, so the soak's driver does
    not grow with the batches it checks)."""
    actions, applied = np.asarray(batch.actions), np.asarray(batch.applied)
    rounds, envs, steps = applied.shape
    log.write("".join(f"{generation} {e} {action_key(actions[r, e, n])}\n" for e in range(envs)
                      for r in range(rounds) for n in range(steps) if applied[r, e, n]))


def read_batch_actions(path: str | os.PathLike) -> list[tuple[int, int, str]]:
    """The ``(generation, env, key)`` rows :func:`write_batch_actions` wrote to ``path``."""
    rows = []
    for line in Path(path).read_text(encoding="ascii").splitlines():
        generation, env, key = line.split()
        rows.append((int(generation), int(env), key))
    return rows


def check_action_logs(logs: dict[int, list[list[str]]], batches: Sequence[tuple[int, int, str]]) -> dict:
    """The batches' applied actions (``(collector generation, env, key)``, :func:`read_batch_actions`) against
    the envs' logs (:func:`read_action_logs`); module docs. Returns the counts and the problems found (each
    a line; none when every check held)."""
    where: dict[tuple[int, str], int] = {}  # (env, key) -> generation of the batch that holds it
    seen: Counter = Counter()
    for generation, env, key in batches:
        seen[(env, key)] += 1
        where[(env, key)] = generation
    problems = [f"env {env}: action {key} is in {n} batches" for (env, key), n in seen.items() if n > 1]
    logged = {(env, key): i for env, files in logs.items()
              for i, key in enumerate(key for keys in files for key in keys)}  # -> its place in the env's log
    problems += [f"env {env}: action {key} of a batch is in no log" for env, key in seen if (env, key) not in logged]
    last_place: dict[int, int] = {}
    for _, env, key in batches:  # in the order the batches were handed out: the order the env applied them
        place = logged.get((env, key), -1)
        if place >= 0 and place < last_place.get(env, -1):
            problems.append(f"env {env}: action {key} of a batch ran before the one a batch before it holds")
        last_place[env] = max(place, last_place.get(env, -1))
    dropped = {"end_of_a_worker_log": 0, "before_the_next_collector": 0}
    for env, files in logs.items():
        problems += _runs_explained(env, [[where.get((env, key)) for key in keys] for keys in files], dropped)
    return {"applied_logged": len(logged), "in_batches": len(seen), "dropped": dropped,
            "problems": problems[:20], "problem_count": len(problems)}


def _runs_explained(env: int, files: list[list[int | None]], dropped: dict[str, int]) -> list[str]:
    """The logs of ``env`` (one per worker process, in order), each action's collector generation (``None``:
    in no batch): generations never go back, and each run of ``None`` ends a log (a kill, or the last
    collector's drop before the engine closed) or comes right before the first action of the collector
    after the one before it (a break-out; every collector of the soak hands out a batch before it is left).
    Counts the dropped actions into ``dropped``."""
    problems: list[str] = []
    last: int | None = None
    for generations in files:
        i = 0
        while i < len(generations):
            gen = generations[i]
            if gen is not None:
                if last is not None and gen < last:
                    problems.append(f"env {env}: an action of collector {gen} after one of collector {last}")
                last, i = gen, i + 1
                continue
            j = i
            while j < len(generations) and generations[j] is None:
                j += 1
            if j == len(generations):
                dropped["end_of_a_worker_log"] += j - i
            elif last is not None and generations[j] == last + 1:
                dropped["before_the_next_collector"] += j - i
            else:
                problems.append(f"env {env}: {j - i} applied actions in no batch before one of collector "
                                f"{generations[j]} (the last before them: {last})")
            i = j
    return problems


# --- the collector soak ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectorSoakConfig:
    """One collector soak (module docs). Seconds, minutes; images of ``resolution`` pixels per side."""

    minutes: float = 10.0
    kill_every_s: float = 20.0
    restart_every_s: float = 60.0
    processes: int = 2
    envs_per_process: int = 2
    chunk_size: int = 8
    rounds_per_batch: int = 4
    resolution: int = 16
    seed: int = 0


class RandomPolicy:
    """Random actions in [-0.5, 0.5] (unique rows: what the logs are matched on) and a weights version the
    trainer posts (``state_dict`` / ``load_state_dict`` of one ``version`` array)."""

    def __init__(self, chunk_size: int, action_dim: int, seed: int):
        self.shape = (chunk_size, action_dim)
        self.rng = np.random.default_rng(seed)
        self.version = np.zeros(1, np.int64)

    def __call__(self, obs: dict) -> np.ndarray:
        rows = len(next(iter(obs.values())))
        return self.rng.uniform(-0.5, 0.5, (rows, *self.shape)).astype(np.float32)

    def state_dict(self) -> dict:
        return {"version": self.version}

    def load_state_dict(self, state: dict) -> None:
        self.version = np.array(state["version"])


@dataclass
class _Run:
    """What a collector soak gathered while it ran."""

    start: float
    samples: list = field(default_factory=list)
    kills: list = field(default_factory=list)
    breakouts: list = field(default_factory=list)
    batches: int = 0
    restarts: list = field(default_factory=list)


def collector_soak(config: CollectorSoakConfig, log_dir: str | os.PathLike) -> dict:
    """Run the collector soak (module docs), the action logs in ``log_dir``; its result (JSON-ready)."""
    from ...backends.reference import ReferenceConfig, ReferenceFactory
    from ...core.profile import RolloutProfile
    from ...rollout import RestartPolicy, RolloutEngine
    from ...rollout.collector import Collector

    profile = RolloutProfile(num_env_processes=config.processes,
                             total_num_envs=config.processes * config.envs_per_process, pipeline_stages=2,
                             chunk_size=config.chunk_size)
    base = ReferenceFactory(ReferenceConfig(resolution=(config.resolution, config.resolution), num_objects=4))
    restarts = RestartPolicy(max_restarts=10**6, window_s=max(60.0, 3 * config.kill_every_s), backoff_s=0.05,
                             max_backoff_s=1.0)
    run = _Run(time.monotonic())
    engine = RolloutEngine(ActionLogFactory(base, str(log_dir), config.seed), profile, restart_workers=restarts,
                           seed=config.seed, stall_timeout_s=60.0)
    policy = RandomPolicy(config.chunk_size, engine.action_dim, config.seed)
    end = run.start + config.minutes * 60
    next_kill = run.start + config.kill_every_s
    batch_log = open(Path(log_dir) / BATCH_LOG, "w", encoding="ascii")  # noqa: SIM115 - closed below
    try:
        generation = 0
        while time.monotonic() < end:
            generation += 1
            until = min(end, time.monotonic() + config.restart_every_s)
            collector = Collector(engine, policy, config.rounds_per_batch, max_lag=1)
            for batch in collector:
                write_batch_actions(batch_log, generation, batch)
                run.batches += 1
                run.restarts += [{"t_s": r.at_s, "worker": r.worker, "cause": r.cause}
                                 for r in collector.last_stats.restarts]
                collector.update_policy_weights({"version": np.array([collector.version + 1])})
                if time.monotonic() >= next_kill and engine.restarts >= len(run.kills):  # the last one respawned
                    _kill(engine, run, len(run.kills) % config.processes)  # lands in the batch being collected
                    next_kill += config.kill_every_s
                if time.monotonic() >= until:
                    break  # mid-batch: the collector stops at a chunk boundary, the engine stays idle
            run.breakouts.append({"t_s": time.monotonic() - run.start, "engine_state": engine.state.value,
                                  "collector": generation})
            if engine.restarts >= len(run.kills):  # every worker alive: a sample
                run.samples.append(sample(engine, run.start))
        for _ in range(3):  # a kill in the last batch: respawned by a rollout
            if engine.restarts >= len(run.kills):
                break
            engine.rollout(policy, 1, reset=False)
        run.samples.append(sample(engine, run.start))
    finally:
        engine.close()
        batch_log.close()
    after_close = leftovers()
    checks = check_action_logs(read_action_logs(log_dir), read_batch_actions(Path(log_dir) / BATCH_LOG))
    return _result(config, run, checks, after_close)


def _kill(engine: Any, run: _Run, victim: int) -> None:
    """SIGKILL worker ``victim`` (while the collecting thread drives the engine: its pid is read once)."""
    pid = engine.worker_pids[victim]
    os.kill(pid, signal.SIGKILL)
    run.kills.append({"t_s": time.monotonic() - run.start, "worker": victim, "pid": pid})


def _result(config: CollectorSoakConfig, run: _Run, checks: dict, after_close: dict) -> dict:
    """The result: ``restarts`` counts every respawn, ``restart_log`` those the handed-out batches' stats
    report (a respawn inside a batch a break-out dropped is counted, not logged); ``actions`` is
    :func:`check_action_logs`' answer; ``checks`` each check and ``ok`` all of them."""
    minutes_run = (time.monotonic() - run.start) / 60
    watched = summary(run.samples)
    flat = all(entry["flat"] for entry in watched.values())
    idle = all(b["engine_state"] == "idle" for b in run.breakouts)
    respawned = run.samples[-1]["restarts"] == len(run.kills)
    left = after_close["children"] == 0 and after_close["segments"] == 0
    ok = flat and idle and respawned and checks["problem_count"] == 0 and left
    return {
        "config": asdict(config),
        "minutes_run": minutes_run,
        "collectors": len(run.breakouts),
        "batches": run.batches,
        "kills": run.kills,
        "restarts": run.samples[-1]["restarts"],
        "restart_log": run.restarts,
        "kills_per_minute": per_minute([k["t_s"] for k in run.kills], minutes_run),
        "breakouts": run.breakouts,
        "samples": run.samples,
        "summary": watched,
        "actions": checks,
        "after_close": after_close,
        "checks": {"flat": flat, "engine_idle_after_every_breakout": idle, "every_kill_respawned": respawned,
                   "every_applied_action_in_at_most_one_batch_and_the_rest_dropped": checks["problem_count"] == 0,
                   "nothing_left_after_close": left},
        "ok": ok,
    }


def resource_figure(samples: Sequence[dict], kills: Sequence[dict]) -> tuple[Any, Any]:
    """A figure of three panels over the minutes of ``samples`` (:func:`sample`): resident memory, open fds
    and segments of the driver and every worker, a grey line at each of ``kills``; ``(figure, axes)``, the
    legends left to the caller (which may add lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(t, [s["driver"]["rss_mib"] for s in samples], marker="o", label="driver")
    axes[1].plot(t, [s["driver"]["fds"] for s in samples], marker="o", label="driver")
    axes[2].plot(t, [s["segments"] for s in samples], marker="o", label="b1kf_ segments of the driver")
    for w in range(len(samples[0]["workers"])):
        axes[0].plot(t, [s["workers"][w]["rss_mib"] for s in samples], marker=".", label=f"worker {w}")
        axes[1].plot(t, [s["workers"][w]["fds"] for s in samples], marker=".", label=f"worker {w}")
        axes[2].plot(t, [s["workers"][w]["segments"] for s in samples], ls="--", label=f"mapped by worker {w}")
    for ax, title in zip(axes, ("resident memory (MiB)", "open file descriptors", "shared-memory segments")):
        ax.set_title(title)
        ax.set_xlabel("minutes")
        for kill in kills:
            ax.axvline(kill["t_s"] / 60, color="grey", alpha=0.2)
    return fig, axes


def plot_collector_soak(result: dict) -> Any:
    """The figure of a collector soak: :func:`resource_figure`, break-outs marked."""
    fig, axes = resource_figure(result["samples"], result["kills"])
    for ax in axes:
        for breakout in result["breakouts"]:
            ax.axvline(breakout["t_s"] / 60, color="tab:green", alpha=0.4, ls=":")
        ax.legend(fontsize=8)
    actions = result["actions"]
    fig.suptitle(f"collector soak: {result['minutes_run']:.1f} min, {result['collectors']} collectors, "
                 f"{result['batches']} batches, {len(result['kills'])} kills (grey), break-outs (green); "
                 f"{actions['in_batches']} of {actions['applied_logged']} applied actions in batches, "
                 f"{actions['problem_count']} problems; {'OK' if result['ok'] else 'NOT OK'}", fontsize=10)
    return fig
