"""Environment / VectorEnvironment / EnvironmentWrapper stepping patches on the real code of every upstream line
(1.1.1, v3.7, main), og.sim seam (``seam``: a ``VectorEnvironment`` of single-scene ``Environment``\ s). On main
``vector_env_step`` is skipped (its ``Environment`` is multi-scene, no ``VectorEnvironment`` of them): the
tests that step through the seam assert that skip there and stop; main's ``Environment`` is tested in
``test_multi_scene.py``."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackend
from behavior1k_fast.patching import FAILED, SKIPPED, PatchError, PatchRegistry
from behavior1k_fast.rollout.chunk import run_chunk

NEW_SIGNATURES = {
    "env_step_obs": {
        ("Environment", "step"): "(self, action, n_render_iterations=1, render=True, get_obs=True)",
        ("Environment", "_post_step"): "(self, action, get_obs=True)",
    },
    "vector_env_step": {
        ("VectorEnvironment", "step"): "(self, actions, env_indices=None, get_obs=True, render=True)",
        ("VectorEnvironment", "reset"): "(self, get_obs=True, env_indices=None, **kwargs)",
    },
    "env_wrapper_forwarding": {
        ("EnvironmentWrapper", "step"): "(self, action, *args, **kwargs)",
        ("EnvironmentWrapper", "reset"): "(self, *args, **kwargs)",
    },
}
MODULES = {
    "Environment": "omnigibson.envs.env_base",
    "VectorEnvironment": "omnigibson.envs.vec_env_base",
    "EnvironmentWrapper": "omnigibson.envs.env_wrapper",
}


#: Patches that add named parameters (the wrapper patch forwards ``*args, **kwargs`` instead).
KEYWORD_PATCHES = ("env_step_obs", "vector_env_step")


def _class(line, name):
    return getattr(line.module(MODULES[name]), name)


@pytest.mark.parametrize("name", sorted(NEW_SIGNATURES))
def test_apply_installs_new_signatures_and_revert_restores_identity(name, line, registry, patched):
    members = NEW_SIGNATURES[name]
    originals = {key: _class(line, key[0]).__dict__.get(key[1]) for key in members}  # main: no _post_step
    if not patched(name):
        assert all(_class(line, cls).__dict__.get(attr) is originals[(cls, attr)] for cls, attr in members)
        return
    for (cls, attr), signature in members.items():
        original = originals[(cls, attr)]
        if original is None:  # absent on this layout (main's Environment has no _post_step)
            assert attr not in _class(line, cls).__dict__
            continue
        installed = getattr(_class(line, cls), attr)
        while installed.__wrapped__ is not original:  # a later patch wraps it again (main: multi_scene_step)
            installed = installed.__wrapped__
        assert str(inspect.signature(installed)) == signature
    registry.revert()
    for (cls, attr), original in originals.items():
        assert _class(line, cls).__dict__.get(attr) is original


def test_new_parameters_follow_upstream_ones(line, patched):
    """Every parameter upstream's method has keeps its position; new ones come after (positional callers of
    upstream keep working: ``reset(False)`` still means ``get_obs=False`` where upstream has ``get_obs``)."""
    members = {key: _class(line, key[0]).__dict__.get(key[1]) for name in KEYWORD_PATCHES for key in NEW_SIGNATURES[name]}
    upstream = {key: list(inspect.signature(fn).parameters) for key, fn in members.items() if fn is not None}
    patched("env_wrapper_forwarding")  # applies the whole profile
    for (cls, attr), names in upstream.items():
        now = list(inspect.signature(getattr(_class(line, cls), attr)).parameters)
        named = [n for n in names if n != "kwargs"]
        assert now[: len(named)] == named, f"{cls}.{attr} on {line.name}: {names} -> {now}"


def test_render_false_runs_sim_step_inside_render_on_step_false(patched, seam, checks):
    if patched("vector_env_step"):
        checks.render_false_steps_physics_only(seam(2))


def test_render_flag_is_restored_when_the_step_raises(patched, seam):
    if not patched("env_step_obs", "vector_env_step"):
        return
    h = seam(2)

    def failing_step():
        raise RuntimeError("physics blew up")

    h.sim.step = failing_step
    with pytest.raises(RuntimeError, match="physics blew up"):
        h.venv.step(h.actions([1]), env_indices=[1], render=False)
    assert h.sim._render_on_step is True
    with pytest.raises(RuntimeError, match="physics blew up"):
        h.venv.envs[0].step(h.action(0), render=False)
    assert h.sim._render_on_step is True
    assert tuple(id(s) for s in h.sim._scenes) == h.scene_ids(range(2))  # scoping undone too


def test_get_obs_false_reads_no_sensor_and_steps_task_every_step(patched, seam, checks):
    if patched("env_step_obs", "vector_env_step"):
        checks.no_obs_reads_no_sensor_but_steps_task(seam(2))


def test_env_indices_runs_only_selected_env_and_scopes_scenes(patched, seam, checks):
    if patched("vector_env_step"):
        checks.env_indices_steps_only_selected(seam(3), selected=1)


def test_reset_with_env_indices_resets_only_selected(patched, seam, checks):
    if patched("vector_env_step"):
        checks.reset_resets_only_selected(seam(2), selected=1)


def test_automatic_reset_inside_a_scoped_step_stays_scoped(patched, seam):
    """An episode that ends during ``step(env_indices=...)`` is reset inside ``_post_step``; the reset's own
    ``og.sim.step()`` advances only the selected scenes, like the step itself."""
    if not patched("env_step_obs", "vector_env_step"):
        return
    h = seam(3, terminate_at={1: 1})
    h.venv.envs[1]._automatic_reset = True
    h.log.clear()
    obs, rewards, terminated, truncated, infos = h.venv.step(h.actions([1, 2]), env_indices=[1, 2], get_obs=False)
    assert terminated == [True, False] and h.events("task.reset") == [1]
    steps = h.events("sim.step")
    assert len(steps) == 2  # the shared step and the automatic reset's step
    assert all(scenes == h.scene_ids([1, 2]) for _, scenes in steps)
    assert tuple(id(s) for s in h.sim._scenes) == h.scene_ids(range(3))


def test_unselected_envs_keep_step_counter_and_action(patched, seam):
    if not patched("vector_env_step"):
        return
    h = seam(2)
    h.venv.step(h.actions([0, 1]))
    h.venv.step(h.actions([1]), env_indices=[1])
    env0, env1 = h.venv.envs
    assert (env0._current_step, env1._current_step) == (1, 2)
    assert len(env0.robots[0].applied) == 1 and len(env1.robots[0].applied) == 2


def test_scoped_step_refreshes_handles_when_views_were_rebuilt(patched, seam, monkeypatch):
    from omnigibson.utils.usd_utils import ControllableObjectViewAPI

    if not patched("vector_env_step"):
        return
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


UPSTREAM_CALLS = {
    # VectorEnvironment method -> calls without the new parameters (positional and keyword), per line
    "1.1.1": {"reset": [((), {})], "step": [((2,), {})]},
    "v3.7": {
        "reset": [((), {}), ((False,), {}), ((), {"get_obs": False}), ((True,), {"seed": 3})],
        "step": [((2,), {})],
    },
}


def _outcome(h, method, args, kwargs):
    """What a call returns (its structure: types, lengths) and the events it records."""
    if method == "step":
        args = (h.actions(range(args[0])),)
    h.log.clear()
    result = getattr(h.venv, method)(*args, **kwargs)

    def shape(value):
        if isinstance(value, (list, tuple)):
            return type(value).__name__, [shape(v) for v in value]
        return type(value).__name__

    return shape(result), list(h.log)


@pytest.mark.parametrize("method", ["reset", "step"])
def test_calls_without_new_parameters_behave_as_upstream(method, line, patched, seam, registry):
    """``reset(...)`` / ``step(actions)`` without ``env_indices`` or new flags: same return types and the same
    events (resets, sim steps, renders, reads) as the unpatched upstream method."""
    if line.name not in UPSTREAM_CALLS:
        assert not patched("vector_env_step")
        return
    h = seam(2)
    calls = UPSTREAM_CALLS[line.name][method]
    upstream = [_outcome(h, method, args, kwargs) for args, kwargs in calls]
    assert patched("vector_env_step")
    assert [_outcome(h, method, args, kwargs) for args, kwargs in calls] == upstream


def test_reset_with_flags_upstream_cannot_take_resets_every_env(line, patched, seam):
    """1.1.1's ``reset()`` takes no arguments: ``reset(get_obs=False)`` resets every env (as ``env_indices``
    selecting all) and returns the lists; where upstream takes it (v3.7) upstream's own reset runs."""
    if not patched("vector_env_step"):
        return
    h = seam(2)
    h.log.clear()
    result = h.venv.reset(get_obs=False)
    assert h.events("task.reset") == [0, 1] and h.events("sim.step") == []
    assert result == ([None, None], [{}, {}]) if line.is_pypi else result is None


