"""PPO's policy objective under policy lag, as pure tensor functions the update calls.

Collect-while-train hands the update chunks chosen by older weights (lag up to ``max_lag`` updates): the
behaviour log-prob recorded with each chunk (``logprob`` in the batch's extras) is not the current policy's.
Each correction below is a choice of *anchor* (the policy the ratio is clipped around) and of *importance
weight* (how a sample's term is reweighted for having been drawn by another policy):

==================  ====================================  ============================  ===================
correction          anchor (the ratio's denominator)      importance weight             extra backbone pass
==================  ====================================  ============================  ===================
``none``            behaviour log-prob                    1                             no
``decoupled``       the policy at the update's start      proximal / behaviour          yes (no-grad, whole batch)
``first_epoch``     the first epoch's own forward         proximal / behaviour, capped  no
``dual_clip``       behaviour log-prob                    1 (ratio bounded both sides)  no
==================  ====================================  ============================  ===================

- ``none`` is PPO as a serial trainer runs it (the anchor is the behaviour policy, which at lag 0 *is* the
  policy at the update's start).
- ``decoupled`` is Hilton et al. 2021 ("Batch size-invariance for policy optimization"): the clip's trust region
  is around the proximal policy (the weights at the update's start, from one more no-grad pass through the
  model), and each term is weighted by proximal / behaviour probability.
- ``first_epoch`` takes the proximal log-prob from a pass the update makes anyway: the first epoch's forward of
  each minibatch, detached, right before that minibatch's gradient step (so the proximal policy of a minibatch
  is the weights after the minibatches before it in that epoch, not the update's start). Its weight is capped
  at :data:`WEIGHT_CAP` (truncated importance sampling, as V-trace truncates its rho): a chunk whose behaviour
  was much less likely under the current weights cannot dominate the batch.
- ``dual_clip`` clips the ratio against the behaviour log-prob as ``none`` does and also bounds it for negative
  advantages (dual-clip PPO, Ye et al. 2020: the objective is at least ``DUAL_CLIP * A``), so a stale chunk's
  ratio, already far from 1, can neither start the update clipped on one side nor explode on the other.

The loss is ``-mean(weight * objective)``; the weight is a constant (no gradient flows through it). Log-probs
are of a whole chunk's action (one decision per chunk). Where the value targets come from (recorded values or
the current critic) is the update's business, not this module's.
"""

from __future__ import annotations

from typing import Any

#: The corrections :func:`policy_loss` knows (module docs).
CORRECTIONS = ("none", "decoupled", "first_epoch", "dual_clip")
#: Which corrections need the proximal log-probs (``decoupled``: from a no-grad pass at the update's start;
#: ``first_epoch``: from the first epoch's own forwards).
NEEDS_PROXIMAL = ("decoupled", "first_epoch")
#: ``first_epoch``'s cap on the importance weight proximal / behaviour.
WEIGHT_CAP = 2.0
#: ``dual_clip``'s bound: for a negative advantage the objective is at least ``DUAL_CLIP * A``.
DUAL_CLIP = 3.0


def check_correction(correction: str) -> str:
    """``correction`` if it is one of :data:`CORRECTIONS`, else a one-line ``ValueError`` naming it."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction: expected one of {', '.join(CORRECTIONS)}, got {correction!r}")
    return correction


def clipped_objective(logprob: Any, anchor_logprob: Any, advantages: Any, clip: float,
                      dual_clip: float | None = None) -> Any:
    """Per sample ``min(r A, clip(r, 1 - clip, 1 + clip) A)`` with ``r = exp(logprob - anchor_logprob)``; with
    ``dual_clip`` c, ``max(that, c A)`` where ``A < 0``."""
    import torch

    ratio = (logprob - anchor_logprob).exp()
    objective = torch.min(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    if dual_clip is not None:
        objective = torch.where(advantages < 0, torch.max(objective, dual_clip * advantages), objective)
    return objective


def importance_weight(proximal_logprob: Any, behaviour_logprob: Any, cap: float | None = None) -> Any:
    """``exp(proximal - behaviour)``, at most ``cap`` where given; a constant (detached)."""
    weight = (proximal_logprob - behaviour_logprob).detach().exp()
    return weight if cap is None else weight.clamp(max=cap)


def policy_loss(correction: str, logprob: Any, behaviour_logprob: Any, advantages: Any, clip: float,
                proximal_logprob: Any = None) -> Any:
    """The policy loss of ``correction`` (module docs) over one minibatch: ``logprob`` the current policy's (with
    gradient), ``behaviour_logprob`` the recorded one, ``proximal_logprob`` the proximal policy's (required by
    the corrections in :data:`NEEDS_PROXIMAL`, ignored by the others)."""
    check_correction(correction)
    if correction in NEEDS_PROXIMAL:
        if proximal_logprob is None:
            raise ValueError(f"proximal_logprob: correction {correction!r} needs the proximal log-probs, got None")
        cap = WEIGHT_CAP if correction == "first_epoch" else None
        weight = importance_weight(proximal_logprob, behaviour_logprob, cap)
        return -(weight * clipped_objective(logprob, proximal_logprob.detach(), advantages, clip)).mean()
    dual = DUAL_CLIP if correction == "dual_clip" else None
    return -clipped_objective(logprob, behaviour_logprob, advantages, clip, dual).mean()
