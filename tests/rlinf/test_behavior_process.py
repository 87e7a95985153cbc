"""RLinf 0.3.0's ``BehaviorProcess`` on stock OmniGibson 1.1.1 with and without the patch set: with it, RLinf
finds ``get_obs``, ``render`` and ``env_indices`` and uses them (no fork of BEHAVIOR-1K needed); without
it, RLinf falls back to stepping every env every step, and its reset of one env raises (1.1.1) or resets
every env (v3.7)."""

from __future__ import annotations

import inspect
import logging

import numpy as np
import pytest

from .conftest import (
    ACTION_DIM, CHUNK, ENVS, FALLBACK_WARNINGS, PHYSICS_HZ, applied, check_reset_resets_only_the_selected_env,
    padded_actions, rlinf_warnings,
)


def step_renders(h) -> list[bool]:
    return [render for render, _ in h.events("sim.step")]


def test_rlinf_detects_get_obs_render_and_env_indices_on_the_patched_vector_env(patched, behavior_process, caplog):
    caplog.set_level(logging.WARNING)
    process, _ = behavior_process(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=True)
    assert (process.step_supports_get_obs, process.step_supports_render, process.step_supports_env_indices) == (
        True, True, True,
    )
    assert process.skip_intermediate_obs_in_chunk is True and rlinf_warnings(caplog) == []
    # RLinf divides the physics frequency by the stage count itself (our divide_physics rescale is not a patch)
    assert [env.config["env"]["physics_frequency"] for env in process.env.envs] == [PHYSICS_HZ / 2] * ENVS


def test_chunk_step_with_env_indices_steps_only_that_env_and_observes_only_at_the_last_step(patched, behavior_process):
    process, h = behavior_process(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=True)
    actions = padded_actions(active=[1])
    h.log.clear()
    obs, rewards, terminations, truncations, infos = process.chunk_step(actions, [1])

    rows = applied(process)
    assert rows[0].shape == rows[2].shape == (0, ACTION_DIM)
    np.testing.assert_allclose(rows[1], actions[1].numpy())  # env 1's rows, every chunk step, in order
    assert h.events("pre_step") == h.events("post_step") == h.events("task.step") == [1] * CHUNK
    assert [scenes for _, scenes in h.events("sim.step")] == [h.scene_ids([1])] * CHUNK
    assert step_renders(h) == [False] * (CHUNK - 1) + [True]  # rendered at the last step only
    last_step = max(i for i, (event, _) in enumerate(h.log) if event == "sim.step")
    reads = [i for i, (event, _) in enumerate(h.log) if event == "sensor.read"]
    assert h.events("sensor.read") == [1] and reads[0] > last_step  # read after the last physics step only
    assert obs[:-1] == (None,) * (CHUNK - 1) and len(obs[-1]) == 1 and obs[-1][0] is not None
    assert [r.tolist() for r in rewards] == [[1.0]] * CHUNK
    assert all(len(step) == 1 for step in (*terminations, *truncations, *infos))


def test_chunk_step_without_skip_observes_every_step_of_the_selected_env(patched, behavior_process):
    process, h = behavior_process(skip_intermediate_obs_in_chunk=False)
    h.log.clear()
    obs, *_ = process.chunk_step(padded_actions(active=[0, 2]), [0, 2])
    assert h.events("post_step") == [0, 2] * CHUNK and step_renders(h) == [True] * CHUNK
    assert h.events("sensor.read") == [0, 2] * CHUNK and all(len(o) == 2 for o in obs)


def test_reset_with_reset_indices_resets_only_that_env(patched, behavior_process):
    process, h = behavior_process()
    check_reset_resets_only_the_selected_env(process, h, lambda i: i)


def test_without_the_patches_rlinf_falls_back_to_stepping_every_env(behavior_process, caplog):
    caplog.set_level(logging.WARNING)
    process, h = behavior_process(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=True)
    assert (process.step_supports_get_obs, process.step_supports_render, process.step_supports_env_indices) == (
        False, False, False,
    )
    warnings = rlinf_warnings(caplog)
    assert len(warnings) == 2 and all(w.startswith(prefix) for w, prefix in zip(warnings, FALLBACK_WARNINGS))

    actions = padded_actions(active=[1])
    h.log.clear()
    obs, rewards, *_ = process.chunk_step(actions, [1])
    rows = applied(process)
    np.testing.assert_allclose(rows[1], actions[1].numpy())
    np.testing.assert_array_equal(rows[0], np.zeros((CHUNK, ACTION_DIM)))  # zero actions advance the others
    np.testing.assert_array_equal(rows[2], np.zeros((CHUNK, ACTION_DIM)))
    assert h.events("post_step") == [0, 1, 2] * CHUNK and step_renders(h) == [True] * CHUNK
    assert h.events("sensor.read") == [0, 1, 2] * CHUNK  # every env observed at every step, then dropped
    assert obs[:-1] == (None,) * (CHUNK - 1) and len(obs[-1]) == 1
    assert [r.tolist() for r in rewards] == [[1.0]] * CHUNK

    h.log.clear()
    if "kwargs" in inspect.signature(type(process.env).reset).parameters:
        process.reset(reset_indices=[2])  # v3.7 passes env_indices on to every env: the reset-all trap
        assert h.events("task.reset") == [0, 1, 2]
    else:
        with pytest.raises(TypeError, match="unexpected keyword argument"):  # 1.1.1's reset() takes none
            process.reset(reset_indices=[2])
