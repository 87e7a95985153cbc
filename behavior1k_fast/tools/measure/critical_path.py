"""Where the rounds of a ``lookahead`` run go: :func:`lookahead_rounds`, from the run's profiler spans.

With one stage (K = 1) forward c of the driver chooses chunk c, and between the end of forward c and the end
of forward c + 1 lies one critical path, in order (each part ends where the next begins; ms):

- ``send``: the driver sends chunk c to every worker (its ``ipc`` spans after forward c);
- ``deliver``: from the last send to the start of chunk c on the last worker to start it (the end of its
  ``stall`` wait: the worker had finished chunk c - 1 and waited for this one);
- ``to_lead``: from there to the last worker's lead observations of chunk c in shared memory (the end of
  its ``write_obs``): the N - d steps before the lead, the lead step's render (``render``, the largest of
  the workers') and observation read;
- ``collect``: from there to the start of forward c + 1 (the lead replies through the pipes, the driver's
  reading of the observations, the policy input);
- ``forward``: forward c + 1.

A part that overlaps the one before it (a worker may start its chunk before the driver's send returns)
counts as 0 and the earlier part keeps the overlap, so the parts add up to the round.

When the forward is longer than the d steps after the lead, the GPU idles for ``round - forward`` in every
round (``send + deliver + to_lead + collect``). When it is shorter, the workers do not stall and the round
is the chunk: the parts still add up to the round, but ``deliver`` then holds the rest of chunk c.

Spans are :class:`~behavior1k_fast.core.tracing.Profiler` spans ``(stage, start_ns, duration_ns, pid, tid,
args)``; the driver is the process of the ``model_forward`` spans.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...core.tracing import IPC, MODEL_FORWARD, RENDER, WAIT

#: The parts of a round, in critical-path order (module docs).
PARTS = ("send", "deliver", "to_lead", "collect", "forward")


def _end(span: Sequence[Any]) -> int:
    return span[1] + span[2]


def _command(span: Sequence[Any]) -> Any:
    return (span[5] or {}).get("command")


def lookahead_rounds(spans: Sequence[Sequence[Any]]) -> list[dict[str, float]]:
    """One entry per round between two forwards with every worker's chunk start and lead in between: the
    :data:`PARTS` (ms), ``round`` (their sum), ``render`` (the largest lead render) and ``stall`` (the mean
    worker wait before the chunk) - module docs."""
    forwards = sorted((s for s in spans if s[0] == MODEL_FORWARD), key=lambda s: s[1])
    if len(forwards) < 2:
        return []
    driver = forwards[0][3]
    by_worker: dict[int, dict[str, list]] = {}
    sends = []
    for s in spans:
        if s[3] == driver:
            if s[0] == IPC and _command(s) == "chunk":
                sends.append(s)
            continue
        kinds = by_worker.setdefault(s[3], {"stall": [], "lead": [], "render": []})
        if s[0] == WAIT and _command(s) == "stall":
            kinds["stall"].append(s)
        elif s[0] == IPC and _command(s) == "write_obs":
            kinds["lead"].append(s)
        elif s[0] == RENDER:
            kinds["render"].append(s)
    rounds = []
    for done, nxt in zip(forwards, forwards[1:]):
        begin, until = _end(done), nxt[1]
        sent = [_end(s) for s in sends if begin <= s[1] < until]
        starts, leads, renders, stalls = [], [], [], []
        for kinds in by_worker.values():
            stall = [s for s in kinds["stall"] if begin <= _end(s) < until]
            lead = [s for s in kinds["lead"] if begin <= s[1] < until]
            if not stall or not lead:
                break
            starts.append(_end(stall[0]))
            stalls.append(stall[0][2])
            leads.append(_end(lead[0]))
            renders.extend(s[2] for s in kinds["render"] if starts[-1] <= s[1] < leads[-1])
        else:
            if not sent or not starts:
                continue
            marks = [begin]
            for mark in (max(sent), max(starts), max(leads), until, _end(nxt)):
                marks.append(max(mark, marks[-1]))
            entry = {part: (b - a) / 1e6 for part, a, b in zip(PARTS, marks, marks[1:])}
            entry["round"] = (marks[-1] - marks[0]) / 1e6
            entry["render"] = max(renders, default=0) / 1e6
            entry["stall"] = float(np.mean(stalls)) / 1e6
            rounds.append(entry)
    return rounds


def summarize(rounds: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Median, min and max of every field over ``rounds``, and each part's share of the median round."""
    if not rounds:
        return {"rounds": 0}
    out: dict[str, Any] = {"rounds": len(rounds)}
    for key in rounds[0]:
        values = np.array([r[key] for r in rounds])
        out[key] = {"median_ms": float(np.median(values)), "min_ms": float(values.min()),
                    "max_ms": float(values.max())}
    total = sum(out[p]["median_ms"] for p in PARTS)
    out["share_of_round"] = {p: out[p]["median_ms"] / total for p in PARTS} if total else {}
    return out
