"""Collect while the trainer trains: an iterator of batches filled by a thread of its own.

TorchRL's collector convention, over :class:`~.trajectory.TrajectoryRecorder` and any schedule::

    with Collector(engine, behaviour_policy, rounds_per_batch=8) as collector:
        for batch in collector:                    # a Trajectory, [rounds, envs, ...]
            update(learner, batch)                 # PPO on batch b while batch b + 1 is collected
            collector.update_policy_weights(learner)

A thread (``behavior1k_fast-collector``) drives the engine: batch after batch, ``recorder.rollout(...,
reset=False)`` (episodes run on across batches; the first batch resets the engine), each finished batch put
in a queue the trainer's ``next()`` takes from. The behaviour policy and the trainer's model are two
objects: :meth:`Collector.update_policy_weights` takes a snapshot of the trainer's weights at the call (so
the trainer may go on changing its own) and the collecting thread loads the newest snapshot into the
behaviour policy right before its next forward, so weights change only at chunk boundaries and never
while a forward runs.

Versions and lag. The weights the collector was built with are version 0; each ``update_policy_weights``
call is the next version. Every chunk records the version that chose it, in the batch's extras under
:data:`WEIGHTS_VERSION_KEY` (int64 ``[R, E]``), beside whatever the policy returned with its actions (its
log-probs: the behaviour policy's, against which PPO's ratio corrects the lag, per sample, as in
asynchronous PPO). ``max_lag`` bounds how far behind the acting weights may be: a forward for batch ``b``
waits until version ``b - max_lag`` has been posted. A trainer that posts its update after each batch
thus trains on batch ``b`` with version ``b`` from samples of versions ``>= b - max_lag``: ``max_lag=1``
collects batch ``b + 1`` while the trainer trains on batch ``b``; ``max_lag=0`` is the serial schedule
(rollout, then update, then rollout), through the same code. A trainer that asks for the next batch
without posting an update releases that wait (no deadlock: the collector goes on with the weights it has).

Memory: at most ``max_queued`` finished batches wait in the queue; with the one being collected and the
one the trainer holds, at most ``max_queued + 2`` batches (:attr:`Trajectory.nbytes` each) are alive.

Errors: an exception in the collecting thread (a worker error, the policy's own) is raised by the
trainer's next ``next()``, the original object with its traceback; the engine has closed itself (as
:meth:`~.engine.RolloutEngine.rollout` does on any failure). From then on the collector is done, and says
why: every later ``next()`` and :meth:`Collector.update_policy_weights` raises
:class:`~.errors.ClosedError` naming that exception (never a clean end of the iteration, never a new
version).

Ending early. :meth:`Collector.close` (and the ``with`` block's exit) stops collection and leaves the
engine usable: between batches at once; within a batch at the next chunk boundary (the collecting thread's
next forward raises :class:`~.errors.StopRollout`), where the engine receives the chunks in flight, drops
them with the unfinished batch, and is idle with its envs mid-episode (``engine.rollout``, ``reset`` and a
new ``Collector`` on it work). Leaving a ``for batch in collector:`` loop early (``break``, an exception)
closes the collector the same way: iterating runs a generator whose end calls :meth:`~Collector.close`,
so the natural "stop once success >= 0.8" needs no ``with`` (TorchRL's collectors need ``shutdown()``
there; an iterator that kept collecting into a queue nobody reads would hold the engine). ``next()`` on
the collector itself does not: close it. When the thread cannot reach a chunk boundary within
``close_timeout_s`` (a worker hung with deadlines off), ``close()`` closes the engine, which ends the
thread's wait on that worker, and returns: never a hang. ``close()`` from the collecting thread itself
(inside ``load_weights`` or the policy) asks it to stop and returns; the trainer's next ``next()`` ends the
iteration. ``total_batches`` ends the iteration cleanly after that many batches, the engine usable. The
engine is driven by the collecting thread only: another thread's call on it meanwhile raises
:class:`~.errors.EngineBusyError`.

Weights are checked at the post against the behaviour policy's ``state_dict()`` (where it has one and the
default ``load_state_dict`` loads them): the same keys, each of the same shape, torch tensors for a torch
module; a mismatch is a ``ValueError`` / ``TypeError`` naming the key, and collection goes on untouched.

GPU: with ``device="cuda:i"`` the behaviour policy's forwards run on a CUDA stream of their own, and a
snapshot taken on the trainer's stream is waited for on that stream before it is loaded; each snapshot
tensor is then marked as used by that stream (``record_stream``), so the caching allocator does not hand
its memory to the trainer's stream before the load's copies ran.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..core.checks import check_int, check_number, check_optional_positive_int, check_positive_int
from .engine import EngineState, RolloutEngine
from .errors import ClosedError, StopRollout, public_type_name
from .policy import Policy, call_policy, split_policy_output
from .trajectory import Trajectory, TrajectoryRecorder

#: Key of the extras (int64 ``[R, E]`` in a batch) that holds the weights version that chose each chunk.
WEIGHTS_VERSION_KEY = "weights_version"

#: Seconds between checks of the stop flag (a full queue) or of the thread's end (an empty one).
_POLL_S = 0.05
#: Default ``close_timeout_s``: seconds :meth:`Collector.close` waits for the collecting thread to reach a
#: chunk boundary and receive the chunks in flight (about two chunks of a slow simulator) before it closes
#: the engine to end the thread's wait.
CLOSE_TIMEOUT_S = 10.0

logger = logging.getLogger(__name__)


class CollectorState(enum.Enum):
    """What the collecting thread is doing."""

    #: Inside a rollout (stepping, or in a forward).
    COLLECTING = "collecting"
    #: Before a forward, waiting for the weights version ``max_lag`` asks for.
    WAITING_WEIGHTS = "waiting for weights"
    #: A finished batch waits for room in the queue (the trainer is behind).
    WAITING_QUEUE = "waiting for queue room"
    #: The thread ended (``total_batches`` reached, closed, or failed).
    STOPPED = "stopped"


@dataclass
class CollectorTimes:
    """Seconds spent so far, per side (for a time-per-sample breakdown)."""

    #: Collecting thread: inside rollouts (stepping and forwards).
    collect_s: float = 0.0
    #: Collecting thread: waiting for the weights version ``max_lag`` asks for.
    wait_weights_s: float = 0.0
    #: Collecting thread: waiting for room in the queue.
    wait_queue_s: float = 0.0
    #: Trainer: blocked in ``next()`` for a batch.
    wait_batch_s: float = 0.0


class _Failed:
    """What the collecting thread queues when it fails: the exception, raised by the trainer's next()."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()  # queued once the thread ends without failure


