"""Calling policies: in the driver, or in a process of their own (:class:`PolicyProcess`).

A policy maps a batched observation dict (key -> ``[B, ...]``) to chunk actions ``[B, N, action_dim]``,
or to ``(actions, extras)``: ``extras`` is a dict of arrays (or tensors) with the same leading batch
dimension ``B``, the policy's own outputs for that chunk (e.g. ``logprob``, ``value``); the engine keeps
them with the chunk they produced (:attr:`~.chunk.ChunkResult.extras`).
The engine hands the same observation arrays to ``on_chunk`` and returns them from ``reset()``, so a policy
must not be able to change them: any callable gets read-only views of the numpy arrays (no copy; writing
into one raises ``ValueError``), and a ``torch.nn.Module``, since torch has no read-only tensors, gets
tensors over copies of them, under ``torch.inference_mode()``. (A callable that turns the views into
tensors with ``torch.from_numpy`` gets PyTorch's warning about non-writable arrays: copy first, e.g.
``torch.tensor(x)`` or ``np.array(x)``.) Tensors that come back (actions and extras) are moved to CPU
numpy arrays; a floating dtype numpy lacks (``bfloat16``, the usual dtype of a GPU VLA, and the float8
types) becomes float32, which holds every such value exactly. The engine keeps copies of what it applied
(extras here, actions where it casts them to the action dtype), so a policy may reuse and overwrite its
output buffers after it returned them.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..core.checks import check_picklable, check_positive_int, check_seconds
from ..core.profile import AUTO_LEAD, RolloutProfile, auto_lead_cap
from .errors import ClosedError
from .protocol import Command, Failure, Forward, Ok, Reply, Request, unwrap
from .serve import CLOSE_GRACE_S, ProcessChannel, serve, stop_processes
from .shutdown import close_on_sigterm, deferred_interrupts, release

#: Key of the policy input that holds each env's committed actions ``[B, d, action_dim]`` under the
#: ``lookahead`` schedule (:mod:`.schedules.lookahead`): the actions of its current chunk still to run after
#: the observation the next chunk is chosen from. A policy that ignores them is allowed.
COMMITTED_KEY = "committed_actions"

#: A policy maps a batched observation dict (key -> [B, ...]) to chunk actions [B, N, action_dim], or to
#: (actions, extras) with extras a dict of [B, ...] arrays or tensors.
Policy = Callable[[dict[str, Any]], Any]


def committed_width(profile: RolloutProfile) -> int:
    """Columns of the committed actions in a ``lookahead`` policy's input under ``profile``: the lead d, or
    :func:`~behavior1k_fast.core.profile.auto_lead_cap` for ``lookahead_steps="auto"`` (the lead is then
    measured, and the committed actions fill the last d columns, so the input keeps one shape); 0 under any
    other schedule."""
    if profile.schedule != "lookahead":
        return 0
    if profile.lookahead_steps == AUTO_LEAD:
        return auto_lead_cap(profile.chunk_size)
    return int(profile.lookahead_steps)


@dataclass(frozen=True)
class CommittedActions:
    """What a ``lookahead`` policy finds in its input besides the backend's observations: under :attr:`key`,
    each env's actions of its current chunk still to run after the observation the next chunk is chosen
    from, ``[batch, width, action_dim]`` in :attr:`dtype`, right-aligned, zeros where they do not run (the
    episode ended before the lead, the env sits the chunk out, the rollout's first chunk). A policy (or a
    trainer sizing its network) reads its shape here instead of from the schedule.

    >>> spec = CommittedActions.from_profile(RolloutProfile(schedule="lookahead", chunk_size=8,
    ...                                                     lookahead_steps=3), action_dim=2)
    >>> spec.key, spec.shape(4), spec.features
    ('committed_actions', (4, 3, 2), 6)
    """

    #: The policy input key (:data:`COMMITTED_KEY`).
    key: str
    #: Columns, :func:`committed_width` of the profile (0: not a lookahead profile, no committed actions).
    width: int
    action_dim: int
    #: The engine's action dtype (``RolloutEngine.action_dtype``).
    dtype: np.dtype

    @classmethod
    def from_profile(cls, profile: RolloutProfile, action_dim: int, dtype: Any = np.float32) -> "CommittedActions":
        """The committed actions of an engine with ``profile``, ``action_dim`` and action ``dtype``
        (``RolloutEngine.action_dtype``; default float32)."""
        if not isinstance(profile, RolloutProfile):
            raise TypeError(f"profile must be a RolloutProfile, got {profile!r}")
        action_dim = check_positive_int("action_dim", action_dim)
        return cls(COMMITTED_KEY, committed_width(profile), action_dim, np.dtype(dtype))

    def shape(self, batch: int) -> tuple[int, int, int]:
        """The array's shape for ``batch`` envs."""
        return (batch, self.width, self.action_dim)

    @property
    def features(self) -> int:
        """Numbers per env once flattened (``width * action_dim``)."""
        return self.width * self.action_dim

    def zeros(self, batch: int) -> np.ndarray:
        """No committed action for ``batch`` envs."""
        return np.zeros(self.shape(batch), self.dtype)


#: Floating tensor dtypes numpy has (any other floating dtype is widened to float32 on its way out).
_NUMPY_FLOATS = ("torch.float16", "torch.float32", "torch.float64")


def to_numpy(value: Any, what: str) -> Any:
    """A tensor as a CPU numpy array (module docs for dtypes numpy lacks); anything else as it is. ``what``
    names the output in the ``TypeError`` of a dtype numpy cannot take."""
    if not (hasattr(value, "detach") and hasattr(value, "cpu")):
        return value
    tensor = value.detach().cpu()
    if tensor.is_floating_point() and str(tensor.dtype) not in _NUMPY_FLOATS:
        tensor = tensor.float()
    try:
        return tensor.numpy()
    except TypeError as exc:
        raise TypeError(f"{what} is a tensor of dtype {tensor.dtype}, which numpy cannot hold ({exc}): return a "
                        f"float or int dtype") from None


