"""Collector: batches collected while the trainer trains, weights versions and lag, errors, close, backpressure."""

import threading

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import ClosedError, EngineBusyError, RolloutEngine
from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY, Collector, CollectorState

from .faulty import FaultyFactory
from .helpers import CHUNK, assert_gone, our_segments
from .pointmass import PointMassFactory

ROUNDS = 3
#: Env episodes end inside chunks (steps 7 and 10), so batches hold episode ends.
LENGTHS = (7, 10)

PROFILES = {
    "barrier_k2": dict(pipeline_stages=2),
    "async_k2": dict(pipeline_stages=2, schedule="async"),
    "process_k2": dict(pipeline_stages=2, partition="process"),
    "lookahead": dict(schedule="lookahead", lookahead_steps=1),
}


def make_engine(executor="inline", **profile):
    profile = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, gc_enable=False, **profile)
    return RolloutEngine(PointMassFactory(episode_lengths=LENGTHS), profile, executor=executor)


class BiasPolicy:
    """Actions = a weight ``bias`` everywhere; log-prob = -bias; records each forward's weights and thread."""

    def __init__(self, bias=0.0):
        self.bias = np.float32(bias)
        self.in_forward = False
        self.loads = []  # (thread id, in_forward at load time, bias loaded)
        self.forward_threads = set()

    def __call__(self, obs):
        self.in_forward = True
        try:
            self.forward_threads.add(threading.get_ident())
            rows = len(obs["proprio"])
            actions = np.full((rows, CHUNK, 2), self.bias, np.float32)
            return actions, {"logprob": np.full(rows, -self.bias, np.float32)}
        finally:
            self.in_forward = False

    def load_state_dict(self, state):
        self.loads.append((threading.get_ident(), self.in_forward, float(state["bias"][0])))
        self.bias = np.float32(state["bias"][0])


def weights(bias):
    return {"bias": np.array([bias], np.float32)}


@pytest.mark.deadline(120)
@pytest.mark.parametrize("layout", sorted(PROFILES))
def test_every_schedule_yields_batches_of_the_asked_rounds_with_the_acting_weights_version(layout):
    policy = BiasPolicy()
    with make_engine(**PROFILES[layout]) as engine:
        with Collector(engine, policy, ROUNDS, total_batches=3) as collector:
            batches = []
            for b, batch in enumerate(collector):
                versions = batch.extras[WEIGHTS_VERSION_KEY]
                assert versions.shape == (ROUNDS, 4) and versions.dtype == np.int64
                # max_lag = 1: batch b was chosen by versions >= b - 1 while the trainer holds version b
                assert collector.version == b and versions.min() >= b - 1
                # each chunk's actions and log-probs are those of the version that chose it
                np.testing.assert_array_equal(batch.actions[..., 0, 0], versions.astype(np.float32))
                np.testing.assert_array_equal(batch.extras["logprob"], -versions.astype(np.float32))
                batches.append(batch)
                collector.update_policy_weights(weights(b + 1))
            assert len(batches) == 3 and collector.state is CollectorState.STOPPED
        assert engine.state.value == "idle"  # total_batches ends cleanly: the engine stays usable
        assert collector.last_stats.own_actions.sum() > 0


@pytest.mark.deadline(120)
def test_max_lag_zero_is_the_serial_schedule_every_chunk_of_batch_b_acts_with_version_b():
    with make_engine(pipeline_stages=2) as engine:
        with Collector(engine, BiasPolicy(), ROUNDS, max_lag=0, total_batches=4) as collector:
            for b, batch in enumerate(collector):
                assert (batch.extras[WEIGHTS_VERSION_KEY] == b).all()
                collector.update_policy_weights(weights(b + 1))


class GatedLoadPolicy(BiasPolicy):
    """Its first load says so (``loading``) and waits for the trainer's ``release`` before it loads."""

    def __init__(self):
        super().__init__()
        self.loading, self.release = threading.Event(), threading.Event()

    def load_state_dict(self, state):
        if not self.loading.is_set():
            self.loading.set()
            assert self.release.wait(60), "the trainer never released the load"
        super().load_state_dict(state)


