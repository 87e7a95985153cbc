"""main's multi-scene ``Environment`` (one ``Environment`` owning ``num_envs`` scenes): ``env_step_obs`` and
``multi_scene_step`` on main's real ``env_base.py`` text, og.sim seam (``multi_seam``). On 1.1.1 and v3.7
(single-scene ``Environment``) ``multi_scene_step`` skips with its reason, which each test asserts there."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

ENV_BASE = "omnigibson.envs.env_base"
SIGNATURES = {
    "env_step_obs": "(self, action, n_render_iterations=1, render=True, get_obs=True)",
    "multi_scene_step": "(self, action, n_render_iterations=1, render=True, get_obs=True, env_indices=None)",
}


def on_main(patched) -> bool:
    """Applies the fast profile; True where main's patches apply (else their skips were asserted)."""
    return patched("env_step_obs", "multi_scene_step")


def test_step_takes_render_get_obs_then_env_indices_and_revert_restores_mains_step(line, registry, patched):
    env_cls = line.module(ENV_BASE).Environment
    original = env_cls.__dict__["step"]
    if not on_main(patched):
        assert "_post_step" in env_cls.__dict__  # the single-scene layout
        return
    outer = env_cls.__dict__["step"]  # multi_scene_step over env_step_obs over main's step
    assert str(inspect.signature(outer)) == SIGNATURES["multi_scene_step"]
    assert str(inspect.signature(outer.__wrapped__)) == SIGNATURES["env_step_obs"]
    assert outer.__wrapped__.__wrapped__ is original
    assert "_post_step" not in env_cls.__dict__
    registry.revert()
    assert env_cls.__dict__["step"] is original


@pytest.mark.parametrize("tiled", [False, True], ids=["cameras", "tiled"])
def test_get_obs_false_reads_no_sensor_or_tile_and_still_scores_every_env(tiled, patched, multi_seam, multi_checks):
    if not on_main(patched):
        return
    multi_checks.no_obs_reads_no_sensor_but_steps_task(multi_seam(3, tiled=tiled))
    h = multi_seam(3, terminate_at={2: 1}, tiled=tiled)
    obs, rewards, terminated, truncated, infos = h.env.step(h.rows(range(3)), get_obs=False)
    assert rewards.tolist() == [1.0, 2.0, 3.0] and terminated.tolist() == [False, False, True]
    assert not truncated.any() and [info["episode_length"] for info in infos] == [0, 0, 0]
    assert infos[2]["done"]["termination_conditions"]["success"]["done"] is True
    assert h.events("sensor.read") == [] and h.events("tiled.read") == []


def test_render_false_steps_physics_only(patched, multi_seam, multi_checks):
    if not on_main(patched):
        return
    h = multi_seam(3)
    multi_checks.render_false_steps_physics_only(h)
    t0 = h.sim.current_time
    h.log.clear()
    h.env.step(h.rows([1]), env_indices=[1], render=False, get_obs=False)
    assert h.events("sim.step") == [False] and h.events("sim.render") == []
    assert h.sim.current_time == pytest.approx(t0 + h.sim.sim_step_dt)  # the same simulated time


@pytest.mark.parametrize("tiled", [False, True], ids=["cameras", "tiled"])
def test_env_indices_applies_only_its_rows_and_post_steps_only_its_envs(tiled, patched, multi_seam, multi_checks):
    if not on_main(patched):
        return
    multi_checks.env_indices_steps_only_selected(multi_seam(3, tiled=tiled), selected=1)
    h = multi_seam(3, tiled=tiled, builders=True)
    h.log.clear()
    obs, rewards, terminated, truncated, infos = h.env.step(h.rows([2, 0]), env_indices=[2, 0])
    assert sorted(h.events("apply")) == [0, 2] and sorted(h.events("builder.step")) == [0, 2]
    assert rewards.tolist() == [3.0, 1.0]  # the selected envs' rows, in env_indices order
    assert [o["robot0"]["proprio"][0].item() for o in obs] == [2.0, 0.0]
    assert h.steps() == [1, 0, 1] and [info["episode_length"] for info in infos] == [0, 0]
    robots = [scene.robots[0] for scene in h.env.scenes]
    np.testing.assert_array_equal(robots[2].applied[-1], h.action(2))
    assert [len(r.applied) for r in robots] == [1, 0, 1]


def test_unselected_envs_hold_their_last_action_and_the_task_is_given_it(patched, multi_seam):
    """main's task is batched (it scores every env in one call): it is given the selected rows and, for the
    other envs, the action they hold (zeros before their first); their robots receive nothing."""
    if not on_main(patched):
        return
    h = multi_seam(3)
    h.log.clear()
    h.env.step(h.rows([1]), env_indices=[1])
    first = h.rows(range(3))
    h.env.step(first)
    second = torch.full((1, 2), 0.9)
    h.env.step(second, env_indices=[2])
    given = h.events("task.step")
    assert torch.equal(given[0], torch.stack([torch.zeros(2), first[1], torch.zeros(2)]))
    assert torch.equal(given[1], first)
    assert torch.equal(given[2], torch.stack([first[0], first[1], second[0]]))
    assert h.events("apply") == [1, 0, 1, 2, 2]
    assert h.steps() == [1, 2, 2]


