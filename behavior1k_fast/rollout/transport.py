"""Deprecated alias (issue 29): the transport interface is :mod:`.transports.base`. Importing this module
warns."""

from __future__ import annotations

import warnings

from .transports.base import RESTART_HINT, Transport

warnings.warn("behavior1k_fast.rollout.transport is deprecated: import Transport from "
              "behavior1k_fast.rollout.transports", DeprecationWarning, stacklevel=2)

__all__ = ["RESTART_HINT", "Transport"]
