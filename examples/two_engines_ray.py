"""Two rollout engines in one Ray job, one per policy device, each driving its own half of the env workers.

One engine has one driver, so one device for the policy's forward. When that device is the bottleneck (the
policy's forwards take longer than the env workers' chunks, or one GPU's memory does not hold the batches),
run one engine per policy GPU: ``engine_shard`` gives engine i its share of the job's workers and envs (and
the seeds one big engine would give them), and ``merge_stats`` joins the engines' statistics per env, in
global order. Each engine is a Ray actor holding a ``RolloutEngine(executor="ray")``: its env workers are
Ray actors placed by ``placement``, its policy runs on the device Ray gave the engine actor
(``--engine-gpus 1``: one GPU per engine, through ``CUDA_VISIBLE_DEVICES``).

    python3 examples/two_engines_ray.py                          # local Ray, CPU policy, small images
    python3 examples/two_engines_ray.py --address auto --engine-gpus 1 --resolution 224 --rounds 16

Needs ``pip install behavior1k_fast[ray] torch`` on every node (see the README, "On a Ray cluster").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, RolloutStats, engine_shard, merge_stats
from behavior1k_fast.tools.argtypes import (Parser, env_count, nonnegative_number, parse_checked, positive_int,
                                           positive_number, process_count)
from behavior1k_fast.tools.backend_args import check_image_memory
from behavior1k_fast.tools.measure.policy import check_image_size


class EngineActor:
    """One engine of the job and its policy, inside a Ray actor (``ray.remote(EngineActor)``)."""

    def __init__(self, factory: Any, job: RolloutProfile, engine_index: int, num_engines: int,
                 make_policy: Callable[..., Any], placement: Any = "spread", seed: int = 0):
        shard = engine_shard(job, engine_index, num_engines, seed)
        self.engine = RolloutEngine(factory, shard.profile, executor="ray", seed=shard.seed, placement=placement)
        self.policy = make_policy(self.engine.observation_space, self.engine.action_space, shard.profile.chunk_size)

    def rollout(self, rounds: int) -> RolloutStats:
        return self.engine.rollout(self.policy, rounds)

    def worker_nodes(self) -> list[str | None]:
        return self.engine.worker_nodes

    def close(self) -> None:
        self.engine.close()


def run_engines(factory: Any, job: RolloutProfile, num_engines: int, rounds: int, make_policy: Callable[..., Any],
                placement: Any = "spread", engine_options: dict | None = None,
                seed: int = 0) -> tuple[RolloutStats, list[RolloutStats], list[list[str | None]]]:
    """Start ``num_engines`` engine actors (``engine_options``: their Ray resources), run ``rounds`` rounds in
    all of them at once; the merged stats, each engine's stats and each engine's worker nodes."""
    import ray  # here, not at the top: a usage error is said before Ray is imported

    actor_cls = ray.remote(EngineActor)
    actors = [actor_cls.options(**(engine_options or {})).remote(factory, job, i, num_engines, make_policy, placement, seed)
              for i in range(num_engines)]
    try:
        parts = ray.get([a.rollout.remote(rounds) for a in actors])
        nodes = ray.get([a.worker_nodes.remote() for a in actors])
        ray.get([a.close.remote() for a in actors])
    finally:
        for actor in actors:
            ray.kill(actor)
    return merge_stats(parts), parts, nodes


def torch_policy(observation_space: Any, action_space: Any, chunk_size: int) -> Any:
    """The benchmark's torch chunk policy on this engine's device (a GPU when Ray gave the actor one)."""
    import ray

    from behavior1k_fast.tools.measure.policy import ChunkPolicy

    device = "cuda" if ray.get_gpu_ids() else "cpu"
    return ChunkPolicy(observation_space, action_space, chunk_size, device=device)


def job_profile(args: argparse.Namespace) -> RolloutProfile:
    """The whole job's layout: ``--processes`` env workers of ``--envs-per-process`` envs in ``--pipeline-stages`` stages."""
    return RolloutProfile(num_env_processes=args.processes, total_num_envs=args.processes * args.envs_per_process,
                          pipeline_stages=args.pipeline_stages)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked before Ray starts (a bad one: one line, exit code 2)."""
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="Ray cluster to join ('auto': the local one; default: start Ray here)")
    parser.add_argument("--engines", type=positive_int, default=2,
                        help="engines, each a Ray actor with its share of the workers (default: 2)")
    parser.add_argument("--processes", type=process_count, default=4,
                        help="env workers of the whole job, a multiple of --engines (default: 4)")
    parser.add_argument("--envs-per-process", type=env_count, default=2, help="envs per env worker (default: 2)")
    parser.add_argument("--pipeline-stages", type=positive_int, default=2, help="pipeline stages K per engine (default: 2)")
    parser.add_argument("--rounds", type=positive_int, default=4, help="rounds of the rollout (default: 4)")
    parser.add_argument("--resolution", type=positive_int, default=64,
                        help="reference cameras' pixels per side (default: 64; bench: 224)")
    parser.add_argument("--engine-cpus", type=positive_number, default=1.0,
                        help="Ray CPUs per engine actor (default: 1)")
    parser.add_argument("--engine-gpus", type=nonnegative_number, default=0.0,
                        help="GPUs per engine, its policy device (default: 0)")
    parser.add_argument("--placement", choices=("spread", "pack"), default="spread",
                        help="where each engine's env workers go (default: spread)")
    parser.add_argument("--json", action="store_true", help="print the merged stats as JSON")
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    """Every engine's share of the job is a layout the engine takes, and the images fit the memory and the
    benchmark policy (ValueError)."""

    job = job_profile(args)
    try:
        for index in range(args.engines):
            engine_shard(job, index, args.engines)
    except ValueError as exc:
        raise ValueError(f"--engines {args.engines}, --processes {args.processes}, --envs-per-process "
                         f"{args.envs_per_process}, --pipeline-stages {args.pipeline_stages}: {exc}") from None
    check_image_memory(args, job.total_num_envs)
    check_image_size("--resolution", args.resolution)  # the benchmark policy's patches


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray

    from behavior1k_fast.reference import ReferenceConfig, ReferenceFactory

    if args.address:
        ray.init(address=args.address)
    else:  # a local instance with a logical CPU for every actor (more than the cores of a small machine)
        ray.init(num_cpus=math.ceil(args.engines * args.engine_cpus) + args.processes)
    job = job_profile(args)
    factory = ReferenceFactory(ReferenceConfig(resolution=(args.resolution, args.resolution)))
    merged, parts, nodes = run_engines(factory, job, args.engines, args.rounds, torch_policy, args.placement,
                                       {"num_cpus": args.engine_cpus, "num_gpus": args.engine_gpus})
    if args.json:
        print(json.dumps(merged.to_dict() | {"worker_nodes": nodes}))
        return 0
    for i, (stats, where) in enumerate(zip(parts, nodes)):
        print(f"engine {i}: {stats.num_envs} envs, {stats.env_steps_per_second:.0f} env-steps/s, "
              f"workers on nodes {[n[:8] for n in where]}")
    print(f"job: {merged.num_envs} envs, {merged.env_steps_per_second:.0f} env-steps/s "
          f"over {merged.wall_seconds:.2f} s (the slowest engine's wall time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
