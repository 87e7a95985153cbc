"""Shared helpers of the engine tests: a deterministic row-wise policy and trajectory recording."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import psutil

from behavior1k_fast.core.tracing import get_profiler
from behavior1k_fast.rollout.shm import SHM_DIR, segment_owner

CHUNK = 4


def policy(obs):
    """Deterministic and row-independent (elementwise only), so the batch layout cannot change bits."""
    p = obs["proprio"].astype(np.float64)
    steps = np.arange(1, CHUNK + 1)[None, :, None]
    return np.tanh(-p[:, None, :2] * 0.7 + 0.05 * steps * p[:, None, 2:]).astype(np.float32)


def make_policy():
    """Picklable policy factory (for PolicyProcess)."""
    return policy


def record(engine, rounds, policy=policy, **rollout_kwargs):
    """Run ``engine.rollout`` (``rollout_kwargs`` passed on) and return its per-env trajectories and stats.

    Trajectory of env ``g``: every observation key, ``rewards``, ``terminated`` and ``truncated``, stacked
    over chunks (``[chunks, ...]``)."""
    traj = {}

    def on_chunk(stage, result):
        fields = {**result.obs, "rewards": result.rewards, "terminated": result.terminated,
                  "truncated": result.truncated}
        for row, env in enumerate(result.env_ids.tolist()):
            t = traj.setdefault(env, {})
            for key, value in fields.items():
                t.setdefault(key, []).append(value[row].copy())

    stats = engine.rollout(policy, rounds, on_chunk=on_chunk, **rollout_kwargs)
    return {env: {k: np.stack(v) for k, v in t.items()} for env, t in traj.items()}, stats


def assert_same_trajectories(a, b):
    """Bit-identical per-env trajectories (every key)."""
    assert sorted(a) == sorted(b)
    for env in a:
        assert sorted(a[env]) == sorted(b[env])
        for key in a[env]:
            np.testing.assert_array_equal(a[env][key], b[env][key], err_msg=f"env {env} {key}")


def our_segments(owner=None):
    """Shared-memory segments that process ``owner`` (default: this test process) created."""
    owner = os.getpid() if owner is None else owner
    return sorted(n for n in os.listdir(SHM_DIR) if segment_owner(n) == owner)


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


@contextlib.contextmanager
def traced():
    """The profiler on and empty inside the block (yields it), as it was afterwards."""
    profiler = get_profiler()
    was = profiler.enabled
    profiler.enabled = True
    profiler.clear()
    try:
        yield profiler
    finally:
        profiler.enabled = was
        profiler.clear()
