"""The one clock of every training row: the engine's ``Collector``, TorchRL's collectors and the gymnasium
double buffer are timed by the same loop (:func:`timed_loop`) and reduced by the same median
(:func:`per_sample`), so the fairness of a ratio between two rows does not rest on two copies staying alike.

Per iteration the trainer waits for a batch (``wait_s``: from the end of the previous iteration until the
collector hands the batch over: the whole rollout when serial, what the update did not hide when collection
overlaps it), then runs the update and posts the weights (``update_s``). What the caller does with a batch
between two iterations (recording, checking a stop rule) is outside both clocks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence


@dataclass(frozen=True)
class Iteration:
    """The trainer's clock of one batch (module docs), in wall seconds."""

    index: int
    wait_s: float
    update_s: float


def timed_loop(batches: Iterable[Any], update: Callable[[Any], Any],
               post: Callable[[], None]) -> Iterator[tuple[Iteration, Any, Any]]:
    """For each batch of ``batches``: ``result = update(batch)``, then ``post()`` (the weights to the actors);
    yields ``(Iteration, batch, result)``. The wait for the next batch starts when the caller resumes."""
    began = time.perf_counter()
    for index, batch in enumerate(batches):
        got = time.perf_counter()
        result = update(batch)
        post()
        done = time.perf_counter()
        yield Iteration(index, got - began, done - got), batch, result
        began = time.perf_counter()


def per_sample(values: Sequence[float | None], samples: Sequence[int]) -> float | None:
    """Median over the iterations after the first (the start, not the steady state) of ``values[i]`` per
    sample of iteration ``i``; ``None`` where a value is missing or no iteration is left."""
    values, samples = list(values)[1:], list(samples)[1:]
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(v / n for v, n in zip(values, samples)))

