"""The worker side of the lookahead schedule (issue 21): profile keys, the LEAD/END protocol of a chunk with
a lead, its episode rule, and the in-process reference run (``lookahead_reference``) it is checked against."""

import pickle
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile, reference
from behavior1k_fast.core.tracing import WAIT, get_profiler
from behavior1k_fast.patching import omnigibson as omnigibson_patches
from behavior1k_fast.rollout import step_chunk
from behavior1k_fast.rollout import worker as worker_module
from behavior1k_fast.rollout.chunk import ChunkLead, ChunkResult, ChunkRun
from behavior1k_fast.rollout.protocol import Attach, Chunk, Command, Failure, Ok, Reset, unwrap
from behavior1k_fast.rollout.serve import ProcessChannel, stop_processes
from behavior1k_fast.rollout.shm import ACTIONS_KEY, SharedBuffers, action_buffer_space
from behavior1k_fast.rollout.worker import EnvWorker, WorkerSpec, env_worker_main

from .helpers import our_segments
from .lookahead_reference import CALL_LOGS, CallLogFactory, EnvRecord, lookahead_profile, run_lookahead
from .pointmass import PointMassFactory

N = 6
#: Episode lengths (own actions) of a backend's envs 0-3: every episode starts with a chunk, so they end at
#: steps 3, 5, 2 and 0 of a 6-step chunk, before and after every lead tested.
LENGTHS = (4, 6, 9, 13)
P, E = 2, 4


def pm_policy(obs, committed):
    """Deterministic, row-independent, and dependent on the committed actions."""
    p = obs["proprio"].astype(np.float64)
    steps = np.arange(1, N + 1)[None, :, None]
    tail = committed.astype(np.float64).sum(axis=1)[:, None, :]
    return np.tanh(-0.7 * p[:, None, :2] + 0.05 * steps * p[:, None, 2:] + 0.3 * tail).astype(np.float32)


def blind_policy(obs, committed):
    """``pm_policy`` without the committed actions (what a policy of a plain chunk loop can compute)."""
    return pm_policy(obs, np.zeros((len(obs["proprio"]), 0, 2), np.float32))


REF_CHUNK = 4
REF_SMALL = dict(resolution=(16, 16), num_objects=2, cameras=("head",))


def ref_policy(obs, committed):
    p = obs["proprio"].astype(np.float64)[:, None, : reference.ACTION_DIM]
    steps = np.arange(1, REF_CHUNK + 1)[None, :, None]
    tail = committed.astype(np.float64).sum(axis=1)[:, None, :]
    return np.sin(3.0 * p + 0.4 * steps + 0.5 * tail).astype(np.float32)


@dataclass(frozen=True)
class UnpicklableInfoFactory:
    """Point masses whose step infos carry a lambda (which does not pickle) from global step ``at`` on."""

    at: int

    def __call__(self, num_envs, seed, profile):
        backend = PointMassFactory()(num_envs, seed, profile)
        step = backend.step

        def step_with_bad_info(actions, env_indices=None, get_obs=True, render=True):
            out = step(actions, env_indices, get_obs, render)
            if backend.global_steps >= self.at:
                for info in out[4]:
                    info["bad"] = lambda: None
            return out

        backend.step = step_with_bad_info
        return backend


def ref_factory(horizon=7):
    return reference.ReferenceFactory(reference.ReferenceConfig(horizon=horizon, **REF_SMALL))


# --- drivers: the schedule over workers, in the protocol's reply order ----------------------------------


class InlineLink:
    """One in-process :class:`EnvWorker`; replies are produced when received (a lead chunk's END only after
    its LEAD was taken), as a worker process produces them in time."""

    def __init__(self, spec):
        self.worker = EnvWorker(spec)
        self.action_dim = int(np.prod(self.worker.ready()[1].shape))
        self.answers = deque()

    def send(self, request):
        answer = self.worker.handle(request)
        self.answers.append(iter((answer,)) if isinstance(answer, (Ok, Failure)) else answer)

    def receive(self):
        while True:
            try:
                return next(self.answers[0])
            except StopIteration:
                self.answers.popleft()

    def obs(self, rows, obs):
        assert obs is not None
        return obs

    def close(self):
        self.worker.close()