def test_environment_step_render_false_and_get_obs_false(patched, seam):
    if not patched("env_step_obs", "vector_env_step"):  # the VectorEnvironment seam
        return
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
    h.log.clear()
    env.step(h.action(0), 1, False)  # positional: render comes right after n_render_iterations
    assert [render for render, _ in h.events("sim.step")] == [False]
    with pytest.raises(ValueError, match="n_render_iterations=3.*render=False"):
        env.step(h.action(0), n_render_iterations=3, render=False)
    with pytest.raises(TypeError, match="get_obs must be a bool, got 'no'"):
        env.step(h.action(0), get_obs="no")


def ending_env(seam):
    """``(harness, env 0)`` of a 2-env seam whose env 0 ends at its first step, automatic reset on, log cleared."""
    h = seam(2, terminate_at={0: 1})
    env = h.venv.envs[0]
    env._automatic_reset = True
    h.log.clear()
    return h, env


def test_automatic_reset_after_skipped_observation_reads_the_new_episode(patched, seam):
    if not patched("env_step_obs", "vector_env_step"):  # the VectorEnvironment seam
        return
    h, env = ending_env(seam)
    obs, reward, terminated, truncated, info = env._post_step(h.action(0), get_obs=False)
    assert terminated and info["last_observation"] is None
    assert h.events("task.reset") == [0] and h.events("sensor.read") == [0]  # only the reset's read
    assert obs is not None and "get_obs" not in env.__dict__


