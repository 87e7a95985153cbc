"""Environment / VectorEnvironment stepping patches on the real omnigibson 1.1.1 code, og.sim seam."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackend
from behavior1k_fast.patching import APPLIED, FAILED, PatchError, PatchRegistry
from behavior1k_fast.rollout.chunk import run_chunk

NEW_SIGNATURES = {
    ("Environment", "step"): "(self, action, n_render_iterations=1, get_obs=True, render=True)",
    ("Environment", "_post_step"): "(self, action, get_obs=True)",
    ("VectorEnvironment", "step"): "(self, actions, env_indices=None, get_obs=True, render=True)",
    ("VectorEnvironment", "reset"): "(self, env_indices=None, get_obs=True, **kwargs)",
    ("EnvironmentWrapper", "step"): "(self, action, *args, **kwargs)",
    ("EnvironmentWrapper", "reset"): "(self, *args, **kwargs)",
}


def _classes():
    from omnigibson.envs.env_base import Environment
    from omnigibson.envs.env_wrapper import EnvironmentWrapper
    from omnigibson.envs.vec_env_base import VectorEnvironment

    return {
        "Environment": Environment,
        "VectorEnvironment": VectorEnvironment,
        "EnvironmentWrapper": EnvironmentWrapper,
    }


def test_apply_installs_new_signatures_and_revert_restores_identity(registry, fast_profile):
    classes = _classes()
    originals = {key: classes[key[0]].__dict__[key[1]] for key in NEW_SIGNATURES}
    report = registry.apply(fast_profile)
    assert report["env_step_obs"].state == APPLIED
    assert report["vector_env_step"].state == APPLIED and report["env_wrapper_forwarding"].state == APPLIED
    for (cls, attr), signature in NEW_SIGNATURES.items():
        patched = getattr(classes[cls], attr)
        assert str(inspect.signature(patched)) == signature
        assert patched.__wrapped__ is originals[(cls, attr)]
    registry.revert()
    for (cls, attr), original in originals.items():
        assert classes[cls].__dict__[attr] is original


def test_render_false_runs_sim_step_inside_render_on_step_false(registry, fast_profile, seam, checks):
    registry.apply(fast_profile)
    checks.render_false_steps_physics_only(seam(2))


def test_get_obs_false_reads_no_sensor_and_steps_task_every_step(registry, fast_profile, seam, checks):
    registry.apply(fast_profile)
    checks.no_obs_reads_no_sensor_but_steps_task(seam(2))


def test_env_indices_runs_only_selected_env_and_scopes_scenes(registry, fast_profile, seam, checks):
    registry.apply(fast_profile)
    checks.env_indices_steps_only_selected(seam(3), selected=1)


def test_reset_with_env_indices_resets_only_selected(registry, fast_profile, seam, checks):
    registry.apply(fast_profile)
    checks.reset_resets_only_selected(seam(2), selected=1)


def test_unselected_envs_keep_step_counter_and_action(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2)
    h.venv.step(h.actions([0, 1]))
    h.venv.step(h.actions([1]), env_indices=[1])
    env0, env1 = h.venv.envs
    assert (env0._current_step, env1._current_step) == (1, 2)
    assert len(env0.robots[0].applied) == 1 and len(env1.robots[0].applied) == 2


def test_scoped_step_refreshes_handles_when_views_were_rebuilt(registry, fast_profile, seam, monkeypatch):
    from omnigibson.utils.usd_utils import ControllableObjectViewAPI

    registry.apply(fast_profile)
    h = seam(2)
    monkeypatch.setattr(ControllableObjectViewAPI, "_VIEWS_BY_PATTERN", {})
    rebuild = h.sim.step

    def step_that_rebuilds_views():
        ControllableObjectViewAPI._VIEWS_BY_PATTERN = {}
        rebuild()

    h.sim.step = step_that_rebuilds_views
    h.venv.step(h.actions([0]), env_indices=[0])
    assert h.sim.handle_updates == 1
    h.venv.step(h.actions([0, 1]))  # all envs selected: no scoping, no refresh
    assert h.sim.handle_updates == 1


def test_environment_step_render_false_and_get_obs_false(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2)
    env = h.venv.envs[0]
    post_step = env.__dict__["_post_step"]
    h.log.clear()
    obs, reward, terminated, truncated, info = env.step(h.action(0), get_obs=False, render=False)
    assert obs is None and reward == 1.0 and not terminated and not truncated
    assert info["obs_info"] == {} and env._current_step == 1
    assert h.events("task.step") == [0] and h.events("sensor.read") == []
    assert [render for render, _ in h.events("sim.step")] == [False]
    assert env.__dict__["_post_step"] is post_step and "get_obs" not in env.__dict__  # per-call overrides undone
    obs, *_ = env.step(h.action(0), n_render_iterations=2)
    assert obs is not None and len(h.events("sim.render")) == 1
    with pytest.raises(ValueError, match="n_render_iterations=3.*render=False"):
        env.step(h.action(0), n_render_iterations=3, render=False)
    with pytest.raises(TypeError, match="get_obs must be a bool, got 'no'"):
        env.step(h.action(0), get_obs="no")


def test_automatic_reset_after_skipped_observation_reads_the_new_episode(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2, terminate_at={0: 1})
    env = h.venv.envs[0]
    env._automatic_reset = True
    h.log.clear()
    obs, reward, terminated, truncated, info = env._post_step(h.action(0), get_obs=False)
    assert terminated and info["last_observation"] is None
    assert h.events("task.reset") == [0] and h.events("sensor.read") == [0]  # only the reset's read
    assert obs is not None and "get_obs" not in env.__dict__


def test_wrapper_forwards_step_and_reset_keywords(registry, fast_profile, seam):
    from omnigibson.envs.env_wrapper import EnvironmentWrapper

    registry.apply(fast_profile)
    h = seam(2)
    wrapper = EnvironmentWrapper(h.venv.envs[0])
    h.log.clear()
    obs, *_ = wrapper.step(h.action(0), get_obs=False, render=False)
    assert obs is None and h.events("sensor.read") == []
    assert [render for render, _ in h.events("sim.step")] == [False]
    assert wrapper.reset(get_obs=False) is None and h.events("task.reset") == [0]
    registry.revert()
    with pytest.raises(TypeError):
        wrapper.step(h.action(0), get_obs=False)


@pytest.mark.parametrize(
    "kwargs, rows, error, message",
    [
        ({"env_indices": [1]}, 2, ValueError, r"actions has 2 rows but env_indices=\[1\] selects 1 envs"),
        ({}, 1, ValueError, r"actions has 1 rows but env_indices=None selects 2 envs"),
        ({"env_indices": [2]}, 1, ValueError, r"env_indices=\[2\] out of range for num_envs=2"),
        ({"env_indices": [1, 1]}, 2, ValueError, r"env_indices=\[1, 1\] contains duplicates"),
        ({"env_indices": []}, 0, ValueError, "env_indices must select at least one env"),
        ({"render": 0}, 2, TypeError, "render must be a bool, got 0"),
    ],
)
def test_vector_step_bad_input_names_argument_and_value(registry, fast_profile, seam, kwargs, rows, error, message):
    registry.apply(fast_profile)
    h = seam(2)
    h.log.clear()
    with pytest.raises(error, match=message):
        h.venv.step(h.actions(range(rows)), **kwargs)
    assert h.events("pre_step") == [] and h.events("sim.step") == []


def test_vector_reset_bad_env_indices(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2)
    with pytest.raises(ValueError, match=r"env_indices=\[0, 5\] out of range"):
        h.venv.reset(env_indices=[0, 5])
    assert h.events("task.reset") == []


def test_revert_brings_back_upstream_behaviour(registry, fast_profile, seam, checks):
    registry.apply(fast_profile)
    h = seam(2)
    h.venv.step(h.actions([1]), env_indices=[1], get_obs=False)
    registry.revert()
    checks.reverted_to_upstream(h)
    with pytest.raises(TypeError):  # 1.1.1's reset() takes no arguments
        h.venv.reset(env_indices=[1])


def test_unsupported_layout_fails_and_rolls_back(og, fast_profile, monkeypatch):
    from omnigibson.envs import vec_env_base

    from behavior1k_fast.patching.omnigibson.stepping import EnvironmentStepPatch, VectorEnvironmentStepPatch

    env_cls = _classes()["Environment"]
    step = env_cls.__dict__["step"]
    monkeypatch.delattr(vec_env_base.VectorEnvironment, "reset")
    registry = PatchRegistry([EnvironmentStepPatch(), VectorEnvironmentStepPatch()])
    with pytest.raises(PatchError) as info:
        registry.apply(fast_profile)
    outcome = info.value.report["vector_env_step"]
    assert outcome.state == FAILED and "VectorEnvironment.reset is missing" in outcome.reason
    assert env_cls.__dict__["step"] is step
    assert registry.status() == {}


def test_already_patched_upstream_is_skipped_with_reason(og):
    from behavior1k_fast.patching.omnigibson.stepping import VectorEnvironmentStepPatch

    class Module:
        __name__ = "fork_vec_env_base"

        class VectorEnvironment:
            def step(self, actions, env_indices=None, get_obs=True, render=True): ...

            def reset(self, env_indices=None, get_obs=True, **kwargs): ...

    reason = VectorEnvironmentStepPatch().skip_reason(Module)
    assert reason.startswith("upstream VectorEnvironment already has them: step takes env_indices, get_obs")


def test_wrapper_forwarding_is_skipped_only_when_step_and_reset_both_take_kwargs(og):
    from behavior1k_fast.patching.omnigibson.stepping import EnvironmentWrapperForwardingPatch

    class MainLayout:  # BEHAVIOR-1K main: reset forwards keywords, step only its named ones
        __name__ = "main_env_wrapper"

        class EnvironmentWrapper:
            def step(self, action, n_render_iterations=1, render=True): ...

            def reset(self, **kwargs): ...

    class Forwarding:
        __name__ = "fork_env_wrapper"

        class EnvironmentWrapper:
            def step(self, action, *args, **kwargs): ...

            def reset(self, *args, **kwargs): ...

    patch = EnvironmentWrapperForwardingPatch()
    assert patch.skip_reason(MainLayout) is None
    assert patch.skip_reason(Forwarding) == (
        "upstream EnvironmentWrapper already has them: step takes kwargs; reset takes kwargs"
    )


def test_step_chunk_observes_at_boundary_or_terminal_step_and_masks_ended_env(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2, terminate_at={0: 2})
    steps = 4
    actions = np.stack([np.stack([h.action(i)] * steps) for i in range(2)]).astype(np.float64)
    h.log.clear()
    obs, result = run_chunk(OmniGibsonBackend(h.venv), actions, np.arange(2), auto_reset=False)
    assert result.applied.tolist() == [[True, True, False, False], [True] * 4]
    assert result.rewards.tolist() == [[1.0, 1.0, 0.0, 0.0], [1.0] * 4]
    assert result.terminated[0].tolist() == [False, True, False, False] and not result.terminated[1].any()
    assert len(h.venv.envs[0].robots[0].applied) == 2  # masked actions are not applied
    assert h.events("task.step") == [0, 1, 0, 1, 1, 1]
    assert h.events("sensor.read") == [0, 1]  # env 0 at its terminal step, env 1 at the boundary
    renders = [render for render, _ in h.events("sim.step")]
    assert renders == [False, False, False, True]
    assert obs[0]["robot0::rgb"].shape == (4, 4, 3) and obs[1]["robot0::rgb"][0, 0, 0] == 1.0


def test_step_chunk_stock_path_reads_every_step_with_same_rewards(registry, fast_profile, seam):
    registry.apply(fast_profile)
    h = seam(2, terminate_at={0: 2})
    actions = np.stack([np.stack([h.action(i)] * 3) for i in range(2)]).astype(np.float64)
    h.log.clear()
    _, result = run_chunk(OmniGibsonBackend(h.venv), actions, np.arange(2), skip_intermediate_obs=False,
                          auto_reset=False)
    assert result.rewards.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    assert h.events("sensor.read") == [0, 1, 0, 1, 1]
    assert all(render for render, _ in h.events("sim.step"))


def test_main_multi_scene_environment_is_skipped_with_reason(og):
    from behavior1k_fast.patching.omnigibson.stepping import EnvironmentStepPatch

    class Module:
        __name__ = "main_env_base"

        class Environment:
            def step(self, action, n_render_iterations=1): ...

            def reset(self, env_indices=None, get_obs=True, **kwargs): ...

    reason = EnvironmentStepPatch().skip_reason(Module)
    assert reason.startswith("upstream Environment is main's multi-scene layout (no _post_step)")
