"""Same seed and actions give identical observations and rewards; stock and slim modes agree."""

import numpy as np

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig
from behavior1k_fast.backends.reference.expert import expert_actions

from .conftest import make_env, random_actions


def rollout(env, actions):
    out = [env.reset()[0]]
    for acts in actions:
        out.append(env.step(acts))
    return out


def assert_same_obs(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_same_seed_and_actions_give_identical_results():
    profile = RolloutProfile.stock()
    a, b = make_env(seed=5, profile=profile), make_env(seed=5, profile=profile)
    rng = np.random.default_rng(0)
    actions = [random_actions(rng, 2, a) for _ in range(8)]
    ra, rb = rollout(a, actions), rollout(b, actions)
    for obs_a, obs_b in zip(ra[0], rb[0]):
        assert_same_obs(obs_a, obs_b)
    for sa, sb in zip(ra[1:], rb[1:]):
        for obs_a, obs_b in zip(sa[0], sb[0]):
            assert_same_obs(obs_a, obs_b)
        for x, y in zip(sa[1:4], sb[1:4]):
            np.testing.assert_array_equal(x, y)
    assert a.sim_time == b.sim_time


def test_resets_depend_on_seed_env_and_reset_count():
    a, b, c = make_env(seed=1), make_env(seed=1), make_env(seed=2)
    objs = lambda env, e: env.data.qpos[env.index.obj_qpos[e]].copy()  # noqa: E731
    np.testing.assert_array_equal(objs(a, 0), objs(b, 0))
    assert not np.array_equal(objs(a, 0), objs(c, 0))  # seed
    assert not np.allclose(objs(a, 0) - a.index.origin_x[0], objs(a, 1) - a.index.origin_x[1])  # env id
    first = objs(a, 0)
    a.reset([0])
    np.testing.assert_array_equal(objs(a, 0), first)  # the first reset reproduces the initial state
    a.reset([0])
    b.reset([0]), b.reset([0])
    assert not np.array_equal(objs(a, 0), first)  # reset count
    np.testing.assert_array_equal(objs(a, 0), objs(b, 0))


def test_stock_and_slim_modes_give_identical_rewards_and_terminations():
    config = ReferenceConfig(resolution=(32, 32), num_objects=6)
    stock = make_env(1, seed=3, profile=RolloutProfile.stock(), config=config)
    slim = make_env(1, seed=3, profile=RolloutProfile(), config=config)
    assert all(stock.stock_costs.values()) and not any(slim.stock_costs.values())
    ended = False
    for step in range(400):
        acts = expert_actions(stock)
        rs = stock.step(acts)  # stock: render and read every step
        rf = slim.step(acts, get_obs=False, render=False)  # slim: physics, reward, termination only
        for x, y in zip(rs[1:4], rf[1:4]):
            np.testing.assert_array_equal(x, y)
        assert rs[4] == rf[4]
        if rs[2][0]:
            ended = True
            break
    assert ended, "the expert should finish within 400 steps"
    assert stock.render_count == 3 * (step + 1) and slim.render_count == 0  # three cameras
    # the slim boundary observation equals the stock one for the keys both have
    slim_obs = slim.observe()[0]
    np.testing.assert_array_equal(slim_obs["head::rgb"], rs[0][0]["head::rgb"])
    np.testing.assert_array_equal(slim_obs["proprio"], rs[0][0]["proprio"])
