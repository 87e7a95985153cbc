"""Backend-contract semantics of ReferenceVectorEnv: env_indices, get_obs, render, reset, observe."""

import os
import pickle

import numpy as np
import pytest

from behavior1k_fast.core.contract import VectorBackend
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceFactory, ReferenceVectorEnv

from .conftest import SMALL, hold_actions, make_env, random_actions


def env_state(env, e):
    """(qpos, qvel) of every joint of env ``e``."""
    ix = env.index
    qadr = np.concatenate([ix.base_qpos[e], ix.arm_qpos[e].ravel(), (ix.obj_qpos[e][:, None] + np.arange(7)).ravel()])
    return env.data.qpos[qadr].copy(), env.data.qvel[env._env_dofs[e]].copy()


def test_is_a_vector_backend_with_matching_spaces(env):
    assert isinstance(env, VectorBackend)
    obs, infos = env.reset()
    assert len(obs) == env.num_envs == len(infos)
    space = env.observation_space
    for o in obs:
        assert set(o) == set(space.spaces)
        for key, value in o.items():
            assert value.shape == space[key].shape, key
            assert value.dtype == space[key].dtype, key
            assert space[key].contains(value), key
    assert {"head::rgb", "left_wrist::depth", "right_wrist::seg_instance", "proprio"} <= set(space.spaces)
    assert env.action_space.shape == (11,) and env.action_space.dtype == np.float32


def test_slim_profile_has_only_the_requested_keys():
    env = make_env(profile=RolloutProfile(obs_modalities=("rgb", "proprio")))
    assert set(env.observation_space.spaces) == {"head::rgb", "left_wrist::rgb", "right_wrist::rgb", "proprio"}
    env.step(hold_actions(env))
    assert env.viewport_count == 0
    assert env.stock_costs == {"all_modalities": False, "viewport_render_targets": False, "render_every_step": False}


def test_only_selected_envs_take_actions_and_get_post_step_work(env):
    rng = np.random.default_rng(0)
    held = env.last_actions
    ctrl_before = env.data.ctrl.copy()
    acts = random_actions(rng, 1, env)
    obs, rewards, terminated, truncated, infos = env.step(acts, env_indices=[1])
    assert len(obs) == len(rewards) == len(terminated) == len(truncated) == len(infos) == 1
    assert rewards.dtype == np.float64 and terminated.dtype == bool and truncated.dtype == bool
    assert infos[0]["episode_step"] == 1
    np.testing.assert_array_equal(env.last_actions[0], held[0])
    np.testing.assert_array_equal(env.last_actions[1], acts[0])
    ctrl = env.data.ctrl
    env0 = slice(env.index.ctrl_start[0], env.index.ctrl_start[0] + 13)
    env1 = slice(env.index.ctrl_start[1], env.index.ctrl_start[1] + 13)
    np.testing.assert_array_equal(ctrl[env0], ctrl_before[env0])
    assert not np.array_equal(ctrl[env1], ctrl_before[env1])
    # env 0 took no own action: its episode counter did not move, the next own step is its first.
    assert env.step(held[:1], env_indices=[0])[4][0]["episode_step"] == 1


def test_rows_follow_env_indices_order(env):
    rng = np.random.default_rng(1)
    acts = random_actions(rng, 2, env)
    env.step(acts, env_indices=[1, 0])
    np.testing.assert_array_equal(env.last_actions[1], acts[0])
    np.testing.assert_array_equal(env.last_actions[0], acts[1])


def test_actions_outside_the_box_are_clipped(env):
    acts = np.full((2, 11), 5.0, np.float32)
    acts[1] = -3.0
    env.step(acts, get_obs=False, render=False)
    np.testing.assert_array_equal(env.last_actions, np.clip(acts, -1, 1))


def test_get_obs_false_gives_none_and_the_same_rewards():
    a, b = make_env(), make_env()
    rng = np.random.default_rng(2)
    for _ in range(5):
        acts = random_actions(rng, 2, a)
        ra = a.step(acts, get_obs=True)
        rb = b.step(acts, get_obs=False)
        assert rb[0] == [None, None]
        assert all(isinstance(o, dict) for o in ra[0])
        for x, y in zip(ra[1:4], rb[1:4]):
            np.testing.assert_array_equal(x, y)
        assert ra[4] == rb[4]


