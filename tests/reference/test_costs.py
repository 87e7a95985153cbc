"""BEHAVIOR-like costs: resets that settle their objects with physics, and contact-dependent solver work."""

import mujoco
import numpy as np
import pytest

from behavior1k_fast.backends.reference import ReferenceConfig
from behavior1k_fast.backends.reference.config import BEHAVIOR_CONTACT_ITERATIONS, BEHAVIOR_SETTLE_STEPS
from behavior1k_fast.core.profile import RolloutProfile

from .conftest import hold_actions, make_env

PROPRIO_ONLY = RolloutProfile(obs_modalities=("proprio",))
SETTLE = 60


def object_state(env, e):
    """Positions [n, 3] (env frame) and velocities [n, 6] of env ``e``'s objects."""
    ix = env.index
    pos = env.data.qpos[ix.obj_qpos[e][:, None] + np.arange(3)]
    pos[:, 0] -= ix.origin_x[e]
    return pos, env.data.qvel[ix.obj_dof[e][:, None] + np.arange(6)].copy()


def test_settled_reset_drops_objects_into_place_and_they_come_to_rest():
    placed = make_env(2, seed=4, profile=PROPRIO_ONLY, config=ReferenceConfig(resolution=(16, 16)))
    settled = make_env(2, seed=4, profile=PROPRIO_ONLY,
                       config=ReferenceConfig(resolution=(16, 16), reset_settle_steps=SETTLE))
    assert settled.settle_steps == 2 * SETTLE and placed.settle_steps == 0  # both envs settled at construction
    for e in range(2):
        (p0, v0), (p1, v1) = object_state(placed, e), object_state(settled, e)
        assert not np.array_equal(p0, p1)  # the same sampled cells, then physics moved them
        np.testing.assert_allclose(p1[:, :2], p0[:, :2], atol=0.01)  # fell onto the same cells
        np.testing.assert_allclose(p1[:, 2], p0[:, 2], atol=0.002)  # resting on the table top again
        assert not v0.any()
        assert np.abs(v1[:, :3]).max() < 1e-3  # OmniGibson's settle threshold, m/s
        assert np.abs(v1[:, 3:]).max() < 0.05  # rad/s
        assert settled.predicates([e]).ontop_table.all()


def test_settling_one_reset_leaves_the_other_envs_and_sim_time_alone():
    config = ReferenceConfig(resolution=(16, 16), reset_settle_steps=SETTLE)
    env = make_env(2, seed=4, profile=PROPRIO_ONLY, config=config)
    env.step(hold_actions(env))
    other = env.data.qpos[env.index.obj_qpos[1]].copy()
    t = env.sim_time
    env.reset([0])
    assert env.settle_steps == 3 * SETTLE
    assert env.sim_time == t
    np.testing.assert_array_equal(env.data.qpos[env.index.obj_qpos[1]], other)


def test_settled_resets_are_deterministic():
    config = ReferenceConfig(resolution=(16, 16), reset_settle_steps=SETTLE)
    a, b = (make_env(1, seed=7, profile=PROPRIO_ONLY, config=config) for _ in range(2))
    a.reset(), b.reset()
    np.testing.assert_array_equal(a.data.qpos, b.data.qpos)
    np.testing.assert_array_equal(a.data.qvel, b.data.qvel)


def iterations_of_one_physics_step(num_objects, contact_iterations):
    """Solver iterations summed over the constraint islands, and the islands, of one physics step from a
    state with the objects resting on the table (the same state for every ``contact_iterations``)."""
    state_spec = mujoco.mjtState.mjSTATE_INTEGRATION
    config = ReferenceConfig(resolution=(16, 16), num_objects=num_objects)
    source = make_env(1, seed=2, profile=PROPRIO_ONLY, config=config)
    mujoco.mj_step(source.model, source.data, nstep=8)
    state = np.empty(mujoco.mj_stateSize(source.model, state_spec))
    mujoco.mj_getState(source.model, source.data, state, state_spec)
    env = make_env(1, seed=2, profile=PROPRIO_ONLY,
                   config=ReferenceConfig(resolution=(16, 16), num_objects=num_objects,
                                          contact_iterations=contact_iterations))
    mujoco.mj_setState(env.model, env.data, state, state_spec)
    mujoco.mj_step(env.model, env.data)
    return int(env.data.solver_niter[: env.data.nisland].sum()), int(env.data.nisland)


@pytest.mark.parametrize("num_objects", [4, 20])
def test_contact_iterations_add_that_many_solver_iterations_per_contact_island(num_objects):
    base, islands = iterations_of_one_physics_step(num_objects, 0)
    more, same_islands = iterations_of_one_physics_step(num_objects, 7)
    assert same_islands == islands > 0
    assert more - base == 7 * islands


def test_contact_work_grows_with_the_contacts():
    few = iterations_of_one_physics_step(4, 7)
    many = iterations_of_one_physics_step(20, 7)
    assert many[1] > few[1] and many[0] > few[0]


def test_the_model_carries_the_contact_iterations():
    env = make_env(1, profile=PROPRIO_ONLY, config=ReferenceConfig(resolution=(16, 16), contact_iterations=3))
    assert env.model.opt.noslip_iterations == 3 and env.model.opt.noslip_tolerance == 0.0
    default = make_env(1, profile=PROPRIO_ONLY)
    assert default.model.opt.noslip_iterations == 0


def test_behavior_like_config_turns_both_costs_on_and_takes_overrides():
    config = ReferenceConfig.behavior_like(resolution=(32, 32))
    assert config.reset_settle_steps == BEHAVIOR_SETTLE_STEPS > 0
    assert config.contact_iterations == BEHAVIOR_CONTACT_ITERATIONS > 0
    assert config.resolution == (32, 32)
    assert ReferenceConfig.behavior_like(contact_iterations=0).contact_iterations == 0
    assert ReferenceConfig() == ReferenceConfig(reset_settle_steps=0, contact_iterations=0)