def test_held_actions_live_from_apply_to_revert(registry, patched, multi_seam, fast_profile):
    """The actions the envs hold belong to one installation of the patch: after revert and apply again, an
    env that has not taken an action since is given zeros, not the action it held before the revert."""
    if not on_main(patched):
        return
    h = multi_seam(2)
    first = h.rows(range(2))
    h.env.step(first)
    registry.revert()
    registry.apply(fast_profile)
    h.log.clear()
    h.env.step(h.rows([0]), env_indices=[0])
    (given,) = h.events("task.step")
    assert torch.equal(given, torch.stack([h.rows([0])[0], torch.zeros(2)]))


def test_automatic_reset_inside_a_subset_step_resets_only_selected_envs_that_ended(patched, multi_seam):
    """The batched task reports env 0 ended too, but env 0 is not selected: only env 1 is reset, and its
    reset observation replaces its step observation."""
    if not on_main(patched):
        return
    h = multi_seam(3, terminate_at={0: 1, 1: 1}, automatic_reset=True)
    h.log.clear()
    obs, rewards, terminated, truncated, infos = h.env.step(h.rows([1, 2]), env_indices=[1, 2])
    assert terminated.tolist() == [True, False]
    assert h.events("task.reset") == [[1]]
    assert infos[0]["last_observation"]["robot0"]["proprio"][1].item() == 1.0  # env 1's terminal observation
    assert obs[0] is not None and h.steps() == [0, 1, 1]  # reset to 0, then counted (main's order)
    assert h.env._current_episodes.tolist() == [0, 1, 0]
    h.log.clear()
    obs, _, terminated, _, infos = h.env.step(h.rows([0]), env_indices=[0], get_obs=False)
    assert terminated.tolist() == [True] and h.events("task.reset") == [[0]]
    # get_obs=False: the step reads nothing (no terminal observation); the automatic reset reads env 0's new one
    assert infos[0]["last_observation"] is None and obs[0]["robot0"]["proprio"][0].item() == 0.0
    assert h.events("sensor.read") == [0]


def test_subset_reset_resets_only_those_envs(patched, multi_seam, multi_checks):
    if not on_main(patched):
        return
    multi_checks.reset_resets_only_selected(multi_seam(3), selected=1)


def test_tiled_subset_observation_is_one_tiled_read_equal_to_the_rows_of_a_full_one(patched, multi_seam,
                                                                                   multi_checks):
    if not on_main(patched):
        return
    h = multi_seam(3, tiled=True)
    h.env.step(h.rows(range(3)))
    multi_checks.tiled_subset_equals_rows_of_full(h, selected=(0, 2))
    obs, *_ = h.env.step(h.rows([1]), env_indices=[1])
    assert obs[0]["robot0"]["robot0:eyes:Camera:0"]["rgb"][0, 0, 0].item() == pytest.approx(1 + h.sim.current_time)


@pytest.mark.parametrize(
    "kwargs, rows, error, message",
    [
        ({"env_indices": [1]}, 2, ValueError, r"action has 2 rows but env_indices=\[1\] selects 1 envs"),
        ({"env_indices": [3]}, 1, ValueError, r"env_indices=\[3\] out of range for num_envs=3"),
        ({"env_indices": [1, 1]}, 2, ValueError, r"env_indices=\[1, 1\] contains duplicates"),
        ({"env_indices": []}, 0, ValueError, "env_indices must select at least one env"),
        ({"env_indices": [1], "get_obs": "no"}, 1, TypeError, "get_obs must be a bool, got 'no'"),
        ({"render": 0}, 3, TypeError, "render must be a bool, got 0"),
        ({"render": False, "n_render_iterations": 2}, 3, ValueError, "n_render_iterations=2.*render=False"),
    ],
)
def test_bad_input_names_argument_and_value_before_any_work(patched, multi_seam, kwargs, rows, error, message):
    if not on_main(patched):
        return
    h = multi_seam(3)
    h.log.clear()
    with pytest.raises(error, match=message):
        h.env.step(h.rows(range(rows)) if rows else torch.zeros((0, 2)), **kwargs)
    assert h.events("apply") == [] and h.events("sim.step") == [] and h.steps() == [0, 0, 0]


