"""The schedules of :meth:`~behavior1k_fast.rollout.engine.RolloutEngine.rollout`, one sibling module each,
all built only on the engine's driver face (:class:`~behavior1k_fast.rollout.driver.EngineDriver`).

- :mod:`.barrier` (``"barrier"``): stage by stage, every slice of a stage sent and received together;
- :mod:`.asynchronous` (``"async"``): slice by slice, no barrier across processes;
- :mod:`.lookahead` (``"lookahead"``): one stage, each chunk chosen from lead observations read ``d``
  steps before the current chunk ends, while it ends.

A new schedule is one more module here: a :class:`~.base.Schedule` subclass with its ``name`` (also listed
in ``core.profile.SCHEDULES``, the profile's allowed values), registered in :data:`SCHEDULE_CLASSES`.
"""

from __future__ import annotations

from .asynchronous import Asynchronous
from .barrier import Barrier
from .base import Schedule
from .lookahead import Lookahead

#: ``profile.schedule`` -> the class that runs it.
SCHEDULE_CLASSES: dict[str, type[Schedule]] = {cls.name: cls for cls in (Barrier, Asynchronous, Lookahead)}


def schedule_class(name: str) -> type[Schedule]:
    """The schedule class of ``name``; ValueError naming the ones there are."""
    try:
        return SCHEDULE_CLASSES[name]
    except KeyError:
        raise ValueError(f"schedule={name!r} has no driver in this version; there are {sorted(SCHEDULE_CLASSES)}") from None


__all__ = ["Asynchronous", "Barrier", "Lookahead", "Schedule", "SCHEDULE_CLASSES", "schedule_class"]
