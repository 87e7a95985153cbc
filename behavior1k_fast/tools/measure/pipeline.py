"""The pipeline model: the round time of a layout from its env and model costs (``../shared/docs/DESIGN.md``,
"Performance model").

Per round (every env takes one chunk of N own actions), in ms:

- the busiest worker's stepping, ``C * X``: C = chunks a worker steps per round (the plan's
  ``stages_sharing_physics``: K in hybrid partition, 1 in process partition), X = a stage's env time;
- the driver's K forwards, ``K * T_m``, T_m = one forward at the stage batch (N_envs / K);
- each stage's own env -> forward cycle, ``X + T_m`` (with K = 1 nothing overlaps: the whole round), less
  the lead L where the next chunk's forward starts before the current chunk ends (the ``lookahead``
  schedule: ``X + max(0, T_m - L)``);
- optionally the CPU work of a round over the cores it may use, ``W / cores``.

``round = max(...)`` of those terms: perfect overlap takes the longest. :func:`pipeline_round` is the one
formula: ``bench`` prints it as each row's bound from the measured T_env and T_model (its pipeline
efficiency is bound / measured), ``tune`` predicts every layout with it (:func:`predict`) from costs
measured once: X is the expected slowest of the processes a barrier waits for (:func:`expected_max`), or
their mean under the async schedule, and the CPU term counts every process's stepping and the policy's
threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .layouts import Layout


def expected_max(samples: Sequence[float], draws: int) -> float:
    """Expected largest of ``draws`` independent draws from the empirical distribution of ``samples``:
    with the samples sorted, x_(i) is the largest with probability (i/n)^draws - ((i-1)/n)^draws."""
    xs = sorted(float(s) for s in samples)
    if not xs:
        raise ValueError("expected_max needs at least one sample")
    n = len(xs)
    return sum(x * (((i + 1) / n) ** draws - (i / n) ** draws) for i, x in enumerate(xs))


@dataclass(frozen=True)
class RoundModel:
    """One round's terms (ms) and which one limits it (module docs)."""

    #: ``workers`` (C * X), ``driver`` (K * T_m), ``stage_cycle`` (X + T_m) and, where modelled, ``cpu``.
    terms_ms: Mapping[str, float]

    @property
    def round_ms(self) -> float:
        return max(self.terms_ms.values())

    @property
    def limit(self) -> str:
        """The term that sets the round."""
        return max(self.terms_ms, key=self.terms_ms.get)

    def ms_per_step(self, chunk_size: int) -> float:
        return self.round_ms / chunk_size


def pipeline_round(stage_env_ms: float, t_model_ms: float, pipeline_stages: int, stages_sharing_physics: int,
                   cpu_ms: float | None = None, lead_ms: float = 0.0) -> RoundModel:
    """The round of a pipeline whose stage steps in ``stage_env_ms`` (X) and forwards in ``t_model_ms`` (T_m),
    with K = ``pipeline_stages`` and C = ``stages_sharing_physics``; ``cpu_ms`` is the CPU term, if modelled;
    ``lead_ms`` the env time of a chunk still to run when the next chunk's forward starts."""
    terms = {
        "workers": stages_sharing_physics * stage_env_ms,
        "driver": pipeline_stages * t_model_ms,
        "stage_cycle": stage_env_ms + max(0.0, t_model_ms - lead_ms),
    }
    if cpu_ms is not None:
        terms["cpu"] = cpu_ms
    return RoundModel(terms)


@dataclass(frozen=True)
class Costs:
    """What a prediction needs, measured (ms)."""

    #: Actions per chunk N.
    chunk_size: int
    #: :attr:`~.layouts.Layout.cost_key` ``(E, K, P)`` -> wall ms of every measured stage chunk of P workers
    #: stepping side by side, each holding E envs in K hybrid stages.
    env_chunk_ms: Mapping[tuple[int, int, int], Sequence[float]]
    #: Batch -> ms of one policy forward.
    model_ms: Mapping[int, float]
    #: Cores free for the run (may be fractional: cores minus other work's load).
    cores: float
    #: Intra-op threads of the policy when it runs on the CPU; 0 when it runs on a GPU.
    policy_cpu_threads: int = 0


def predict(layout: Layout, costs: Costs) -> dict[str, Any]:
    """The model's round for ``layout`` from ``costs`` (module docs), with its terms; ms."""
    samples = costs.env_chunk_ms[layout.cost_key]
    mean = sum(samples) / len(samples)
    waits = layout.schedule != "async"  # barrier and lookahead wait for every process of the stage
    stage_env = expected_max(samples, layout.processes_per_stage) if waits else mean
    t_model = costs.model_ms[layout.stage_batch]
    c, k = layout.stages_sharing_physics, layout.pipeline_stages
    cpu_work = layout.processes * c * mean + k * t_model * costs.policy_cpu_threads
    # lookahead's "auto" lead covers the forward, up to all but one step of the chunk
    lead = min(t_model, stage_env * (costs.chunk_size - 1) / costs.chunk_size) if layout.schedule == "lookahead" else 0.0
    model = pipeline_round(stage_env, t_model, k, c, cpu_ms=cpu_work / costs.cores, lead_ms=lead)
    ms_per_step = model.ms_per_step(costs.chunk_size)
    return {
        "t_env_stage_ms": stage_env,
        "t_env_mean_ms": mean,
        "t_model_ms": t_model,
        "terms_ms": dict(model.terms_ms),
        "limit": model.limit,
        "round_ms": model.round_ms,
        "ms_per_step": ms_per_step,
        "env_steps_per_s": layout.total_envs * 1e3 / ms_per_step,
    }


def rank(layouts: Sequence[Layout], costs: Costs) -> list[tuple[Layout, dict[str, Any]]]:
    """``(layout, prediction)`` pairs, most predicted env-steps per second first (ties: listing order)."""
    predicted = [(layout, predict(layout, costs)) for layout in layouts]
    return sorted(predicted, key=lambda lp: -lp[1]["env_steps_per_s"])
