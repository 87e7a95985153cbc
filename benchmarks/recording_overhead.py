"""What recording trajectories costs: ``TrajectoryRecorder.rollout`` against a plain ``RolloutEngine.rollout``.

Layout: the bench's all-optimisations row (``tools/bench/ablation.py``: P x E envs, K = 2 hybrid, overlap,
skip-obs, slim: rgb of three cameras + proprioception, chunks of 32) and its calibrated torch chunk policy
(one forward at the stage batch ~ one stage chunk of env time), which here also returns per-env extras
(``value``, ``logprob``) as a trainer's policy does. On one engine, after a warm-up round, rollouts of
``--rounds`` rounds alternate between plain, recorded into numpy arrays, and recorded into torch tensors
(``--repeats`` each, so load drift on a shared machine hits all three alike).

Measures per variant (medians over repeats): wall seconds of the whole call (for the recorder: its
rollout and the finished batch), and, for the recorders, the seconds spent inside the recorder itself
(writing each chunk into the batch, episode bookkeeping, building the batch at the end). Overhead =
recorder-inside seconds / plain rollout wall seconds (the direct measure), and the wall difference
recorded - plain over plain (the end-to-end one, noisier on a shared machine); ``*_inside_fraction_worst``:
the largest share of one recorded rollout's own wall time spent inside the recorder.

Run: ``python3 benchmarks/recording_overhead.py`` (about a minute on 2 CPU cores); writes
``recording_overhead_<tag>.json`` to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the checkout's
``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from behavior1k_fast.backends import make_factory
from behavior1k_fast.core.checks import MachineLimits
from behavior1k_fast.rollout import RolloutEngine, TrajectoryRecorder
from behavior1k_fast.rollout import trajectory
from behavior1k_fast.rollout.plan import PartitionPlan
from behavior1k_fast.tools.bench import report
from behavior1k_fast.tools.bench.ablation import ALL_ROW, BenchConfig, ablation_rows
from behavior1k_fast.tools.argtypes import (Parser, chunk_steps, env_count, file_name, parse_checked, positive_int,
                                           process_count)
from behavior1k_fast.tools.backend_args import check_image_memory
from behavior1k_fast.tools.measure.calibration import calibrate
from behavior1k_fast.tools.measure.runs import Row
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir
from behavior1k_fast.tools.measure.policy import check_image_size



class WithExtras:
    """The bench policy, returning a value and a log-probability per env next to its chunk."""

    def __init__(self, policy: Any):
        self.policy = policy

    def __call__(self, obs: dict) -> tuple[np.ndarray, dict]:
        actions = self.policy(obs)
        batch = len(actions)
        return actions, {"value": np.zeros(batch, np.float32), "logprob": np.zeros(batch, np.float32)}


class InsideTimer:
    """Seconds spent in the recorder's batch methods (``TrajectoryBatch.add`` and ``.finish``), wrapped here."""

    def __init__(self):
        self.seconds = 0.0
        self._originals = {name: getattr(trajectory.TrajectoryBatch, name) for name in ("add", "finish")}
        for name, original in self._originals.items():
            setattr(trajectory.TrajectoryBatch, name, self._timed(original))

    def _timed(self, original):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed

    def restore(self) -> None:
        for name, original in self._originals.items():
            setattr(trajectory.TrajectoryBatch, name, original)


def all_row(processes: int, envs_per_process: int, chunk_size: int) -> Row:
    """The bench's all-optimisations row of this layout (ValueError for a layout the engine refuses)."""
    row = next(r for r in ablation_rows(processes, envs_per_process, 2, chunk_size) if r.name == ALL_ROW)
    PartitionPlan.from_profile(row.profile)
    return row


