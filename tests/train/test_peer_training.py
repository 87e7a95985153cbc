"""The peers as training batch sources: the gymnasium double buffer (``DoubleBufferBatches``), serial and with its PPO
update on a thread, and TorchRL's ``MultiSyncCollector`` and single ``Collector`` over a ``ParallelEnv``
(``TorchRLTraining``): a tiny training run yields ``Trajectory`` batches whose per-step arrays are the envs' own
(replayed here in-process from the same seeds and actions) and whose chunks carry the weights version that chose
them."""

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


def worker_chunks(batches, per_process):
    """Worker -> its chunks in the order its envs took them, each ``(batch, round, rows)``: a batch's env rows in
    blocks of ``per_process``, block j being worker j's (the extras' worker names it where the rows are runs of
    a worker's envs, ``WORKER_KEY``)."""
    chunks = {}
    for batch in batches:
        for j in range(batch.actions.shape[1] // per_process):
            rows = slice(j * per_process, (j + 1) * per_process)
            worker = int(batch.extras[WORKER_KEY][0, rows.start]) if WORKER_KEY in batch.extras else j
            chunks.setdefault(worker, []).extend((batch, r, rows) for r in range(len(batch.actions)))
    return chunks


def assert_own_steps(batches, factory, profile):
    """Each worker's envs, stepped in this process from its seed (sub-env i is seeded seed + i) with the chunks
    the batches recorded for them in order, give the batches' per-step arrays and the observations each chunk
    was chosen from."""
    bootstrap_process(profile, patch_set=patch_set_of(factory))
    chunks = worker_chunks(batches, profile.envs_per_process)
    assert sorted(chunks) == list(range(profile.num_env_processes))
    for worker, taken in chunks.items():
        backend = factory(profile.envs_per_process, SEED + worker, profile)
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
