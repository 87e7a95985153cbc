"""RLinf's own BEHAVIOR env worker (``rlinf.envs.behavior.behavior_env.BehaviorProcess`` of ``rlinf==0.3.0``)
around a real OmniGibson ``VectorEnvironment`` built at the ``og.sim`` seam of ``tests/omnigibson``: on 1.1.1 and
v3.7 the line's own, on main the ``multi_scene_vector_env`` patch's over main's real multi-scene ``Environment``.

RLinf's code runs as shipped: ``__init__`` (its feature detection of ``VectorEnvironment.step``, the physics
frequency division for pipeline stages, the env-wrapper hook, ``gc.enable()``), ``chunk_step``,
``_step_shard``, ``_call_step``, ``reset`` and ``_call_reset``. Stand-ins replace only the three
infrastructure calls that need a BEHAVIOR-1K data install or Isaac Sim: ``setup_omni_cfg`` (loads
OmniGibson's R1Pro example config and sets macros), ``ActivityInstanceLoader`` (loads cached task
instances) and ``apply_runtime_renderer_settings`` (Kit's carb settings). The class is taken from under
Ray's ``@ray.remote`` and run in this process, so the seam's recording sim sees every call.

The seam fixtures (``og``, ``seam_og``, ``recording``, ``registry``) are the ones of ``tests/omnigibson``,
imported as they are. Where that harness runs each test once per upstream line (its ``line`` fixture,
``tests/upstream_lines.py``), ``test_behavior_process.py`` runs on the single-scene lines (:data:`RLINF_LINES`)
and ``test_behavior_process_main.py`` on main.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import torch

from behavior1k_fast.core.profile import RolloutProfile
from tests.omnigibson.conftest import og, recording, registry, seam_og  # noqa: F401  (fixtures, reused)

README = Path(__file__).resolve().parents[2] / "README.md"
#: Upstream lines with their own ``VectorEnvironment`` of single-scene envs, which RLinf 0.3.0's
#: ``BehaviorProcess`` builds; main's multi-scene ``Environment(num_envs)`` gets one from the patch set.
RLINF_LINES = ("1.1.1", "v3.7")
#: ``env.physics_frequency`` of the stand-in OmniGibson config (Hz).
PHYSICS_HZ = 120.0
ENVS, CHUNK, ACTION_DIM = 3, 4, 2
#: RLinf's two warnings when OmniGibson's step lacks the keywords (its fallback).
FALLBACK_WARNINGS = (
    "skip_intermediate_obs_in_chunk is True but OmniGibson env step does not support get_obs",
    "pipeline_stage_num > 1 but OmniGibson env step does not support env_indices",
)


def padded_actions(active: list[int]) -> torch.Tensor:
    """``[ENVS, CHUNK, ACTION_DIM]`` chunk actions as RLinf's ``BehaviorProcessPool`` sends them: distinct
    rows for the active envs, zero rows for the others."""
    actions = torch.zeros(ENVS, CHUNK, ACTION_DIM)
    for env in active:
        for t in range(CHUNK):
            actions[env, t] = torch.tensor([0.1 * (env + 1) + 0.01 * t, -0.1 * (env + 1)])
    return actions


def applied(process) -> list[np.ndarray]:
    """Per env, the action rows its robot received, stacked (``[steps, ACTION_DIM]``)."""
    return [np.array(env.robots[0].applied).reshape(-1, ACTION_DIM) for env in process.env.envs]


def rlinf_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "RLinf" and r.levelno == logging.WARNING]


def check_reset_resets_only_the_selected_env(process, h, task_reset: Any) -> list:
    """RLinf's ``reset(reset_indices=[2])`` resets and observes env 2 only, after RLinf's instance hook, and with
    ``get_obs=False`` resets env 0 and reads nothing; ``task_reset(i)`` is the layout's task-reset event for env i.
    Returns the infos of the first reset."""
    h.log.clear()
    obs, infos = process.reset(reset_indices=[2])
    assert process.instance_loader.prepared == [process.env]  # RLinf's instance hook ran first
    assert h.events("task.reset") == [task_reset(2)] and h.events("sensor.read") == [2]
    assert len(obs) == len(infos) == 1 and obs[0] is not None
    h.log.clear()
    assert process.reset(reset_indices=[0], get_obs=False) == (None, None)
    assert h.events("task.reset") == [task_reset(0)] and h.events("sensor.read") == []
    return infos


@pytest.fixture
def patched(registry, tmp_path):  # noqa: F811
    """The ``rlinf`` preset applied (the profile ``BEHAVIOR1K_FAST=rlinf`` applies at start-up)."""
    return registry.apply(RolloutProfile.rlinf(numba_cache_dir=str(tmp_path / "numba")))


class InstanceLoader:
    """Stand-in for RLinf's ``ActivityInstanceLoader``: records the envs it prepares for a reset."""

    activity_name = "turning_on_radio"

    def __init__(self) -> None:
        self.prepared: list = []

    @classmethod
    def from_omni_cfg(cls, omni_cfg: Any) -> "InstanceLoader":
        return cls()

    def prepare_reset(self, env: Any) -> None:
        self.prepared.append(env)


