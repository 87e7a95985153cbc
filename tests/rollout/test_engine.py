"""Engine runs over spawned worker processes on the point-mass backend (episode ids visible in frames)."""

import numpy as np
import psutil
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import ClosedError, RolloutEngine

from .helpers import CHUNK, assert_same_trajectories, our_segments, policy, record, traced
from .pointmass import PointMassFactory

TIMEOUT = 30.0


def profile(**kw):
    base = dict(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=1)
    base.update(kw)
    return RolloutProfile.from_dict(base)


def engine(factory=None, **kw):
    opts = {k: kw.pop(k) for k in ("restart_workers", "auto_reset", "executor") if k in kw}
    return RolloutEngine(factory or PointMassFactory(episode_lengths=(7, 10, 5, 9)), profile(**kw), timeout_s=TIMEOUT, **opts)


def test_auto_reset_and_stage_results_cross_the_process_boundary():
    factory = PointMassFactory(episode_lengths=(3,))
    with engine(factory, pipeline_stages=2) as e:
        obs = e.reset()
        assert [o["head::rgb"].shape for o in obs] == [(2, 3, 8, 8)] * 2
        result = e.step(1, np.zeros((2, CHUNK, 2), np.float32))
        assert result.env_ids.tolist() == e.plan.stage_envs(1).tolist() == [1, 3]
        assert result.applied.tolist() == [[True, True, True, False]] * 2
        for info in result.infos:
            assert info["final_info"]["episode_step"] == 3
            # construction and reset() made episode 2; the auto-reset starts episode 3
            assert info["final_observation"]["head::rgb"][2, 0, 0] == 2
        assert np.all(result.obs["head::rgb"][:, 2] == 3)
        np.testing.assert_array_equal(e.stage_obs(1)["proprio"], result.obs["proprio"])


def test_close_leaves_no_children_and_no_shared_memory():
    e = engine(pipeline_stages=2)
    pids = e.worker_pids
    assert len(pids) == 2 and len(our_segments()) == 6  # observations, actions and progress per worker
    e.rollout(policy, 2)
    e.close()
    e.close()
    children = {c.pid for c in psutil.Process().children(recursive=True)}
    assert not children & set(pids)
    assert our_segments() == []
    with pytest.raises(RuntimeError, match="closed"):
        e.reset()


def test_without_auto_reset_the_driver_resets_chosen_envs():
    factory = PointMassFactory(episode_lengths=(3, 1000, 1000, 1000))
    with engine(factory, pipeline_stages=2, auto_reset=False) as e:
        e.reset()
        before = {k: v.copy() for k, v in e.stage_obs(1).items()}
        result = e.step(0, np.zeros((2, CHUNK, 2), np.float32))
        assert result.terminated[0].tolist() == [False, False, True, False]
        assert "final_observation" not in result.infos[0]
        assert result.obs["head::rgb"][0, 2, 0, 0] == 2  # still episode 2: not reset
        obs = e.reset(env_ids=[0])
        assert obs[0]["head::rgb"][0, 2, 0, 0] == 3 and obs[0]["head::rgb"][1, 2, 0, 0] == 2
        np.testing.assert_array_equal(result.obs["head::rgb"][0, 2], 2)  # the returned result is untouched
        for key in before:
            np.testing.assert_array_equal(obs[1][key], before[key])  # stage 1 untouched


def test_profiler_spans_from_workers_reach_the_driver():
    from behavior1k_fast.core.tracing import IPC, MODEL_FORWARD, WAIT

    with traced() as profiler:
        with engine(pipeline_stages=2) as e:
            stats = e.rollout(policy, 2)
            pids = set(e.worker_pids)
        # each worker timed writing its boundary observations and shipped the span back
        worker_ipc = {s[3] for s in profiler.spans if s[0] == IPC and s[5]["command"] == "write_obs"}
    assert {IPC, WAIT, MODEL_FORWARD} <= set(stats.stage_timings)
    assert stats.stage_timings[MODEL_FORWARD]["count"] == 4
    assert worker_ipc == pids


def test_workers_apply_the_profile_before_importing_the_factory_module():
    from .import_probe import ProbeFactory

    # the worker's profile has the hybrid stage count, so the backend can rescale its physics
    with RolloutEngine(ProbeFactory(), profile(pipeline_stages=2, gc_enable=False), timeout_s=TIMEOUT) as e:
        assert e.rollout(policy, 1).own_actions.sum() == 4 * CHUNK


def test_big_chunks_and_final_observations_never_block_the_pipe():
    # 2 MB of actions per stage chunk and 786 kB terminal frames in every reply: far beyond a pipe's
    # buffer; a design that pickles them through the pipe deadlocks here (both sides blocked in send)
    factory = PointMassFactory(episode_lengths=(2,), image_size=512, action_dim=65536)

    def wide(obs):
        return np.zeros((len(obs["proprio"]), CHUNK, 65536), np.float32)

    with RolloutEngine(factory, profile(pipeline_stages=2), timeout_s=20) as e:
        stats = e.rollout(wide, 3)
    assert stats.episodes.tolist() == [3] * 4  # one per chunk, reset at its boundary


