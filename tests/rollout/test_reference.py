"""End-to-end engine semantics on the MuJoCo reference simulator."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile, reference
from behavior1k_fast.rollout import RolloutEngine, step_chunk
from behavior1k_fast.core.frequencies import rescale_for_stages

from .helpers import assert_same_trajectories, record

CHUNK = 4
SMALL = dict(resolution=(24, 24), num_objects=2, cameras=("head",))


def factory(horizon):
    return reference.ReferenceFactory(reference.ReferenceConfig(horizon=horizon, **SMALL))


def policy(obs):
    """Deterministic and row-independent (elementwise only), so the batch layout cannot change bits."""
    p = obs["proprio"].astype(np.float64)[:, None, : reference.ACTION_DIM]
    steps = np.arange(1, CHUNK + 1)[None, :, None]
    return np.sin(3.0 * p + 0.4 * steps).astype(np.float32)


def profile(**kw):
    return RolloutProfile.from_dict({"num_env_subprocess": 2, "total_num_envs": 4, "num_action_chunks": CHUNK, **kw})


def test_process_partition_k2_is_bit_identical_to_k1():
    runs = []
    for stages in (1, 2):
        with RolloutEngine(factory(6), profile(pipeline_stage_num=stages, partition="process"), timeout_s=60) as e:
            runs.append(record(e, rounds=4, policy=policy))
    (traj1, _), (traj2, stats) = runs
    assert_same_trajectories(traj1, traj2)
    # horizon 6 with chunks of 4: every episode was truncated inside its second chunk and reset once
    assert stats.episodes.tolist() == [2] * 4
    assert all(t["truncated"][1].tolist() == [False, True, False, False] for t in traj2.values())


@pytest.mark.parametrize("mode", ["divide_physics", "preserve_sim_time"])
def test_hybrid_k2_sim_time_per_own_action_matches_stage_timing(mode):
    base = reference.ReferenceConfig(**SMALL).frequencies
    timing = rescale_for_stages(base, 2, mode)
    with RolloutEngine(factory(1000), profile(pipeline_stage_num=2, physics_rescale=mode), timeout_s=60) as e:
        stats = e.rollout(policy, 3)
    assert stats.own_actions.tolist() == [3 * CHUNK] * 4
    np.testing.assert_allclose(stats.sim_seconds_per_own_action, timing.sim_seconds_per_own_action, rtol=1e-9)
    assert stats.hold_steps_per_round.tolist() == [timing.hold_steps_per_round(CHUNK)] * 4


def test_on_demand_obs_gives_the_stock_rewards_terminations_and_boundary_obs():
    runs = []
    for skip in (True, False):
        with RolloutEngine(factory(6), profile(pipeline_stage_num=2, skip_intermediate_obs_in_chunk=skip),
                           timeout_s=60) as e:
            runs.append(record(e, rounds=3, policy=policy)[0])
    assert_same_trajectories(*runs)


def test_episode_end_inside_chunk_matches_the_stock_path_in_process():
    results = []
    for skip in (True, False):
        env = factory(3)(2, 0, RolloutProfile(chunk_size=CHUNK))
        try:
            env.reset()
            actions = np.full((2, CHUNK, reference.ACTION_DIM), 0.3, np.float32)
            results.append(step_chunk(env, actions, skip_intermediate_obs=skip, auto_reset=True))
        finally:
            env.close()
    fast, stock = results
    assert fast.applied.tolist() == [[True, True, True, False]] * 2
    assert fast.truncated[:, 2].all() and not fast.truncated[:, 3].any()
    assert fast.global_steps.tolist() == [3, 3]  # every env ended: the chunk stopped early
    for a, b in zip(fast.infos, stock.infos):
        assert a["final_info"]["episode_step"] == 3 and a["episode_step"] == 0
        for key in ("head::rgb", "proprio"):
            # the terminal observation rendered on demand equals the one the stock path rendered at step 3
            np.testing.assert_array_equal(a["final_observation"][key], b["final_observation"][key])
    for key in fast.obs:
        np.testing.assert_array_equal(fast.obs[key], stock.obs[key])


@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(seed=-1), "seed must be an int >= 0, got -1"),
        (dict(profile=profile(obs_modalities=["rgb", "flow", "proprio"])),
         "modality 'flow' in obs_modalities is not supported by the reference simulator"),
        (dict(profile=profile(pipeline_stage_num=7, total_num_envs=14)), "stages=7 is impossible"),
    ],
)
def test_what_a_worker_would_reject_is_rejected_in_the_driver_before_any_worker_starts(kwargs, text):
    import psutil

    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError) as info:
        RolloutEngine(factory(1000), kwargs.pop("profile", profile()), **kwargs)
    assert text in str(info.value)
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before
