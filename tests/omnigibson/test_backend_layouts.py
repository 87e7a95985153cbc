"""The OmniGibson backend, its factory, the engine, ``validate`` and a ``bench`` row on both upstream layouts:
a ``VectorEnvironment`` of single-scene ``Environment``\\ s (1.1.1, v3.7) and main's multi-scene
``Environment``, each line's real env code at the og.sim seam (``seam_og``), built by the factory from one
config. The engine runs with ``executor="inline"`` (the seam lives in this process)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackend, OmniGibsonBackendFactory
from behavior1k_fast.core.contract import VectorBackend
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.patching.omnigibson.layout import is_multi_scene
from behavior1k_fast.rollout import RolloutEngine

#: One user config for both layouts (no env.num_envs: the engine decides how many envs a worker builds).
CONFIG = {
    "env": {"action_frequency": 30, "rendering_frequency": 30, "physics_frequency": 120},
    "robots": [{"type": "Turtlebot", "obs_modalities": ["rgb", "proprio"]}],
    "task": {"type": "DummyTask"},
}
CHUNK = 4


def multi_scene(env_cls) -> bool:
    return is_multi_scene(env_cls)


def robots(env_cls) -> list:
    """The stand-in robot of every env the seam built, in env order."""
    if multi_scene(env_cls):
        return [scene.robots[0] for env in env_cls.built for scene in env.scenes]
    return [env._scene.robots[0] for env in env_cls.built]


def reward_of(env_cls, env: int) -> float:
    """The seam task's reward per step: 1 (single-scene ``Task``), ``env + 1`` (main's batched task)."""
    return float(env + 1) if multi_scene(env_cls) else 1.0


def policy(obs):
    """Each env's action is ``0.1 * (its camera value + 1)``: the seam camera of env i reads i."""
    rgb = next(value for key, value in obs.items() if key.endswith("::rgb"))
    value = 0.1 * (rgb[:, 0, 0, 0].astype(np.float32) + 1)
    return np.repeat(value[:, None, None], CHUNK, axis=1).repeat(2, axis=2)


def test_factory_builds_the_installed_layout_from_one_config(line, patched, seam_og):
    sim, env_cls = seam_og
    patched("env_step_obs")  # the fast profile
    config = copy.deepcopy(CONFIG)
    backend = OmniGibsonBackendFactory(config)(3, 0, RolloutProfile())
    assert config == CONFIG  # the factory's config is not changed
    assert isinstance(backend, VectorBackend) and backend.num_envs == 3
    if line.name == "main":
        (env,) = env_cls.built
        assert backend.env is env and env.num_envs == 3 and env.config["env"]["num_envs"] == 3
    else:
        assert type(backend.env).__name__ == "VectorEnvironment" and len(env_cls.built) == 3
        assert "num_envs" not in env_cls.built[0].config["env"]
    OmniGibsonBackendFactory({**CONFIG, "env": {"num_envs": 2}})(2, 0, RolloutProfile())  # equal: accepted


def test_config_num_envs_that_differs_from_the_engines_is_an_error_before_building(line, patched, seam_og):
    sim, env_cls = seam_og
    patched("env_step_obs")
    factory = OmniGibsonBackendFactory({**CONFIG, "env": {"num_envs": 4}})
    with pytest.raises(ValueError, match=r"config env.num_envs=4 but this backend builds num_envs=2 envs"):
        factory(2, 0, RolloutProfile())
    with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
        factory(0, 0, RolloutProfile())
    assert env_cls.built == []


def test_backend_meets_the_contract_on_each_layout(line, patched, seam_og):
    sim, env_cls = seam_og
    patched("env_step_obs")
    backend = OmniGibsonBackendFactory(CONFIG)(2, 0, RolloutProfile())
    camera = "robot0::robot0:eyes:Camera:0::rgb" if line.name == "main" else "robot0::rgb"
    assert backend.action_space.shape == (2,)
    assert sorted(backend.observation_space.spaces) == sorted([camera] + ["robot0::proprio"] * (line.name == "main"))
    t0 = backend.sim_time
    obs, rewards, terminated, truncated, infos = backend.step(np.zeros((1, 2)), env_indices=[1], get_obs=False)
    assert obs == [None] and rewards.dtype == np.float64 and rewards.tolist() == [reward_of(env_cls, 1)]
    assert terminated.dtype == truncated.dtype == bool and len(infos) == 1
    assert backend.sim_time == pytest.approx(t0 + 1 / 30)
    assert [len(r.applied) for r in robots(env_cls)] == [0, 1]  # env 0 held
    renders = []
    sim.render = lambda: renders.append(1)
    (ob,) = backend.observe([1])
    assert ob[camera].shape == (4, 4, 3) and ob[camera][0, 0, 0] == 1.0 and renders == [1]
    obs, infos = backend.reset([0])
    assert obs[0][camera][0, 0, 0] == 0.0 and len(infos) == 1
    assert backend.reset([0], get_obs=False) == ([None], [{}])
    with pytest.raises(ValueError, match=r"actions must have shape \(1, 2\), got \(2, 2\)"):
        backend.step(np.zeros((2, 2)), env_indices=[0])


