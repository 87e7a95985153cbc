"""The fault matrix: every way a worker, a policy or the driver itself can fail, each followed by the same
check: the failure is reported as it should be, and no process and no shared-memory segment is left."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import psutil
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import (
    ClosedError,
    PolicyProcess,
    RolloutEngine,
    WorkerDiedError,
    WorkerError,
    WorkerHungError,
)

from .faulty import HOLD_GIL, HOW, WHERE, FaultyFactory
from .helpers import CHUNK, assert_gone, make_policy, our_segments, policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2)
#: Deadlines short enough for CI; the healthy worker 0 needs none of them.
FAST = dict(startup_timeout_s=10.0, reset_timeout_s=2.0, timeout_s=None, stall_timeout_s=1.0)
#: What the driver raises for each way a worker fails.
EXPECTED = {"hang": WorkerHungError, "segv": WorkerDiedError, "exit": WorkerDiedError, "raise": WorkerError}


def children():
    """Child processes of this test process, without multiprocessing's resource tracker (started by the
    first spawn of the session and alive until it ends)."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker._pid
    return {c.pid for c in psutil.Process().children(recursive=True)} - {tracker}


@pytest.fixture
def nothing_left():
    """After the case: no process it started is alive and no segment of this process exists."""
    before = children()
    yield
    assert_gone(children() - before)
    assert our_segments() == []


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.deadline(60)  # with stall detection off the hang would block for ever
def test_worker_fault(where, how, nothing_left):
    with pytest.raises(EXPECTED[how]) as info:
        engine = RolloutEngine(FaultyFactory(where=where, how=how, after_steps=1), PROFILE, **FAST)
        engine.rollout(policy, 2)
    err = info.value
    # a worker error names the envs of its request (stage 0 holds env 2 of worker 1); a death or hang all of them
    assert err.command == where and err.env_ids == ([2] if (where, how) == ("chunk", "raise") else [2, 3]), str(err)
    if where != "init":
        with pytest.raises(ClosedError):
            engine.reset()


def test_sigkilled_worker_mid_rollout(nothing_left):
    engine = RolloutEngine(FaultyFactory(seeds=()), PROFILE, **FAST)

    def kill_worker_0(stage, result):
        os.kill(engine.worker_pids[0], signal.SIGKILL)

    with pytest.raises(WorkerDiedError, match=r"worker 0 \(envs \[0, 1\]\) died .*SIGKILL"):
        engine.rollout(policy, 3, on_chunk=kill_worker_0)


@pytest.mark.parametrize(
    "bad_policy, error, text",
    [
        (lambda obs: 1 / 0, ZeroDivisionError, "division by zero"),
        (lambda obs: np.zeros((3, CHUNK, 2), np.float32), ValueError, "policy output for stage 0 must have shape"),
        (lambda obs: np.full((2, CHUNK, 2), np.nan, np.float32), ValueError, "NaN or inf (first at [env, step, dim]"),
    ],
)
def test_policy_error_in_the_driver(bad_policy, error, text, nothing_left):
    with RolloutEngine(FaultyFactory(seeds=()), PROFILE, **FAST) as engine:
        with pytest.raises(error) as info:
            engine.rollout(bad_policy, 1)
        assert text in str(info.value)


def broken_policy():
    """Picklable factory of a policy that fails inside the policy process."""
    return lambda obs: obs["no such key"]


def test_policy_process_errors(nothing_left):
    with PolicyProcess(broken_policy, timeout_s=30) as remote, RolloutEngine(FaultyFactory(seeds=()), PROFILE,
                                                                             **FAST) as engine:
        with pytest.raises(WorkerError, match="policy process failed in 'forward'.*KeyError"):
            engine.rollout(remote, 1)
    with PolicyProcess(make_policy, timeout_s=30) as remote, RolloutEngine(FaultyFactory(seeds=()), PROFILE,
                                                                           **FAST) as engine:
        engine.reset()
        os.kill(remote.pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="policy process .*SIGKILL"):
            engine.rollout(remote, 1, reset=False)


