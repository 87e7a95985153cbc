"""The peers as training batch sources: the gymnasium double buffer (``DoubleBufferBatches``), serial and with its PPO
update on a thread, and TorchRL's collectors (``TorchRLTraining``: ``MultiSyncCollector``, ``MultiAsyncCollector``,
``AsyncBatchedCollector`` and a single ``Collector`` over a ``ParallelEnv``): a tiny training run yields
``Trajectory`` batches whose per-step arrays are the envs' own (replayed here in-process from the same seeds and
actions) and whose chunks carry the weights version that chose them."""

import copy
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from behavior1k_fast.core.contract import patch_set_of  # noqa: E402
from behavior1k_fast.rollout import RolloutEngine, step_chunk  # noqa: E402
from behavior1k_fast.rollout.bootstrap import bootstrap_process  # noqa: E402
from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY  # noqa: E402
from behavior1k_fast.tools.peers.gymnasium import DoubleBufferBatches  # noqa: E402
from behavior1k_fast.tools.peers.torchrl import WORKER_KEY  # noqa: E402
from behavior1k_fast.tools.train import learner  # noqa: E402

CONFIG = learner.PPOConfig(profile="k1_skip", iterations=2, processes=2, envs=4, chunk_size=4, rounds=3, epochs=1,
                           minibatches=1, executor="inline", horizon=5)  # 5 own actions: episodes end in a batch
SEED = 3


def train_peer(on_thread, torchrl_kind=None):
    factory, profile = learner.make_factory(CONFIG), learner.make_profile(CONFIG)
    with RolloutEngine(factory, profile, executor="inline") as engine:
        spaces = (engine.observation_space, engine.action_space)
        obs_dim = sum(int(np.prod(engine.observation_space[k].shape)) for k in learner.OBS_KEYS)
        action_dim = engine.action_dim
    batches = []
    config = dataclasses.replace(CONFIG, seed=SEED, max_lag=int(on_thread))

    def source(policy):
        if torchrl_kind is not None:
            return torchrl_source(torchrl_kind, policy, spaces, factory, profile, config, obs_dim, action_dim)
        return DoubleBufferBatches(factory, profile, copy.deepcopy(policy), spaces, config.rounds, config.iterations,
                                   config.seed, learner.load_trained, on_thread=on_thread)

    run, _ = learner.train_on(config, source, obs_dim, action_dim,
                              on_iteration=lambda it, batch, entry: batches.append(batch))
    return run, batches, factory, profile


def torchrl_source(kind, policy, spaces, factory, profile, config, obs_dim, action_dim):
    import functools

    from tensordict.nn import TensorDictModule

    from behavior1k_fast.tools.peers.torchrl import ACTOR_OUT_KEYS, TorchRLActor, TorchRLTraining

    make_policy = functools.partial(learner.ActorCritic, obs_dim, action_dim, config.chunk_size)

    def make_actor():
        return TensorDictModule(TorchRLActor(make_policy, learner.trained_state(policy), spaces[0]),
                                in_keys=list(spaces[0].spaces), out_keys=ACTOR_OUT_KEYS)

    return TorchRLTraining(kind, make_actor, profile, factory, spaces, config.seed, config.rounds, config.iterations)