class ProcessLink:
    """One worker process with shared-memory observations and actions, as the process executor runs it."""

    def __init__(self, spec):
        self.channel = ProcessChannel(env_worker_main, (spec,), f"lookahead-test-{spec.worker}", spec.worker,
                                      spec.env_ids)
        observation_space, action_space = unwrap(self.channel.receive(Command.INIT, 60), spec.worker)
        self.action_dim = int(np.prod(action_space.shape))
        self.obs_buffers = SharedBuffers.create(observation_space, spec.num_envs)
        self.action_buffers = SharedBuffers.create(action_buffer_space(action_space, spec.profile["chunk_size"]),
                                                   spec.num_envs)
        self.send(Attach(self.obs_buffers.spec, self.action_buffers.spec))
        assert unwrap(self.receive(), spec.worker) is None

    def send(self, request):
        if isinstance(request, Chunk):
            self.action_buffers.write(request.rows, [{ACTIONS_KEY: a} for a in request.actions])
            request = Chunk(request.rows, None, request.steps, request.lead_steps)
        self.channel.send(request)

    def receive(self):
        return self.channel.receive(Command.CHUNK, 60)

    def obs(self, rows, obs):
        assert obs is None  # in shared memory
        return self.obs_buffers.read(rows)

    def close(self):
        stop_processes([self.channel], 5.0)
        for buffers in (self.obs_buffers, self.action_buffers):
            buffers.close()
            buffers.unlink()


def specs(factory, processes, per, chunk_size, lead_steps, seed=0, tracing=False, **kw):
    profile = lookahead_profile(processes, per, chunk_size, lead_steps, **kw).to_dict()
    return [WorkerSpec(w, pickle.dumps(factory), per, seed + w, profile, auto_reset=True, tracing=tracing)
            for w in range(processes)]


@pytest.fixture
def links():
    """``make(link_class, specs)``: links closed and the profile they applied reverted after the test."""
    made = []
    previous = omnigibson_patches.active_profile()

    def make(cls, worker_specs):
        made.extend(cls(spec) for spec in worker_specs)
        return made[-len(worker_specs):]

    yield make
    for link in made:
        link.close()
    if previous is None:
        omnigibson_patches.revert()
    else:
        omnigibson_patches.apply(previous)