@pytest.mark.deadline(120)
def test_weights_are_loaded_only_by_the_collecting_thread_between_forwards_and_a_superseded_post_never():
    """Posts 1-3 arrive while the collecting thread is inside the load of post 0: its next load is post 4 (the
    newest), and 1-3 are never loaded. (Batch 2 may start only after post 0, max_lag = 1: that load comes.)"""
    policy = GatedLoadPolicy()
    with make_engine(pipeline_stages=2) as engine:
        with Collector(engine, policy, ROUNDS, total_batches=3) as collector:
            for b, _ in enumerate(collector):
                if b == 0:
                    collector.update_policy_weights(weights(0))
                    assert policy.loading.wait(60)  # the collecting thread is in the load of post 0
                    for i in range(1, 5):
                        collector.update_policy_weights(weights(i))
                    policy.release.set()
    assert [bias for _, _, bias in policy.loads] == [0.0, 4.0]
    assert {thread for thread, _, _ in policy.loads} == policy.forward_threads
    assert threading.get_ident() not in policy.forward_threads
    assert not any(in_forward for _, in_forward, _ in policy.loads)


@pytest.mark.deadline(120)
def test_the_snapshot_is_taken_at_the_call_so_later_trainer_updates_do_not_leak_into_acting_weights():
    policy = BiasPolicy()
    with make_engine() as engine:
        with Collector(engine, policy, ROUNDS, max_lag=0, total_batches=2) as collector:
            first = next(collector)
            trainer_weights = weights(0.5)
            collector.update_policy_weights(trainer_weights)
            trainer_weights["bias"][:] = 0.9  # the trainer goes on changing its own copy
            second = next(collector)
    assert (first.actions == 0).all()
    np.testing.assert_array_equal(second.actions, np.float32(0.5))


def make_head(torch):
    """A torch module with one parameter ``bias`` [2]; its actions are that bias everywhere."""

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.zeros(2))

        def forward(self, obs):
            rows = obs["proprio"].shape[0]
            return self.bias.expand(rows, CHUNK, 2).clone()

    return Head()


def test_a_torch_module_gets_a_copy_of_the_trainers_module_weights_at_the_post():
    torch = pytest.importorskip("torch")
    behaviour, learner = make_head(torch), make_head(torch)
    with make_engine() as engine:
        with Collector(engine, behaviour, ROUNDS, max_lag=0, total_batches=2) as collector:
            next(collector)
            with torch.no_grad():
                learner.bias.fill_(0.25)
            collector.update_policy_weights(learner)
            with torch.no_grad():
                learner.bias.fill_(0.75)  # the trainer's next step, before the collector loaded the post
            second = next(collector)
    np.testing.assert_array_equal(second.actions, np.float32(0.25))
    assert learner.bias is not behaviour.bias


@pytest.mark.deadline(120)
def test_a_trainer_that_never_posts_weights_still_gets_every_batch():
    with make_engine() as engine:
        with Collector(engine, BiasPolicy(), ROUNDS, max_lag=0, total_batches=3) as collector:
            versions = [batch.extras[WEIGHTS_VERSION_KEY] for batch in collector]
    assert len(versions) == 3 and all((v == 0).all() for v in versions)