def worker_chunks(batches, per_worker):
    """Worker -> its chunks in the order its envs took them, each ``(batch, round, rows)``: a batch's env rows in
    blocks of ``per_worker``, block j being worker j's (the extras' worker names it where the rows are runs of
    a worker's envs, ``WORKER_KEY``), leaving out the rounds in which the block took no step (sat out)."""
    chunks = {}
    for batch in batches:
        for j in range(batch.actions.shape[1] // per_worker):
            rows = slice(j * per_worker, (j + 1) * per_worker)
            worker = int(batch.extras[WORKER_KEY][-1, rows.start]) if WORKER_KEY in batch.extras else j
            chunks.setdefault(worker, []).extend((batch, r, rows) for r in range(len(batch.actions))
                                                 if batch.applied[r, rows].any())
    return chunks


def assert_own_steps(batches, factory, profile, per_worker=None):
    """Each worker's envs (``per_worker`` of them, a process's by default), stepped in this process from its seed
    (sub-env i is seeded seed + i) with the chunks the batches recorded for them in order, give the batches'
    per-step arrays and the observations each chunk was chosen from."""
    per_worker = per_worker or profile.envs_per_process
    bootstrap_process(profile, patch_set=patch_set_of(factory))
    chunks = worker_chunks(batches, per_worker)
    assert sorted(chunks) == list(range(profile.num_env_processes * profile.envs_per_process // per_worker))
    for worker, taken in chunks.items():
        backend = factory(per_worker, SEED + worker, profile)
        try:
            obs, _ = backend.reset()
            seen = {k: np.stack([o[k] for o in obs]) for k in batches[0].obs}  # what chose the first chunk
            for i, (batch, r, rows) in enumerate(taken):
                for k, value in seen.items():
                    np.testing.assert_array_equal(batch.obs[k][r, rows], value, err_msg=f"worker {worker} {i} {k}")
                result = step_chunk(backend, batch.actions[r, rows],
                                    skip_intermediate_obs=profile.skip_intermediate_obs)
                seen = result.obs
                for name in ("rewards", "terminated", "truncated", "applied"):
                    np.testing.assert_array_equal(getattr(batch, name)[r, rows], getattr(result, name),
                                                  err_msg=f"worker {worker} chunk {i} {name}")
        finally:
            backend.close()


@pytest.mark.parametrize("on_thread", [False, True], ids=["serial", "update_on_a_thread"])
def test_the_double_buffer_trains_on_batches_of_the_envs_own_steps_and_weights_versions(on_thread):
    run, batches, factory, profile = train_peer(on_thread)
    assert len(batches) == 2 and run.env_steps[-1] == sum(int(b.applied.sum()) for b in batches)
    assert_own_steps(batches, factory, profile)
    assert sum(len(b.episodes.env) for b in batches) > 0  # episodes of 5 actions end inside these batches
    for b in batches:  # an ended episode's return is its applied rewards (rewards are 0 where not applied)
        assert np.all(b.rewards[~b.applied] == 0)
        assert b.episodes.success is not None and set(b.episodes.final_obs) == set(b.obs)
    # serial: the second batch acts with the weights of the first update; on a thread it was collected while
    # that update ran, so it acts with the weights before it (one update behind)
    versions = [set(np.unique(b.extras[WEIGHTS_VERSION_KEY]).tolist()) for b in batches]
    assert versions == ([{0}, {0}] if on_thread else [{0}, {1}])
    assert run.policy_lag == ([0.0, 1.0] if on_thread else [0.0, 0.0])
    assert all(cpu > 0 for cpu in run.update_cpu_s)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torchrl_sync", "torchrl_parallel"])
def test_torchrl_trains_on_batches_of_the_envs_own_steps_with_the_versions_its_actor_recorded(kind):
    pytest.importorskip("torchrl")
    run, batches, factory, profile = train_peer(False, kind)
    assert len(batches) == 2 and run.env_steps[-1] == sum(int(b.applied.sum()) for b in batches)
    assert_own_steps(batches, factory, profile)
    assert sum(len(b.episodes.env) for b in batches) > 0 and batches[0].episodes.success is not None
    # serial: the second batch was collected after the trainer posted the first update's weights
    assert [set(np.unique(b.extras[WEIGHTS_VERSION_KEY]).tolist()) for b in batches] == [{0}, {1}]
    assert run.policy_lag == [0.0, 0.0]


@pytest.mark.slow
def test_torchrl_s_async_collector_trains_on_runs_of_each_worker_s_own_steps_recorded_with_their_worker():
    """``MultiAsyncCollector``: a PPO batch is P runs of ``rounds`` chunks, each of the worker that finished it
    (the same worker may hand two in a row); every run is its worker's envs' own steps in order, and the second
    batch was collected, at least in part, while the trainer made the first update."""
    pytest.importorskip("torchrl")
    run, batches, factory, profile = train_peer(True, "torchrl_async")
    envs = profile.num_env_processes * profile.envs_per_process
    assert len(batches) == 2 and all(b.actions.shape[:2] == (CONFIG.rounds, envs) for b in batches)
    assert run.env_steps[-1] == sum(int(b.applied.sum()) for b in batches)
    assert_own_steps(batches, factory, profile)
    for b in batches:  # a run's rows are one worker's envs for all its rounds
        blocks = b.extras[WORKER_KEY].reshape(CONFIG.rounds, -1, profile.envs_per_process)
        assert (blocks == blocks[:1, :, :1]).all()
    assert set(np.unique(batches[0].extras[WEIGHTS_VERSION_KEY]).tolist()) == {0}
    assert run.policy_lag[0] == 0 and 0 < run.policy_lag[1] <= 1


@pytest.mark.slow
def test_torchrl_s_batched_collector_trains_on_each_env_s_own_steps_its_rows_sitting_out_the_rounds_it_did_not_take():
    """``AsyncBatchedCollector``: a batch holds whichever envs stepped, so each env's row holds the chunks it took,
    in its last rounds, and sits out the first ones where it took fewer than the most (no step applied, no
    episode); every row is its env's own steps in order (each env is its own worker, seeded seed + env), the
    batch's own actions are the frames asked for, and its lag counts the chunks taken only."""
    pytest.importorskip("torchrl")
    run, batches, factory, profile = train_peer(True, "torchrl_batched")
    envs = profile.num_env_processes * profile.envs_per_process
    assert len(batches) == 2 and all(b.actions.shape[1] == envs and len(b.actions) >= CONFIG.rounds for b in batches)
    took = [b.applied.any(axis=2) for b in batches]
    assert [int(t.sum()) for t in took] == [envs * CONFIG.rounds] * 2  # the frames asked for, one chunk each
    assert run.env_steps[-1] == sum(int(b.applied.sum()) for b in batches)
    for b, t in zip(batches, took):
        assert (t == np.sort(t, axis=0)).all()  # a row sits out first, then takes its chunks
        assert (b.extras[WORKER_KEY] == np.arange(envs)).all() and not b.rewards[~t].any()
        assert set(b.episodes.round.tolist()) <= set(np.flatnonzero(t.any(axis=1)).tolist())
    assert_own_steps(batches, factory, profile, per_worker=1)
    assert set(np.unique(batches[0].extras[WEIGHTS_VERSION_KEY][took[0]]).tolist()) == {0}
    versions = batches[1].extras[WEIGHTS_VERSION_KEY][took[1]]
    assert run.policy_lag[0] == 0 and run.policy_lag[1] == pytest.approx(1 - versions.mean())


def test_a_batched_collector_s_batch_gives_each_env_its_chunks_in_order_in_its_last_rounds():
    """``AsyncBatchedCollector``'s frames, one env's chunk each in the order they completed (env 0 took three,
    env 1 two, env 2 one): each env's row holds its own chunks in its last rounds and sits out before them
    (nothing applied, no reward, no lag counted); its boundary observation is its last chunk's; an episode that
    ended is recorded at its round with the sums carried from the batch before."""
    pytest.importorskip("torchrl")
    import gymnasium
    from tensordict import TensorDict

    from behavior1k_fast.core.profile import RolloutProfile
    from behavior1k_fast.tools.peers.torchrl import TorchRLTraining

    obs_space = gymnasium.spaces.Dict({"proprio": gymnasium.spaces.Box(-10, 10, (2,), np.float32)})
    profile = RolloutProfile(num_env_processes=1, total_num_envs=3, chunk_size=2)
    source = TorchRLTraining("torchrl_batched", lambda: None, profile, None, (obs_space, None), 0, 2, 1)
    source.returns[:] = [0.0, 0.0, 5.0]  # env 2's episode began in an earlier batch
    source.lengths[:] = [0, 0, 4]
    envs = [0, 1, 0, 2, 0, 1]
    n = len(envs)
    frame = torch.arange(n, dtype=torch.float32)
    ends = torch.zeros(n, 1, 2, dtype=torch.bool)
    ends[3, 0, 1] = True  # env 2's chunk: its episode terminates at the chunk's last step
    data = TensorDict({
        "proprio": frame[:, None, None].expand(n, 1, 2).clone(),
        "action": (10 + frame)[:, None, None, None].expand(n, 1, 2, 1).double(),
        "logprob": -frame[:, None], "value": 0.5 * frame[:, None],
        "weights_version": torch.tensor([[0], [0], [1], [1], [1], [1]]),
        "next": {"proprio": (100 + frame)[:, None, None].expand(n, 1, 2).clone(),
                 "step_rewards": torch.ones(n, 1, 2, dtype=torch.float64), "step_terminated": ends,
                 "step_truncated": torch.zeros(n, 1, 2, dtype=torch.bool),
                 "step_applied": torch.ones(n, 1, 2, dtype=torch.bool), "ended_success": ends.any(-1),
                 "ended::proprio": torch.full((n, 1, 2), -1.0), "worker": torch.tensor(envs),
                 "env_wall_seconds": torch.full((n,), 0.25, dtype=torch.float64),
                 "own_actions": torch.full((n,), 2)}}, batch_size=[n])
    batch = source.trajectory(data)
    took = batch.applied.any(axis=2)
    assert took.T.tolist() == [[True] * 3, [False, True, True], [False, False, True]]
    assert batch.actions[:, :, 0, 0].T[took.T].tolist() == [10, 12, 14, 11, 15, 13]  # each env's own, in order
    assert (batch.obs["proprio"][:, :, 0][took] + 10 == batch.actions[:, :, 0, 0][took]).all()  # chosen from
    assert not batch.rewards[~took].any() and batch.rewards[took].sum() == 2 * n
    assert batch.last_obs["proprio"][:, 0].tolist() == [104, 105, 103]
    eps = batch.episodes
    assert (eps.env.tolist(), eps.round.tolist(), eps.returns.tolist(), eps.lengths.tolist()) == ([2], [2], [7.0], [6])
    assert source.returns.tolist() == [6.0, 4.0, 0.0] and source.lengths.tolist() == [6, 4, 0]
    source.version = 1
    measure = source.measure(batch)
    assert measure.own_actions == 2 * n and measure.busiest_env_s == 0.25 * n  # one process holds the three envs
    assert measure.policy_lag == pytest.approx(1 - 4 / 6)  # the six chunks taken: two acted with version 0
