"""Process safety: light package import, MUJOCO_GL default, the factory in a spawned worker."""

import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceFactory

PROBE = (
    "import os, sys, behavior1k_fast; assert 'mujoco' not in sys.modules; "
    "import behavior1k_fast.reference; print(os.environ['MUJOCO_GL'])"
)


def run_probe(env):
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_package_import_is_light_and_mujoco_gl_is_defaulted_or_respected():
    base = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    assert run_probe(base) in ("egl", "osmesa")
    assert run_probe({**base, "MUJOCO_GL": "osmesa"}) == "osmesa"


def _worker(factory, queue):
    env = factory(2, 11, RolloutProfile(obs_modalities=("rgb", "proprio")))
    obs, rewards, *_ = env.step(env.last_actions)
    queue.put((obs[1]["head::rgb"].std(), rewards.tolist(), os.getpid()))
    env.close()


def test_factory_builds_and_renders_in_a_spawned_worker():
    factory = ReferenceFactory(ReferenceConfig(resolution=(24, 32)))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(factory, queue))
    proc.start()
    std, rewards, pid = queue.get(timeout=120)
    proc.join(timeout=60)
    assert proc.exitcode == 0 and pid != os.getpid()
    assert std > 0 and len(rewards) == 2 and np.all(np.isfinite(rewards))
    local = factory(2, 11, RolloutProfile(obs_modalities=("rgb", "proprio")))
    np.testing.assert_array_equal(local.step(local.last_actions, get_obs=False)[1], rewards)