# --- the driver itself: interrupted, terminated, killed ----------------------------------------------
DRIVER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    import numpy as np
    from behavior1k_fast.rollout import RolloutEngine, serve
    from tests.rollout.faulty import HOLD_GIL, FaultyFactory
    from tests.rollout.helpers import policy

    def announce(*words):
        print(*words, flush=True)

    if __name__ == "__main__":
        mode = sys.argv[1]
        hang = mode == "double-ctrl-c"
        how = HOLD_GIL if mode == "sigkill-holding-gil" else "hang"
        faulty = (1,) if hang or how == HOLD_GIL else ()
        engine = RolloutEngine(FaultyFactory(how=how, seeds=faulty), {{"num_env_subprocess": 2,
                               "total_num_envs": 4, "pipeline_stage_num": 2, "num_action_chunks": 4}},
                               timeout_s=None, stall_timeout_s=None)
        engine.reset()
        announce(os.getpid(), *engine.worker_pids)
        if hang:
            real_wait = serve.wait
            def wait(objects, timeout=None):  # tells the test that close() waits for the busy worker now
                if not getattr(wait, "told", False):
                    wait.told = True
                    announce("closing")
                return real_wait(objects, timeout)
            engine.submit(0, np.zeros((2, 4, 2), np.float32))  # worker 1 hangs in this chunk: busy
            try:
                announce("busy")
                engine.collect(0)
            except KeyboardInterrupt:
                serve.wait = wait
                engine.close()  # the second Ctrl-C arrives while this waits
        else:
            announce("busy")
            engine.rollout(policy, 10**6)
    """
)


def run_driver(tmp_path, mode, *signals_after):
    """Start the driver script in its own session, send ``signals_after`` as ``(line, signal, group)``: when
    the driver printed ``line``, ``signal`` goes to the driver (``group``: to its whole process group, as a
    terminal's Ctrl-C does). Returns (driver pid, worker pids, return code, stderr)."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=ROOT))
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    pids, workers = [], []
    try:
        owner, *pids = [int(p) for p in proc.stdout.readline().split()]
        workers = [psutil.Process(pid) for pid in pids]
        for line, sig, group in signals_after:
            while proc.stdout.readline().strip() != line:
                pass
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=60)  # EOF once every process holding stderr is gone
    finally:
        if proc.poll() is None:
            proc.kill()
        for worker in workers:  # a case that failed leaves no worker running (psutil: never a reused pid)
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
    assert len(pids) == 2, stderr
    return owner, pids, proc.returncode, stderr


def assert_driver_left_nothing(owner, pids):
    assert_gone(pids)
    assert our_segments(owner) == []


def test_double_ctrl_c_while_close_waits_for_a_busy_worker(tmp_path):
    owner, pids, code, stderr = run_driver(
        tmp_path, "double-ctrl-c", ("busy", signal.SIGINT, True), ("closing", signal.SIGINT, True)
    )
    assert code != 0 and "KeyboardInterrupt" in stderr
    assert_driver_left_nothing(owner, pids)
    assert "leaked" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_sigterm_closes_the_engine_and_dies_of_sigterm(tmp_path):
    owner, pids, code, stderr = run_driver(tmp_path, "sigterm", ("busy", signal.SIGTERM, False))
    assert code == -signal.SIGTERM, stderr
    assert_driver_left_nothing(owner, pids)
    assert "leaked" not in stderr and "Traceback" not in stderr, stderr


def test_workers_of_a_killed_driver_exit_quietly(tmp_path):
    owner, pids, code, stderr = run_driver(tmp_path, "sigkill", ("busy", signal.SIGKILL, False))
    assert code == -signal.SIGKILL
    assert_driver_left_nothing(owner, pids)  # owner watchdog; the resource tracker unlinks the segments
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_a_worker_holding_the_gil_in_native_code_dies_with_its_killed_driver_and_its_segments_go(tmp_path):
    """The driver SIGKILLed while worker 1 sleeps in a C call that holds the GIL (a simulator stuck in
    C++): the owner watchdog thread cannot run there; the kernel ends the worker with its parent
    (PR_SET_PDEATHSIG), and the resource tracker then unlinks the driver's segments."""
    owner, pids, code, stderr = run_driver(tmp_path, "sigkill-holding-gil", (HOLD_GIL, signal.SIGKILL, False))
    assert code == -signal.SIGKILL
    assert_driver_left_nothing(owner, pids)
    assert "Traceback" not in stderr, stderr


