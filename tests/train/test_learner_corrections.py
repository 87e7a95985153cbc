"""The learner's lag corrections and value targets (``PPOConfig.correction``, ``value_targets``) on a recorded batch:
serial PPO is the same update whatever the correction, ``first_epoch`` and ``dual_clip`` make no extra pass through
the model, ``current`` value targets are the current critic's, and a bad name is a one-line error."""

import copy
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from behavior1k_fast.tools.train import learner, objective  # noqa: E402

CONFIG = learner.PPOConfig(profile="k1_skip", iterations=1, processes=1, envs=4, chunk_size=4, rounds=3, epochs=2,
                           minibatches=2, executor="inline")


@pytest.fixture(scope="module")
def trained():
    """A policy after one PPO iteration and the batch it trained on (its recorded log-probs the behaviour's)."""
    batches = []
    _, policy = learner.train(CONFIG, lambda it, batch, entry: batches.append(batch))
    return policy, batches[0]


class CountingPolicy:
    """Counts the calls of ``features`` (each one pass through the model's input) of a wrapped policy."""

    def __init__(self, policy):
        self.policy, self.calls = policy, 0
        self.original = policy.features

    def __enter__(self):
        def counted(obs):
            self.calls += 1
            return self.original(obs)

        self.policy.features = counted
        return self

    def __exit__(self, *exc):
        del self.policy.features


def update(policy, batch, **changes):
    """The parameters and losses after one ``ppo_update`` of a copy of ``policy`` with ``changes`` to the config,
    and the number of ``features`` calls it made."""
    model = copy.deepcopy(policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with CountingPolicy(model) as counting:
        losses = learner.ppo_update(model, optimizer, copy.deepcopy(batch), dataclasses.replace(CONFIG, **changes),
                                    np.random.default_rng(0))
    return {"losses": losses, **{n: p.detach().clone() for n, p in model.named_parameters()}}, counting.calls


def same(a, b):
    return all(torch.equal(a[n], b[n]) for n in a if n != "losses") and a["losses"] == b["losses"]


def test_serial_ppo_is_the_same_update_whatever_the_correction(trained):
    policy, batch = trained
    serial, _ = update(policy, batch)
    for correction in objective.CORRECTIONS:
        assert learner.active_correction(dataclasses.replace(CONFIG, correction=correction)) == "none"
        assert same(update(policy, batch, correction=correction)[0], serial), correction


def test_first_epoch_and_dual_clip_make_no_extra_pass_and_decoupled_makes_one(trained):
    policy, batch = trained
    _, serial = update(policy, batch)
    # one features call per minibatch of the first epoch, plus the bootstrap values of the last observation
    assert serial >= CONFIG.minibatches
    for correction in ("none", "first_epoch", "dual_clip"):
        assert update(policy, batch, max_lag=1, correction=correction)[1] == serial, correction
    assert update(policy, batch, max_lag=1, correction="decoupled")[1] == serial + CONFIG.minibatches
    # current value targets share decoupled's pass
    assert update(policy, batch, max_lag=1, correction="decoupled", value_targets="current")[1] == (
        serial + CONFIG.minibatches)


def test_first_epoch_differs_from_the_uncorrected_update_on_a_stale_batch(trained):
    policy, batch = trained
    stale = copy.deepcopy(batch)
    stale.extras["logprob"] = batch.extras["logprob"] - 0.5  # chosen by weights that liked it less
    plain, _ = update(policy, stale, max_lag=1, correction="none")
    first, _ = update(policy, stale, max_lag=1, correction="first_epoch")
    assert not same(plain, first)


def test_current_value_targets_are_the_current_critic_s_values(trained):
    policy, batch = trained
    obs = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.obs.items()}
    with torch.no_grad():
        now = policy.critic(policy.features(obs)).squeeze(-1).numpy().reshape(batch.rewards.shape[:2])
    assert not np.allclose(now, batch.extras["value"])  # the update moved the critic
    recorded_now = copy.deepcopy(batch)
    recorded_now.extras["value"] = now  # as if the values had been recorded by the current critic
    current, _ = update(policy, batch, value_targets="current")
    recorded, _ = update(policy, recorded_now)
    for name in current:
        if name != "losses":
            torch.testing.assert_close(current[name], recorded[name], rtol=1e-3, atol=1e-4)  # float32 sums
    assert not same(update(policy, batch)[0], current)


@pytest.mark.parametrize("change, text", [({"correction": "vtrace"}, "correction"),
                                          ({"value_targets": "stale"}, "value_targets")])
def test_a_bad_correction_or_value_target_is_a_one_line_error(change, text):
    with pytest.raises(ValueError, match=text) as exc:
        dataclasses.replace(CONFIG, **change)
    assert len(str(exc.value).splitlines()) == 1 and repr(next(iter(change.values()))) in str(exc.value)
