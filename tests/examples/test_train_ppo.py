"""The PPO learner (``behavior1k_fast.tools.train.learner``) end to end: iterations through the engine (K = 2
hybrid, on-demand observation; lookahead; collect-while-train), GAE and the (decoupled) PPO update; and the
example script over it (``examples/train_ppo_reference.py``)."""

import subprocess
import sys

import numpy as np
import pytest

from .scripts import ROOT, load_script

torch = pytest.importorskip("torch")


def load_example():
    """The learner the example trains with."""
    from behavior1k_fast.tools.train import learner

    return learner


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
    assert len(batches) == 2 and run.env_steps[-1] == sum(int(b.applied.sum()) for b in batches)
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
        assert len(getattr(run, key)) == 2 and np.isfinite(getattr(run, key)).all(), key
    assert run.profile["pipeline_stages"] == 2 and run.to_dict()["env_steps"] == run.env_steps
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


def test_lookahead_ppo_gives_the_policy_its_committed_actions_and_trains_on_them():
    ppo = load_example()
    from behavior1k_fast.rollout.policy import COMMITTED_KEY

    # chunks of 4 with lead 2: each chunk is chosen 2 steps before the last one ends; horizon 7 ends
    # episodes at step 3 of a chunk, after the lead, so the next chunk is sat out
    config = ppo.PPOConfig(profile="lookahead", lookahead_steps=2, iterations=2, processes=2, envs=4, chunk_size=4,
                           rounds=4, horizon=7, epochs=2, minibatches=2, executor="inline")
    seen, batches, policies = [], [], []

    class Recording(ppo.ActorCritic):
        def forward(self, obs):
            seen.append(np.array(obs[COMMITTED_KEY]))
            return super().forward(obs)

    def make_policy(obs_dim, action_dim, chunk_size):
        policies.append(Recording(obs_dim, action_dim, chunk_size))
        return policies[0]

    run, policy = ppo.train(config, lambda it, batch, entry: batches.append(batch), make_policy=make_policy)
    assert policy.actor[0].in_features == 27 + 6 + 2 * 11  # proprio, task offset, d committed actions
    assert all(c.shape == (4, 2, 11) for c in seen) and any(np.abs(c).sum() > 0 for c in seen)
    for batch in batches:
        assert batch.committed.shape == (4, 4, 2, 11) and not batch.committed[0].any()  # a rollout's first chunk
        # what the policy saw: the last d actions of the env's previous chunk, zeros where they did not run
        ran = batch.committed[1:].any(axis=(2, 3))
        np.testing.assert_array_equal(batch.committed[1:][ran], batch.actions[:-1, :, 2:][ran])
        assert ran.any()
    assert any((~b.applied.any(axis=2)).any() for b in batches)  # sat-out chunks (left out of the loss)
    assert all(np.isfinite(getattr(run, k)).all() for k in ("policy_loss", "value_loss"))

    # one update on the last batch moves the weights that read the committed actions: PPO consumes them
    batch = batches[-1]
    before = policy.actor[0].weight.detach().clone()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    ppo.ppo_update(policy, optimizer, batch, config, np.random.default_rng(0))
    committed_columns = slice(27 + 6, None)
    assert policy.actor[0].weight.grad[:, committed_columns].abs().sum() > 0
    assert not torch.equal(policy.actor[0].weight[:, committed_columns], before[:, committed_columns])
    # with the committed actions zeroed, those weights get no gradient: the input is what moved them
    batch.committed = np.zeros_like(batch.committed)
    ppo.ppo_update(policy, optimizer, batch, config, np.random.default_rng(0))
    assert policy.actor[0].weight.grad[:, committed_columns].abs().sum() == 0


@pytest.mark.slow
def test_overlapped_ppo_acts_at_most_one_update_behind_and_its_ratio_reads_the_behaviour_log_probs():
    ppo = load_example()
    from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY

    # lead 0 too: its committed actions are [R, E, 0, A], which PPO's input must still shape
    config = ppo.PPOConfig(profile="lookahead", lookahead_steps=0, iterations=4, processes=2, envs=4, chunk_size=4,
                           rounds=3, epochs=2, minibatches=2, executor="inline", max_lag=1)
    batches = []
    run, policy = ppo.train(config, lambda it, batch, entry: batches.append(batch))
    assert len(batches) == 4 and all(b.committed.shape[2] == 0 for b in batches)
    versions = [b.extras[WEIGHTS_VERSION_KEY] for b in batches]
    for b, version in enumerate(versions):  # batch b trains version b from chunks of versions b - 1 .. b
        assert version.min() >= b - 1 and version.max() <= b
    assert max(run.policy_lag) > 0 and all(0 <= lag <= 1 for lag in run.policy_lag)
    # the recorded log-probs are the behaviour policy's: the trained model's differ once it has been updated
    batch = batches[-1]
    x = policy.features({**{k: v[0] for k, v in batch.obs.items()}, ppo.COMMITTED_KEY: batch.committed[0]})
    logprob, _, _ = policy.evaluate(x, torch.as_tensor(batch.actions[0, :, 0]))
    assert not np.allclose(logprob.detach().numpy(), batch.extras["logprob"][0])
    assert all(run.collect_s[i] <= run.wall_s[i] for i in range(4))


