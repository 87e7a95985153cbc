"""Shared helpers of the engine tests: a deterministic row-wise policy and trajectory recording."""

from __future__ import annotations

import os

import numpy as np
import psutil

from behavior1k_fast.rollout.worker import SHM_PREFIX

CHUNK = 4


def policy(obs):
    """Deterministic and row-independent (elementwise only), so the batch layout cannot change bits."""
    p = obs["proprio"].astype(np.float64)
    steps = np.arange(1, CHUNK + 1)[None, :, None]
    return np.tanh(-p[:, None, :2] * 0.7 + 0.05 * steps * p[:, None, 2:]).astype(np.float32)


def record(engine, rounds):
    """Per-env trajectory {env: {"proprio": [...], "rgb": [...], "rewards": [...], "terminated": [...]}}."""
    traj = {}

    def on_chunk(stage, result):
        for row, env in enumerate(result.env_ids.tolist()):
            t = traj.setdefault(env, {"proprio": [], "rgb": [], "rewards": [], "terminated": []})
            t["proprio"].append(result.obs["proprio"][row].copy())
            t["rgb"].append(result.obs["head::rgb"][row].copy())
            t["rewards"].append(result.rewards[row].copy())
            t["terminated"].append(result.terminated[row].copy())

    stats = engine.rollout(policy, rounds, on_chunk=on_chunk)
    return {env: {k: np.stack(v) for k, v in t.items()} for env, t in traj.items()}, stats


def our_segments():
    """Shared-memory segments this test process created."""
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"{SHM_PREFIX}{os.getpid()}_"))


def assert_gone(pids, timeout=10.0):
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"worker processes still alive: {alive}"
