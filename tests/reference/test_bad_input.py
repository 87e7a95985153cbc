"""Bad input gets a clear error naming the argument and value, and changes nothing."""

import numpy as np
import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig, ReferenceVectorEnv
from behavior1k_fast.core.frequencies import Frequencies

from .conftest import SMALL, hold_actions, make_env


@pytest.mark.parametrize(
    "actions, error, match",
    [
        (np.zeros((2, 10), np.float32), ValueError, r"shape \(2, 11\)"),
        (np.zeros((1, 11), np.float32), ValueError, r"shape \(2, 11\)"),
        (np.zeros((2, 11), np.int64), TypeError, "float dtype"),
        ([[0.0] * 11] * 2, TypeError, "numpy array"),
        (np.full((2, 11), np.nan, np.float32), ValueError, "NaN or inf"),
        (np.full((2, 11), np.inf), ValueError, "NaN or inf"),
    ],
)
def test_bad_actions_raise_and_change_nothing(env, actions, error, match):
    held, t = env.last_actions, env.sim_time
    with pytest.raises(error, match=match):
        env.step(actions)
    np.testing.assert_array_equal(env.last_actions, held)
    assert env.sim_time == t


@pytest.mark.parametrize(
    "env_indices, match",
    [([2], "out of range"), ([-1], "out of range"), ([0, 0], "duplicates"), ([], "at least one")],
)
def test_bad_env_indices_raise(env, env_indices, match):
    n = max(len(env_indices), 1)
    with pytest.raises(ValueError, match=match):
        env.step(np.zeros((n, 11), np.float32), env_indices=env_indices)
    with pytest.raises(ValueError, match=match):
        env.reset(env_indices)
    with pytest.raises(ValueError, match=match):
        env.observe(env_indices)


def test_unsupported_modality_is_named():
    with pytest.raises(ValueError, match="'flow'"):
        make_env(profile=RolloutProfile(obs_modalities=("rgb", "flow")))
    with pytest.raises(ValueError, match="'rgbb'"):
        RolloutProfile(obs_modalities=("rgbb",))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(resolution=(0, 224)), ValueError, r"resolution height \(pixels\) must be an int in \[1, 4096\], got 0"),
        (dict(resolution=(224, -5)), ValueError, r"resolution width \(pixels\) must be an int in \[1, 4096\], got -5"),
        (dict(resolution=(16384, 16384)), ValueError, r"height \(pixels\) must be an int in \[1, 4096\], got 16384"),
        (dict(resolution=(224.0, 224)), TypeError, r"resolution height \(pixels\) must be an int"),
        (dict(resolution=224), TypeError, "resolution must be a"),
        (dict(num_objects=0), ValueError, "num_objects"),
        (dict(num_objects=32), ValueError, "num_objects"),
        (dict(horizon=0), ValueError, "horizon"),
        (dict(cameras=("head", "tail")), ValueError, "'tail'"),
        (dict(cameras=()), ValueError, "cameras"),
        (dict(cameras=("head", "head")), ValueError, "duplicates"),
        (dict(frequencies=(30, 30, 120)), TypeError, "Frequencies"),
        (dict(frequencies=Frequencies(30, 60, 120, headless=False)), ValueError, "headless"),
        (dict(reset_settle_steps=-1), ValueError, "reset_settle_steps must be an int >= 0, got -1"),
        (dict(reset_settle_steps=2.5), TypeError, "reset_settle_steps must be an int"),
        (dict(reset_settle_steps=True), TypeError, "reset_settle_steps must be an int"),
        (dict(contact_iterations=-3), ValueError, "contact_iterations must be an int >= 0, got -3"),
        (dict(contact_iterations="5"), TypeError, "contact_iterations must be an int"),
    ],
)
def test_bad_config_raises(kwargs, error, match):
    with pytest.raises(error, match=match):
        ReferenceConfig(**kwargs)


def test_frequencies_breaking_the_dt_rules_raise():
    with pytest.raises(ValueError, match="rendering_hz=30 must divide physics_hz=100"):
        ReferenceConfig(frequencies=Frequencies(30, 30, 100))
    with pytest.raises(ValueError, match=r"stages=7 is impossible.*valid stage counts"):
        make_env(profile=RolloutProfile(pipeline_stages=7, physics_rescale="divide_physics"))


@pytest.mark.parametrize(
    "args, error, match",
    [((0,), ValueError, "num_envs"), ((2.0,), TypeError, "num_envs"), ((2, -1), ValueError, "seed")],
)
def test_bad_constructor_arguments(args, error, match):
    with pytest.raises(error, match=match):
        ReferenceVectorEnv(*args, config=SMALL)


def test_profile_and_config_types_are_checked():
    with pytest.raises(TypeError, match="profile must be a RolloutProfile"):
        ReferenceVectorEnv(1, profile={"obs_modalities": None}, config=SMALL)
    with pytest.raises(TypeError, match="config must be a ReferenceConfig"):
        ReferenceVectorEnv(1, config={"resolution": (8, 8)})


def test_bad_constructed_state_raises(env):
    with pytest.raises(ValueError, match="obj must be"):
        env.set_object_pose(0, 99, (1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="pos_env_frame"):
        env.set_object_pose(0, 0, (1.0, np.nan, 1.0))
    env.step(hold_actions(env))  # still usable


def test_images_larger_than_mujocos_default_offscreen_buffer_render():
    config = ReferenceConfig(resolution=(500, 700), cameras=("head",))  # wider than the default 640
    obs, _ = make_env(1, profile=RolloutProfile(obs_modalities=("rgb",)), config=config).reset()
    assert obs[0]["head::rgb"].shape == (500, 700, 3) and obs[0]["head::rgb"].any()