class FailingPolicy(BiasPolicy):
    def __init__(self, fail_at):
        super().__init__()
        self.calls, self.fail_at = 0, fail_at

    def __call__(self, obs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("policy failed on purpose")
        return super().__call__(obs)


@pytest.mark.deadline(120)
def test_an_error_in_the_collecting_thread_reaches_the_next_next_and_leaves_nothing_behind():
    engine = make_engine(executor="process", pipeline_stages=2)
    pids = engine.worker_pids
    with Collector(engine, FailingPolicy(fail_at=2 * ROUNDS + 2), ROUNDS) as collector:
        next(collector)  # the first batch is whole
        with pytest.raises(RuntimeError, match="policy failed on purpose"):
            next(collector)
    assert engine.state.value == "closed"
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.deadline(120)
def test_after_the_collecting_thread_failed_every_next_and_post_raises_closed_error_naming_the_failure():
    with make_engine() as engine:
        collector = Collector(engine, FailingPolicy(fail_at=1), ROUNDS)
        while collector.state is not CollectorState.STOPPED:
            threading.Event().wait(0.01)  # polled; the deadline bounds it
        # the trainer has not seen the error yet: a post already says it, and gets no new version
        with pytest.raises(ClosedError, match="RuntimeError: policy failed on purpose"):
            collector.update_policy_weights(weights(1.0))
        assert collector.version == 0
        with pytest.raises(RuntimeError, match="policy failed on purpose"):
            next(collector)  # the original exception, once
        for _ in range(2):  # then a ClosedError naming it, every time: never a clean end
            with pytest.raises(ClosedError, match="RuntimeError: policy failed on purpose"):
                next(collector)
        collector.close()
        with pytest.raises(ClosedError, match="policy failed on purpose"):
            next(collector)


@pytest.mark.deadline(120)
def test_close_within_a_batch_stops_at_a_chunk_boundary_and_leaves_the_engine_idle():
    engine = make_engine(executor="process", pipeline_stages=2)
    pids = engine.worker_pids
    policy = SignallingPolicy()
    collector = Collector(engine, policy, 1000)  # a batch far longer than the test
    policy.forwarded.wait()
    collector.close()
    collector.close()  # idempotent
    assert collector.state is CollectorState.STOPPED
    with pytest.raises(StopIteration):
        next(collector)
    with pytest.raises(ClosedError):
        collector.update_policy_weights(weights(1.0))
    # the chunks in flight were received and discarded: the engine is idle, its envs mid-episode
    assert engine.state.value == "idle" and engine.worker_pids == pids
    stats = engine.rollout(policy, 2, reset=False)
    assert (stats.own_actions > 0).all()
    engine.close()
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.deadline(120)
def test_backpressure_holds_at_most_max_queued_finished_batches():
    with make_engine() as engine:
        collector = Collector(engine, BiasPolicy(), 1, max_lag=5, max_queued=2)
        try:
            next(collector)
            while collector.state is not CollectorState.WAITING_QUEUE or collector.queued < 2:
                threading.Event().wait(0.01)  # polled; the deadline bounds it
            # one handed out, two queued, and the third waits for room: no fourth rollout started
            assert collector.queued == 2 and collector.times.collect_s > 0
        finally:
            collector.close()
        assert engine.state.value == "idle"  # closed between batches: the engine stays usable


class SignallingPolicy(BiasPolicy):
    def __init__(self):
        super().__init__()
        self.forwarded = threading.Event()

    def __call__(self, obs):
        self.forwarded.set()
        return super().__call__(obs)


@pytest.mark.deadline(60)
def test_the_engine_is_driven_only_by_the_collecting_thread():
    policy = SignallingPolicy()
    with make_engine() as engine:
        with Collector(engine, policy, 1000, total_batches=1):
            policy.forwarded.wait()  # inside the collector's rollout now
            with pytest.raises(EngineBusyError):
                engine.reset()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rounds_per_batch=0), ValueError, "rounds_per_batch"),
    (dict(max_lag=-1), ValueError, "max_lag"),
    (dict(max_lag=True), TypeError, "max_lag"),
    (dict(max_queued=0), ValueError, "max_queued"),
    (dict(total_batches=0), ValueError, "total_batches"),
    (dict(load_weights=5), TypeError, "load_weights"),
    (dict(device="tpu"), ValueError, "device"),
    (dict(policy=5), TypeError, "policy must be callable"),
])
def test_bad_arguments_are_refused_before_the_thread_starts(kwargs, error, match):
    args = {"policy": BiasPolicy(), "rounds_per_batch": ROUNDS, **kwargs}
    before = threading.active_count()
    with make_engine() as engine:
        with pytest.raises(error, match=match):
            Collector(engine, args.pop("policy"), args.pop("rounds_per_batch"), **args)
        assert threading.active_count() == before
        assert engine.state.value == "not reset"


def test_weights_for_a_policy_without_load_state_dict_need_load_weights():
    with make_engine() as engine:
        with Collector(engine, lambda obs: np.zeros((len(obs["proprio"]), CHUNK, 2), np.float32), 1,
                       total_batches=1) as collector:
            with pytest.raises(TypeError, match="load_weights"):
                collector.update_policy_weights(weights(1.0))
            next(collector)
        with Collector(engine, BiasPolicy(), 1, total_batches=1) as collector:
            with pytest.raises(TypeError, match="mapping"):
                collector.update_policy_weights(5)
            next(collector)


def test_a_closed_engine_is_refused():
    engine = make_engine()
    engine.close()
    with pytest.raises(ClosedError):
        Collector(engine, BiasPolicy(), 1)


@pytest.mark.deadline(60)
def test_a_malformed_policy_output_is_refused_with_the_engines_message():
    def three_outputs(obs):
        rows = len(obs["proprio"])
        return np.zeros((rows, CHUNK, 2), np.float32), {}, None

    with make_engine() as engine:
        with Collector(engine, three_outputs, 1) as collector:
            with pytest.raises(TypeError, match=r"actions or an \(actions, extras dict\) pair, got a tuple of 3"):
                next(collector)