def drive(links, per, policy, chunk_size, lead_steps, rounds):
    """The lookahead schedule over ``links``: send chunk c + 1 once every LEAD(c) came, then take every END(c),
    then every LEAD(c + 1). Returns per-env :meth:`EnvRecord.stacked` runs (as ``run_lookahead``) and the
    chunk results."""
    rows = tuple(range(per))
    for link in links:
        link.send(Reset(rows))
    obs = [link.obs(rows, unwrap(link.receive(), w)[1]) for w, link in enumerate(links)]
    choose_obs = {k: np.concatenate([o[k] for o in obs]) for k in obs[0]}
    n = per * len(links)
    committed = np.zeros((n, lead_steps, links[0].action_dim), np.float32)
    chunk = policy(choose_obs, committed)
    records = [EnvRecord() for _ in range(n)]
    results = []

    def send(actions):
        for w, link in enumerate(links):
            link.send(Chunk(rows, actions[w * per : (w + 1) * per], chunk_size, lead_steps))

    def receive_leads():
        got = [unwrap(link.receive(), w) for w, link in enumerate(links)]
        assert all(isinstance(lead, ChunkLead) for lead, _ in got)
        lead_obs = [link.obs(rows, o) for link, (_, o) in zip(links, got)]
        return ([lead for lead, _ in got], {k: np.concatenate([o[k] for o in lead_obs]) for k in lead_obs[0]})

    send(chunk)
    leads, lead_obs = receive_leads()
    for c in range(rounds):
        ended = np.concatenate([lead.ended for lead in leads])
        sat_out = np.concatenate([lead.sat_out for lead in leads])
        for g in range(n):
            rec = records[g]
            rec.policy_obs.append({k: v[g] for k, v in choose_obs.items()})
            rec.committed.append(committed[g])
            rec.actions.append(chunk[g])
            rec.lead_obs.append({k: v[g] for k, v in lead_obs.items()})
            rec.sat_out.append(bool(sat_out[g]))
            rec.ended_before_lead.append(bool(ended[g]))
        if c + 1 < rounds:
            mask = np.concatenate([lead.committed for lead in leads])
            committed = (chunk[:, chunk_size - lead_steps :] * mask[:, None, None]).astype(chunk.dtype)
            choose_obs = lead_obs
            chunk = policy(choose_obs, committed)
            send(chunk)
        ends = [unwrap(link.receive(), w) for w, link in enumerate(links)]
        assert all(isinstance(end, ChunkResult) and end.obs is None for end in ends)
        results.append(ends)
        for w, end in enumerate(ends):
            for row in range(per):
                rec = records[w * per + row]
                for name in ("rewards", "terminated", "truncated", "applied"):
                    getattr(rec, name).append(getattr(end, name)[row])
                rec.infos.append(end.infos[row])
        if c + 1 < rounds:
            leads, lead_obs = receive_leads()
    return {g: rec.stacked() for g, rec in enumerate(records)}, results


