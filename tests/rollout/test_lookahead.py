"""The lookahead schedule driven by the engine (issue 21): d = 0 is the one-stage barrier schedule bit for
bit, d > 0 gives each env the trajectory of the in-process reference run (``lookahead_reference``), no
chunk is chosen from a previous episode, the recorder keeps what the policy saw, and a worker that dies or
hangs between its lead and its chunk's end is handled as in every other schedule."""

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.core.profile import auto_lead_cap
from behavior1k_fast.core.tracing import SLICE_WAIT, WAIT
from behavior1k_fast.rollout import (
    ClosedError,
    EngineState,
    RolloutEngine,
    TrajectoryRecorder,
    WorkerDiedError,
    WorkerHungError,
)
from behavior1k_fast.rollout import COMMITTED_KEY, CommittedActions
from behavior1k_fast.rollout.schedules.lookahead import Lookahead

from .faulty import FaultyFactory
from .helpers import assert_gone, assert_same_trajectories, our_segments, record, traced
from .lookahead_reference import lookahead_profile, run_lookahead
from .pointmass import PointMassFactory
from .test_lookahead_worker import LENGTHS, E, N, P, pm_policy


def engine_policy(obs):
    """``pm_policy`` (deterministic, row-independent, dependent on the committed actions) on the engine's
    policy input (the committed actions under their key)."""
    return pm_policy({k: v for k, v in obs.items() if k != COMMITTED_KEY}, obs[COMMITTED_KEY])


def blind_policy(obs):
    """Ignores the committed actions (any policy of the other schedules)."""
    return pm_policy(obs, np.zeros((len(obs["proprio"]), 0, 2)))


def profile(lead, **kw):
    return lookahead_profile(P, E, N, lead, **kw)


def run_engine(factory, lead, rounds, executor="process", stages=1, **kw):
    """Per global env: the engine's lookahead run stacked over chunks (the reference's field names);
    ``stages`` > 1: that many stages of whole processes (``partition="process"``)."""
    runs = {}

    def on_chunk(stage, result):
        for row, env in enumerate(result.env_ids.tolist()):
            run = runs.setdefault(env, {})
            fields = {"rewards": result.rewards[row], "terminated": result.terminated[row],
                      "truncated": result.truncated[row], "applied": result.applied[row],
                      "actions": result.actions[row], "sat_out": result.sat_out[row],
                      "committed": result.policy_obs[COMMITTED_KEY][row]}
            for key, value in fields.items():
                run.setdefault(key, []).append(np.array(value))
            for key, value in result.policy_obs.items():
                if key != COMMITTED_KEY:
                    run.setdefault(f"policy_obs/{key}", []).append(value[row].copy())
            for key, value in result.obs.items():
                run.setdefault(f"lead_obs/{key}", []).append(value[row].copy())

    deadline = {} if executor == "inline" else {"timeout_s": 60}  # inline has no deadlines
    layout = profile(lead) if stages == 1 else profile(lead, pipeline_stages=stages, partition="process")
    with RolloutEngine(factory, layout, executor=executor, **{**deadline, **kw}) as engine:
        stats = engine.rollout(engine_policy, rounds, on_chunk=on_chunk)
    return {env: {k: np.stack(v) for k, v in run.items()} for env, run in runs.items()}, stats


def as_engine_fields(ref_run):
    """A reference run in :func:`run_engine`'s layout."""
    out = {k: ref_run[k] for k in ("rewards", "terminated", "truncated", "applied", "actions", "sat_out", "committed")}
    for group in ("policy_obs", "lead_obs"):
        out.update({f"{group}/{k}": v for k, v in ref_run[group].items()})
    return out


def test_a_zero_lead_gives_the_trajectories_of_the_one_stage_barrier_schedule():
    factory = PointMassFactory(episode_lengths=LENGTHS)
    runs = {}
    for schedule in ("barrier", "lookahead"):
        p = RolloutProfile(num_env_processes=P, total_num_envs=P * E, chunk_size=N, schedule=schedule,
                           gc_enable=False)
        with RolloutEngine(factory, p, timeout_s=60) as engine:
            runs[schedule] = record(engine, 5, policy=blind_policy)
    assert_same_trajectories(runs["barrier"][0], runs["lookahead"][0])
    stats = runs["lookahead"][1]
    assert stats.schedule == "lookahead" and stats.lookahead_steps == 0 and stats.sat_out_chunks.sum() == 0