@pytest.fixture(params=RLINF_LINES)
def line(request, og, monkeypatch):  # noqa: F811
    """The multi-line harness's ``line``, restricted to :data:`RLINF_LINES`: the line's upstream modules
    are active until the test ends; skips with the reason where its texts are absent. Requested by the
    ``seam`` and ``registry`` fixtures of the multi-line harness only."""
    from tests.upstream_lines import activate_line

    return activate_line(request.param, monkeypatch)


@pytest.fixture
def behavior_process(og, line, seam_og, recording, monkeypatch):  # noqa: F811  (the reused fixtures)
    """Factory: ``behavior_process(num_envs, pipeline_stage_num, **rlinf_env_cfg)`` -> ``(process, harness)``:
    RLinf's ``BehaviorProcess`` over a seam ``VectorEnvironment`` (on main the patch set's, over main's
    multi-scene ``Environment``), with the harness recording its calls (a ``MultiSceneHarness`` on main).
    Apply patches before calling it (RLinf detects the step signature in ``__init__``)."""
    import omnigibson.envs
    from omegaconf import OmegaConf
    from rlinf.envs.behavior import behavior_env

    sim, env_cls = seam_og
    multi_scene = not hasattr(env_cls, "created")
    if not multi_scene:
        # RLinf imports ``from omnigibson.envs import VectorEnvironment``: the package's re-export must be the
        # class of the active line's module (the same class on 1.1.1). main has no such module of its own.
        vec_env_module = sys.modules["omnigibson.envs.vec_env_base"]
        monkeypatch.setattr(omnigibson.envs, "VectorEnvironment", vec_env_module.VectorEnvironment)
    renderer_settings: list = []
    monkeypatch.setattr(behavior_env, "setup_omni_cfg", lambda cfg: OmegaConf.create({"env": {"physics_frequency": PHYSICS_HZ}}))
    monkeypatch.setattr(behavior_env, "ActivityInstanceLoader", InstanceLoader)
    monkeypatch.setattr(behavior_env, "apply_runtime_renderer_settings", lambda: renderer_settings.append(True))
    # Ray's @ray.remote keeps the class it decorated here; RLinf's methods are that class's own.
    process_cls = behavior_env.BehaviorProcess.__ray_metadata__.modified_class.__ray_actor_class__
    assert process_cls.__module__ == behavior_env.__name__ and process_cls.__qualname__ == "BehaviorProcess"

    def build(num_envs: int = ENVS, pipeline_stage_num: int = 1, **cfg: Any):
        process = process_cls(OmegaConf.create(cfg), num_envs, pipeline_stage_num)
        assert renderer_settings == [True] and process.env.num_envs == num_envs
        if multi_scene:
            harness = recording.MultiSceneHarness(process.env.env, sim, action=lambda i: None)
            recording.instrument_multi_scene(harness)
        else:
            harness = recording.Harness(process.env, sim, action=lambda i: None)
            recording.instrument(harness)
        return process, harness

    return build
