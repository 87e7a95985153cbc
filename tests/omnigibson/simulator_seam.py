"""A line's real ``Simulator`` over a recording stand-in for Isaac Sim's ``SimulationContext``.

On main (cbd13c78), the Isaac Sim 6.0 work (2af465a2) and the render/physics-backend refactor (7423c692) the
``Simulator`` composes a ``SimulationContext`` (directly, or inside ``PhysXBackend`` of bdc01a23): its
``step()``, ``render()`` and ``render_on_step()`` are upstream's own code down to ``SimulationContext.step(render=)``
and ``SimulationContext.render()``, where Kit would render. Those two are the seam here: a
:class:`RecordingSimulationContext` records every call (and advances simulated time by its physics dt per
physics step), so a test counts renders where they happen.

The class is defined inside upstream's ``_launch_simulator()`` and built at once; :func:`simulator_class` runs
that function with the Kit app taken as launched and stops it at the first Isaac Sim call of
``Simulator.__init__`` (the stage check of main and Isaac 6, ``PhysXBackend.assert_clean_start()`` on the
backend line), which is where the class is taken from. :func:`recording_simulator` then makes an instance
without upstream's constructor (which loads a stage, physics and renderer settings) and sets only the members
``step()`` / ``render()`` read, each named there; ``_non_physics_step`` (object states, transition rules) is a
recorder. Nothing here stands in for OmniGibson's own stepping logic.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


class RecordingSimulationContext:
    """Stand-in for Isaac Sim's ``SimulationContext`` under the ``Simulator``: records ``("step", render)`` and
    ``("render", None)`` into ``log``; a step advances ``current_time`` by one physics dt, or by one rendering dt
    when it renders (Kit's rendered update runs the physics of a whole frame)."""

    def __init__(self, log: list, physics_dt: float, rendering_dt: float) -> None:
        self.log = log
        self.physics_dt, self.rendering_dt = physics_dt, rendering_dt
        self.current_time = 0.0
        self.current_time_step_index = 0
        self.stage = object()
        #: ``current_time`` of every frame rendered, in order.
        self.frames: list[float] = []

    def is_playing(self) -> bool:
        return True

    def get_physics_dt(self) -> float:
        return self.physics_dt

    def get_rendering_dt(self) -> float:
        return self.rendering_dt

    def step(self, render: bool) -> None:
        self.log.append(("step", render))
        self.current_time += self.rendering_dt if render else self.physics_dt
        if render:
            self.frames.append(self.current_time)

    def render(self) -> None:
        self.log.append(("render", None))
        self.frames.append(self.current_time)

    def steps(self, render: bool) -> int:
        """How many ``step(render=render)`` calls were recorded."""
        return self.log.count(("step", render))

    @property
    def renders(self) -> int:
        """Frames Kit would render: rendered steps and ``render()`` calls."""
        return self.steps(True) + self.log.count(("render", None))


class SimulatorInitStarted(Exception):
    """Raised by the first Isaac Sim access of ``Simulator.__init__`` (:func:`simulator_class`)."""


class _IsaacSimUnavailable:
    """``omnigibson.lazy`` while :func:`simulator_class` runs: any Isaac Sim access ends the constructor."""

    def __getattr__(self, name: str) -> Any:
        raise SimulatorInitStarted(name)


def isaac_sim_unavailable() -> Any:
    """A stand-in for ``omnigibson.lazy`` of a module: its first Isaac Sim access raises
    :class:`SimulatorInitStarted`."""
    return _IsaacSimUnavailable()


def simulator_class(og: Any, monkeypatch: Any) -> type:
    """The ``Simulator`` class of the active line's ``omnigibson.simulator`` (module docs)."""
    from omnigibson import simulator

    with monkeypatch.context() as mp:
        mp.setattr(og, "app", object())
        mp.setattr(og, "sim", None)
        for name in ("omnigibson.simulator", "omnigibson.physics_backends.physx_backend"):
            if name in sys.modules:
                mp.setattr(sys.modules[name], "lazy", isaac_sim_unavailable())
        with pytest.raises(SimulatorInitStarted) as info:
            simulator._launch_simulator()
    tb = info.tb
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__init__" and type(frame.f_locals.get("self")).__name__ == "Simulator":
            return type(frame.f_locals["self"])
        tb = tb.tb_next
    raise AssertionError("_launch_simulator ended before Simulator.__init__ ran")


def recording_simulator(og: Any, monkeypatch: Any, log: list, physics_dt: float = 1 / 120, rendering_dt: float = 1 / 30,
                        sim_step_dt: float = 1 / 30) -> tuple[Any, RecordingSimulationContext]:
    """``(og.sim, context)``: an instance of the active line's real ``Simulator`` over a
    :class:`RecordingSimulationContext` (through the line's ``PhysXBackend`` where the simulator has a physics
    backend), set as ``og.sim`` until ``monkeypatch`` is undone; ``_non_physics_step`` appends
    ``("non_physics_step", None)`` to ``log``."""
    cls = simulator_class(og, monkeypatch)
    context = RecordingSimulationContext(log, physics_dt, rendering_dt)
    sim = object.__new__(cls)
    members = {  # what upstream's __init__ sets and step() / render() read
        "_render_on_step": True,
        "_sim_step_dt": sim_step_dt,
        "_n_steps_per_loop": int(round(sim_step_dt / rendering_dt)),
        "_objects_to_initialize": [],
        "_scenes": [],
        "_in_sim_lifecycle": 0,
        "pre_step_exception": None,
        "post_step_exception": None,
        "_deferred_usd_guard_error": None,
        "_step_profiler": types.SimpleNamespace(enable=lambda: None, disable=lambda: None),
        "_non_physics_step": lambda: log.append(("non_physics_step", None)),
    }
    if "_physics_backend" in _code_names(cls.step):  # the render/physics-backend layout
        backend = sys.modules["omnigibson.physics_backends.physx_backend"].PhysXBackend(sim)
        backend._sim_context = context
        members["_physics_backend"] = backend
    else:
        members["_sim_context"] = context
    sim.__dict__.update(members)
    monkeypatch.setattr(og, "sim", sim)
    return sim, context


def _code_names(fn: Any) -> tuple:
    """Names the code of ``fn`` (unwrapped: upstream's ``with_profiler`` wraps ``step``) reads."""
    return getattr(getattr(fn, "__wrapped__", fn), "__code__").co_names
