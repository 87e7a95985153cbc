"""The peer baseline: gymnasium's ``AsyncVectorEnv`` stepping the reference env the way a user writes it.

One gymnasium env per worker process, each wrapping a one-env backend built with the stock profile (every
modality rendered and read on every step); the policy emits a chunk of N actions from the batched
observation and the loop steps all N of them, taking every observation it is handed.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import gymnasium
import numpy as np

from ...core.contract import patch_set_of
from ...rollout.bootstrap import bootstrap_process


class BackendGymEnv(gymnasium.Env):
    """A ``gymnasium.Env`` over a one-env backend (``factory(1, seed, profile)``); no reset of its own.

    In a worker process it applies ``profile`` first, as an engine worker does. ``AsyncVectorEnv`` also
    builds one of these in the owning process to read the spaces: there nothing is applied, so the
    owner's own patch state is left alone."""

    def __init__(self, factory: Callable[..., Any], seed: int, profile: Any) -> None:
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            bootstrap_process(profile, patch_set=patch_set_of(factory))
        self.backend = factory(1, seed, profile)
        self.observation_space = self.backend.observation_space
        self.action_space = self.backend.action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, _ = self.backend.reset()
        return obs[0], {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        obs, rewards, terminated, truncated, _ = self.backend.step(np.asarray(action, dtype=np.float64)[None])
        return obs[0], float(rewards[0]), bool(terminated[0]), bool(truncated[0]), {}

    def close(self) -> None:
        self.backend.close()


def run_async_vector_env(
    factory: Callable[..., Any],
    profile: Any,
    policy: Callable[[dict[str, np.ndarray]], np.ndarray],
    num_envs: int,
    rounds: int,
    chunk_size: int,
    seed: int = 0,
    monitor: Any = None,
    warmup: int = 1,
) -> dict[str, Any]:
    """Step ``rounds`` chunks in ``num_envs`` AsyncVectorEnv workers; wall s, per chunk env and model s.

    Episodes that end are reset by AsyncVectorEnv's own autoreset (the next step is the reset). ``warmup``
    chunks run before timing; ``monitor`` (a :class:`ResourceMonitor`) spans the timed chunks.
    """
    import functools

    from gymnasium.vector import AsyncVectorEnv

    fns = [functools.partial(BackendGymEnv, factory, seed + i, profile) for i in range(num_envs)]
    venv = AsyncVectorEnv(fns, shared_memory=True, context="spawn")
    try:
        obs, _ = venv.reset(seed=seed)
        env_s: list[float] = []
        model_s: list[float] = []
        wall_start = 0.0
        for r in range(warmup + rounds):
            if r == warmup:
                env_s, model_s = [], []
                if monitor is not None:
                    monitor.start()
                wall_start = time.perf_counter()
            t0 = time.perf_counter()
            actions = policy(obs)
            t1 = time.perf_counter()
            for t in range(chunk_size):
                obs, _, _, _, _ = venv.step(actions[:, t])
            model_s.append(t1 - t0)
            env_s.append(time.perf_counter() - t1)
        wall_s = time.perf_counter() - wall_start
        usage = monitor.stop() if monitor is not None else None
        pids = [p.pid for p in venv.processes]
    finally:
        venv.close()
    return {"wall_s": wall_s, "env_s": env_s, "model_s": model_s, "steps": rounds * chunk_size,
            "usage": usage, "worker_pids": pids}