@pytest.mark.deadline(120)
@pytest.mark.parametrize("layout", sorted(PROFILES))
def test_breaking_out_of_the_loop_mid_batch_leaves_the_engine_idle_for_a_rollout_and_a_new_collector(layout):
    policy = BiasPolicy()
    with make_engine(**PROFILES[layout]) as engine:
        collector = Collector(engine, policy, 50)  # max_lag=1: batch 1 is in flight when batch 0 is handed out
        for batch in collector:
            collector.update_policy_weights(weights(1.0))
            break  # "stop once success >= 0.8"
        assert collector.state is CollectorState.STOPPED
        assert engine.state.value == "idle"
        stats = engine.rollout(policy, 1, reset=False)  # an evaluation on the same engine, episodes run on
        assert (stats.own_actions > 0).all()
        with Collector(engine, policy, ROUNDS, total_batches=1) as again:
            assert next(again).actions.shape[:2] == (ROUNDS, 4)
        assert engine.state.value == "idle"


@pytest.mark.deadline(60)
def test_close_with_a_worker_hung_mid_batch_and_no_deadlines_returns_within_close_timeout_s():
    factory = FaultyFactory(where="chunk", how="hang", seeds=(1,), after_steps=2)
    profile = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, gc_enable=False)
    engine = RolloutEngine(factory, profile, timeout_s=None, stall_timeout_s=None)
    pids = engine.worker_pids
    policy = SignallingPolicy()
    with Collector(engine, policy, 1000, close_timeout_s=0.5) as collector:
        policy.forwarded.wait()  # the hung worker's chunk is in flight
    # the thread could not reach a chunk boundary: close() closed the engine to end its wait
    assert engine.state.value == "closed"
    with pytest.raises(StopIteration):
        next(collector)
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.deadline(120)
@pytest.mark.parametrize("where", ["load_weights", "policy"])
def test_close_from_the_collecting_thread_ends_the_iteration_without_a_join_error(where):
    holder = {}

    class ClosingPolicy(BiasPolicy):
        def __call__(self, obs):
            if where == "policy" and len(self.loads) == 1:
                holder["collector"].close()
            return super().__call__(obs)

    def load(policy, state):
        policy.load_state_dict(state)
        if where == "load_weights":
            holder["collector"].close()

    with make_engine() as engine:
        with Collector(engine, ClosingPolicy(), ROUNDS, max_lag=0, load_weights=load) as collector:
            holder["collector"] = collector
            next(collector)
            collector.update_policy_weights(weights(1.0))
            with pytest.raises(StopIteration):
                next(collector)
        assert engine.state.value == "idle"


@pytest.mark.parametrize("post, error, match", [
    (lambda torch: {}, ValueError, "missing 'bias'"),
    (lambda torch: {"bias": torch.zeros(2), "scale": torch.zeros(2)}, ValueError, "'scale'"),
    (lambda torch: {"bias": torch.zeros(3)}, ValueError, r"weights\['bias'\] has shape \(3,\).*\(2,\)"),
    (lambda torch: {"bias": np.zeros(2, np.float32)}, TypeError, r"weights\['bias'\] is a numpy.ndarray"),
    (lambda torch: torch.nn.Linear(2, 2), ValueError, "'weight'"),
])
def test_weights_that_do_not_fit_the_behaviour_policy_are_refused_at_the_post_and_the_engine_goes_on(
        post, error, match):
    torch = pytest.importorskip("torch")
    with make_engine() as engine:
        with Collector(engine, make_head(torch), 1, max_lag=0, total_batches=2) as collector:
            next(collector)
            with pytest.raises(error, match=match):
                collector.update_policy_weights(post(torch))
            assert collector.version == 0
            assert (next(collector).actions == 0).all()  # the collector went on with its weights
        assert engine.state.value == "idle"


@pytest.mark.deadline(120)
def test_episodes_run_on_across_batches():
    # batches of one round (CHUNK = 4 steps) never hold a whole episode of 7 or 10 steps: episodes that end
    # with those lengths ran across batches, which a reset per batch would cut
    with make_engine() as engine:
        with Collector(engine, BiasPolicy(), 1, total_batches=8) as collector:
            lengths = np.concatenate([batch.episodes.lengths for batch in collector])
    assert sorted(set(lengths.tolist())) == list(LENGTHS)


def test_a_closed_error_after_a_failure_names_public_types_only():
    class _PrivateFailure(RuntimeError):
        pass

    def failing(obs):
        raise _PrivateFailure("policy failed on purpose")

    with make_engine() as engine:
        with pytest.raises(_PrivateFailure):
            engine.rollout(failing, 1)
        with pytest.raises(ClosedError) as info:
            engine.rollout(failing, 1)
    assert "_PrivateFailure" not in str(info.value) and "after RuntimeError" in str(info.value)
