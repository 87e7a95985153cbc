"""Soak: one rollout engine on the reference simulator for many minutes, workers killed now and then, and a
record of what every process holds over time. Not part of CI (it runs for ``--minutes``, 10 by default).

The engine (P workers x E envs, K = 2 hybrid, the ``async`` schedule by default) runs rollouts back to back;
every ``--kill-every-s`` seconds (20 by default) one worker, in turn, gets SIGKILL in the middle of a
rollout (from ``on_chunk``, so the kill lands while other slices step) and the engine respawns it.
``--schedule lookahead`` runs K = 2 stages of whole processes instead (the lookahead schedule needs every
env to step at every global step; P even) with a lead of ``--lookahead-steps`` (3 by default): a kill then
lands while the other stage's chunk is in flight with its lead observation sent or due. The
restart policy has a budget no soak spends, a window of :data:`WINDOW_KILLS` kill intervals and back-off
capped at :data:`MAX_BACKOFF_S` (``max_backoff_s``), so the soak steps instead of sleeping in back-off;
every restart is recorded with its back-off (``restart_log``, ``t_s`` in seconds since the engine started)
and ``restarts_per_minute`` counts them. Every ``--sample-s`` seconds (each minute by default, the first
right after the first rollout) it records, per process (the driver and each worker slot, whose pid changes
on a respawn): resident memory (MiB), open file descriptors and the ``b1kf_*`` segments it has mapped; and
the segments of the driver in ``/dev/shm`` (``b1kf_<driver pid>_*``), each sample once every kill is
respawned (a sample waits a rollout for that; a kill in the last rollout takes one more rollout). After
``close()`` it records what is left: child processes and segments (both must be zero).

A leak shows as growth from the first to the last sample: the summary gives first, last, max and the
slope per hour of each, and ``flat`` says whether the last sample is within ``RSS_TOLERANCE`` of the
first in resident memory, within ``FD_TOLERANCE`` descriptors (``behavior1k_fast.tools.measure.soak``, which
samples and judges them), and holds the same segments. Exit code
1 when something is not flat or something is left after ``close()``.

Writes ``soak_<tag>.json`` and ``.png`` to ``--out-dir`` (``benchmarks/results``). Run:
``python3 benchmarks/soak.py`` (10 minutes; ``--minutes 1.5`` for a short check).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

import numpy as np

from behavior1k_fast import RolloutProfile
from behavior1k_fast.core.profile import SCHEDULES
from behavior1k_fast.reference import ReferenceConfig, ReferenceFactory
from behavior1k_fast.rollout import PartitionPlan, RestartPolicy, RolloutEngine
from behavior1k_fast.tools.argtypes import lookahead_steps
from behavior1k_fast.tools.measure.files import save_figure
from behavior1k_fast.tools.measure.soak import leftovers, per_minute, resource_figure, sample, summary

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = 8
#: The restart window, in kill intervals (at least a minute), and the cap on one back-off, in seconds.
WINDOW_KILLS, MAX_BACKOFF_S = 3, 1.0
#: ``--lookahead-steps`` of ``--schedule lookahead`` when not given.
LEAD_STEPS = 3


def policy(obs):
    """Small deterministic actions from proprioception (the point here is the processes, not the task)."""
    p = obs["proprio"].astype(np.float64)
    return np.tanh(np.sin(p[:, None, :11] + np.arange(CHUNK)[None, :, None])).astype(np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples (default: 60)")
    parser.add_argument("--kill-every-s", type=float, default=20.0, help="SIGKILL one worker this often (0: never)")
    parser.add_argument("--schedule", choices=SCHEDULES, default="async")
    parser.add_argument("--lookahead-steps", type=lookahead_steps, default=None,
                        help=f"the lead of --schedule lookahead: an int below the chunk size {CHUNK}, or auto "
                             f"(default: {LEAD_STEPS})")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--envs-per-process", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the JSON and PNG go")
    parser.add_argument("--tag", default=f"cpu{os.cpu_count()}")
    args = parser.parse_args()

    lookahead = args.schedule == "lookahead"
    if lookahead and args.lookahead_steps is None:
        args.lookahead_steps = LEAD_STEPS
    try:  # the profile's and the plan's own checks: the lead against chunk and schedule, P against the stages
        profile = RolloutProfile(num_env_processes=args.processes,
                                 total_num_envs=args.processes * args.envs_per_process, pipeline_stages=2,
                                 partition="process" if lookahead else "hybrid", chunk_size=CHUNK,
                                 schedule=args.schedule, lookahead_steps=args.lookahead_steps or 0)
        PartitionPlan.from_profile(profile)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    factory = ReferenceFactory(ReferenceConfig(resolution=(args.resolution, args.resolution), num_objects=4))
    restarts = RestartPolicy(max_restarts=10**6, window_s=max(60.0, WINDOW_KILLS * args.kill_every_s),
                             backoff_s=0.05, max_backoff_s=MAX_BACKOFF_S)
    samples, kills, restart_log, rollouts, own_actions = [], [], [], 0, 0
    start = time.monotonic()
    engine = RolloutEngine(factory, profile, restart_workers=restarts, stall_timeout_s=60.0)
    kill = {"next": start + args.kill_every_s, "victim": 0}

    def kill_on_time(stage, result) -> None:
        """SIGKILL the next worker once its time has come, mid-rollout (the other slices keep stepping)."""
        now = time.monotonic()
        if args.kill_every_s and now >= kill["next"]:
            try:
                os.kill(engine.worker_pids[kill["victim"]], signal.SIGKILL)
            except ProcessLookupError:  # the last kill of this worker is not respawned yet: try again later
                return
            kills.append({"t_s": now - start, "worker": kill["victim"]})
            kill["victim"] = (kill["victim"] + 1) % args.processes
            kill["next"] += args.kill_every_s

    def one_rollout(on_chunk) -> None:
        nonlocal rollouts, own_actions
        stats = engine.rollout(policy, 2, reset=rollouts == 0, on_chunk=on_chunk)
        rollouts += 1
        own_actions += int(stats.own_actions.sum())
        restart_log.extend({"t_s": r.at_s, "worker": r.worker, "backoff_s": r.backoff_s, "cause": r.cause,
                            "lost_actions": sum(r.lost_actions.values())} for r in stats.restarts)

    try:
        next_sample, end = start, start + args.minutes * 60
        while time.monotonic() < end:
            one_rollout(kill_on_time)
            if next_sample <= time.monotonic() < end and engine.restarts >= len(kills):  # every worker live
                samples.append(sample(engine, start))
                next_sample += args.sample_s
        for _ in range(3):  # a kill in the last rollout: respawned (by the next rollout) before the last sample
            if engine.restarts >= len(kills):
                break
            one_rollout(None)
        samples.append(sample(engine, start))
    finally:
        engine.close()
    after_close = leftovers()
    watched = summary(samples)
    flat = all(entry["flat"] for entry in watched.values())
    minutes_run = (time.monotonic() - start) / 60
    result = {
        "machine": {"platform": platform.platform(), "logical_cores": os.cpu_count()},
        "config": vars(args),
        "minutes_run": minutes_run,
        "rollouts": rollouts,
        "own_actions": own_actions,
        "kills": kills,
        "restarts": samples[-1]["restarts"],
        "restart_policy": dataclasses.asdict(restarts),
        "restart_log": restart_log,
        "restarts_per_minute": per_minute([r["t_s"] for r in restart_log], minutes_run),
        "backoff_s_max": max((r["backoff_s"] for r in restart_log), default=0.0),
        "samples": samples,
        "summary": watched,
        "flat": flat,
        "after_close": after_close,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = args.out_dir / f"soak_{args.tag}.json"
    json_path.write_text(json.dumps(result, indent=2, default=str))
    png_path = plot(result, args.out_dir / f"soak_{args.tag}.png")
    print(json.dumps({"minutes_run": result["minutes_run"], "rollouts": rollouts, "restarts": result["restarts"],
                      "restarts_per_minute": result["restarts_per_minute"], "backoff_s_max": result["backoff_s_max"],
                      "summary": watched, "flat": flat, "after_close": after_close}, indent=2))
    print(f"wrote {json_path} and {png_path}")
    return 0 if flat and after_close["children"] == 0 and after_close["segments"] == 0 else 1


def plot(result: dict, path: Path) -> Path:
    samples = result["samples"]
    fig, axes = resource_figure(samples, result["kills"])
    axes[2].plot([s["t_s"] / 60 for s in samples], [s["restarts"] for s in samples], label="restarts (cumulative)")
    axes[2].set_title("segments and restarts")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"soak ({result['config']['schedule']} schedule): {result['minutes_run']:.1f} min, "
                 f"{result['rollouts']} rollouts, {result['restarts']} restarts (back-off at most "
                 f"{result['backoff_s_max']:g} s; grey: SIGKILL of a worker); "
                 f"{'flat' if result['flat'] else 'NOT flat'}")
    return save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
