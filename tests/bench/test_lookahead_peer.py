"""The user-level lookahead peer: a chunk in two AsyncVectorEnv steps around its lead, the forward on the lead
observations and the committed actions while the last d steps run."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceFactory
from behavior1k_fast.rollout import COMMITTED_KEY
from behavior1k_fast.tools.peers.gymnasium import run_lookahead_peer

N, LEAD, P, E = 4, 1, 2, 2


@pytest.mark.deadline(300)
def test_the_lookahead_peer_chooses_each_chunk_from_lead_observations_with_the_committed_actions():
    factory = ReferenceFactory(ReferenceConfig(resolution=(16, 16), horizon=7))
    profile = RolloutProfile(num_env_processes=P, total_num_envs=P * E, chunk_size=N, obs_modalities=("rgb", "proprio"))
    probe = factory(1, 0, profile)
    spaces = (probe.observation_space, probe.action_space)
    action_dim = int(np.prod(probe.action_space.shape))
    probe.close()
    seen = []

    def policy(obs):
        seen.append(obs[COMMITTED_KEY].copy())
        rows = len(obs["proprio"])
        # the next chunk encodes how many forwards came before it, so committed actions can be traced back
        return np.full((rows, N, action_dim), 0.01 * len(seen), np.float32)

    raw = run_lookahead_peer(factory, profile, policy, spaces, P, E, LEAD, rounds=3, warmup=1)
    assert raw["own_actions"] > 0 and len(raw["env_s_per_worker"]) == P and len(raw["worker_pids"]) == P
    assert all(c.shape == (P * E, LEAD, action_dim) for c in seen)
    np.testing.assert_array_equal(seen[0], 0.0)  # the first chunk: nothing committed yet
    for k in range(1, len(seen)):  # forward k gets the last d actions of the chunk forward k - 1 chose
        np.testing.assert_allclose(seen[k], np.float32(0.01 * k))
    assert len(raw["model_s"]) == 3  # the timed rounds' forwards