@pytest.mark.parametrize("executor, stages", [("inline", 1), ("process", 1), ("process", 2), ("inline", 2)])
@pytest.mark.parametrize("lead", [2, 4])
def test_a_lead_gives_each_env_the_trajectory_of_the_in_process_reference(executor, stages, lead):
    """With stages of whole processes too: each process is its own pipeline in time, and the policy's
    rows are independent, so every env's run is the reference's."""
    rounds = 6
    factory = PointMassFactory(episode_lengths=LENGTHS)
    got, stats = run_engine(factory, lead, rounds, executor, stages)
    ref = run_lookahead(factory, pm_policy, processes=P, envs_per_process=E, chunk_size=N,
                        lead_steps=lead, rounds=rounds)
    assert sorted(got) == sorted(ref)
    for env, run in got.items():
        expected = as_engine_fields(ref[env])
        assert sorted(run) == sorted(expected)
        for key, value in run.items():
            # the rollout's last chunk has lead 0 (it ends at a boundary): only its lead observation differs
            upto = rounds - 1 if key.startswith("lead_obs/") else rounds
            np.testing.assert_array_equal(value[:upto], expected[key][:upto], err_msg=f"env {env} {key}")
    assert stats.lookahead_steps == lead and stats.sat_out_chunks.sum() > 0
    assert (stats.hold_steps_per_round * rounds).sum() > 0  # masked steps only: sat out or ended episodes


def test_no_chunk_is_chosen_from_a_previous_episode():
    """The point mass paints its episode number into the image: the observation a chunk was chosen from
    shows the episode that chunk's actions are applied in."""
    got, _ = run_engine(PointMassFactory(episode_lengths=LENGTHS), 4, 8, "inline")
    checked = 0
    for run in got.values():
        episode = int(run["policy_obs/head::rgb"][0, 2, 0, 0])
        for c in range(8):
            if run["applied"][c].any():
                assert run["policy_obs/head::rgb"][c, 2, 0, 0] == episode, f"chunk {c}"
                checked += 1
            episode += int((run["terminated"][c] | run["truncated"][c]).any())
    assert checked >= 4 * P * E


def test_the_recorder_keeps_the_lead_observation_the_committed_actions_the_chunk_and_its_rewards():
    rounds, lead = 5, 3
    factory = PointMassFactory(episode_lengths=LENGTHS)
    ref = run_lookahead(factory, pm_policy, processes=P, envs_per_process=E, chunk_size=N,
                        lead_steps=lead, rounds=rounds)
    with RolloutEngine(factory, profile(lead), executor="inline") as engine:
        _, batch = TrajectoryRecorder(engine).rollout(engine_policy, rounds)
        boundary = engine.stage_obs(0)["proprio"]
    assert batch.committed.shape == (rounds, P * E, lead, 2)
    for env, run in ref.items():
        np.testing.assert_array_equal(batch.obs["proprio"][:, env], run["policy_obs"]["proprio"])
        np.testing.assert_array_equal(batch.committed[:, env], run["committed"])
        np.testing.assert_array_equal(batch.actions[:, env], run["actions"])
        np.testing.assert_array_equal(batch.rewards[:, env], run["rewards"])
    np.testing.assert_array_equal(batch.last_obs["proprio"], boundary)  # the last chunk ends at a boundary


def test_stall_and_slice_wait_are_in_the_stats_and_the_trace():
    # inline workers wait for every chunk while the driver runs the policy
    with traced() as profiler, RolloutEngine(PointMassFactory(), profile(3), executor="inline") as engine:
        stats = engine.rollout(blind_policy, 3)
        stalls = [s for s in profiler.spans if s[0] == WAIT and (s[5] or {}).get("command") == "stall"]
        waits = [s for s in profiler.spans if s[0] == SLICE_WAIT]
    assert len(stalls) == P * 3  # every worker, before each of its 3 chunks (the first: since its reset)
    assert stats.stall_seconds_per_worker.shape == (P,) and np.all(stats.stall_seconds_per_worker > 0)
    assert len(waits) == P * 3 and stats.slice_wait_seconds.shape == (P * E,)


