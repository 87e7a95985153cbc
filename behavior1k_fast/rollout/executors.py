"""Deprecated alias (issue 29): the supervisor is in :mod:`.supervision`, the transports and
:func:`~.transports.make_executor` in :mod:`.transports`. Importing this module warns."""

from __future__ import annotations

import warnings

from .supervision import END, LEAD, ONLY, Pending, Supervisor, placeholder, reply_parts
from .transports import EXECUTORS, make_executor
from .transports.inline import InlineTransport
from .transports.process import ProcessSlot, ProcessTransport

warnings.warn("behavior1k_fast.rollout.executors is deprecated: import Supervisor from behavior1k_fast.rollout."
              "supervision, and the transports and make_executor from behavior1k_fast.rollout.transports",
              DeprecationWarning, stacklevel=2)

__all__ = ["END", "EXECUTORS", "InlineTransport", "LEAD", "ONLY", "Pending", "ProcessSlot", "ProcessTransport",
           "Supervisor", "make_executor", "placeholder", "reply_parts"]