def test_render_false_renders_nothing_and_reads_the_last_frames(env):
    first = env.observe()
    count = env.render_count
    assert count == 2 * 3
    for _ in range(3):
        obs = env.step(random_actions(np.random.default_rng(3), 2, env), render=False)[0]
    assert env.render_count == count
    np.testing.assert_array_equal(obs[0]["head::rgb"], first[0]["head::rgb"])
    assert not np.array_equal(obs[0]["proprio"], first[0]["proprio"])  # proprio is read live
    env.step(hold_actions(env, [0]), env_indices=[0], render=True, get_obs=False)
    assert env.render_count == count + 3  # one env, three cameras
    assert env.viewport_count == env.render_count  # stock: one discarded viewport frame per camera frame


def test_observe_does_not_step(env):
    t = env.sim_time
    before = env_state(env, 0)
    obs = env.observe([1, 0])
    assert env.sim_time == t
    np.testing.assert_array_equal(env_state(env, 0)[0], before[0])
    assert len(obs) == 2 and set(obs[0]) == set(env.observation_space.spaces)


def test_reset_of_a_subset_leaves_other_envs_untouched(env):
    rng = np.random.default_rng(4)
    for _ in range(4):
        env.step(random_actions(rng, 2, env), get_obs=False, render=False)
    other = env_state(env, 1)
    held = env.last_actions[1]
    obs, infos = env.reset([0])
    assert len(obs) == 1 and infos[0]["episode"] == 0  # the first reset reproduces the initial state
    for x, y in zip(env_state(env, 1), other):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(env.last_actions[1], held)
    # env 0 is back at rest with a fresh episode
    assert np.all(env_state(env, 0)[1] == 0)
    assert env.step(hold_actions(env, [0, 1]), get_obs=False)[4][0]["episode_step"] == 1


def test_closed_env_refuses_calls(env):
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(hold_actions(env))
    env.close()  # idempotent


def test_factory_is_picklable_and_builds_the_env():
    factory = pickle.loads(pickle.dumps(ReferenceFactory(SMALL)))
    env = factory(2, 7, RolloutProfile(pipeline_stages=2))
    assert isinstance(env, ReferenceVectorEnv)
    assert env.num_envs == 2 and env.seed == 7 and env.config == SMALL
    assert env.frequencies.physics_hz == 60  # divide_physics with K = 2


def test_rendering_in_a_forked_child_raises(env):
    env.observe()  # GL context now exists in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must refuse to touch the parent's GL context
        try:
            env.observe()
            msg = b"no error"
        except RuntimeError as exc:
            msg = b"RuntimeError: " + str(exc).encode()[:200]
        except BaseException as exc:  # noqa: BLE001 - report anything else to the parent
            msg = type(exc).__name__.encode()
        os.write(write, msg)
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    msg = os.read(read, 400).decode()
    os.close(read)
    assert msg.startswith("RuntimeError") and "never fork" in msg, msg


@pytest.mark.parametrize(
    "knob, stock_value, switch",
    [
        ("obs_modalities", None, "all_modalities"),
        ("remove_headless_viewports", False, "viewport_render_targets"),
        ("skip_intermediate_obs", False, "render_every_step"),
    ],
)
def test_each_stock_cost_follows_its_own_profile_knob(knob, stock_value, switch):
    from behavior1k_fast.backends.reference import STOCK_COSTS

    assert STOCK_COSTS[switch] == knob
    env = make_env(1, profile=RolloutProfile().replace(**{knob: stock_value}))
    assert env.stock_costs == {name: name == switch for name in STOCK_COSTS}
    env.observe()
    assert env.viewport_count == (3 if switch == "viewport_render_targets" else 0)
    assert len(env.observation_space.spaces) == (6 * 3 + 1 if switch == "all_modalities" else 3 + 1)