def assert_same(a, b, path="run"):
    """Equal nested runs: dicts, lists, arrays (bit for bit) and scalars."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), path
        for key in a:
            assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        np.testing.assert_array_equal(a, b, err_msg=path)


# --- profile -------------------------------------------------------------------------------------------


def test_lookahead_profile_keys_default_to_today_and_round_trip():
    assert RolloutProfile().lookahead_steps == 0
    p = RolloutProfile(schedule="lookahead", lookahead_steps=np.int64(3), chunk_size=4)
    assert p.lookahead_steps == 3 and type(p.lookahead_steps) is int
    assert RolloutProfile.from_dict(p.to_dict()) == p
    assert RolloutProfile.from_yaml("schedule: lookahead\nlookahead_steps: auto\n").lookahead_steps == "auto"


@pytest.mark.parametrize(
    "kw, exc, text",
    [
        (dict(schedule="lookahead", pipeline_stages=2), ValueError,
         r"^schedule='lookahead' needs pipeline_stages=1 or partition='process' \(every env steps at every "
         r"global step\), got pipeline_stages=2 with partition='hybrid'$"),
        (dict(schedule="lookahead", lookahead_steps=4, chunk_size=4), ValueError,
         r"^lookahead_steps=4 must be < chunk_size=4"),
        (dict(lookahead_steps=2), ValueError,
         r"^lookahead_steps=2 needs schedule='lookahead', got schedule='barrier'$"),
        (dict(lookahead_steps="auto", schedule="async"), ValueError,
         "needs schedule='lookahead', got schedule='async'"),
        (dict(schedule="lookahead", lookahead_steps="soon"), ValueError,
         r"^lookahead_steps must be an int >= 0 or 'auto', got 'soon'$"),
        (dict(schedule="lookahead", lookahead_steps=-1), ValueError, r"^lookahead_steps must be .*, got -1$"),
        (dict(schedule="lookahead", lookahead_steps=True), TypeError, r"^lookahead_steps must be .*, got True$"),
        (dict(schedule="lookahead", lookahead_steps=1.0), TypeError, r"^lookahead_steps must be .*, got 1.0$"),
    ],
)
def test_bad_lookahead_settings_are_one_line_errors_naming_the_values(kw, exc, text):
    with pytest.raises(exc, match=text):
        RolloutProfile(**kw)


# --- chunk run -----------------------------------------------------------------------------------------


def test_a_chunk_run_checks_its_lead_and_needs_auto_reset_for_one():
    backend = PointMassFactory()(2, 0, RolloutProfile())
    actions = np.zeros((2, N, 2), np.float32)
    with pytest.raises(ValueError, match=r"lead_steps must be an int in \[0, 5\] for a chunk of 6, got 6"):
        ChunkRun(backend, actions, np.arange(2), lead_steps=N)
    with pytest.raises(ValueError, match="lead_steps=2 and rows sitting out need auto_reset=True"):
        ChunkRun(backend, actions, np.arange(2), lead_steps=2, auto_reset=False)
    assert backend.global_steps == 0


def test_a_zero_lead_makes_the_backend_calls_and_results_of_a_plain_chunk(links):
    runs = []
    for lead in (None, 0):
        CALL_LOGS.clear()
        (link,) = links(InlineLink, specs(CallLogFactory(PointMassFactory(episode_lengths=LENGTHS)), 1, 4, N, 0))
        rows = tuple(range(4))
        link.send(Reset(rows))
        obs = unwrap(link.receive(), 0)[1]
        out = []
        for _ in range(5):
            link.send(Chunk(rows, blind_policy(obs, None), N, lead))
            if lead is None:
                result, obs = unwrap(link.receive(), 0)
            else:
                (lead_info, obs), result = unwrap(link.receive(), 0), unwrap(link.receive(), 0)
                assert not lead_info.sat_out.any()
            result.stall_seconds = result.env_wall_seconds = None  # wall times
            out.append((result, obs))
        runs.append((out, list(CALL_LOGS[0])))
        link.close()
    (plain, plain_calls), (zero, zero_calls) = runs
    assert_same(plain_calls, zero_calls, "backend calls")
    assert sum(call[0] == "reset" for call in plain_calls) > 2  # episodes ended and were reset
    for (a, obs_a), (b, obs_b) in zip(plain, zero):
        assert_same(obs_a, obs_b, "obs")
        assert_same({k: v for k, v in vars(a).items() if k != "stall_seconds"},
                    {k: v for k, v in vars(b).items() if k != "stall_seconds"}, "result")


# --- the reference run ---------------------------------------------------------------------------------


def test_the_reference_with_zero_lead_is_the_plain_chunk_loop():
    factory = PointMassFactory(episode_lengths=LENGTHS)
    ref = run_lookahead(factory, blind_policy, processes=P, envs_per_process=E, chunk_size=N, lead_steps=0,
                        rounds=5)
    profile = lookahead_profile(P, E, N, 0)
    backends = [factory(E, w, profile) for w in range(P)]
    obs = [backend.reset(list(range(E)))[0] for backend in backends]
    obs = {k: np.stack([o[k] for part in obs for o in part]) for k in obs[0][0]}
    for c in range(5):
        chunk = blind_policy(obs, None)
        results = [step_chunk(b, chunk[w * E : (w + 1) * E]) for w, b in enumerate(backends)]
        for w, result in enumerate(results):
            for row in range(E):
                g = w * E + row
                for name in ("rewards", "terminated", "truncated", "applied"):
                    np.testing.assert_array_equal(ref[g][name][c], getattr(result, name)[row])
                np.testing.assert_array_equal(ref[g]["actions"][c], chunk[g])
                assert_same(ref[g]["infos"][c], result.infos[row])
                assert_same({k: v[c] for k, v in ref[g]["lead_obs"].items()},
                            {k: v[row] for k, v in result.obs.items()})
        obs = {k: np.concatenate([r.obs[k] for r in results]) for k in results[0].obs}
    assert not any(ref[g]["sat_out"].any() for g in ref)


@pytest.mark.parametrize("lead, skip", [(1, True), (3, True), (5, True), (3, False)])
def test_inline_workers_serving_lead_chunks_give_the_reference_run(links, lead, skip):
    factory = PointMassFactory(episode_lengths=LENGTHS)
    ref = run_lookahead(factory, pm_policy, processes=P, envs_per_process=E, chunk_size=N, lead_steps=lead,
                        rounds=6, skip_intermediate_obs=skip)
    got, _ = drive(links(InlineLink, specs(factory, P, E, N, lead, skip_intermediate_obs=skip)), E, pm_policy, N,
                   lead, 6)
    assert_same(ref, got)
    assert sum(ref[g]["sat_out"].sum() for g in ref) > 0 and sum(ref[g]["ended_before_lead"].sum() for g in ref) > 0


@pytest.mark.parametrize("horizon, sat_out", [(5, False), (7, True)])
def test_inline_workers_on_the_reference_simulator_give_the_reference_run(links, horizon, sat_out):
    ref = run_lookahead(ref_factory(horizon), ref_policy, processes=1, envs_per_process=2, chunk_size=REF_CHUNK,
                        lead_steps=2, rounds=5)
    got, _ = drive(links(InlineLink, specs(ref_factory(horizon), 1, 2, REF_CHUNK, 2)), 2, ref_policy, REF_CHUNK,
                   2, 5)
    assert_same(ref, got)
    # every episode starts with a chunk; the lead is after step 2 of 4: horizon 5 ends before it, 7 after it
    assert ref[0]["truncated"].any() and ref[0]["sat_out"].any() == sat_out
    assert ref[0]["ended_before_lead"].any() != sat_out


def test_a_worker_process_answers_lead_then_end_and_runs_the_chunk_queued_meanwhile(links):
    factory = PointMassFactory(episode_lengths=LENGTHS)
    ref = run_lookahead(factory, pm_policy, processes=P, envs_per_process=E, chunk_size=N, lead_steps=3, rounds=6)
    got, results = drive(links(ProcessLink, specs(factory, P, E, N, 3)), E, pm_policy, N, 3, 6)
    assert_same(ref, got)
    stalls = np.array([end.stall_seconds for ends in results for end in ends])
    assert stalls.shape == (6 * P, E) and (stalls >= 0).all()
    assert all((end.sat_out == np.array([rec["sat_out"][c] for rec in list(ref.values())[w * E:(w + 1) * E]])).all()
               for c, ends in enumerate(results) for w, end in enumerate(ends))


def test_worker_processes_leave_no_shared_memory_segment(links):
    before = our_segments()
    made = links(ProcessLink, specs(PointMassFactory(), 1, 2, N, 2))
    drive(made, 2, pm_policy, N, 2, 2)
    made[0].close()
    made.clear()
    assert our_segments() == before


# --- the schedule's guarantees, on the reference run ----------------------------------------------------


@pytest.mark.parametrize("backend", ["pointmass", "reference"])
def test_every_env_acts_at_every_global_step_but_the_counted_masked_ones(backend):
    if backend == "pointmass":
        inner, policy, chunk, lead, per = PointMassFactory(episode_lengths=LENGTHS), pm_policy, N, 4, E
    else:
        inner, policy, chunk, lead, per = ref_factory(), ref_policy, REF_CHUNK, 2, 2
    CALL_LOGS.clear()
    rounds = 6
    ref = run_lookahead(CallLogFactory(inner), policy, processes=P, envs_per_process=per, chunk_size=chunk,
                        lead_steps=lead, rounds=rounds)
    for w, log in enumerate(CALL_LOGS):
        steps = iter([call[1] for call in log if call[0] == "step"])
        runs = [ref[w * per + i] for i in range(per)]
        for c in range(rounds):
            for i, run in enumerate(runs):
                ended = run["terminated"][c] | run["truncated"][c]
                if run["sat_out"][c]:
                    assert not run["applied"][c].any()
                else:  # applied up to and including the episode's end, masked only after it
                    end = int(np.argmax(ended)) if ended.any() else chunk - 1
                    assert run["applied"][c].tolist() == [t <= end for t in range(chunk)]
            # every global step of the backend carries the own action of every env not masked; it stops
            # stepping once every env is masked
            applied = np.stack([run["applied"][c] for run in runs])
            for t in range(applied.any(axis=0).sum()):
                assert next(steps) == tuple(np.flatnonzero(applied[:, t]).tolist()), (c, t)
        assert next(steps, None) is None
    sat_out = sum(run["sat_out"].sum() for run in ref.values())
    ends = sum((run["terminated"] | run["truncated"]).sum() for run in ref.values())
    assert 0 < sat_out <= ends  # only episodes that ended after a lead sit out


def test_no_chunk_is_chosen_from_a_previous_episode():
    """The point mass paints its episode number into the image: the observation a chunk was chosen from
    shows the episode that chunk's actions are applied in."""
    ref = run_lookahead(PointMassFactory(episode_lengths=LENGTHS), pm_policy, processes=P, envs_per_process=E,
                        chunk_size=N, lead_steps=4, rounds=8)
    checked = 0
    for run in ref.values():
        episode = int(run["policy_obs"]["head::rgb"][0, 2, 0, 0])  # the reset episode
        for c in range(8):
            if run["applied"][c].any():
                assert run["policy_obs"]["head::rgb"][c, 2, 0, 0] == episode, f"chunk {c}"
                checked += 1
            episode += int((run["terminated"][c] | run["truncated"][c]).any())
    assert checked >= 4 * P * E