def test_backend_refuses_an_unpatched_env(line, seam_og):
    with pytest.raises(RuntimeError, match=r"\.step takes no env_indices: apply the behavior1k_fast profile"):
        OmniGibsonBackendFactory(CONFIG)(2, 0, RolloutProfile())
    with pytest.raises(TypeError, match="env must be an OmniGibson VectorEnvironment or main's multi-scene"):
        OmniGibsonBackend(object())


def test_engine_drives_each_layout_end_to_end(line, seam_og, tmp_path):
    """Hybrid partition, K = 2 stages of 2 envs in one backend: every env takes exactly its own actions (the
    other stage's envs hold theirs), each its own rows; env 1's episode ends at its third step of every
    episode, its remaining actions are masked and the engine resets env 1 only."""
    sim, env_cls = seam_og
    env_cls.terminate_at = {1: 3}
    profile = RolloutProfile(num_env_processes=1, total_num_envs=4, pipeline_stages=2, chunk_size=CHUNK,
                             gc_enable=False, numba_cache_dir=str(tmp_path / "numba"))
    with RolloutEngine(OmniGibsonBackendFactory(CONFIG), profile, executor="inline") as engine:
        assert engine.worker_pids == []
        stats = engine.rollout(policy, 3)
    assert stats.own_actions.tolist() == [12, 9, 12, 12]
    assert stats.episodes.tolist() == [0, 3, 0, 0]
    assert stats.hold_steps_per_round[[0, 2, 3]].tolist() == [CHUNK] * 3
    applied = [np.asarray(r.applied) for r in robots(env_cls)]
    assert [len(a) for a in applied] == stats.own_actions.tolist()  # held envs receive nothing
    for env, rows in enumerate(applied):
        np.testing.assert_allclose(rows, 0.1 * (env + 1), rtol=1e-6)
    assert stats.total_reward.tolist() == [reward_of(env_cls, g) * n for g, n in enumerate(stats.own_actions)]
    if line.name == "main":
        (env,) = env_cls.built
        assert env._current_episodes.tolist() == [1, 4, 1, 1]  # the engine's resets touched env 1 only


def test_validate_compares_stock_and_fast_on_each_layout(line, patched, seam_og, monkeypatch):
    """``validate --backend omnigibson`` runs each side in its own process; here both run in this one (the
    seam), with the patches applied as a worker would."""
    from behavior1k_fast import backends
    from behavior1k_fast.tools import validate

    patched("env_step_obs")
    monkeypatch.setattr(backends, "isolate_sides", lambda backend: False)
    # episodes end (validate fails a run without): env 0 every 3rd step, env 1 every 2nd (single-scene seam
    # envs are keyed by creation, so the fast side's envs 2 and 3 too)
    seam_og[1].terminate_at = {0: 3, 1: 2, 2: 3, 3: 2}
    report = validate.validate(backend="omnigibson", backend_options={"config": CONFIG}, num_envs=2, chunks=2,
                               chunk_size=CHUNK)
    assert report.passed, report.format()
    assert report.frames_compared == 2 * 3 and report.max_abs_reward_delta == 0.0
    assert report.episodes_ended == report.terminations == 4


def test_bench_row_runs_on_each_layout(line, seam_og, tmp_path):
    from behavior1k_fast.backends import make_factory
    from behavior1k_fast.tools.bench import ablation

    config = ablation.BenchConfig(backend="omnigibson", backend_options={"config": CONFIG}, processes=2,
                                  envs_per_process=2, pipeline_stages=2, chunk_size=CHUNK, rounds=2, warmup=0,
                                  executor="inline")
    factory = make_factory(config.backend, **config.backend_options)
    row = next(r for r in ablation.ablation_rows(2, 2, 2, CHUNK) if r.name == "hybrid_overlap")
    row = ablation.Row(row.name, row.label, row.profile.replace(numba_cache_dir=str(tmp_path / "numba")),
                       row.overlap, row.prev)
    measures = ablation.run_engine_row(factory, row, policy, config)
    assert measures.own_actions == 4 * 2 * CHUNK and measures.pipeline_stages == 2
    assert [len(r.applied) for r in robots(seam_og[1])] == [2 * CHUNK] * 4



@pytest.mark.parametrize("tiled", [False, True], ids=["per-camera", "tiled"])
def test_validate_holds_with_tiled_rendering_on_and_off(line, patched, seam_og, monkeypatch, tiled):
    """main's ``Environment`` with tiled rendering on (one tiled read per step, the seam's stand-in for main's
    ``TiledVisionSensor``: each tile shows its env and the simulated time) and off: stock and fast agree frame by
    frame. The single-scene lines have no tiled rendering."""
    from behavior1k_fast import backends
    from behavior1k_fast.tools import validate

    sim, env_cls = seam_og
    if not multi_scene(env_cls):
        assert not hasattr(env_cls, "tiled")
        return
    patched("env_step_obs", "multi_scene_step")
    monkeypatch.setattr(backends, "isolate_sides", lambda backend: False)
    monkeypatch.setattr(env_cls, "tiled", tiled)
    env_cls.terminate_at = {0: 3, 1: 2}
    report = validate.validate(backend="omnigibson", backend_options={"config": CONFIG}, num_envs=2, chunks=2,
                               chunk_size=CHUNK)
    assert report.passed, report.format()
    assert report.frames_compared == 2 * 3 and report.episodes_ended == 4
    assert report.stale_boundary_frames == 0  # tiles show the simulated time: each boundary frame is current
    assert all((env._tiled_sensor is not None) is tiled for env in env_cls.built)