def test_auto_lead_runs_with_one_policy_input_shape_and_reports_the_lead_it_chose():
    widths = set()

    def policy(obs):
        widths.add(obs[COMMITTED_KEY].shape[1:])
        return blind_policy(obs)

    with RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile("auto"), executor="inline") as engine:
        stats = engine.rollout(policy, 6)
    assert widths == {(auto_lead_cap(N), 2)}
    assert 0 <= stats.lookahead_steps <= auto_lead_cap(N) and stats.own_actions.sum() > 0


@pytest.mark.parametrize("step_s, hidden_s, lead", [
    ([0.010, 0.020], 0.045, 3),   # the slowest worker's step: 3 * 20 ms >= 45 ms
    ([0.010], 0.040, 4),          # exactly 4 steps hide it
    ([0.010], 1.0, 4),            # more than the cap hides (a quarter of 16 steps): the cap
    ([0.010], 0.0, 0),            # nothing to hide
    ([0.0], 0.5, 4),              # no step time measured (placeholders only): the cap
])
def test_the_auto_lead_is_the_smallest_that_hides_the_policy_and_the_transfer_up_to_the_cap(step_s, hidden_s, lead):
    with RolloutEngine(PointMassFactory(), lookahead_profile(P, E, 16, "auto"), executor="inline") as engine:
        schedule = Lookahead(engine, blind_policy, 1, None)
        assert schedule.auto_lead(np.array(step_s), hidden_s) == lead


def test_lookahead_options_are_checked_before_anything_runs():
    with RolloutEngine(PointMassFactory(), profile(2), executor="inline", auto_reset=False) as engine:
        with pytest.raises(ValueError, match="schedule='lookahead' needs auto_reset=True"):
            engine.rollout(blind_policy, 1)
        with pytest.raises(ValueError, match="overlap=False is the barrier schedule's serial baseline"):
            engine.rollout(blind_policy, 1, overlap=False)
        assert engine.rollout(blind_policy, 1, schedule="barrier").own_actions.sum() == P * E * N


# --- faults between a lead and its chunk's end: the fault matrix's rows for this schedule ----------------
#: Worker 1 (seed 1) faults at step 9: in chunk 1, after its lead (step 2 of 6 with d = 4) was reported.
MID_LEAD = dict(where="chunk", after_steps=N + 3, base=PointMassFactory(episode_lengths=LENGTHS))
FAST = dict(startup_timeout_s=10.0, reset_timeout_s=5.0, timeout_s=None, stall_timeout_s=1.0)


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("how, error", [("exit", WorkerDiedError), ("hang", WorkerHungError)])
def test_a_worker_that_dies_or_hangs_after_its_lead_is_reported_and_nothing_is_left(how, error, stages):
    layout = profile(4) if stages == 1 else profile(4, pipeline_stages=stages, partition="process")
    engine = RolloutEngine(FaultyFactory(how=how, **MID_LEAD), layout, **FAST)
    pids = engine.worker_pids
    with pytest.raises(error, match=r"worker 1 \(envs \[4, 5, 6, 7\]\)") as info:
        engine.rollout(blind_policy, 4)
    assert info.value.command == "chunk"
    with pytest.raises(ClosedError):
        engine.reset()
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.parametrize("stages", [1, 2])
def test_a_worker_respawned_after_its_lead_resets_its_envs_and_the_others_keep_their_trajectories(stages):
    """Also with stages of whole processes, where worker 1 is stage 1 on its own."""
    rounds = 5
    clean, _ = run_engine(PointMassFactory(episode_lengths=LENGTHS), 4, rounds, stages=stages)
    faulty, stats = run_engine(FaultyFactory(how="exit", **MID_LEAD), 4, rounds, stages=stages,
                               restart_workers={"max_restarts": 5, "backoff_s": 0.0}, **FAST)
    assert len(stats.restarts) >= 1 and {r.worker for r in stats.restarts} == {1}
    for env in range(E):  # worker 0: untouched
        for key in clean[env]:
            np.testing.assert_array_equal(faulty[env][key], clean[env][key], err_msg=f"env {env} {key}")
    for env in range(E, 2 * E):  # worker 1: chunk 1's END and chunk 2 were placeholders, chunk 3 from a reset
        run = faulty[env]
        assert not run["applied"][2].any() and run["truncated"][1, 0] and not run["truncated"][2].any()
        assert not run["committed"][3].any()  # chosen from the respawn's reset: nothing committed runs
        assert run["applied"][3].any()


