"""Interrupt-safe shutdown: close() finishes or stays retryable under Ctrl-C, and leaves nothing behind."""

import signal
import threading

import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import RolloutEngine, serve
from behavior1k_fast.rollout.shm import SharedBuffers
from behavior1k_fast.rollout.shutdown import deferred_interrupts

from .faulty import FaultyFactory
from .helpers import CHUNK, assert_gone, our_segments

PROFILE = RolloutProfile(num_env_processes=2, total_num_envs=4, chunk_size=CHUNK, pipeline_stages=2)


def busy_engine():
    """An engine whose worker 1 is stuck in a chunk (busy: it will not read a close request)."""
    engine = RolloutEngine(FaultyFactory(how="hang"), PROFILE, timeout_s=None, stall_timeout_s=None)
    engine.reset()
    engine.submit(0, np.zeros((2, CHUNK, 2), np.float32))
    return engine


def test_ctrl_c_while_close_waits_for_a_busy_worker_cuts_the_wait_and_still_cleans_up(monkeypatch):
    engine = busy_engine()
    pids = engine.worker_pids
    waits = []
    real_wait = serve.wait

    def wait_then_ctrl_c(objects, timeout=None):
        waits.append(timeout)
        if len(waits) == 1:
            signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C during the grace wait
        return real_wait(objects, timeout)

    monkeypatch.setattr(serve, "wait", wait_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        engine.close()
    assert len(waits) == 1  # the grace wait ended at the interrupt instead of running its 5 s
    assert_gone(pids)
    assert our_segments() == []


def test_close_interrupted_inside_its_cleanup_is_finished_by_the_next_call(monkeypatch):
    engine = busy_engine()
    pids = engine.worker_pids
    real_unlink = SharedBuffers.unlink
    calls = []

    def unlink_interrupted_once(self):
        calls.append(self.spec.name)
        if len(calls) == 2:
            raise KeyboardInterrupt  # a second Ctrl-C lands in the middle of the cleanup
        real_unlink(self)

    monkeypatch.setattr(SharedBuffers, "unlink", unlink_interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        engine.close()
    assert_gone(pids)  # the workers were killed before the segments were touched
    assert len(our_segments()) == 5  # one of the six unlinked before the interrupt
    engine.close()  # retry: the rest is done now
    assert our_segments() == []
    engine.close()  # and again: nothing left to do


def test_deferred_interrupts_hold_nothing_outside_the_main_thread():
    seen = []

    def in_thread():
        with deferred_interrupts() as interrupted:
            seen.append((signal.getsignal(signal.SIGINT), interrupted.is_set()))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == [(before, False)]
