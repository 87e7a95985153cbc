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
from typing import Any, Callable

import ray

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, RolloutStats, engine_shard, merge_stats


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
    from behavior1k_fast.tools.measure.policy import ChunkPolicy

    device = "cuda" if ray.get_gpu_ids() else "cpu"
    return ChunkPolicy(observation_space, action_space, chunk_size, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="Ray cluster to join ('auto': the local one); default: start Ray here")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--processes", type=int, default=4, help="env workers of the whole job")
    parser.add_argument("--envs-per-process", type=int, default=2)
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--resolution", type=int, default=64, help="reference cameras' pixels (bench: 224)")
    parser.add_argument("--engine-cpus", type=float, default=1.0)
    parser.add_argument("--engine-gpus", type=float, default=0.0, help="GPUs per engine (its policy device)")
    parser.add_argument("--placement", default="spread", help="spread | pack (each engine's env workers)")
    parser.add_argument("--json", action="store_true", help="print the merged stats as JSON")
    args = parser.parse_args()

    from behavior1k_fast.reference import ReferenceConfig, ReferenceFactory

    if args.address:
        ray.init(address=args.address)
    else:  # a local instance with a logical CPU for every actor (more than the cores of a small machine)
        ray.init(num_cpus=math.ceil(args.engines * args.engine_cpus) + args.processes)
    job = RolloutProfile(num_env_processes=args.processes, total_num_envs=args.processes * args.envs_per_process,
                         pipeline_stages=args.stages)
    factory = ReferenceFactory(ReferenceConfig(resolution=(args.resolution, args.resolution)))
    merged, parts, nodes = run_engines(factory, job, args.engines, args.rounds, torch_policy, args.placement,
                                       {"num_cpus": args.engine_cpus, "num_gpus": args.engine_gpus})
    if args.json:
        print(json.dumps(merged.to_dict() | {"worker_nodes": nodes}))
        return
    for i, (stats, where) in enumerate(zip(parts, nodes)):
        print(f"engine {i}: {stats.num_envs} envs, {stats.env_steps_per_second:.0f} env-steps/s, "
              f"workers on nodes {[n[:8] for n in where]}")
    print(f"job: {merged.num_envs} envs, {merged.env_steps_per_second:.0f} env-steps/s "
          f"over {merged.wall_seconds:.2f} s (the slowest engine's wall time)")


if __name__ == "__main__":
    main()