@pytest.mark.parametrize("stages", [1, 2])
def test_a_respawn_between_a_lead_and_its_end_ends_each_cut_episode_once(stages):
    """Issue 33 (N3): the chunk pending after the cut one (sent at the lead) is a placeholder too, which
    must not end the respawn's fresh episode again: one ``worker_restarted`` episode per env and restart,
    in the recorder and in ``stats.episodes``, as the barrier schedule counts it."""
    layout = profile(4) if stages == 1 else profile(4, pipeline_stages=stages, partition="process")
    with RolloutEngine(FaultyFactory(how="exit", **MID_LEAD), layout,
                       restart_workers={"max_restarts": 5, "backoff_s": 0.0}, **FAST) as engine:
        stats, batch = TrajectoryRecorder(engine).rollout(blind_policy, 5)
    episodes = batch.episodes
    assert len(stats.restarts) >= 1 and {r.worker for r in stats.restarts} == {1}
    cut = episodes.env[episodes.worker_restarted]
    assert sorted(cut.tolist()) == sorted(list(range(E, 2 * E)) * len(stats.restarts))
    np.testing.assert_array_equal(np.bincount(episodes.env, minlength=P * E), stats.episodes)


def test_lookahead_on_a_layout_the_profile_refuses_is_refused_up_front_and_the_engine_stays_usable():
    """Issue 33 (N7): hybrid K = 2 has no lookahead (the profile's reason), asked for in ``rollout``."""
    layout = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=N, pipeline_stages=2)
    with RolloutEngine(PointMassFactory(), layout, executor="inline") as engine:
        with pytest.raises(ValueError, match=r"schedule='lookahead' needs pipeline_stages=1 or partition='process'"):
            engine.rollout(blind_policy, 6, schedule="lookahead")
        assert engine.state is EngineState.NOT_RESET
        assert engine.rollout(blind_policy, 2).own_actions.sum() == 4 * 2 * N


def boundary_proprio(engine):
    """Each env's proprio as its (inline) backend holds it now: what a boundary observation shows."""
    backends = [w.backend for w in engine._executor.transport.workers]
    return np.concatenate([np.concatenate([b.pos, b.vel], axis=1) for b in backends]).astype(np.float32)


@pytest.mark.parametrize("lead", [2, 4])
def test_a_lookahead_rollout_ends_at_a_chunk_boundary_for_the_bootstrap_and_the_next_rollout(lead):
    """The last chunk of a rollout runs with lead 0 (module docs): the batch's last observations (a trainer's
    bootstrap input) and the next rollout's first choice are the envs' states after the chunk, not lead
    observations ``lead`` steps before it (issue 33: the mutation that sent it with the lead passed)."""
    with RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile(lead), executor="inline") as engine:
        recorder = TrajectoryRecorder(engine)
        _, batch = recorder.rollout(engine_policy, 3)
        now = boundary_proprio(engine)
        np.testing.assert_array_equal(batch.last_obs["proprio"], now)
        np.testing.assert_array_equal(engine.stage_obs(0)["proprio"], now)
        _, after = recorder.rollout(engine_policy, 1, reset=False)
        np.testing.assert_array_equal(after.obs["proprio"][0], now)
        assert not after.committed[0].any()  # nothing committed across rollouts


@pytest.mark.parametrize("lead", [3, "auto"])
def test_the_policy_input_holds_the_committed_actions_that_committed_actions_describes(lead):
    """``CommittedActions`` (exported from ``behavior1k_fast.rollout``) is what a lookahead policy gets."""
    seen = []

    def spy(obs):
        seen.append(obs[COMMITTED_KEY])
        return engine_policy(obs)

    with RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile(lead), executor="inline") as engine:
        engine.rollout(spy, 3)
        spec = CommittedActions.from_profile(engine.profile, engine.action_dim, engine.action_dtype)
    assert spec.key == COMMITTED_KEY and spec.width == (3 if lead == 3 else auto_lead_cap(N)) and spec.features == spec.width * 2
    assert {(c.shape, c.dtype) for c in seen} == {(spec.shape(P * E), spec.dtype)}
    with pytest.raises(TypeError, match="profile must be a RolloutProfile"):
        CommittedActions.from_profile({"schedule": "lookahead"}, 2)