class RecordingEnv:
    """The env a wrapper holds: records what reaches its ``step`` / ``reset``."""

    def __init__(self) -> None:
        self.calls: list = []

    def step(self, *args, **kwargs):
        self.calls.append(("step", args, kwargs))
        return "stepped"

    def reset(self, *args, **kwargs):
        self.calls.append(("reset", args, kwargs))
        return "reset"


def test_wrapper_forwards_every_argument_to_the_wrapped_env(line, patched, registry):
    wrapper_cls = _class(line, "EnvironmentWrapper")
    env = RecordingEnv()
    wrapper = wrapper_cls(env)
    assert patched("env_wrapper_forwarding")
    assert wrapper.step("a", 2, get_obs=False, render=False) == "stepped"
    assert wrapper.reset(False, env_indices=[1], seed=3) == "reset"
    assert env.calls == [
        ("step", ("a", 2), {"get_obs": False, "render": False}),
        ("reset", (False,), {"env_indices": [1], "seed": 3}),
    ]
    registry.revert()
    with pytest.raises(TypeError):
        wrapper.step("a", get_obs=False)


def test_wrapped_environment_steps_without_observation(patched, seam):
    from omnigibson.envs.env_wrapper import EnvironmentWrapper

    if not patched("env_step_obs", "vector_env_step", "env_wrapper_forwarding"):  # the VectorEnvironment seam
        return
    h = seam(2)
    wrapper = EnvironmentWrapper(h.venv.envs[0])
    h.log.clear()
    obs, *_ = wrapper.step(h.action(0), get_obs=False, render=False)
    assert obs is None and h.events("sensor.read") == []
    assert [render for render, _ in h.events("sim.step")] == [False]
    assert wrapper.reset(get_obs=False) is None and h.events("task.reset") == [0]


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
def test_vector_step_bad_input_names_argument_and_value(patched, seam, kwargs, rows, error, message):
    if not patched("vector_env_step"):
        return
    h = seam(2)
    h.log.clear()
    with pytest.raises(error, match=message):
        h.venv.step(h.actions(range(rows)), **kwargs)
    assert h.events("pre_step") == [] and h.events("sim.step") == []


def test_vector_reset_bad_env_indices(patched, seam):
    if not patched("vector_env_step"):
        return
    h = seam(2)
    with pytest.raises(ValueError, match=r"env_indices=\[0, 5\] out of range"):
        h.venv.reset(env_indices=[0, 5])
    assert h.events("task.reset") == []