@pytest.mark.parametrize("partition", ["hybrid", "process"])
def test_rollout_without_overlap_gives_the_same_trajectories(partition):
    runs = []
    for overlap in (True, False):
        with engine(pipeline_stages=2, partition=partition) as e:
            runs.append(record(e, 5, overlap=overlap))
    (traj_on, stats_on), (traj_off, stats_off) = runs
    assert_same_trajectories(traj_on, traj_off)
    # episodes of 7, 10, 5 and 9 actions over 5 chunks of 4: every env ended one inside a chunk
    assert stats_off.episodes.tolist() == stats_on.episodes.tolist() == [2, 1, 2, 1]
    np.testing.assert_array_equal(stats_off.chunks_per_worker, stats_on.chunks_per_worker)


def test_stats_report_each_workers_env_time():
    with engine(pipeline_stages=2) as e:
        stats = e.rollout(policy, 3)
    assert stats.chunks_per_worker.tolist() == [6, 6]  # hybrid: one slice of each worker per stage
    assert np.all(stats.env_wall_seconds_per_worker > 0)
    # the workers step inside the driver's timed loop
    assert stats.env_wall_seconds_per_worker.max() <= stats.wall_seconds
    np.testing.assert_allclose(stats.env_wall_seconds_per_chunk, stats.env_wall_seconds_per_worker / 6)
    d = stats.to_dict()
    assert d["env_wall_seconds_per_worker"] == stats.env_wall_seconds_per_worker.tolist()
    assert d["env_wall_seconds_per_chunk"] == stats.env_wall_seconds_per_chunk.tolist()
    assert d["chunks_per_worker"] == [6, 6]


def test_rollout_flags_must_be_bools():
    with engine(pipeline_stages=2) as e:
        for name in ("overlap", "reset"):
            with pytest.raises(TypeError, match=f"{name} must be a bool, got 'no'"):
                e.rollout(policy, 1, **{name: "no"})
        assert e.rollout(policy, 1).own_actions.sum() == 4 * CHUNK  # still usable


def test_the_engine_has_the_users_face_only():
    """The engine's public names (class and instance) are the user's: about 20, none of the driver face
    (issue 29: 32 before), and the driver's are not reachable through it."""
    import numpy as np

    from behavior1k_fast.rollout.driver import EngineDriver

    profile = RolloutProfile(num_env_processes=1, total_num_envs=2, chunk_size=2)
    with RolloutEngine(PointMassFactory(), profile, executor="inline") as engine:
        names = {n for n in dir(engine) if not n.startswith("_")}
        driver_only = {"forward", "send", "ready", "receive", "receive_lead", "new_batch", "set_stage_obs",
                       "take_respawned", "accounting", "stage_busy", "stage_envs"}
        assert not names & driver_only and len(names) <= 21, sorted(names)
        assert {"rollout", "submit", "collect", "reset", "close", "state", "stage_obs"} <= names
        assert {"forward", "send", "collect", "receive_lead", "stage_obs", "require"} <= set(dir(EngineDriver))
        assert not [name for name in driver_only if hasattr(engine, name)]
        engine.reset()
        assert np.isfinite(engine.stage_obs(0)["proprio"]).all()


def test_after_a_failure_inside_rollout_the_closed_error_says_why():
    """Issue 33: the engine closes on any failure inside ``rollout()``; every later call says why."""

    def broken(obs):
        raise RuntimeError("a policy bug on purpose\nsecond line")

    profile = RolloutProfile(num_env_processes=1, total_num_envs=2, chunk_size=2)
    engine = RolloutEngine(PointMassFactory(), profile, executor="inline")
    with pytest.raises(RuntimeError, match="a policy bug"):
        engine.rollout(broken, 2)
    with pytest.raises(ClosedError, match=r"^the rollout engine is closed \(closed after RuntimeError inside "
                                          r"rollout\(\): a policy bug on purpose\)$"):
        engine.reset()
    engine.close()  # the first reason stays
    with pytest.raises(ClosedError, match="after RuntimeError inside rollout"):
        engine.rollout(policy, 1)
    other = RolloutEngine(PointMassFactory(), profile, executor="inline")
    other.close()
    with pytest.raises(ClosedError, match=r"closed by close\(\)"):
        other.submit(0, np.zeros((2, 2, 2), np.float32))


@pytest.mark.parametrize("layout", [dict(pipeline_stages=2), dict(pipeline_stages=2, schedule="async"),
                                    dict(pipeline_stages=2, partition="process", schedule="lookahead",
                                         lookahead_steps=2)], ids=["barrier", "async", "lookahead"])
def test_a_policy_that_raises_stop_rollout_ends_it_at_a_chunk_boundary_with_the_engine_idle(layout):
    from behavior1k_fast.rollout import StopRollout

    forwards = []

    def stopping(obs):
        forwards.append(len(next(iter(obs.values()))))
        if len(forwards) == 5:  # chunks of other stages are in flight
            raise StopRollout("enough")
        return policy(obs)

    with engine(**layout) as e:
        pids = e.worker_pids
        with pytest.raises(StopRollout, match="enough"):
            e.rollout(stopping, 100)
        assert e.state.value == "idle" and e.worker_pids == pids  # no worker was stopped
        stats = e.rollout(policy, 2, reset=False)  # episodes run on from where the stop left them
        assert (stats.own_actions > 0).all()
        assert [o["proprio"].shape for o in e.reset()] == [(2, 4)] * 2
