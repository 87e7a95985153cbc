"""End-to-end engine runs over spawned worker processes."""

import numpy as np
import psutil
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine

from .helpers import CHUNK, assert_gone, our_segments, policy, record
from .pointmass import PointMassFactory

TIMEOUT = 30.0


def profile(**kw):
    base = dict(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=1)
    base.update(kw)
    return RolloutProfile.from_dict(base)


def engine(factory=None, **kw):
    opts = {k: kw.pop(k) for k in ("restart_workers", "auto_reset", "executor") if k in kw}
    return RolloutEngine(factory or PointMassFactory(episode_lengths=(7, 10, 5, 9)), profile(**kw), timeout_s=TIMEOUT, **opts)


def test_process_partition_k2_is_bit_identical_to_k1():
    with engine(pipeline_stages=1) as e1:
        traj1, _ = record(e1, rounds=6)
    with engine(pipeline_stages=2, partition="process") as e2:
        assert [s.worker for s in e2.plan.stage_slices(1)] == [1]
        traj2, stats = record(e2, rounds=6)
    assert sorted(traj1) == sorted(traj2) == [0, 1, 2, 3]
    for env in traj1:
        for key in ("proprio", "rgb", "rewards", "terminated"):
            np.testing.assert_array_equal(traj1[env][key], traj2[env][key], err_msg=f"env {env} {key}")
    # episodes of length 5..10 ended inside chunks of 4 and were reset (6 rounds x 4 actions each)
    assert stats.episodes.sum() > 4
    assert np.all(stats.hold_steps_per_round >= 0)


@pytest.mark.parametrize("mode", ["divide_physics", "preserve_sim_time"])
def test_hybrid_k2_sim_time_per_own_action_matches_stage_timing(mode):
    factory = PointMassFactory(episode_lengths=(1000,))
    with engine(factory, pipeline_stages=2, partition="hybrid", physics_rescale=mode) as e:
        stats = e.rollout(policy, 5)
    timing = factory.timing(2, mode)
    assert stats.own_actions.tolist() == [5 * CHUNK] * 4
    np.testing.assert_allclose(stats.sim_seconds_per_own_action, timing.sim_seconds_per_own_action, rtol=1e-12)
    assert stats.hold_steps_per_round.tolist() == [timing.hold_steps_per_round(CHUNK)] * 4


def test_auto_reset_and_stage_results_cross_the_process_boundary():
    factory = PointMassFactory(episode_lengths=(3,))
    with engine(factory, pipeline_stages=2) as e:
        obs = e.reset()
        assert [o["head::rgb"].shape for o in obs] == [(2, 3, 8, 8)] * 2
        result = e.step(1, np.zeros((2, CHUNK, 2), np.float32))
        assert result.env_ids.tolist() == e.stage_envs(1).tolist() == [1, 3]
        assert result.applied.tolist() == [[True, True, True, False]] * 2
        for info in result.infos:
            assert info["final_info"]["episode_step"] == 3
            # construction and reset() made episode 2; the auto-reset starts episode 3
            assert info["final_observation"]["head::rgb"][2, 0, 0] == 2
        assert np.all(result.obs["head::rgb"][:, 2] == 3)
        np.testing.assert_array_equal(e.stage_obs(1)["proprio"], result.obs["proprio"])


def test_on_demand_and_full_obs_engines_agree():
    runs = []
    for skip in (True, False):
        with engine(skip_intermediate_obs_in_chunk=skip, pipeline_stages=2) as e:
            runs.append(record(e, rounds=4)[0])
    for env in runs[0]:
        for key in ("rewards", "terminated", "proprio"):
            np.testing.assert_array_equal(runs[0][env][key], runs[1][env][key])


def test_close_leaves_no_children_and_no_shared_memory():
    e = engine(pipeline_stages=2)
    pids = e.worker_pids
    assert len(pids) == 2 and len(our_segments()) == 2
    e.rollout(policy, 2)
    e.close()
    e.close()
    children = {c.pid for c in psutil.Process().children(recursive=True)}
    assert not children & set(pids)
    assert our_segments() == []
    with pytest.raises(RuntimeError, match="closed"):
        e.reset()
