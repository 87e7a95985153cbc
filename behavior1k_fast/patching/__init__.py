"""Patching layer: the generic registry (:mod:`.registry`, no simulator import) and, in :mod:`.omnigibson`,
the OmniGibson patch set with the process-wide registry that ``behavior1k_fast.apply()`` drives.

A new patch for an upstream area goes into ``patching/omnigibson/<area>.py`` and into
``patching/omnigibson.PATCHES``; a patch set for another simulator gets a sibling package of its own.
"""

from .registry import (
    APPLIED,
    DISABLED,
    FAILED,
    PENDING,
    PROCESS_MODES,
    REVERTED,
    SKIPPED,
    WOULD_APPLY,
    Knobs,
    Patch,
    PatchContext,
    PatchError,
    PatchOutcome,
    PatchRegistry,
    PatchReport,
    PatchState,
    UpstreamLayoutError,
)

__all__ = [
    "Knobs",
    "Patch",
    "PatchContext",
    "PatchError",
    "PatchOutcome",
    "PatchRegistry",
    "PatchReport",
    "PatchState",
    "UpstreamLayoutError",
    "APPLIED",
    "PENDING",
    "SKIPPED",
    "FAILED",
    "DISABLED",
    "WOULD_APPLY",
    "REVERTED",
    "PROCESS_MODES",
]