@dataclass
class _Weights:
    version: int
    state: Any
    #: A CUDA event recorded on the trainer's stream after the snapshot was taken (``None`` on CPU).
    ready: Any = None


class Collector:
    """Batches of ``rounds_per_batch`` rounds from ``engine``, collected while the trainer trains (module docs).

    Args:
        engine: a :class:`~.engine.RolloutEngine`, reset or not; the collector drives it from its thread.
        policy: the behaviour policy (any engine policy: a torch module, a callable, a
            :class:`~.policy.PolicyProcess`); returns actions, or ``(actions, extras)`` with its log-probs.
        rounds_per_batch: rounds (one chunk per stage each) per batch.
        max_lag: the most weight versions a chunk of batch ``b`` may be behind ``b`` (``0``: serial).
        max_queued: finished batches that may wait for the trainer (backpressure).
        total_batches: stop after this many batches (``None``: until :meth:`close`).
        load_weights: ``load_weights(policy, weights)`` puts a snapshot into the behaviour policy;
            default ``policy.load_state_dict(weights)``.
        device: ``None`` / ``"cpu"``, or the CUDA device of the behaviour policy (``"cuda:0"``): its
            forwards then run on a CUDA stream of their own.
        tensors, pin_memory: the batch's output kind (:class:`~.trajectory.TrajectoryRecorder`).
        close_timeout_s: seconds :meth:`close` waits for the collecting thread to stop at a chunk boundary
            before it closes the engine (module docs, "Ending early").

    Every batch runs the profile's schedule (``barrier``, ``async`` or ``lookahead``).

    Raises:
        TypeError, ValueError: on a bad argument, before the thread starts.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        policy: Policy,
        rounds_per_batch: int,
        *,
        max_lag: int = 1,
        max_queued: int = 1,
        total_batches: int | None = None,
        load_weights: Callable[[Any, Any], None] | None = None,
        device: Any = None,
        tensors: bool = False,
        pin_memory: bool = False,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ):
        if not callable(policy):
            raise TypeError(f"policy must be callable, got {policy!r}")
        self.rounds_per_batch = check_positive_int("rounds_per_batch", rounds_per_batch)
        self.max_lag = check_int("max_lag", max_lag, low=0)
        self.max_queued = check_positive_int("max_queued", max_queued)
        self.total_batches = check_optional_positive_int("total_batches", total_batches)
        if load_weights is not None and not callable(load_weights):
            raise TypeError(f"load_weights must be a callable load_weights(policy, weights), got {load_weights!r}")
        self.close_timeout_s = check_number("close_timeout_s", close_timeout_s, low=0.0, high=threading.TIMEOUT_MAX,
                                            low_open=True, unit="of seconds")
        if engine.state is EngineState.CLOSED:
            raise ClosedError("the engine is closed: a collector needs an open one")
        self._recorder = TrajectoryRecorder(engine, tensors=tensors, pin_memory=pin_memory)
        self.engine = engine
        self.policy = policy
        self._load_weights = load_weights
        #: key -> (shape, torch tensor?) of the behaviour policy's state dict, what a post must match
        #: (``None``: not checked; a ``load_weights`` of the user's decides what it takes).
        self._expected = _state_layout(policy) if load_weights is None else None
        self._stream = _policy_stream(device)
        #: The newest weights version posted (0: the weights the policy was built with).
        self.version = 0
        #: The stats of the rollout of the batch last handed out (``None`` before the first).
        self.last_stats: Any = None
        self.times = CollectorTimes()
        self._pending: _Weights | None = None
        self._acting = 0  # the version loaded into the behaviour policy
        self._collecting = 0  # index of the batch being collected
        self._requested = 0  # batches the trainer has asked for (next() calls)
        self._state = CollectorState.COLLECTING
        self._stop = False
        self._done = False
        #: The exception the collecting thread failed with (``None``: it did not).
        self._failure: BaseException | None = None
        self._cond = threading.Condition()
        self._queue: queue.Queue = queue.Queue(maxsize=self.max_queued)
        self._thread = threading.Thread(target=self._run, name="behavior1k_fast-collector", daemon=True)
        self._thread.start()

    # --- the trainer's side ---------------------------------------------------------------------
    @property
    def state(self) -> CollectorState:
        return self._state

    @property
    def queued(self) -> int:
        """Finished batches waiting for the trainer (at most ``max_queued``)."""
        return self._queue.qsize()

    def __iter__(self) -> Iterator[Trajectory]:
        """The batches, until ``total_batches`` or :meth:`close`; leaving the loop early (``break``, an
        exception) closes the collector at once (module docs, "Ending early")."""
        try:
            while True:
                try:
                    batch = next(self)
                except StopIteration:
                    return
                yield batch
        finally:
            self.close()

    def __next__(self) -> Trajectory:
        """The next batch; raises the collecting thread's exception if it failed (then
        :class:`~.errors.ClosedError` naming it, every time), ``StopIteration`` after ``total_batches``
        batches or :meth:`close`."""
        if self._done:
            self.close()  # a close() from the collecting thread left the join to the trainer's side
            self._raise_if_failed()
            raise StopIteration
        with self._cond:
            self._requested += 1
            self._cond.notify_all()
        start = time.perf_counter()
        item = self._take()
        self.times.wait_batch_s += time.perf_counter() - start
        if item is _END:
            self._done = True
            self._raise_if_failed()
            raise StopIteration
        if isinstance(item, _Failed):
            self._done = True
            raise item.exc
        batch, self.last_stats = item
        return batch

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ClosedError(self._failure_text()) from self._failure

    def _failure_text(self) -> str:
        lines = str(self._failure).strip().splitlines()
        line = f": {lines[0][:200]}" if lines else ""
        return f"the collector stopped after {public_type_name(self._failure)}{line}"

    def _take(self) -> Any:
        """The next queued item; ``_END`` once the thread has ended and nothing is left."""
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _END

    def update_policy_weights(self, weights: Any) -> int:
        """Post new weights for the behaviour policy: a torch module (its ``state_dict()``) or a mapping of
        tensors / arrays, copied now; the collecting thread loads the newest posted copy before its next
        forward. Returns the new version."""
        if self._load_weights is None and not hasattr(self.policy, "load_state_dict"):
            raise TypeError(f"the behaviour policy {type(self.policy).__name__} has no load_state_dict: pass "
                            "load_weights=(policy, weights) to the Collector")
        if hasattr(weights, "state_dict") and callable(weights.state_dict):
            weights = weights.state_dict()
        if not isinstance(weights, Mapping):
            raise TypeError(f"weights must be a torch module or a mapping of tensors or arrays, got "
                            f"{type(weights).__name__}")
        with self._cond:
            self._check_open()
        if self._expected is not None:
            _check_layout(weights, self._expected)
        snapshot = {key: _copy(value) for key, value in weights.items()}
        ready = None
        if self._stream is not None:
            ready = sys.modules["torch"].cuda.Event()
            ready.record()  # on the trainer's current stream, after the copies
        with self._cond:
            self._check_open()
            self.version += 1
            self._pending = _Weights(self.version, snapshot, ready)
            self._cond.notify_all()
        return self.version

    def _check_open(self) -> None:
        self._raise_if_failed()
        if self._stop:
            raise ClosedError("the collector is closed")

    def close(self) -> None:
        """Stop collecting; the engine stays usable (module docs, "Ending early"). Waits at most
        ``close_timeout_s`` for the collecting thread, then closes the engine (a hung worker gets its close
        grace, 5 s, before it is killed) and waits ``close_timeout_s`` more: it returns whatever the workers
        do. Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._done = True
        if threading.current_thread() is self._thread:
            return  # the thread stops at its next chunk boundary; the trainer's side waits for it
        self._thread.join(self.close_timeout_s)
        if self._thread.is_alive():
            logger.warning("the collecting thread did not reach a chunk boundary within close_timeout_s=%g s (a "
                           "worker hangs?): closing the engine", self.close_timeout_s)
            self.engine.close()
            self._thread.join(self.close_timeout_s)
        while True:  # batches nobody will take
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Collector({self.rounds_per_batch} rounds per batch, max_lag={self.max_lag}, "
                f"max_queued={self.max_queued}, version={self.version}, state={self._state.value!r})")

    # --- the collecting thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while self.total_batches is None or self._collecting < self.total_batches:
                with self._cond:
                    if self._stop:
                        break
                self._state = CollectorState.COLLECTING
                start = time.perf_counter()
                try:
                    stats, batch = self._recorder.rollout(self._act, self.rounds_per_batch,
                                                          reset=self._collecting == 0)
                except StopRollout:  # close(): the engine dropped the chunks in flight and is idle
                    break
                self.times.collect_s += time.perf_counter() - start
                self._collecting += 1
                if not self._put((batch, stats)):
                    break
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the trainer
            with self._cond:
                if self._stop:  # after close(): the engine says why it closed (close() may have closed it)
                    return
                self._failure = exc
            self._put(_Failed(exc))
        finally:
            self._state = CollectorState.STOPPED

    def _put(self, item: Any) -> bool:
        """Queue ``item``, waiting for room; ``False`` if the collector was closed meanwhile."""
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            pass
        self._state = CollectorState.WAITING_QUEUE
        start = time.perf_counter()
        try:
            while not self._stop:
                try:
                    self._queue.put(item, timeout=_POLL_S)
                    return True
                except queue.Full:
                    pass
            return False
        finally:
            self.times.wait_queue_s += time.perf_counter() - start
            self._state = CollectorState.COLLECTING

    def _act(self, obs: Mapping[str, np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
        """One forward of the behaviour policy at a chunk boundary: the lag wait, the newest weights, the
        forward, its weights version in the extras."""
        self._await_weights()
        with self._on_policy_stream():
            out = call_policy(self.policy, obs)
        batch = len(next(iter(obs.values())))
        actions, extras = split_policy_output(out, batch)  # the engine's own check of a policy's output
        return actions, {**extras, WEIGHTS_VERSION_KEY: np.full(batch, self._acting, dtype=np.int64)}

    def _await_weights(self) -> None:
        start = time.perf_counter()
        with self._cond:
            needed = self._collecting - self.max_lag
            while not self._stop and self.version < needed and self._requested <= self._collecting:
                self._state = CollectorState.WAITING_WEIGHTS
                self._cond.wait()
            self._state = CollectorState.COLLECTING
            if self._stop:
                raise StopRollout("the collector was closed")
            pending, self._pending = self._pending, None
        self.times.wait_weights_s += time.perf_counter() - start
        if pending is not None:
            self._load(pending)

    def _load(self, weights: _Weights) -> None:
        if weights.ready is not None:
            self._stream.wait_event(weights.ready)
        with self._on_policy_stream():
            self._load_into_policy(weights.state)
        if self._stream is not None:  # the snapshot is freed after this: not before the load's copies ran
            for value in weights.state.values():
                if getattr(value, "is_cuda", False):
                    value.record_stream(self._stream)
        self._acting = weights.version

    def _on_policy_stream(self) -> Any:
        """The behaviour policy's CUDA stream as the current one (nothing on the CPU)."""
        if self._stream is None:
            return contextlib.nullcontext()
        return sys.modules["torch"].cuda.stream(self._stream)

    def _load_into_policy(self, state: Any) -> None:
        if self._load_weights is not None:
            self._load_weights(self.policy, state)
        else:
            self.policy.load_state_dict(state)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _state_layout(policy: Any) -> dict[str, tuple[tuple[int, ...], bool]] | None:
    """key -> (shape, torch tensor?) of ``policy.state_dict()``; ``None`` where it has no ``state_dict``."""
    state_dict = getattr(policy, "state_dict", None)
    if not callable(state_dict):
        return None
    return {key: (tuple(np.shape(value)), _is_tensor(value)) for key, value in state_dict().items()}


def _check_layout(weights: Mapping[str, Any], expected: Mapping[str, tuple[tuple[int, ...], bool]]) -> None:
    """Refuse ``weights`` unless they have ``expected``'s keys, shapes and kinds (one line naming the key)."""
    def first(keys: list[str]) -> str:
        return f"{keys[0]!r}" + (f" (and {len(keys) - 1} more)" if len(keys) > 1 else "")

    missing = [key for key in expected if key not in weights]
    if missing:
        raise ValueError(f"weights are missing {first(missing)} of the behaviour policy's state dict")
    extra = [key for key in weights if key not in expected]
    if extra:
        raise ValueError(f"weights have {first(extra)}, which the behaviour policy's state dict lacks")
    for key, value in weights.items():
        shape, tensor = expected[key]
        if tensor and not _is_tensor(value):
            kind = type(value)
            raise TypeError(f"weights[{key!r}] is a {kind.__module__}.{kind.__qualname__}; the behaviour policy "
                            "(a torch module) takes torch tensors")
        if tuple(np.shape(value)) != shape:
            raise ValueError(f"weights[{key!r}] has shape {tuple(np.shape(value))}, the behaviour policy's has {shape}")


def _copy(value: Any) -> Any:
    """A copy of one weight that the trainer's later updates cannot change."""
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    return np.array(value, copy=True)


def _policy_stream(device: Any) -> Any:
    """A CUDA stream on ``device`` for the behaviour policy's forwards, or ``None`` for the CPU."""
    if device is None or str(device) == "cpu":
        return None
    if not str(device).startswith("cuda"):
        raise ValueError(f"device must be None, 'cpu' or a CUDA device such as 'cuda:0', got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r} needs a CUDA device, and torch.cuda.is_available() is False")
    return torch.cuda.Stream(device=torch.device(device))
