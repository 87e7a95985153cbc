"""The lag corrections' policy loss against the objective computed by hand on a tiny batch: value and gradient.

Each case builds three chunks' log-probs as leaf tensors, so d(logprob_i)/d(theta_i) = 1 and the gradient of the
loss with respect to ``logprob`` is the hand-derived per-sample derivative divided by the batch size. A dropped,
inverted or misplaced importance weight, a clip around the wrong anchor or a missing dual clip changes one of them.
"""

import math

import pytest

torch = pytest.importorskip("torch")

from behavior1k_fast.tools.train import objective  # noqa: E402

CLIP = 0.2


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def hand_term(r, a, clip=CLIP, dual=None):
    """(objective, d objective / d log r) of one sample, by cases."""
    low, high = 1 - clip, 1 + clip
    unclipped = r * a
    clipped = min(max(r, low), high) * a
    value, grad = (unclipped, r * a) if unclipped <= clipped else (clipped, r * a if low < r < high else 0.0)
    if dual is not None and a < 0 and dual * a > value:
        value, grad = dual * a, 0.0
    return value, grad


def loss_and_grad(correction, logprob, behaviour, adv, proximal=None):
    theta = leaf(logprob)
    loss = objective.policy_loss(correction, theta, torch.tensor(behaviour, dtype=torch.float64),
                                 torch.tensor(adv, dtype=torch.float64), CLIP,
                                 None if proximal is None else torch.tensor(proximal, dtype=torch.float64))
    loss.backward()
    return loss.item(), theta.grad.tolist()


# current, behaviour and proximal log-probs of three chunks, and their advantages: one sample inside the clip
# range, one clipped high with A > 0, one whose ratio to the behaviour is exp(1.8) with A < 0 (where the dual
# clip binds).
CURRENT = [-1.0, -0.5, -0.2]
BEHAVIOUR = [-1.1, -1.0, -2.0]
PROXIMAL = [-1.05, -0.7, -0.4]
ADV = [1.0, 2.0, -1.5]


def expected(anchor, weights, dual=None):
    terms = [hand_term(math.exp(c - an), a, dual=dual) for c, an, a in zip(CURRENT, anchor, ADV)]
    n = len(terms)
    value = -sum(w * t[0] for w, t in zip(weights, terms)) / n
    grad = [-w * t[1] / n for w, t in zip(weights, terms)]
    return value, grad


def test_no_correction_is_ppo_clipped_around_the_behaviour_log_probs():
    value, grad = loss_and_grad("none", CURRENT, BEHAVIOUR, ADV)
    want_value, want_grad = expected(BEHAVIOUR, [1, 1, 1])
    assert value == pytest.approx(want_value)
    assert grad == pytest.approx(want_grad)


def test_decoupled_clips_around_the_proximal_policy_and_weights_by_proximal_over_behaviour():
    value, grad = loss_and_grad("decoupled", CURRENT, BEHAVIOUR, ADV, PROXIMAL)
    weights = [math.exp(p - b) for p, b in zip(PROXIMAL, BEHAVIOUR)]
    want_value, want_grad = expected(PROXIMAL, weights)
    assert value == pytest.approx(want_value)
    assert grad == pytest.approx(want_grad)
    # the third chunk's weight is exp(1.6): an inverted weight (behaviour / proximal) would be exp(-1.6)
    assert weights[2] > 4


def test_first_epoch_caps_the_importance_weight():
    behaviour = [-1.1, -3.0, -2.0]  # the second and third chunks: proximal / behaviour exp(2.3), exp(1.6): capped
    value, grad = loss_and_grad("first_epoch", CURRENT, behaviour, ADV, PROXIMAL)
    weights = [min(math.exp(p - b), objective.WEIGHT_CAP) for p, b in zip(PROXIMAL, behaviour)]
    assert weights[1] == weights[2] == objective.WEIGHT_CAP and weights[0] < objective.WEIGHT_CAP
    want_value, want_grad = expected(PROXIMAL, weights)
    assert value == pytest.approx(want_value)
    assert grad == pytest.approx(want_grad)


def test_dual_clip_bounds_a_negative_advantage_term_at_dual_clip_times_the_advantage():
    value, grad = loss_and_grad("dual_clip", CURRENT, BEHAVIOUR, ADV)
    want_value, want_grad = expected(BEHAVIOUR, [1, 1, 1], dual=objective.DUAL_CLIP)
    assert value == pytest.approx(want_value)
    assert grad == pytest.approx(want_grad)
    # the third chunk's ratio exp(1.8) under A < 0: plain PPO gives its term a gradient, the dual clip none
    _, plain = loss_and_grad("none", CURRENT, BEHAVIOUR, ADV)
    assert plain[2] != 0 and grad[2] == 0


def test_the_importance_weight_carries_no_gradient():
    proximal = leaf(PROXIMAL)
    theta = leaf(CURRENT)
    objective.policy_loss("decoupled", theta, torch.tensor(BEHAVIOUR, dtype=torch.float64),
                          torch.tensor(ADV, dtype=torch.float64), CLIP, proximal).backward()
    assert proximal.grad is None


def test_at_lag_zero_every_correction_is_serial_ppo():
    """Behaviour = proximal = the update's start: the weight is 1 and the anchors agree."""
    serial = loss_and_grad("none", CURRENT, PROXIMAL, ADV)
    for correction in ("decoupled", "first_epoch"):
        assert loss_and_grad(correction, CURRENT, PROXIMAL, ADV, PROXIMAL) == pytest.approx(serial)


@pytest.mark.parametrize("correction", objective.NEEDS_PROXIMAL)
def test_a_correction_that_needs_the_proximal_log_probs_refuses_none(correction):
    with pytest.raises(ValueError, match="proximal_logprob"):
        loss_and_grad(correction, CURRENT, BEHAVIOUR, ADV)


def test_an_unknown_correction_is_refused_by_name():
    with pytest.raises(ValueError, match="correction: expected one of .* got 'vtrace'"):
        objective.check_correction("vtrace")
