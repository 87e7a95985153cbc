"""Deprecated alias (issue 29): the Ray transport is :mod:`.transports.ray`. Importing this module warns
(and imports Ray)."""

from __future__ import annotations

import warnings

from .transports.ray import RayEnvHost, RayTransport, check_actor_resources

warnings.warn("behavior1k_fast.rollout.ray_executor is deprecated: import RayTransport from "
              "behavior1k_fast.rollout.transports.ray", DeprecationWarning, stacklevel=2)

__all__ = ["RayEnvHost", "RayTransport", "check_actor_resources"]
