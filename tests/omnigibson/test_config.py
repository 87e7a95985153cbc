"""Env-config functions (slim modalities, frequency rescale) and the backend factory's config (the backend on
each layout: ``test_backend_layouts.py``)."""

from __future__ import annotations

import copy
import pickle

import pytest

from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackendFactory
from behavior1k_fast.backends.omnigibson.config import env_frequencies, rescale_env_config
from behavior1k_fast.backends.omnigibson.config import slim_config
from behavior1k_fast.core.profile import RolloutProfile

#: Shaped like the v3.7 ``r1pro_behavior.yaml`` plus a ``DefaultWrapper``.
STOCK = {
    "env": {"external_sensors": [{"sensor_type": "VisionSensor", "name": "external_sensor0"}]},
    "robots": [
        {
            "type": "R1Pro",
            "obs_modalities": ["rgb", "depth"],
            "sensor_config": {"VisionSensor": {"modalities": ["rgb", "depth", "seg_semantic"]}},
        },
        {"type": "Fetch"},
    ],
    "wrapper": {"type": "DefaultWrapper"},
}


def test_slim_config_keeps_only_consumed_modalities_and_says_what_it_removed():
    original = copy.deepcopy(STOCK)
    slim = slim_config(STOCK, ("rgb", "proprio"))
    assert STOCK == original
    assert slim.config["robots"][0]["obs_modalities"] == ["rgb", "proprio"]
    assert slim.config["robots"][0]["sensor_config"]["VisionSensor"]["modalities"] == ["rgb"]
    assert slim.config["robots"][1]["obs_modalities"] == ["rgb", "proprio"]
    assert slim.config["env"]["external_sensors"] is None
    assert slim.config["wrapper"]["type"] is None
    assert slim.removed == (
        "robots[0].obs_modalities: depth",
        "robots[0].sensor_config.VisionSensor.modalities: depth, seg_semantic",
        "env.external_sensors: external_sensor0",
        "wrapper.type: DefaultWrapper (adds modalities to every camera)",
    )
    again = slim_config(slim.config, ("rgb", "proprio"))
    assert again.removed == () and again.config == slim.config


def test_slim_config_bad_input():
    with pytest.raises(ValueError, match="unknown modality 'rgbd'.*did you mean 'rgb'"):
        slim_config(STOCK, ("rgbd", "proprio"))
    with pytest.raises(TypeError, match="config must be an OmniGibson config mapping, got list"):
        slim_config([STOCK])


def test_rescale_env_config_divides_physics_and_states_time_per_own_action():
    config = {"env": {"action_frequency": 30, "rendering_frequency": 30, "physics_frequency": 120}}
    out, timing = rescale_env_config(config, 2)
    assert out["env"]["physics_frequency"] == 60 and config["env"]["physics_frequency"] == 120
    assert timing.sim_seconds_per_own_action == pytest.approx(2 / 30)
    assert timing.physics_substeps_per_own_action == 4
    with pytest.raises(ValueError, match=r"stages=3 .*valid stage counts up to 16: \[1, 2, 4"):
        rescale_env_config(config, 3)
    defaults = env_frequencies({})
    assert (defaults.action_hz, defaults.rendering_hz, defaults.physics_hz) == (30, 30, 120)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"physics_frequency": -5}, r"env.physics_frequency must be a finite number of Hz > 0, got -5"),
        ({"physics_frequency": 100}, r"rendering_hz=30 must divide physics_hz=100"),
        ({"action_frequency": 15}, r"headless runs need action_hz == rendering_hz"),
    ],
)
def test_invalid_frequencies_name_the_key_and_value(env, message):
    with pytest.raises(ValueError, match=message):
        env_frequencies({"env": env})


def test_a_frequency_that_is_not_a_number_is_a_type_error():
    with pytest.raises(TypeError, match=r"env.action_frequency must be .* got 'fast'"):
        env_frequencies({"env": {"action_frequency": "fast"}})


def test_factory_config_is_slim_rescaled_without_auto_reset_and_picklable():
    factory = OmniGibsonBackendFactory(STOCK)
    config = factory.build_config(RolloutProfile(pipeline_stages=2))
    assert config["env"]["physics_frequency"] == 60 and config["env"]["automatic_reset"] is False
    assert config["robots"][0]["obs_modalities"] == ["rgb", "proprio"]
    assert pickle.loads(pickle.dumps(factory)) == factory
    stock = factory.build_config(RolloutProfile.stock())
    assert stock["robots"][0]["obs_modalities"] == ["rgb", "depth"] and stock["env"]["physics_frequency"] == 120