def call_policy(policy: Policy, obs: Mapping[str, np.ndarray]) -> Any:
    """One forward of ``policy`` on ``obs`` (see module docs); returns what it returned (actions, or an
    ``(actions, extras)`` pair), with tensors as numpy arrays."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(policy, torch.nn.Module):
        with torch.inference_mode():
            out = policy({k: torch.from_numpy(np.array(v)) for k, v in obs.items()})
    else:
        out = policy({k: _read_only(v) for k, v in obs.items()})
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping):
        return (to_numpy(out[0], "the policy's actions"),
                {key: to_numpy(value, f"the policy's extras[{key!r}]") for key, value in out[1].items()})
    return to_numpy(out, "the policy's actions")


def split_policy_output(out: Any, batch: int, argname: str = "policy output") -> tuple[Any, dict[str, np.ndarray]]:
    """``(actions, extras)`` of a :func:`call_policy` result for a batch of ``batch`` envs: ``extras`` is
    ``{}`` when the policy returned actions only, else checked here (a dict of str -> numpy arrays of shape
    ``[batch, ...]``) and copied (the policy may overwrite its buffers later). The actions are returned
    unchecked (the engine checks them against the chunk)."""
    if not isinstance(out, tuple):
        return out, {}
    if len(out) != 2 or not isinstance(out[1], Mapping):
        raise TypeError(
            f"{argname} must be actions or an (actions, extras dict) pair, got a tuple of "
            f"{len(out)} ({', '.join(type(o).__name__ for o in out)})"
        )
    actions, extras = out
    for key, value in extras.items():
        if not isinstance(key, str):
            raise TypeError(f"{argname}: extras keys must be str, got {key!r}")
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{argname}: extras[{key!r}] must be an array or tensor, got {type(value).__name__}")
        if value.ndim < 1 or value.shape[0] != batch:
            raise ValueError(
                f"{argname}: extras[{key!r}] must have a leading batch dimension of {batch}, got shape {value.shape}"
            )
    return actions, {key: np.array(value) for key, value in extras.items()}


def _read_only(array: Any) -> Any:
    """A view of ``array`` that cannot be written (``array`` itself stays writable)."""
    if not isinstance(array, np.ndarray):
        return array
    view = array.view()
    view.flags.writeable = False
    return view


class _PolicyServer:
    """The :class:`~.serve.Handler` of a policy process: one forward per :class:`~.protocol.Forward`."""

    env_ids = ()

    def __init__(self, policy_factory: Callable[[], Policy]):
        self.policy = policy_factory()

    def ready(self) -> None:
        return None

    def handle(self, request: Request) -> Reply:
        try:
            if not isinstance(request, Forward):
                raise TypeError(f"the policy process does not serve {type(request).__name__} requests")
            return Ok(call_policy(self.policy, request.obs))
        except Exception as exc:
            return Failure.from_exception(exc, request.command, ())

    def close(self) -> None:
        pass


def _policy_main(conn: Any, owner_pid: int, policy_factory: Callable[[], Policy]) -> None:
    serve(conn, owner_pid, lambda: _PolicyServer(policy_factory))


class PolicyProcess:
    """A policy that runs in its own spawned process; use it as the ``policy`` of ``rollout()``.

    ``policy_factory()`` (picklable, no arguments) builds the policy inside that process, e.g. loads a
    model onto a GPU. Observations and actions cross a pipe, pickled. The process exits when
    :meth:`close` is called, when this object is collected, at interpreter exit, on SIGTERM, or when its
    owner dies. Errors in the policy are re-raised here as :class:`WorkerError` with the remote traceback;
    a process that died is reported as :class:`~.errors.WorkerDiedError`, one that gives no reply within
    ``timeout_s`` as :class:`~.errors.WorkerHungError`, as for env workers.
    """

    def __init__(self, policy_factory: Callable[[], Policy], timeout_s: float | None = 300.0):
        if not callable(policy_factory):
            raise TypeError(f"policy_factory must be a callable returning a policy, got {policy_factory!r}")
        check_picklable("policy_factory", policy_factory, "the policy process")
        self.timeout_s = check_seconds("timeout_s", timeout_s)
        self._closed = False
        self._channel = ProcessChannel(_policy_main, (policy_factory,), "behavior1k_fast-policy", "policy process")
        self._finalizer = weakref.finalize(self, stop_processes, [self._channel], CLOSE_GRACE_S)
        close_on_sigterm(self)
        self._wait(Command.INIT)

    @property
    def pid(self) -> int:
        return self._channel.pid

    def _wait(self, command: Command) -> Any:
        """The payload of the next reply; any failure or death closes the process before it is raised."""
        try:
            return unwrap(self._channel.receive(command, self.timeout_s), "policy process")
        except BaseException:
            self.close()
            raise

    def __call__(self, obs: Mapping[str, np.ndarray]) -> Any:
        """The remote policy's output for ``obs``: actions, or ``(actions, extras)`` (numpy arrays)."""
        if self._closed:
            raise ClosedError("the policy process is closed")
        self._channel.send(Forward(dict(obs)))
        return self._wait(Command.FORWARD)

    def close(self) -> None:
        """Stop the process. Idempotent, and retryable after an interrupt (as an executor's ``close``)."""
        self._closed = True
        with deferred_interrupts() as interrupted:
            stop_processes([self._channel], CLOSE_GRACE_S, interrupted)
        self._finalizer.detach()
        release(self)

    def __enter__(self) -> "PolicyProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