@pytest.mark.parametrize("argv, text", [
    (["--iterations", "0"], "--iterations"), (["--iterations", "-3"], "--iterations"),
    (["--schedule", "barrier", "--lookahead-steps", "3"], "--lookahead-steps 3"),
    (["--lookahead-steps", "soon"], "--lookahead-steps"), (["--schedule", "lookahead", "--lookahead-steps", "8"],
                                                            "--lookahead-steps 8"),
    (["--schedule", "lookahead", "--profile", "k2_skip"], "--schedule lookahead"), (["--seed", "-1"], "--seed"),
    (["--compare"], "unrecognized arguments: --compare"),
])
def test_a_bad_argument_is_a_one_line_usage_error(argv, text, capsys):
    example = load_script("train_ppo_reference")
    with pytest.raises(SystemExit) as exc:
        example.parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and text in err and len(err.strip().splitlines()) == 1


def test_the_example_parses_its_arguments_before_importing_torch():
    """A usage error is immediate: torch (seconds to import) is imported only once the arguments parsed."""
    code = ("import sys; sys.argv = ['x', '--iterations', '0']; import runpy\n"
            "try:\n    runpy.run_path(sys.argv_script, run_name='__main__')\n"
            "except SystemExit as exc:\n    print(exc.code, 'torch' in sys.modules)")
    code = code.replace("sys.argv_script", repr(str(ROOT / "examples" / "train_ppo_reference.py")))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.stdout.split() == ["2", "False"], done.stderr


def test_the_lookahead_schedule_defaults_to_lead_0_and_help_shows_each_default(capsys):
    example = load_script("train_ppo_reference")
    args = example.parse_args(["--schedule", "lookahead"])
    assert (args.profile, args.lookahead_steps) == ("lookahead", 0)
    assert load_example().PPOConfig().lookahead_steps == 0
    with pytest.raises(SystemExit):
        example.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 100)" in out and "(default: 0)" in out


def test_decoupled_ppo_trains_a_batch_of_current_weights_as_serial_ppo_does_and_reweights_a_stale_one():
    ppo = load_example()
    import copy
    import dataclasses

    config = ppo.PPOConfig(profile="k1_skip", iterations=1, processes=1, envs=4, chunk_size=4, rounds=3, epochs=2,
                           minibatches=2, executor="inline")
    batches = []
    _, policy = ppo.train(config, lambda it, batch, entry: batches.append(batch))
    batch = batches[0]
    obs = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.obs.items()}
    with torch.no_grad():  # the batch as the current weights would have chosen it: behaviour = proximal
        logprob, _, value = policy.evaluate(policy.features(obs),
                                            torch.as_tensor(batch.actions[:, :, 0].reshape(-1, 11)))
    batch.extras["logprob"] = logprob.numpy().reshape(3, 4)
    batch.extras["value"] = value.numpy().reshape(3, 4)

    def updated(max_lag: int, stale_by: float = 0.0) -> dict:
        model = copy.deepcopy(policy)
        stale = copy.deepcopy(batch)
        stale.extras["logprob"] = batch.extras["logprob"] - stale_by  # chosen by weights that liked it less
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        lagged = dataclasses.replace(config, max_lag=max_lag, correction="decoupled")
        losses = ppo.ppo_update(model, optimizer, stale, lagged, np.random.default_rng(0))
        return {"losses": losses, **{n: p.detach().clone() for n, p in model.named_parameters()}}

    serial, decoupled = updated(0), updated(1)
    assert serial["losses"] == pytest.approx(decoupled["losses"], rel=1e-5)
    for name in serial:
        if name != "losses":
            torch.testing.assert_close(decoupled[name], serial[name], rtol=1e-5, atol=1e-6)
    # stale behaviour log-probs: serial PPO starts its ratio at exp(0.5) (clipped), decoupled weights the sample
    # by exp(0.5) and starts its ratio at 1, so the two updates differ
    serial_stale, decoupled_stale = updated(0, 0.5), updated(1, 0.5)
    assert any(not torch.allclose(serial_stale[n], decoupled_stale[n]) for n in serial if n != "losses")
