"""Shared fixtures for the reference-simulator tests: small scenes keep the folder fast on 2 cores."""

import numpy as np
import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceVectorEnv

#: A small image keeps rendering cheap; the scene is otherwise the default one.
SMALL = ReferenceConfig(resolution=(48, 64))


def make_env(num_envs=2, seed=0, profile=None, config=SMALL):
    return ReferenceVectorEnv(num_envs, seed=seed, profile=profile, config=config)


def hold_actions(env, env_indices=None):
    """The actions the selected envs currently hold."""
    acts = env.last_actions
    return acts if env_indices is None else acts[list(env_indices)]


def random_actions(rng, n, env):
    return rng.uniform(-1, 1, (n, env.action_space.shape[0])).astype(np.float32)


@pytest.fixture
def env():
    e = make_env(profile=RolloutProfile.stock())
    yield e
    e.close()
