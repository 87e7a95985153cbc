"""Calling policies: in the driver, or in a process of their own (:class:`PolicyProcess`).

A policy maps a batched observation dict (key -> ``[B, ...]``) to chunk actions ``[B, N, action_dim]``.
A ``torch.nn.Module`` is called on a dict of tensors (zero-copy views of the numpy arrays) under
``torch.inference_mode()``; any other callable gets the numpy arrays. Tensors that come back are moved to
CPU numpy arrays.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import weakref
from typing import Any, Callable, Mapping

import numpy as np

from .worker import (
    ProcessDied,
    WorkerDiedError,
    WorkerError,
    check_timeout,
    error_reply,
    stop_processes,
    wait_reply,
    watch_owner,
)

#: A policy maps a batched observation dict (key -> [B, ...]) to chunk actions [B, N, action_dim].
Policy = Callable[[dict[str, Any]], Any]


def call_policy(policy: Policy, obs: Mapping[str, np.ndarray]) -> Any:
    """One forward of ``policy`` on ``obs`` (see module docs); returns a numpy array or what it returned."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(policy, torch.nn.Module):
        with torch.inference_mode():
            out = policy({k: torch.from_numpy(v) for k, v in obs.items()})
    else:
        out = policy(dict(obs))
    if hasattr(out, "detach") and hasattr(out, "cpu"):
        out = out.detach().cpu().numpy()
    return out


def _policy_main(conn: Any, owner_pid: int, policy_factory: Callable[[], Policy]) -> None:
    watch_owner(owner_pid)
    try:
        policy = policy_factory()
    except Exception as exc:
        conn.send(error_reply(exc, "init", []))
        return
    conn.send(("ok", None, []))
    while True:
        try:
            command, obs = conn.recv()
        except EOFError:
            return
        if command == "close":
            return
        try:
            reply = ("ok", np.asarray(call_policy(policy, obs)), [])
        except Exception as exc:
            reply = error_reply(exc, "forward", [])
        conn.send(reply)


class PolicyProcess:
    """A policy that runs in its own spawned process; use it as the ``policy`` of ``rollout()``.

    ``policy_factory()`` (picklable, no arguments) builds the policy inside that process, e.g. loads a
    model onto a GPU. Observations and actions cross a pipe, pickled. The process exits when
    :meth:`close` is called, when this object is collected, at interpreter exit, or when its owner dies.
    Errors in the policy are re-raised here as :class:`WorkerError` with the remote traceback.
    """

    def __init__(self, policy_factory: Callable[[], Policy], timeout_s: float = 300.0):
        if not callable(policy_factory):
            raise TypeError(f"policy_factory must be a callable returning a policy, got {policy_factory!r}")
        self.timeout_s = check_timeout(timeout_s)
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_policy_main, args=(child, os.getpid(), policy_factory), daemon=True, name="behavior1k_fast-policy"
        )
        self._proc.start()
        child.close()
        self._finalizer = weakref.finalize(self, stop_processes, [self._proc], [self._conn], 5.0)
        self._call("init", None)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _call(self, command: str, obs: Any) -> Any:
        if not self._finalizer.alive:
            raise RuntimeError("the policy process is closed")
        try:
            if obs is not None:
                self._conn.send(("forward", obs))
            status, payload, *_ = wait_reply(self._conn, self._proc, self.timeout_s, f"policy process ({command})")
        except ProcessDied as exc:
            self.close()
            raise WorkerDiedError("policy process", [], command, str(exc)) from None
        except BaseException:
            self.close()
            raise
        if status == "error":
            self.close()
            raise WorkerError("policy process", payload)
        return payload

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self._call("forward", dict(obs))

    def close(self) -> None:
        """Stop the process. Idempotent."""
        self._finalizer()

    def __enter__(self) -> "PolicyProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
