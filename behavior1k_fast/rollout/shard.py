"""Several engines, one job: scale-out over policy devices.

One :class:`~.engine.RolloutEngine` has one driver, so one policy device. With several policy GPUs, run one
engine per device, each with its own share of the job's env workers: :func:`engine_shard` cuts the job's
profile into ``num_engines`` equal shares of whole workers (``num_env_processes / num_engines`` workers,
``total_num_envs / num_engines`` envs, the same K and partition), and :func:`merge_stats` joins the
engines' :class:`~.engine.RolloutStats` back into one, per env in global order.

Global ids run engine by engine: engine i's local env ``e`` is global env ``first_env + e``, and its
worker ``w`` gets seed ``seed + first_worker + w``: the seeds one engine with all the workers would use,
so in process partition each env's trajectory is the one engine's (bit-identical for a deterministic
policy, tested). ``examples/two_engines_ray.py`` runs two engines as Ray actors in one job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.checks import check_int, check_positive_int
from ..core.profile import RolloutProfile
from .accounting import RolloutStats
from .plan import PartitionPlan


@dataclass(frozen=True)
class EngineShard:
    """Engine ``index`` of ``count``: its profile, seed and the global ids of its first worker and env."""

    index: int
    count: int
    #: The job's profile with this engine's share of workers and envs.
    profile: RolloutProfile
    #: The engine's ``seed`` argument (its worker w builds its backend with ``seed + w``).
    seed: int
    first_worker: int
    first_env: int

    @property
    def env_ids(self) -> np.ndarray:
        """Global ids of this engine's envs, in its local order."""
        return np.arange(self.first_env, self.first_env + self.profile.total_num_envs)


def engine_shard(
    profile: RolloutProfile | Mapping[str, Any] | None, engine_index: int, num_engines: int, seed: int = 0
) -> EngineShard:
    """Engine ``engine_index``'s share of the job ``profile`` run by ``num_engines`` engines (module docs).

    ValueError unless ``num_engines`` divides ``num_env_processes`` and each share is a valid partition."""
    job = RolloutProfile.coerce(profile)
    count = check_positive_int("num_engines", num_engines)
    index = check_int("engine_index", engine_index, 0, count - 1)
    seed = check_int("seed", seed)
    workers = job.num_env_processes
    if workers % count:
        raise ValueError(
            f"num_engines={count} must divide num_env_processes={workers}: each engine drives whole env workers"
        )
    per_engine = workers // count
    share = job.replace(num_env_processes=per_engine, total_num_envs=per_engine * job.envs_per_process)
    try:
        PartitionPlan.from_profile(share)
    except ValueError as exc:
        raise ValueError(f"{exc} (in each of num_engines={count} engines sharing num_env_processes={workers})") from None
    first_worker = index * per_engine
    return EngineShard(index, count, share, seed + first_worker, first_worker, first_worker * job.envs_per_process)


#: Per-env and per-worker fields of :class:`~.engine.RolloutStats`, joined in engine order.
_JOINED = ("own_actions", "episodes", "total_reward", "sim_seconds_per_own_action", "hold_steps_per_round",
           "env_wall_seconds_per_worker", "chunks_per_worker", "slice_wait_seconds", "stall_seconds_per_worker",
           "sat_out_chunks")
#: Fields every engine of one job must agree on.
_SHARED = ("rounds", "pipeline_stages", "chunk_size")


def merge_stats(parts: Sequence[RolloutStats]) -> RolloutStats:
    """One :class:`~.engine.RolloutStats` for engines that ran side by side, given in engine order.

    Per-env and per-worker arrays are joined (global ids, see module docs); ``num_envs`` adds up; wall,
    model and wait seconds are the largest over the engines (each engine has its own driver and they run at
    the same time, so ``env_steps_per_second`` is the job's); ``stage_timings`` stay with each engine's
    stats (empty here). ValueError when the engines ran different rounds, stages or chunk sizes."""
    if not parts:
        raise ValueError("merge_stats needs the stats of at least one engine, got none")
    for name in _SHARED:
        values = [getattr(p, name) for p in parts]
        if len(set(values)) > 1:
            raise ValueError(f"engines of one job must agree on {name}, got {values}")
    first = parts[0]
    return RolloutStats(
        rounds=first.rounds,
        pipeline_stages=first.pipeline_stages,
        chunk_size=first.chunk_size,
        num_envs=sum(p.num_envs for p in parts),
        wall_seconds=max(p.wall_seconds for p in parts),
        model_seconds=max(p.model_seconds for p in parts),
        wait_seconds=max(p.wait_seconds for p in parts),
        **{name: np.concatenate([getattr(p, name) for p in parts]) for name in _JOINED},
        stage_timings={},
    )