def test_the_policy_gets_exactly_the_committed_actions_that_run():
    lead = 4
    CALL_LOGS.clear()
    ref = run_lookahead(CallLogFactory(PointMassFactory(episode_lengths=LENGTHS)), pm_policy, processes=P,
                        envs_per_process=E, chunk_size=N, lead_steps=lead, rounds=6)
    for g, run in ref.items():
        assert run["committed"][0].shape == (lead, 2) and not run["committed"][0].any()
        # the actions each env ran, from the backend's own calls
        ran = [actions[list(ids).index(g % E)] for _, ids, actions, *_ in
               (call for call in CALL_LOGS[g // E] if call[0] == "step") if g % E in ids]
        np.testing.assert_array_equal(np.stack(ran), run["actions"][run["applied"]])
        for c in range(5):
            if run["ended_before_lead"][c] or run["sat_out"][c]:
                assert not run["committed"][c + 1].any()  # masked: never run
            else:
                np.testing.assert_array_equal(run["committed"][c + 1], run["actions"][c][N - lead :])
                ran_tail = run["applied"][c][N - lead :]
                np.testing.assert_array_equal(run["actions"][c][N - lead :][ran_tail],
                                              run["committed"][c + 1][ran_tail])


def test_a_sitting_out_env_is_reset_at_the_next_lead_with_its_final_observation_in_the_ended_chunk():
    ref = run_lookahead(PointMassFactory(episode_lengths=(5,)), pm_policy, processes=1, envs_per_process=1,
                        chunk_size=N, lead_steps=3, rounds=3)
    run = ref[0]
    # episode of 5 actions, lead after step 3 of 6: ends after the lead of chunk 0
    assert run["terminated"][0].tolist() == [False] * 4 + [True, False]
    assert run["sat_out"].tolist() == [False, True, False]
    assert set(run["infos"][0]) == {"final_observation", "final_info"}
    assert run["infos"][0]["final_info"]["episode_step"] == 5
    assert set(run["infos"][1]) == {"episode"} and not run["applied"][1].any()
    # chunk 2 is chosen from the reset observation read at chunk 1's lead
    assert run["policy_obs"]["head::rgb"][2, 2, 0, 0] == run["infos"][1]["episode"]
    np.testing.assert_array_equal(run["policy_obs"]["proprio"][2], run["lead_obs"]["proprio"][1])


# --- worker state, stall and failures -------------------------------------------------------------------


def test_stall_seconds_are_the_wait_between_a_reply_and_the_next_chunk(links, monkeypatch):
    class Clock:
        now = 100 * 10**9

        def perf_counter_ns(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(worker_module, "time", clock)
    profiler = get_profiler()
    monkeypatch.setattr(profiler, "enabled", profiler.enabled)  # the worker turns tracing on: undone after
    (link,) = links(InlineLink, specs(PointMassFactory(), 1, 2, N, 2, tracing=True))
    link.send(Chunk((0, 1), np.zeros((2, N, 2), np.float32), N, 2))
    link.receive()
    assert unwrap(link.receive(), 0).stall_seconds.tolist() == [0.0, 0.0]  # nothing before it
    link.send(Reset((0, 1)))
    link.receive()
    clock.now += 2_500_000_000
    link.send(Chunk((0, 1), np.zeros((2, N, 2), np.float32), N, 2))
    stalls = [span for span in link.receive().spans if span[0] == WAIT]
    assert [(span[2], span[5]) for span in stalls] == [(2_500_000_000, {"worker": 0, "command": "stall"})]
    clock.now += 7 * 10**9  # time spent between LEAD and END is the chunk's, not a stall
    link.send(Chunk((0, 1), np.zeros((2, N, 2), np.float32), N, 2))
    assert unwrap(link.receive(), 0).stall_seconds.tolist() == [2.5, 2.5]
    link.receive()
    assert unwrap(link.receive(), 0).stall_seconds.tolist() == [0.0, 0.0]  # queued before the END


def test_a_reset_forgets_that_an_env_sits_out_its_next_chunk(links):
    (link,) = links(InlineLink, specs(PointMassFactory(episode_lengths=(5,)), 1, 1, N, 3))
    link.send(Chunk((0,), np.zeros((1, N, 2), np.float32), N, 3))
    link.receive()
    assert unwrap(link.receive(), 0).terminated[0, 4]  # ended after the lead
    link.send(Reset((0,)))
    link.receive()
    link.send(Chunk((0,), np.zeros((1, N, 2), np.float32), N, 3))
    lead, _ = unwrap(link.receive(), 0)
    assert not lead.sat_out.any() and unwrap(link.receive(), 0).applied[0, :5].all()  # acts from step 0


@pytest.mark.parametrize("fail_at, replies", [(2, ["failure"]), (5, ["lead", "failure"])])
def test_a_failure_is_the_last_reply_to_a_lead_chunk(links, fail_at, replies):
    for cls in (InlineLink, ProcessLink):
        (link,) = links(cls, specs(PointMassFactory(fail_at_step=fail_at), 1, 2, N, 3))
        link.send(Chunk((0, 1), np.zeros((2, N, 2), np.float32), N, 3))
        got = [link.receive() for _ in replies]
        assert ["failure" if isinstance(r, Failure) else "lead" for r in got] == replies
        assert len(got) == 1 or isinstance(got[0].payload[0], ChunkLead)
        assert got[-1].command == "chunk" and f"global step {fail_at}" in got[-1].message
        link.send(Reset((0, 1)))  # the next reply answers the next request
        infos, _ = unwrap(link.receive(), 0)
        assert len(infos) == 2


def test_an_end_reply_that_does_not_pickle_becomes_the_failure_and_the_worker_serves_on(links):
    (link,) = links(ProcessLink, specs(UnpicklableInfoFactory(at=5), 1, 2, N, 3))
    link.send(Chunk((0, 1), np.zeros((2, N, 2), np.float32), N, 3))
    lead, obs = unwrap(link.receive(), 0)  # the lead carries no infos
    assert isinstance(lead, ChunkLead) and obs is None
    end = link.receive()
    assert isinstance(end, Failure) and end.command == "chunk" and "pickle" in end.message.lower()
    link.send(Reset((0, 1)))
    infos, _ = unwrap(link.receive(), 0)
    assert len(infos) == 2
