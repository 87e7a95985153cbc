"""Backend-contract semantics of ReferenceVectorEnv: env_indices, get_obs, render, reset, observe."""

import numpy as np
import pytest

from behavior1k_fast.backend import VectorBackend
from behavior1k_fast.profile import RolloutProfile

from .conftest import SMALL, hold_actions, make_env, random_actions


def test_is_a_vector_backend_with_matching_spaces(env):
    assert isinstance(env, VectorBackend)
    obs, infos = env.reset()
    assert len(obs) == env.num_envs == len(infos)
    space = env.observation_space
    for o in obs:
        assert set(o) == set(space.spaces)
        for key, value in o.items():
            assert value.shape == space[key].shape, key
            assert value.dtype == space[key].dtype, key
    assert "head::rgb" in space.spaces and "proprio" in space.spaces
    assert env.action_space.shape == (11,)
