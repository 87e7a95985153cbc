"""RLinf's own BEHAVIOR env worker (``rlinf.envs.behavior.behavior_env.BehaviorProcess`` of ``rlinf==0.3.0``)
around a real OmniGibson ``VectorEnvironment`` built at the ``og.sim`` seam of ``tests/omnigibson``.

RLinf's code runs as shipped: ``__init__`` (its feature detection of ``VectorEnvironment.step``, the physics
frequency division for pipeline stages, the env-wrapper hook, ``gc.enable()``), ``chunk_step``,
``_step_shard``, ``_call_step``, ``reset`` and ``_call_reset``. Stand-ins replace only the three
infrastructure calls that need a BEHAVIOR-1K data install or Isaac Sim: ``setup_omni_cfg`` (loads
OmniGibson's R1Pro example config and sets macros), ``ActivityInstanceLoader`` (loads cached task
instances) and ``apply_runtime_renderer_settings`` (Kit's carb settings). The class is taken from under
Ray's ``@ray.remote`` and run in this process, so the seam's recording sim sees every call.

The seam fixtures (``og``, ``seam``, ``recording``, ``registry``) are the ones of ``tests/omnigibson``,
imported as they are. Where that harness runs each test once per upstream line (its ``line`` fixture,
``tests/upstream_lines.py``), these tests run on the lines RLinf 0.3.0 can drive (:data:`RLINF_LINES`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.omnigibson.conftest import og, recording, registry, seam  # noqa: F401  (fixtures, reused)

README = Path(__file__).resolve().parents[2] / "README.md"
#: Upstream lines with a ``VectorEnvironment``, which RLinf 0.3.0's ``BehaviorProcess`` builds; main's
#: multi-scene ``Environment(num_envs)`` layout has none, and no RLinf release drives it yet.
RLINF_LINES = ("1.1.1", "v3.7")
#: ``env.physics_frequency`` of the stand-in OmniGibson config (Hz).
PHYSICS_HZ = 120.0


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
def behavior_process(og, seam, recording, monkeypatch):  # noqa: F811  (the reused fixtures)
    """Factory: ``behavior_process(num_envs, pipeline_stage_num, **rlinf_env_cfg)`` -> ``(process, harness)``:
    RLinf's ``BehaviorProcess`` over a seam ``VectorEnvironment``, with the harness recording its calls.
    Apply patches before calling it (RLinf detects the step signature in ``__init__``)."""
    import omnigibson.envs
    from omegaconf import OmegaConf
    from rlinf.envs.behavior import behavior_env

    # RLinf imports ``from omnigibson.envs import VectorEnvironment``: the package's re-export must be the
    # class of the active line's module (the same class on 1.1.1).
    vec_env_module = sys.modules["omnigibson.envs.vec_env_base"]
    monkeypatch.setattr(omnigibson.envs, "VectorEnvironment", vec_env_module.VectorEnvironment)
    renderer_settings: list = []
    monkeypatch.setattr(behavior_env, "setup_omni_cfg", lambda cfg: OmegaConf.create({"env": {"physics_frequency": PHYSICS_HZ}}))
    monkeypatch.setattr(behavior_env, "ActivityInstanceLoader", InstanceLoader)
    monkeypatch.setattr(behavior_env, "apply_runtime_renderer_settings", lambda: renderer_settings.append(True))
    # Ray's @ray.remote keeps the class it decorated here; RLinf's methods are that class's own.
    process_cls = behavior_env.BehaviorProcess.__ray_metadata__.modified_class.__ray_actor_class__
    assert process_cls.__module__ == behavior_env.__name__ and process_cls.__qualname__ == "BehaviorProcess"

    def build(num_envs: int = 3, pipeline_stage_num: int = 1, **cfg: Any):
        process = process_cls(OmegaConf.create(cfg), num_envs, pipeline_stage_num)
        assert renderer_settings == [True] and process.env.num_envs == num_envs
        harness = recording.Harness(process.env, og.sim, action=lambda i: None)
        recording.instrument(harness)
        return process, harness

    return build