def killed_with_its_group(tmp_path):
    """A driver SIGKILLed with its whole process group (its resource tracker too, as a cluster scheduler
    kills a job): its pid and the segments it left."""
    owner, pids, code, _ = run_driver(tmp_path, "sigkill", ("busy", signal.SIGKILL, True))
    assert code == -signal.SIGKILL
    assert_gone(pids)
    left = our_segments(owner)
    assert left  # nothing of the dead driver's own removes them
    return owner, pids, left


def test_segments_of_a_driver_killed_with_its_group_go_at_the_next_engine_start(tmp_path, nothing_left):
    owner, pids, _ = killed_with_its_group(tmp_path)
    with RolloutEngine(FaultyFactory(seeds=()), PROFILE, **FAST):
        assert_driver_left_nothing(owner, pids)


def test_doctor_clean_removes_the_segments_of_a_driver_killed_with_its_group(tmp_path, capsys):
    import json

    from behavior1k_fast.tools.cli import main

    owner, pids, left = killed_with_its_group(tmp_path)
    assert main(["doctor", "--clean", "--json"]) == 0
    removed = [name for name, _ in json.loads(capsys.readouterr().out)["shared_memory"]["removed"]]
    assert set(left) <= set(removed)
    assert_driver_left_nothing(owner, pids)


def test_ctrl_c_while_a_worker_starts_neither_kills_it_nor_prints_a_traceback(capfd, nothing_left):
    from behavior1k_fast.rollout.policy import _policy_main
    from behavior1k_fast.rollout.protocol import Command
    from behavior1k_fast.rollout.serve import CLOSE_GRACE_S, ProcessChannel, stop_processes

    channel = ProcessChannel(_policy_main, (make_policy,), "ctrl-c-at-start", "policy process")
    try:
        signals = 0
        while not channel.conn.poll(0.01) and channel.proc.is_alive():  # Ctrl-C all through the start-up
            os.kill(channel.pid, signal.SIGINT)
            signals += 1
        assert channel.receive(Command.INIT, 60).payload is None  # the INIT reply: it started
        assert signals > 0 and channel.proc.is_alive()
    finally:
        stop_processes([channel], CLOSE_GRACE_S)
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_a_ctrl_c_of_the_driver_while_it_starts_a_worker_is_delivered_after_the_start():
    from behavior1k_fast.rollout import serve

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with serve._children_ignore_sigint():
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                reached = True  # the signal waits for the start to finish
        assert reached and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_closed_vector_env_raises_closed_error_and_starts_no_workers(nothing_left):
    from behavior1k_fast.rollout import EngineVectorEnv

    env = EngineVectorEnv(FaultyFactory(seeds=()), PROFILE, **FAST)
    env.reset(seed=1)
    pids = env.engine.worker_pids
    env.close()
    assert_gone(pids)
    with pytest.raises(ClosedError):
        env.reset(seed=7)  # used to start a new engine and its workers, which a later close() left running
    env.close()


@pytest.mark.deadline(120)
def test_a_factory_hanging_in_init_in_every_worker_fails_within_the_startup_deadline(nothing_left, monkeypatch):
    import time

    from behavior1k_fast.rollout.transports import process

    monkeypatch.setattr(process, "CLOSE_GRACE_S", 600.0)  # a grace for workers still building would show
    start = time.monotonic()
    with pytest.raises(WorkerHungError, match=r"worker 0 \(envs \[0, 1\]\) hung in 'init'.*startup_timeout_s=2"):
        RolloutEngine(FaultyFactory(where="init", how="hang", seeds=(0, 1)), PROFILE, **dict(FAST, startup_timeout_s=2.0))
    assert time.monotonic() - start < 60  # the deadline and the kills, not a close grace for the other worker


