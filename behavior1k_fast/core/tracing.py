"""Per-stage timers for rollouts, aggregated per step and per env, exportable as a Chrome trace.

Every process has one :class:`Profiler` (``get_profiler()``). Code that does rollout work wraps each stage
in ``with profiler.section(STAGE, env=..., step=...)``; when the profiler is off ``section`` returns one
shared no-op context, so the cost is a method call and an attribute test.

Spans are kept as ``(stage, start_ns, duration_ns, pid, tid, args)``. ``summary()`` aggregates them in ms;
``chrome_trace()`` gives the Trace Event Format that Perfetto and ``chrome://tracing`` open, one track per
process and thread. Spans from worker processes are merged into the driver's profiler with
``merge(spans)`` (workers send ``drain()`` output back with their results).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import defaultdict
from typing import Any, Iterable

# Stage names, in the order a step runs them.
ACTION_APPLY = "action_apply"
PHYSICS = "physics"
RENDER = "render"
OBS_READ = "obs_read"
REWARD = "reward"
TERMINATION = "termination"
MODEL_FORWARD = "model_forward"
IPC = "ipc"
WAIT = "wait"
#: A slice's boundary observation is at the driver, its next chunk not yet sent (policy queue + forward).
SLICE_WAIT = "slice_wait"
STAGES = (ACTION_APPLY, PHYSICS, RENDER, OBS_READ, REWARD, TERMINATION, MODEL_FORWARD, IPC, WAIT, SLICE_WAIT)

Span = tuple  # (stage, start_ns, duration_ns, pid, tid, args or None)

_NULL = contextlib.nullcontext()


class Profiler:
    """Collects timed spans of rollout stages for the current process."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    def section(self, stage: str, **args: Any) -> contextlib.AbstractContextManager:
        """Time a stage. ``args`` (e.g. ``env=3``, ``step=7``) end up on the trace event."""
        if not self.enabled:
            return _NULL
        return _Section(self, stage, args or None)

    def add(self, stage: str, start_ns: int, duration_ns: int, args: dict | None = None) -> None:
        """Record a span measured elsewhere (start from ``time.perf_counter_ns()``)."""
        if self.enabled:
            span = (stage, start_ns, duration_ns, os.getpid(), threading.get_ident(), args)
            with self._lock:
                self._spans.append(span)

    def merge(self, spans: Iterable[Span]) -> None:
        """Add spans recorded in another process (``perf_counter_ns`` is system-wide on Linux)."""
        if self.enabled:
            with self._lock:
                self._spans.extend(tuple(s) for s in spans)

    def drain(self) -> list[Span]:
        """Return and forget the recorded spans (workers ship them to the driver)."""
        with self._lock:
            spans, self._spans = self._spans, []
        return spans

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def summary(self, steps: int | None = None, envs: int | None = None) -> dict[str, dict[str, float]]:
        """Per stage: count, total ms, mean ms per span, and ms per step / per env-step when given."""
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for stage, _, duration, *_ in self.spans:
            totals[stage][0] += 1
            totals[stage][1] += duration / 1e6
        out = {}
        for stage, (count, total) in totals.items():
            row = {"count": count, "total_ms": total, "mean_ms": total / count}
            if steps:
                row["ms_per_step"] = total / steps
                if envs:
                    row["ms_per_env_step"] = total / (steps * envs)
            out[stage] = row
        return out

    def chrome_trace(self) -> dict[str, Any]:
        """Trace Event Format ("X" complete events, microseconds)."""
        events = []
        for stage, start, duration, pid, tid, args in self.spans:
            event = {"name": stage, "ph": "X", "ts": start / 1e3, "dur": duration / 1e3, "pid": pid, "tid": tid}
            if args:
                event["args"] = args
            events.append(event)
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | os.PathLike) -> str:
        """Write the trace as JSON (open it in https://ui.perfetto.dev); returns the path."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.chrome_trace(), fh)
        return str(path)


class _Section:
    """The timer of one :meth:`Profiler.section` (a plain class: a step runs several, so it is kept cheap)."""

    __slots__ = ("_profiler", "_stage", "_args", "_start")

    def __init__(self, profiler: Profiler, stage: str, args: dict | None) -> None:
        self._profiler, self._stage, self._args = profiler, stage, args

    def __enter__(self) -> None:
        self._start = time.perf_counter_ns()

    def __exit__(self, *exc: Any) -> None:
        self._profiler.add(self._stage, self._start, time.perf_counter_ns() - self._start, self._args)


_profiler = Profiler(enabled=os.environ.get("BEHAVIOR1K_FAST_PROFILE_TRACE", "") not in ("", "0"))


def get_profiler() -> Profiler:
    """The profiler of this process (on when ``BEHAVIOR1K_FAST_PROFILE_TRACE=1`` at import time)."""
    return _profiler