def test_revert_brings_back_upstream_behaviour(patched, registry, seam, checks):
    if not patched("env_step_obs", "vector_env_step"):
        return
    h = seam(2)
    h.venv.step(h.actions([1]), env_indices=[1], get_obs=False)
    registry.revert()
    checks.reverted_to_upstream(h)


def test_unsupported_layout_fails_and_rolls_back(line, fast_profile, monkeypatch):
    from behavior1k_fast.patching.omnigibson.env_step import EnvironmentStepPatch
    from behavior1k_fast.patching.omnigibson.vector_env_step import VectorEnvironmentStepPatch

    env_cls = _class(line, "Environment")
    step = env_cls.__dict__["step"]
    monkeypatch.delattr(_class(line, "VectorEnvironment"), "reset")
    registry = PatchRegistry([EnvironmentStepPatch(), VectorEnvironmentStepPatch()])
    if line.name == "main":  # main's multi-scene layout is recognised before the missing method
        report = registry.apply(fast_profile)
        assert report["vector_env_step"].state == SKIPPED and "multi-scene" in report["vector_env_step"].reason
        registry.revert()
        return
    with pytest.raises(PatchError) as info:
        registry.apply(fast_profile)
    outcome = info.value.report["vector_env_step"]
    assert outcome.state == FAILED and "VectorEnvironment.reset is missing" in outcome.reason
    assert env_cls.__dict__["step"] is step
    assert registry.status().outcomes == ()


def test_already_patched_upstream_is_skipped_with_reason(og):
    from behavior1k_fast.patching.omnigibson.vector_env_step import VectorEnvironmentStepPatch

    class Module:
        __name__ = "fork_vec_env_base"

        class VectorEnvironment:
            def step(self, actions, env_indices=None, get_obs=True, render=True): ...

            def reset(self, get_obs=True, env_indices=None, **kwargs): ...

    reason = VectorEnvironmentStepPatch().skip_reason(Module)
    assert reason.startswith("upstream VectorEnvironment already has them: step takes env_indices, get_obs")


def test_wrapper_forwarding_is_skipped_only_when_step_and_reset_both_take_kwargs(og):
    from behavior1k_fast.patching.omnigibson.wrapper_forwarding import EnvironmentWrapperForwardingPatch

    class Forwarding:
        __name__ = "fork_env_wrapper"

        class EnvironmentWrapper:
            def step(self, action, *args, **kwargs): ...

            def reset(self, *args, **kwargs): ...

    assert EnvironmentWrapperForwardingPatch().skip_reason(Forwarding) == (
        "upstream EnvironmentWrapper already has them: step takes kwargs; reset takes kwargs"
    )


def test_step_chunk_observes_at_boundary_or_terminal_step_and_masks_ended_env(patched, seam):
    if not patched("env_step_obs", "vector_env_step"):
        return
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


def test_step_chunk_stock_path_reads_every_step_with_same_rewards(patched, seam):
    if not patched("env_step_obs", "vector_env_step"):
        return
    h = seam(2, terminate_at={0: 2})
    actions = np.stack([np.stack([h.action(i)] * 3) for i in range(2)]).astype(np.float64)
    h.log.clear()
    _, result = run_chunk(OmniGibsonBackend(h.venv), actions, np.arange(2), skip_intermediate_obs=False,
                          auto_reset=False)
    assert result.rewards.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    assert h.events("sensor.read") == [0, 1, 0, 1, 1]
    assert all(render for render, _ in h.events("sim.step"))


def test_render_false_leaves_an_automatic_reset_rendering(patched, seam):
    """``render=False`` is about the step's own ``og.sim.step()``: an automatic reset inside the step renders the
    new episode as upstream does (as the v3.7.2 series' step)."""
    if not patched("env_step_obs", "vector_env_step"):  # the VectorEnvironment seam
        return
    h, env = ending_env(seam)
    env.step(h.action(0), render=False, get_obs=False)
    assert h.events("task.reset") == [0]
    assert [render for render, _ in h.events("sim.step")] == [False, True]
    assert h.sim._render_on_step is True and h.sim.__dict__["step"].__name__ == "recorded"  # own step restored
