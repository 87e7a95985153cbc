"""The PPO example end to end: two iterations through the engine (K = 2 hybrid, on-demand observation)."""

import numpy as np
import pytest

from .scripts import load_script

torch = pytest.importorskip("torch")


def load_example():
    return load_script("train_ppo_reference")


@pytest.mark.slow
def test_two_ppo_iterations_run_end_to_end_with_masked_steps_carrying_no_reward():
    ppo = load_example()
    # horizon 6 with chunks of 4: every episode is truncated inside a chunk, so chunks hold masked steps
    config = ppo.PPOConfig(profile="k2_skip", iterations=2, processes=2, envs=4, chunk_size=4, rounds=3,
                           horizon=6, epochs=2, minibatches=2, executor="inline")
    assert ppo.make_profile(config).pipeline_stages == 2 and ppo.make_profile(config).skip_intermediate_obs
    batches = []

    def on_iteration(it, batch, entry):
        batches.append(batch)

    torch.manual_seed(0)
    run, policy = ppo.train(config, on_iteration)
    assert len(batches) == 2 and run["env_steps"][-1] == sum(int(b.applied.sum()) for b in batches)
    for batch in batches:
        assert batch.actions.shape == (3, 4, 4, 11) and batch.rewards.shape == (3, 4, 4)
        assert batch.extras["logprob"].shape == batch.extras["value"].shape == (3, 4)
        assert batch.obs["task::target"].shape == (3, 4, 6) and batch.last_obs["proprio"].shape == (4, 27)
        assert (~batch.applied).any() and (batch.rewards[~batch.applied] == 0).all()
        assert np.isfinite(batch.rewards).all() and np.isfinite(batch.extras["logprob"]).all()
        # one sampled action per chunk, repeated over its steps
        np.testing.assert_array_equal(batch.actions, np.repeat(batch.actions[:, :, :1], 4, axis=2))
        eps = batch.episodes
        assert len(eps.env) > 0 and eps.truncated.any() and eps.success.dtype == bool
        assert (eps.lengths <= 6).all()
    for key in ("success_rate", "mean_return", "policy_loss", "value_loss", "entropy"):
        assert len(run[key]) == 2 and np.isfinite(run[key]).all(), key
    assert run["profile"]["pipeline_stages"] == 2
    evaluation = ppo.evaluate_policy(policy, config, rounds=2)
    assert evaluation["episodes"] > 0 and 0.0 <= evaluation["success_rate"] <= 1.0 and not policy.deterministic


def test_the_advantages_bootstrap_truncated_episodes_and_stop_at_terminated_ones():
    ppo = load_example()
    config = ppo.PPOConfig(chunk_size=2, gamma=0.5, gae_lambda=1.0, reward_scale=1.0)

    class Critic(torch.nn.Module):  # V(obs) = proprio[0]
        def forward(self, x):
            return x[:, :1]

    policy = ppo.ActorCritic(2, 1, 2)
    policy.critic = Critic()
    rounds, envs = 2, 2
    obs = {"proprio": np.zeros((rounds, envs, 1), np.float32), "task::target": np.zeros((rounds, envs, 1), np.float32)}
    last = {"proprio": np.array([[4.0], [8.0]], np.float32), "task::target": np.zeros((2, 1), np.float32)}
    rewards = np.ones((rounds, envs, 2))
    terminated = np.zeros((rounds, envs, 2), bool)
    truncated = np.zeros((rounds, envs, 2), bool)
    terminated[0, 0, 1] = True  # env 0 terminates in round 0
    truncated[1, 1, 1] = True  # env 1 is truncated in round 1: bootstrapped from its final obs, V = 16
    final = {"proprio": np.array([[16.0]], np.float32), "task::target": np.zeros((1, 1), np.float32)}
    eps = type("Episodes", (), dict(env=np.array([1]), round=np.array([1]), terminated=np.array([False]),
                                    truncated=np.array([True]), final_obs=final))
    batch = type("Batch", (), dict(rewards=rewards, terminated=terminated, truncated=truncated, obs=obs,
                                   last_obs=last, episodes=eps, extras={"value": np.zeros((rounds, envs))}))
    adv, returns = ppo.advantages(batch, policy, config)
    g = 0.5 ** 2  # per-chunk discount: gamma ** chunk_size
    # env 0: round 0 ends the episode (no bootstrap); round 1 bootstraps from last_obs (V = 4)
    assert adv[:, 0].tolist() == [2.0, 2.0 + g * 4.0]
    # env 1: round 1 is truncated: 2 + g * V(final obs) = 2 + g * 16, not V(last_obs); round 0 continues into it
    assert adv[:, 1].tolist() == [2.0 + g * (2.0 + g * 16.0), 2.0 + g * 16.0]
    np.testing.assert_array_equal(returns, adv)  # values were 0
