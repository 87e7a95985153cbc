"""Transports: how the driver talks to env workers of one kind, one module each.

- :mod:`.base`: the :class:`~.base.Transport` interface (start a worker, send it a request, tell which
  workers have a reply or died, read one reply, stop a worker; nothing else);
- :mod:`.process`: spawned local processes (``executor="process"``), shared memory and pipes;
- :mod:`.inline`: this process itself (``executor="inline"``), for pdb and fast tests;
- :mod:`.ray`: Ray actors (``executor="ray"``), imported only when asked for (``import ray`` is heavy).

The :class:`~..supervision.Supervisor` over a transport keeps deadlines, restarts and placeholders, the same
for every kind; :func:`make_executor` wires the two. A new transport is a module here and a branch of
:func:`make_executor`; where a worker runs is :mod:`~..placement`'s business.
"""

from __future__ import annotations

from typing import Sequence

from ..placement import Setting
from ..supervision import Supervision, Supervisor
from ..worker import WorkerSpec
from .base import RESTART_HINT, Transport
from .inline import InlineTransport
from .process import ProcessTransport

#: Where the env workers run: spawned local processes, Ray actors, or this process.
EXECUTORS = ("process", "ray", "inline")


def make_executor(
    kind: str,
    specs: Sequence[WorkerSpec],
    supervision: Supervision,
    ray_actor_options: dict | None = None,
    placement: Setting = None,
) -> Supervisor:
    """The supervised executor of transport ``kind`` (one of :data:`EXECUTORS`) for ``specs``; nothing is
    started yet. ``placement``: as returned by :func:`~..placement.check_placement` (Ray only)."""
    if kind == "process":
        transport: Transport = ProcessTransport(specs)
    elif kind == "inline":
        transport = InlineTransport(specs)
    elif kind == "ray":
        from .ray import RayTransport

        transport = RayTransport(specs, supervision.startup_timeout_s, ray_actor_options, placement)
    else:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
    return Supervisor(transport, supervision)


__all__ = ["EXECUTORS", "InlineTransport", "ProcessTransport", "RESTART_HINT", "Transport", "make_executor"]
