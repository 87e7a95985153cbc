"""The benchmark's torch chunk policy: shapes, bounds, determinism, configurable forward cost."""

import numpy as np
import pytest
from gymnasium import spaces

from behavior1k_fast.tools.bench.policy import ChunkPolicy, calibrate_denoise_steps

ACTION_SPACE = spaces.Box(-1.0, 1.0, (11,), np.float32)


def _obs_space(with_rgb=True):
    keys = {"proprio": spaces.Box(-np.inf, np.inf, (10,), np.float32),
            "head::depth": spaces.Box(0.0, np.inf, (24, 24), np.float32)}
    if with_rgb:
        keys["head::rgb"] = spaces.Box(0, 255, (24, 24, 3), np.uint8)
        keys["wrist::rgb"] = spaces.Box(0, 255, (24, 24, 3), np.uint8)
    return spaces.Dict(keys)


def _batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "proprio": rng.normal(size=(n, 10)).astype(np.float32),
        "head::depth": rng.uniform(size=(n, 24, 24)).astype(np.float32),
        "head::rgb": rng.integers(0, 256, size=(n, 24, 24, 3), dtype=np.uint8),
        "wrist::rgb": rng.integers(0, 256, size=(n, 24, 24, 3), dtype=np.uint8),
    }


def test_chunk_of_actions_in_bounds_and_deterministic():
    policy = ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=8, denoise_steps=3, hidden=32)
    assert policy.rgb_keys == ["head::rgb", "wrist::rgb"]
    obs = _batch(3)
    actions = policy(obs)
    assert actions.shape == (3, 8, 11) and actions.dtype == np.float64
    assert np.all(actions >= -1.0) and np.all(actions <= 1.0)
    np.testing.assert_array_equal(actions, policy(obs))
    assert not np.array_equal(actions, policy(_batch(3, seed=1)))


def test_same_seed_same_weights():
    a = ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=4, denoise_steps=2, hidden=16, seed=3)
    b = ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=4, denoise_steps=2, hidden=16, seed=3)
    np.testing.assert_array_equal(a(_batch(2)), b(_batch(2)))


def test_policy_needs_rgb_and_proprio():
    with pytest.raises(ValueError, match="rgb"):
        ChunkPolicy(_obs_space(with_rgb=False), ACTION_SPACE)


@pytest.mark.parametrize("kwargs", [{"chunk_size": 0}, {"denoise_steps": -1}, {"hidden": 1.5}])
def test_bad_sizes_are_errors(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ChunkPolicy(_obs_space(), ACTION_SPACE, **kwargs)


def test_empty_batch_is_an_error():
    policy = ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=4, denoise_steps=1, hidden=16)
    with pytest.raises(ValueError, match="empty batch"):
        policy(_batch(0))


def test_calibration_sets_the_denoise_steps():
    policy = ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=4, denoise_steps=1, hidden=16)
    steps = calibrate_denoise_steps(policy, _batch(2), target_ms=5.0, max_steps=50)
    assert steps == policy.denoise_steps
    assert 1 <= steps <= 50
    with pytest.raises(ValueError, match="target_ms"):
        calibrate_denoise_steps(policy, _batch(2), target_ms=0.0)
