"""Soak: one rollout engine on the reference simulator for many minutes, workers killed now and then, and a
record of what every process holds over time. Not part of CI (it runs for ``--minutes``, 10 by default).

The engine (P workers x E envs, K = 2 hybrid, restart policy with a large budget) runs rollouts back to
back; every ``--kill-every-s`` seconds one worker, in turn, gets SIGKILL and the engine respawns it. Every
``--sample-s`` seconds it records, per process (the driver and each worker slot, whose pid changes on a
respawn): resident memory (MiB) and open file descriptors; and the shared-memory segments of the driver
(``/dev/shm/b1kf_<driver pid>_*``). After ``close()`` it records what is left: child processes and
segments (both must be zero). A leak shows as a slope over the run; the summary gives first and last
values and the growth per hour.

Writes ``benchmarks/results/soak_<tag>.json`` and ``.png``. Run:
``python3 benchmarks/soak.py --minutes 10`` (``--minutes 1.5`` for a short check).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from behavior1k_fast import RolloutProfile  # noqa: E402
from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceFactory  # noqa: E402
from behavior1k_fast.rollout import RestartPolicy, RolloutEngine  # noqa: E402
from behavior1k_fast.rollout.shm import SHM_PREFIX  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = 8


def policy(obs):
    """Small deterministic actions from proprioception (the point here is the processes, not the task)."""
    p = obs["proprio"].astype(np.float64)
    return np.tanh(np.sin(p[:, None, :11] + np.arange(CHUNK)[None, :, None])).astype(np.float32)


def segments(owner: int) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"{SHM_PREFIX}{owner}_"))


def sample(engine: RolloutEngine, start: float) -> dict:
    def usage(pid: int) -> dict:
        proc = psutil.Process(pid)
        return {"pid": pid, "rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds()}

    return {
        "t_s": time.monotonic() - start,
        "driver": usage(os.getpid()),
        "workers": [usage(pid) for pid in engine.worker_pids],
        "segments": len(segments(os.getpid())),
        "restarts": engine.restarts,
    }


def growth(samples: list[dict], pick) -> dict:
    """First, last and least-squares slope per hour of ``pick(sample)``."""
    t = np.array([s["t_s"] for s in samples])
    y = np.array([pick(s) for s in samples], dtype=float)
    slope = float(np.polyfit(t, y, 1)[0]) * 3600 if len(samples) > 2 else 0.0
    return {"first": float(y[0]), "last": float(y[-1]), "max": float(y.max()), "per_hour": slope}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--kill-every-s", type=float, default=30.0, help="SIGKILL one worker this often (0: never)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--envs-per-process", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--tag", default=f"cpu{os.cpu_count()}")
    args = parser.parse_args()

    profile = RolloutProfile(num_env_processes=args.processes, total_num_envs=args.processes * args.envs_per_process,
                             pipeline_stages=2, chunk_size=CHUNK)
    factory = ReferenceFactory(ReferenceConfig(resolution=(args.resolution, args.resolution), num_objects=4))
    restarts = RestartPolicy(max_restarts=10**6, window_s=600.0, backoff_s=0.05)
    samples, kills, rollouts, own_actions = [], [], 0, 0
    start = time.monotonic()
    engine = RolloutEngine(factory, profile, restart_workers=restarts, stall_timeout_s=60.0)
    try:
        next_sample, next_kill, victim = start, start + args.kill_every_s, 0
        while time.monotonic() - start < args.minutes * 60:
            stats = engine.rollout(policy, 2, reset=rollouts == 0)
            rollouts += 1
            own_actions += int(stats.own_actions.sum())
            now = time.monotonic()
            if now >= next_sample:
                samples.append(sample(engine, start))
                next_sample += args.sample_s
            if args.kill_every_s and now >= next_kill:
                os.kill(engine.worker_pids[victim], signal.SIGKILL)
                kills.append({"t_s": now - start, "worker": victim})
                victim = (victim + 1) % args.processes
                next_kill += args.kill_every_s
        samples.append(sample(engine, start))
    finally:
        engine.close()
    tracker = _resource_tracker()
    after_close = {
        "children": len([c for c in psutil.Process().children(recursive=True) if c.pid not in tracker]),
        "segments": len(segments(os.getpid())),
        "driver_fds": psutil.Process().num_fds(),
    }

    summary = {
        "driver_rss_mib": growth(samples, lambda s: s["driver"]["rss_mib"]),
        "driver_fds": growth(samples, lambda s: s["driver"]["fds"]),
        "worker_rss_mib_max": growth(samples, lambda s: max(w["rss_mib"] for w in s["workers"])),
        "worker_fds_max": growth(samples, lambda s: max(w["fds"] for w in s["workers"])),
        "segments": growth(samples, lambda s: s["segments"]),
    }
    result = {
        "machine": {"platform": platform.platform(), "logical_cores": os.cpu_count()},
        "config": vars(args),
        "minutes_run": (time.monotonic() - start) / 60,
        "rollouts": rollouts,
        "own_actions": own_actions,
        "kills": kills,
        "restarts": samples[-1]["restarts"],
        "samples": samples,
        "summary": summary,
        "after_close": after_close,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS / f"soak_{args.tag}.json"
    json_path.write_text(json.dumps(result, indent=2))
    png_path = plot(result, RESULTS / f"soak_{args.tag}.png")
    print(json.dumps({"minutes_run": result["minutes_run"], "rollouts": rollouts, "restarts": result["restarts"],
                      "summary": summary, "after_close": after_close}, indent=2))
    print(f"wrote {json_path} and {png_path}")
    return 0 if after_close["children"] == 0 and after_close["segments"] == 0 else 1


def _resource_tracker() -> list[int]:
    """multiprocessing's resource tracker: a child of this process that lives until it exits."""
    from multiprocessing import resource_tracker

    pid = resource_tracker._resource_tracker._pid
    return [pid] if pid is not None and psutil.pid_exists(pid) else []


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(t, [s["driver"]["rss_mib"] for s in samples], label="driver")
    for w in range(len(samples[0]["workers"])):
        axes[0].plot(t, [s["workers"][w]["rss_mib"] for s in samples], label=f"worker {w}")
        axes[1].plot(t, [s["workers"][w]["fds"] for s in samples], label=f"worker {w}")
    axes[1].plot(t, [s["driver"]["fds"] for s in samples], label="driver")
    axes[2].plot(t, [s["segments"] for s in samples], label="b1kf_ segments")
    axes[2].plot(t, [s["restarts"] for s in samples], label="restarts (cumulative)")
    for ax, title in zip(axes, ("resident memory (MiB)", "open file descriptors", "segments and restarts")):
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.legend(fontsize=8)
        for kill in result["kills"]:
            ax.axvline(kill["t_s"] / 60, color="grey", alpha=0.2)
    fig.suptitle(f"soak: {result['minutes_run']:.1f} min, {result['rollouts']} rollouts, "
                 f"{result['restarts']} restarts (grey: SIGKILL of a worker)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
