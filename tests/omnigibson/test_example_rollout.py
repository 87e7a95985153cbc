"""``examples/omnigibson_rollout.py`` with its own configs, on the real OmniGibson code of every upstream line at
the ``og.sim`` seam (``--executor inline``: the seam lives in this process), and its config checked against the
real OmniGibson classes it names."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..examples.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
ENV_CONFIG = ROOT / "examples" / "configs" / "behavior_task.yaml"
PROFILE = ROOT / "examples" / "configs" / "fast_2env.yaml"


def load_example():
    return load_script("omnigibson_rollout")


@pytest.fixture
def profile_file(tmp_path):
    """The example's profile as it ships, with the numba cache in this test's folder."""
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.read_text() + f"numba_cache_dir: {tmp_path / 'numba'}\n")
    return path


def test_the_example_rolls_out_its_behavior_config_on_each_layout(line, seam_og, profile_file, monkeypatch, capsys):
    from behavior1k_fast import backends

    sim, env_cls = seam_og
    monkeypatch.setattr(backends, "check_installed", lambda backend: None)  # the seam stands in for Isaac Sim
    env_cls.terminate_at = {1: 5}  # env 1's episodes end at their 5th step
    assert load_example().main(["--executor", "inline", "--rounds", "3", "--profile", str(profile_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("RolloutEngine(1 workers x 2 envs x 2 stages, partition='hybrid', chunk_size=8")
    # env 0: 3 chunks of 8; env 1: episodes of 5 own actions, each chunk's rest masked: 5 per chunk
    assert out[-1].startswith("3 rounds: 39 own actions in ") and ", 3 episodes ended, " in out[-1]
    if line.name == "main":
        (env,) = env_cls.built
        assert env.num_envs == 2 and env.config["env"]["num_envs"] == 2
        robots = [scene.robots[0] for scene in env.scenes]
    else:
        assert len(env_cls.built) == 2 and type(env_cls.built[0]).__name__ == "SeamEnvironment"
        robots = [env.robots[0] for env in env_cls.built]
    for env in env_cls.built:  # the factory's config: rescaled for K = 2 (divide_physics), no auto-reset
        assert env.config["env"]["physics_frequency"] == 60 and env.config["env"]["action_frequency"] == 30
        assert env.config["robots"][0]["obs_modalities"] == ["rgb", "proprio"]
    applied = [np.asarray(robot.applied) for robot in robots]
    assert [len(a) for a in applied] == [24, 15]
    assert all(np.abs(a).max() <= 1.0 for a in applied)  # the random policy's chunks, in [-1, 1]


def test_the_example_without_omnigibson_says_so_in_one_line_and_exits_2(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "omnigibson" else
                        find_spec(name, *a))
    assert load_example().main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("omnigibson_rollout: error: backend 'omnigibson' needs OmniGibson")


def test_the_example_profile_is_the_slimmed_2_env_layout():
    from behavior1k_fast import RolloutProfile
    from behavior1k_fast.rollout.plan import PartitionPlan

    profile = RolloutProfile.from_yaml(PROFILE)
    plan = PartitionPlan.from_profile(profile)
    assert (plan.num_env_processes, plan.envs_per_process, plan.pipeline_stages, plan.stages_sharing_physics) == (1, 2, 2, 2)
    assert profile.obs_modalities == ("rgb", "proprio") and profile.skip_intermediate_obs
    assert profile.remove_headless_viewports


def test_the_example_env_config_names_only_what_the_real_classes_take(line):
    """Every ``env`` and ``render`` key is one the line's ``Environment.default_config`` has (main adds
    ``num_envs``, which the factory sets); the robot, scene and task types are registered in OmniGibson and take
    the config's keys (those modules are 1.1.1's on every line of the harness)."""
    from omnigibson.robots import REGISTERED_ROBOTS
    from omnigibson.scenes import REGISTERED_SCENES
    from omnigibson.tasks import REGISTERED_TASKS

    config = yaml.safe_load(ENV_CONFIG.read_text())
    defaults = line.module("omnigibson.envs.env_base").Environment.default_config.fget(None)
    for section in ("env", "render"):
        assert set(config[section]) <= set(defaults[section]), (section, set(config[section]) - set(defaults[section]))
    assert "num_envs" not in config["env"]
    (robot,) = config["robots"]
    for registry, entry, extra in ((REGISTERED_ROBOTS, robot, ()), (REGISTERED_SCENES, config["scene"], ()),
                                   (REGISTERED_TASKS, config["task"], ())):
        cls = registry[entry["type"]]
        accepted = {name for klass in cls.__mro__ if "__init__" in vars(klass)
                    for name in inspect.signature(klass.__init__).parameters}
        assert set(entry) - {"type"} <= accepted, (cls.__name__, set(entry) - {"type"} - accepted)
