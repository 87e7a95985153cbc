"""RLinf 0.3.0's ``BehaviorProcess`` unchanged on BEHAVIOR-1K main's texts: main replaced ``VectorEnvironment`` by one
multi-scene ``Environment(num_envs)``; with the patch set, ``omnigibson.envs.VectorEnvironment`` is the
``multi_scene_vector_env`` patch's class over main's real ``Environment``, and RLinf finds ``get_obs``, ``render``
and ``env_indices`` and uses them (skip-obs inside a chunk, per-env stepping and reset), as on 1.1.1 and v3.7.
Without the patch set RLinf cannot build its env there."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.upstream_lines import activate_line

from .conftest import (
    ACTION_DIM, CHUNK, ENVS, PHYSICS_HZ, applied, check_reset_resets_only_the_selected_env, padded_actions,
    rlinf_warnings,
)


@pytest.fixture(params=["main"])
def line(request, og, monkeypatch):
    """main's texts active until the test ends (skips with the reason where they are absent)."""
    return activate_line(request.param, monkeypatch)


def test_rlinf_builds_the_patch_sets_vector_env_over_mains_environment(patched, behavior_process, caplog):
    from behavior1k_fast.patching.omnigibson.vector_env import MultiSceneVectorEnvironment

    assert patched["multi_scene_vector_env"].state == "applied"
    caplog.set_level(logging.WARNING)
    process, h = behavior_process(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=True)
    assert type(process.env) is MultiSceneVectorEnvironment and h.env.num_envs == ENVS  # one Environment
    assert (process.step_supports_get_obs, process.step_supports_render, process.step_supports_env_indices) == (
        True, True, True,
    )
    assert process.skip_intermediate_obs_in_chunk is True and rlinf_warnings(caplog) == []
    assert [env.scene for env in process.env.envs] == h.env.scenes
    assert [env.config["env"]["physics_frequency"] for env in process.env.envs] == [PHYSICS_HZ / 2] * ENVS


def test_chunk_step_with_env_indices_steps_only_that_env_and_observes_only_at_the_last_step(patched, behavior_process):
    process, h = behavior_process(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=True)
    actions = padded_actions(active=[1])
    before = h.steps()
    h.log.clear()
    obs, rewards, terminations, truncations, infos = process.chunk_step(actions, [1])

    rows = applied(process)
    assert rows[0].shape == rows[2].shape == (0, ACTION_DIM)
    np.testing.assert_allclose(rows[1], actions[1].numpy())  # env 1's rows, every chunk step, in order
    assert h.events("apply") == [1] * CHUNK and len(h.events("task.step")) == CHUNK  # main's task is batched
    assert h.events("sim.step") == [False] * (CHUNK - 1) + [True]  # rendered at the last step only
    last_step = max(i for i, (event, _) in enumerate(h.log) if event == "sim.step")
    reads = [i for i, (event, _) in enumerate(h.log) if event == "sensor.read"]
    assert h.events("sensor.read") == [1] and reads[0] > last_step  # read after the last physics step only
    assert obs[:-1] == (None,) * (CHUNK - 1) and len(obs[-1]) == 1 and obs[-1][0] is not None
    assert [r.tolist() for r in rewards] == [[2.0]] * CHUNK  # env 1's row of the batched task's rewards
    assert all(len(step) == 1 for step in (*terminations, *truncations, *infos))
    assert h.steps() == [before[0], before[1] + CHUNK, before[2]]


def test_chunk_step_without_skip_observes_every_step_of_the_selected_envs(patched, behavior_process):
    process, h = behavior_process(skip_intermediate_obs_in_chunk=False)
    h.log.clear()
    obs, *_ = process.chunk_step(padded_actions(active=[0, 2]), [0, 2])
    assert sorted(h.events("apply")) == [0] * CHUNK + [2] * CHUNK and h.events("sim.step") == [True] * CHUNK
    assert h.events("sensor.read") == [0, 2] * CHUNK and all(len(o) == 2 for o in obs)


def test_reset_with_reset_indices_resets_only_that_env(patched, behavior_process):
    process, h = behavior_process()
    infos = check_reset_resets_only_the_selected_env(process, h, lambda i: [i])  # main's reset takes env_indices
    assert set(infos[0]) == {"obs_info"}


def test_without_the_patches_rlinf_cannot_build_its_env_on_main(behavior_process):
    """The only ``VectorEnvironment`` in reach (1.1.1's here; no stored main text has one) builds one single-scene
    ``Environment(configs, in_vec_env=True)`` per env, which main's multi-scene ``Environment`` does not take."""
    with pytest.raises(TypeError, match="in_vec_env"):
        behavior_process()