def measure(args: argparse.Namespace) -> dict[str, Any]:
    config = BenchConfig(processes=args.processes, envs_per_process=args.envs_per_process, pipeline_stages=2,
                         chunk_size=args.chunk_size, rounds=args.rounds)
    factory = make_factory("reference", resolution=(args.resolution, args.resolution))
    row = all_row(config.processes, config.envs_per_process, config.chunk_size)
    bench_policy, calibration = calibrate(factory, row.profile, config, max_processes=config.processes)
    policy = WithExtras(bench_policy)
    walls: dict[str, list[float]] = {"plain": [], "numpy": [], "torch": []}
    inside: dict[str, list[float]] = {"numpy": [], "torch": []}
    nbytes = None
    timer = InsideTimer()
    try:
        with RolloutEngine(factory, row.profile, seed=0) as engine:
            engine.rollout(policy, 1)  # warm-up
            recorders = {"numpy": TrajectoryRecorder(engine), "torch": TrajectoryRecorder(engine, tensors=True)}
            for _ in range(args.repeats):
                for variant in walls:
                    start = time.perf_counter()
                    if variant == "plain":
                        engine.rollout(policy, args.rounds, reset=False)
                    else:
                        recorder = recorders[variant]
                        recorder.reset_episodes()  # the plain rollouts step the engine outside the recorder
                        timer.seconds = 0.0
                        batch = recorder.rollout(policy, args.rounds, reset=False)[1]
                        inside[variant].append(timer.seconds)
                        nbytes = batch.nbytes
                    walls[variant].append(time.perf_counter() - start)
    finally:
        timer.restore()
    plain = float(np.median(walls["plain"]))
    result = {
        "layout": {"processes": config.processes, "envs_per_process": config.envs_per_process, "stages": 2,
                   "partition": "hybrid", "overlap": True, "chunk_size": config.chunk_size,
                   "rounds": args.rounds, "resolution": args.resolution, "profile": row.profile.to_dict()},
        "calibration": calibration.to_dict(),
        "repeats": args.repeats,
        "wall_s": walls,
        "inside_recorder_s": inside,
        "batch_bytes": nbytes,
        "batch_bytes_per_round": nbytes / args.rounds,
        "plain_wall_s_median": plain,
    }
    for variant in inside:
        result[f"{variant}_inside_fraction"] = float(np.median(inside[variant])) / plain
        result[f"{variant}_inside_fraction_worst"] = float(np.max(np.array(inside[variant]) / np.array(walls[variant])))
        result[f"{variant}_wall_overhead_fraction"] = float(np.median(walls[variant])) / plain - 1.0
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=process_count, default=2, help="env processes P (default: 2)")
    parser.add_argument("--envs-per-process", type=env_count, default=2,
                        help="envs E per process, a multiple of the 2 stages (default: 2)")
    parser.add_argument("--chunk-size", type=chunk_steps, default=32, help="actions per chunk (default: 32)")
    parser.add_argument("--rounds", type=positive_int, default=6, help="rounds of each rollout (default: 6)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="rollouts of each variant (default: 5)")
    parser.add_argument("--resolution", type=positive_int, default=224,
                        help="reference cameras' pixels per side (default: 224)")
    parser.add_argument("--tag", type=file_name, default=None, help="machine tag in the file name (default: derived)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    """What the options do not check one by one (ValueError); ``out_dir`` resolved and made."""
    try:
        all_row(args.processes, args.envs_per_process, args.chunk_size)
    except ValueError as exc:
        raise ValueError(f"--processes {args.processes}, --envs-per-process {args.envs_per_process}: {exc}") from None
    num_envs = MachineLimits.here().check_envs("--processes x --envs-per-process",
                                               args.processes * args.envs_per_process)
    check_image_memory(args, num_envs)
    check_image_size("--resolution", args.resolution)  # the bench policy's patches
    args.out_dir = checked_output_dir(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    result = measure(args)
    result["load_average_1min"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    result["machine"] = report.describe_machine("cpu")
    result["command"] = "python3 benchmarks/recording_overhead.py " + " ".join(sys.argv[1:] if argv is None else argv)
    tag = args.tag or report.machine_tag(result["machine"])
    path = report.write_json(result, Path(args.out_dir) / f"recording_overhead_{tag}.json")
    for variant in ("numpy", "torch"):
        print(f"{variant}: inside the recorder {result[f'{variant}_inside_fraction']:.2%} of a plain rollout, "
              f"wall {result[f'{variant}_wall_overhead_fraction']:+.2%}")
    print(f"plain rollout {result['plain_wall_s_median']:.3f} s; batch {result['batch_bytes_per_round'] / 2**20:.2f} "
          f"MiB per round; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