@pytest.mark.parametrize("schedule", ["barrier", "async"])
def test_close_inside_on_chunk_ends_the_rollout_with_closed_error_after_the_callback(schedule, nothing_left):
    engine = RolloutEngine(FaultyFactory(seeds=()), PROFILE.replace(schedule=schedule), **FAST)
    pids, returned = engine.worker_pids, []

    def close_it(stage, result):
        engine.close()
        returned.append(stage)  # the callback itself runs to its end

    with pytest.raises(ClosedError, match="the rollout engine is closed"):
        engine.rollout(policy, 3, on_chunk=close_it)
    assert len(returned) == 1
    assert_gone(pids)


@pytest.mark.deadline(120)
def test_a_second_thread_rollout_fails_at_once_and_the_first_completes(nothing_left):
    import threading

    from behavior1k_fast.rollout import EngineBusyError

    engine = RolloutEngine(FaultyFactory(seeds=()), PROFILE, **FAST)
    inside, release, outcome = threading.Event(), threading.Event(), {}

    def slow_policy(obs):
        inside.set()
        release.wait(60)
        return policy(obs)

    def first():
        outcome["stats"] = engine.rollout(slow_policy, 2)

    thread = threading.Thread(target=first, name="trainer")
    thread.start()
    try:
        assert inside.wait(60)
        for call in (lambda: engine.rollout(policy, 1), engine.reset, lambda: engine.collect(0)):
            with pytest.raises(EngineBusyError, match="thread 'trainer' is running rollout\\(\\) on this engine"):
                call()
    finally:
        release.set()
        thread.join(60)
    assert outcome["stats"].own_actions.sum() == 2 * 4 * CHUNK  # the first rollout was not disturbed
    assert engine.rollout(policy, 1).own_actions.sum() == 4 * CHUNK  # and the engine is free again
    engine.close()


@pytest.mark.deadline(120)
def test_workers_started_and_restarted_from_a_thread_that_ended_go_on_serving(nothing_left):
    """The kernel ends a worker with the thread that started it (PR_SET_PDEATHSIG): the engine starts its
    workers from a thread that lasts, so an engine built, and a worker respawned, in a trainer's short-lived
    thread keeps working after that thread is gone."""
    built = {}

    def build_and_restart():
        engine = RolloutEngine(FaultyFactory(seeds=()), PROFILE, **FAST, restart_workers=True)
        engine.reset()
        os.kill(engine.worker_pids[1], signal.SIGKILL)
        engine.rollout(policy, 1, reset=False)  # respawns worker 1 from this thread
        assert engine.restarts == 1
        built["engine"] = engine

    thread = threading.Thread(target=build_and_restart, name="short-lived")
    thread.start()
    thread.join()
    engine = built["engine"]
    with engine:
        pids = engine.worker_pids
        engine.rollout(policy, 3)
        assert engine.restarts == 1 and engine.worker_pids == pids


@pytest.mark.parametrize("how", [*HOW, HOLD_GIL])
@pytest.mark.deadline(60)  # deadlines are off: only close_timeout_s ends a hang
def test_a_worker_fault_inside_a_collector_batch_with_deadlines_off_ends_in_close_with_nothing_left(how, nothing_left):
    from behavior1k_fast.rollout.collector import Collector

    forwards = []
    in_flight = threading.Event()

    def counting(obs):
        forwards.append(1)
        if len(forwards) == 2:  # both stages' first chunks sent: the faulty worker's is in flight
            in_flight.set()
        return policy(obs)

    engine = RolloutEngine(FaultyFactory(where="chunk", how=how, after_steps=1), PROFILE, timeout_s=None,
                           reset_timeout_s=None, stall_timeout_s=None)
    try:
        with Collector(engine, counting, 1000, close_timeout_s=0.5) as collector:
            in_flight.wait()
            if how not in ("hang", HOLD_GIL):  # a death or an error reaches the trainer
                with pytest.raises(EXPECTED[how]):
                    next(collector)
        # closed by the failure, or for a hang by close() once the thread could not reach a chunk boundary
        assert engine.state.value == "closed"
    finally:
        engine.close()