def test_dict_actions_need_all_envs(patched, multi_seam):
    if not on_main(patched):
        return
    h = multi_seam(2)
    with pytest.raises(TypeError, match="action with env_indices must be array rows"):
        h.env.step([{"robot0": h.action(1)}], env_indices=[1])
    h.log.clear()
    h.env.step([{"robot0": h.action(i)} for i in range(2)], get_obs=False)  # without env_indices: as upstream
    assert h.events("apply") == [0, 1]


UPSTREAM_CALLS = {
    "step": lambda h: h.env.step(h.rows(range(3))),
    "step with renders": lambda h: h.env.step(h.rows(range(3)), 2),
    "reset": lambda h: h.env.reset(),
    "subset reset": lambda h: h.env.reset(env_indices=[2], get_obs=False),
}


@pytest.mark.parametrize("call", sorted(UPSTREAM_CALLS))
@pytest.mark.parametrize("tiled", [False, True], ids=["cameras", "tiled"])
def test_calls_without_new_parameters_behave_as_upstream(call, tiled, line, patched, multi_seam):
    if line.name != "main":
        assert not on_main(patched)
        return
    upstream = [multi_seam(3, tiled=tiled).outcome(UPSTREAM_CALLS[call]) for _ in range(2)]
    assert on_main(patched)
    assert [multi_seam(3, tiled=tiled).outcome(UPSTREAM_CALLS[call]) for _ in range(2)] == upstream


def test_render_flag_is_restored_when_the_step_raises(patched, multi_seam):
    if not on_main(patched):
        return
    h = multi_seam(3)

    def failing_step():
        raise RuntimeError("physics blew up")

    h.sim.step = failing_step
    with pytest.raises(RuntimeError, match="physics blew up"):
        h.env.step(h.rows([1]), env_indices=[1], render=False)
    assert h.sim._render_on_step is True
    robot = h.env.scenes[0].robots[0]
    assert "apply_action" in robot.__dict__ and robot.__dict__["apply_action"].__name__ == "recorded"  # undone
    assert "get_obs" not in h.env.__dict__ and "reset" not in h.env.__dict__


def test_wrapper_forwards_env_indices_to_mains_environment(patched, multi_seam):
    from omnigibson.envs.env_wrapper import EnvironmentWrapper

    if not on_main(patched):
        return
    h = multi_seam(3)
    wrapper = EnvironmentWrapper(h.env)
    h.log.clear()
    obs, rewards, *_ = wrapper.step(h.rows([2]), env_indices=[2], get_obs=False, render=False)
    assert obs == [None] and rewards.tolist() == [3.0] and h.events("apply") == [2]
    assert wrapper.reset(env_indices=[2], get_obs=False) is None and h.events("task.reset") == [[2]]


def test_revert_brings_back_mains_behaviour(patched, registry, multi_seam, multi_checks):
    if not on_main(patched):
        return
    h = multi_seam(3, tiled=True)
    h.env.step(h.rows([1]), env_indices=[1], get_obs=False)
    registry.revert()
    multi_checks.reverted_to_upstream(h)


def test_render_false_leaves_an_automatic_reset_rendering(patched, multi_seam):
    """``render=False`` is about the step's own ``og.sim.step()``: the automatic reset of an env that ends renders
    the new episode as main's ``reset`` does (as ``patches/main``)."""
    if not on_main(patched):
        return
    h = multi_seam(3, terminate_at={1: 1}, automatic_reset=True)
    h.log.clear()
    h.env.step(h.rows([1]), env_indices=[1], render=False, get_obs=False)
    assert h.events("task.reset") == [[1]]
    assert h.events("sim.step") == [False, True] and len(h.events("sim.render")) == 3
    assert h.sim._render_on_step is True and h.sim.__dict__["step"].__name__ == "recorded"  # own step restored


def test_vector_env_over_mains_environment_checks_its_arguments_and_views_each_env(line, patched, seam_og):
    """``multi_scene_vector_env``: ``omnigibson.envs.VectorEnvironment(num_envs, config)`` builds one multi-scene
    ``Environment`` (its config's ``env.num_envs`` set, the caller's config untouched), one-line errors for a bad
    count or a config naming another one, and ``envs[i]`` is env i's scene and robots."""
    import omnigibson.envs

    if not patched("multi_scene_step", "multi_scene_vector_env"):
        return
    vector_env_cls = omnigibson.envs.VectorEnvironment
    config = {"env": {"automatic_reset": False}}
    venv = vector_env_cls(3, config)
    assert config == {"env": {"automatic_reset": False}} and venv.env.num_envs == len(venv) == 3
    assert [view.scene for view in venv.envs] == venv.env.scenes
    assert [view.robots for view in venv.envs] == [scene.robots for scene in venv.env.scenes]
    assert venv.envs[1].task is venv.env.task  # main's task is batched: shared
    with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
        vector_env_cls(0, config)
    with pytest.raises(ValueError, match=r"config env.num_envs=2 differs from num_envs=3"):
        vector_env_cls(3, {"env": {"num_envs": 2}})
