"""The benchmark's VLA-like chunk policy: tokens, shapes, bounds, determinism, size calibration, T_model curve."""

import numpy as np
import pytest
from gymnasium import spaces

from behavior1k_fast.tools.measure.policy import (
    MAX_DEPTH,
    MIN_DEPTH,
    PROPRIO_TOKENS,
    ChunkPolicy,
    batch_of,
    calibrate_model_size,
    model_cost_curve,
)

ACTION_SPACE = spaces.Box(-1.0, 1.0, (11,), np.float32)


def _obs_space(with_rgb=True, size=32):
    keys = {"proprio": spaces.Box(-np.inf, np.inf, (10,), np.float32),
            "head::depth": spaces.Box(0.0, np.inf, (size, size), np.float32)}
    if with_rgb:
        keys["head::rgb"] = spaces.Box(0, 255, (size, size, 3), np.uint8)
        keys["wrist::rgb"] = spaces.Box(0, 255, (size, size, 3), np.uint8)
    return spaces.Dict(keys)


def _batch(n, seed=0, size=32):
    rng = np.random.default_rng(seed)
    return {
        "proprio": rng.normal(size=(n, 10)).astype(np.float32),
        "head::depth": rng.uniform(size=(n, size, size)).astype(np.float32),
        "head::rgb": rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8),
        "wrist::rgb": rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8),
    }


def _small(**kwargs):
    return ChunkPolicy(_obs_space(), ACTION_SPACE, **{"chunk_size": 8, "width": 64, "depth": 1, **kwargs})


def test_tokens_are_image_patches_of_every_camera_proprio_and_action_queries():
    policy = _small()
    assert policy.rgb_keys == ["head::rgb", "wrist::rgb"]
    assert policy.tokens == 2 * (32 // 16) ** 2 + PROPRIO_TOKENS + 8
    assert str(policy.dtype) == "torch.float32"  # on CPU
    wider = _small(width=128, depth=2)
    assert wider.num_parameters > policy.num_parameters


def test_chunk_of_actions_in_bounds_and_deterministic():
    policy = _small()
    obs = _batch(3)
    actions = policy(obs)
    assert actions.shape == (3, 8, 11) and actions.dtype == np.float64
    assert np.all(actions >= -1.0) and np.all(actions <= 1.0)
    np.testing.assert_array_equal(actions, policy(obs))
    assert not np.array_equal(actions, policy(_batch(3, seed=1)))


def test_actions_are_mapped_onto_the_action_bounds():
    box = spaces.Box(np.zeros(11, np.float32), np.full(11, 4.0, np.float32))
    actions = ChunkPolicy(_obs_space(), box, chunk_size=4, width=64, depth=1)(_batch(2))
    assert np.all(actions >= 0.0) and np.all(actions <= 4.0) and actions.std() > 0


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = _small(seed=3), _small(seed=3), _small(seed=4)
    np.testing.assert_array_equal(a(_batch(2)), b(_batch(2)))
    assert not np.array_equal(a(_batch(2)), c(_batch(2)))


def test_policy_needs_rgb_and_proprio():
    with pytest.raises(ValueError, match="rgb"):
        ChunkPolicy(_obs_space(with_rgb=False), ACTION_SPACE)


def test_images_smaller_than_a_patch_are_refused():
    with pytest.raises(ValueError, match="8x8 pixels hold no 16x16 patch"):
        ChunkPolicy(_obs_space(size=8), ACTION_SPACE, width=64, depth=1)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"chunk_size": 0}, ValueError, "chunk_size"),
    ({"depth": 0}, ValueError, "depth"),
    ({"width": 96}, ValueError, "width must be a multiple of 64"),
    ({"width": 64.0}, TypeError, "width must be an int"),
    ({"seed": -1}, ValueError, "seed"),
])
def test_bad_sizes_are_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        ChunkPolicy(_obs_space(), ACTION_SPACE, **kwargs)


def test_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="empty batch"):
        _small()(_batch(0))


def _cost_model(fixed_ms, per_block):
    """A stand-in size -> forward time: ``fixed_ms + per_block(width) * depth`` (no timing)."""
    build = lambda width, depth: (width, depth)  # noqa: E731
    timer = lambda model, obs: fixed_ms + per_block(model[0]) * model[1]  # noqa: E731
    return build, timer


def test_calibration_picks_the_widest_width_that_holds_the_minimum_depth():
    build, timer = _cost_model(2.0, lambda w: w / 64)  # 1 ms per block at width 64, 8 at 512
    width, depth = calibrate_model_size(build, {}, target_ms=42.0, widths=(64, 128, 256, 512, 1024), timer=timer)
    # 256: (42 - 2) / 4 = 10 blocks; 512: 40 / 8 = 5 blocks; 1024: 40 / 16 = 2.5 < MIN_DEPTH
    assert (width, depth) == (512, 5) and depth >= MIN_DEPTH


def test_calibration_caps_the_depth_and_keeps_at_least_one_block():
    build, timer = _cost_model(0.0, lambda w: 0.001 * w)
    assert calibrate_model_size(build, {}, 1e6, widths=(64, 128), timer=timer) == (128, MAX_DEPTH)
    build, timer = _cost_model(5.0, lambda w: 10.0)
    assert calibrate_model_size(build, {}, 1.0, widths=(64, 128), timer=timer) == (64, 1)


def test_calibration_with_one_width_only_sizes_the_depth():
    build, timer = _cost_model(1.0, lambda w: 3.0)
    assert calibrate_model_size(build, {}, 10.0, widths=(256,), timer=timer) == (256, 3)


def test_calibration_of_a_real_policy_returns_a_buildable_size():
    def build(width, depth):
        return ChunkPolicy(_obs_space(), ACTION_SPACE, chunk_size=4, width=width, depth=depth)

    width, depth = calibrate_model_size(build, _batch(2), target_ms=5.0, widths=(64, 128))
    assert width in (64, 128) and 1 <= depth <= MAX_DEPTH
    assert build(width, depth)(_batch(2)).shape == (2, 4, 11)


@pytest.mark.parametrize("target", [0.0, -1.0, float("nan")])
def test_calibration_target_must_be_positive(target):
    build, timer = _cost_model(1.0, lambda w: 1.0)
    with pytest.raises(ValueError, match="target_ms"):
        calibrate_model_size(build, {}, target, timer=timer)


def test_model_cost_curve_has_every_batch_from_one_to_full():
    rows = [{k: v[i] for k, v in _batch(3).items()} for i in range(3)]
    sizes = []
    curve = model_cost_curve(lambda obs: sizes.append(len(obs["proprio"])), rows, 5,
                             timer=lambda policy, obs: policy(obs) or 2.0 * len(obs["proprio"]))
    assert [c["batch"] for c in curve] == [1, 2, 3, 4, 5] == sizes
    assert [c["ms_per_sample"] for c in curve] == [2.0] * 5
    with pytest.raises(ValueError, match="max_batch"):
        model_cost_curve(_small(), rows, 0)


def test_batch_of_cycles_through_the_rows():
    rows = [{"x": np.array([i])} for i in range(2)]
    np.testing.assert_array_equal(batch_of(rows, 5)["x"][:, 0], [0, 1, 0, 1, 0])
