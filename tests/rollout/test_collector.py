"""Collector: batches collected while the trainer trains, weights versions and lag, errors, close, backpressure."""

import threading

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import ClosedError, EngineBusyError, RolloutEngine
from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY, Collector, CollectorState

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


@pytest.mark.deadline(120)
def test_weights_are_loaded_only_by_the_collecting_thread_between_forwards():
    policy = BiasPolicy()
    with make_engine(pipeline_stages=2) as engine:
        with Collector(engine, policy, ROUNDS, total_batches=3) as collector:
            for b, _ in enumerate(collector):
                for i in range(5):  # several posts per batch: only the newest is loaded
                    collector.update_policy_weights(weights(10 * b + i))
    assert policy.loads, "no weights were ever loaded"
    assert {thread for thread, _, _ in policy.loads} == policy.forward_threads
    assert threading.get_ident() not in policy.forward_threads
    assert not any(in_forward for _, in_forward, _ in policy.loads)
    assert all(bias % 10 == 4 for _, _, bias in policy.loads)  # the newest of each batch's posts


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


def test_a_torch_module_gets_the_trainers_module_weights():
    torch = pytest.importorskip("torch")

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.zeros(2))

        def forward(self, obs):
            rows = obs["proprio"].shape[0]
            return self.bias.expand(rows, CHUNK, 2).clone()

    behaviour, learner = Head(), Head()
    with make_engine() as engine:
        with Collector(engine, behaviour, ROUNDS, max_lag=0, total_batches=2) as collector:
            next(collector)
            with torch.no_grad():
                learner.bias.fill_(0.25)
            collector.update_policy_weights(learner)
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
        with pytest.raises(StopIteration):
            next(collector)
    assert engine.state.value == "closed"
    assert_gone(pids)
    assert our_segments() == []


@pytest.mark.deadline(120)
def test_close_within_a_batch_stops_at_a_chunk_boundary_and_closes_the_engine():
    engine = make_engine(executor="process", pipeline_stages=2)
    pids = engine.worker_pids
    collector = Collector(engine, BiasPolicy(), 1000)  # a batch far longer than the test
    collector.close()
    collector.close()  # idempotent
    assert collector.state is CollectorState.STOPPED
    with pytest.raises(StopIteration):
        next(collector)
    with pytest.raises(ClosedError):
        collector.update_policy_weights(weights(1.0))
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
