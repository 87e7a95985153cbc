"""Simulated time per step and per own action for K stages under every physics-rescale mode."""

import pytest

from behavior1k_fast.core.profile import PHYSICS_RESCALE_MODES, RolloutProfile
from behavior1k_fast.backends.reference import ReferenceConfig
from behavior1k_fast.core.frequencies import rescale_for_stages

from .conftest import hold_actions, make_env

TINY = ReferenceConfig(resolution=(16, 16), num_objects=2)


@pytest.mark.parametrize("mode", PHYSICS_RESCALE_MODES)
@pytest.mark.parametrize("stages", [1, 2])
def test_sim_time_advances_by_the_rescaled_step(stages, mode):
    profile = RolloutProfile(pipeline_stages=stages, physics_rescale=mode, obs_modalities=("proprio",))
    env = make_env(stages, profile=profile, config=TINY)
    expected = rescale_for_stages(TINY.frequencies, stages, mode)
    assert env.timing == expected and env.frequencies == expected.frequencies
    assert env.model.opt.timestep == pytest.approx(1 / expected.frequencies.physics_hz)
    step_dt = {"none": 1 / 30, "divide_physics": 1 / 30, "preserve_sim_time": 1 / (30 * stages)}[mode]
    assert expected.frequencies.sim_step_dt == pytest.approx(step_dt)
    # Hybrid partition: each env is its own slice; the stages take turns, one env stepping at a time.
    rounds = 3
    for _ in range(rounds):
        for e in range(stages):
            before = env.sim_time
            env.step(hold_actions(env, [e]), env_indices=[e], get_obs=False, render=False)
            assert env.sim_time - before == pytest.approx(step_dt, rel=1e-9)
    # Per own action, every env lived K global steps: the StageTiming statement, read off MjData.time.
    assert env.sim_time == pytest.approx(rounds * expected.sim_seconds_per_own_action, rel=1e-9)
    assert round(env.sim_time / env.model.opt.timestep) == rounds * expected.physics_substeps_per_own_action
