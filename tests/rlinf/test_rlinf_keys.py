"""``rlinf_overrides``: our flat profile keys land where RLinf 0.3.0's own code reads them."""

from __future__ import annotations

import importlib
import inspect

import pytest

from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.tools.rlinf_keys import rlinf_overrides

#: An RLinf embodied config as its BEHAVIOR examples lay it out (``behavior_ppo_openpi.yaml``: env/behavior_r1pro
#: at env.train and env.eval, model/pi0 at actor.model), with their values.
RLINF_BASE = {
    "env": {split: {"env_type": "behavior", "total_num_envs": 1, "max_steps_per_rollout_epoch": 20}
            for split in ("train", "eval")},
    "rollout": {"pipeline_stage_num": 1},
    "actor": {"model": {"num_action_chunks": 32}},
}
#: (RLinf module, the text with which its code reads the key) for each key rlinf_overrides writes.
READS = {
    "rollout.pipeline_stage_num": ("rlinf.workers.env.env_worker", "self.cfg.rollout.pipeline_stage_num"),
    "env.train.total_num_envs": ("rlinf.workers.env.env_worker", "self.cfg.env.train.total_num_envs"),
    "env.train.num_env_subprocess": ("rlinf.envs.behavior.behavior_env", 'OmegaConf.select(cfg, "num_env_subprocess"'),
    "env.train.skip_intermediate_obs_in_chunk": ("rlinf.envs.behavior.behavior_env",
                                                 'OmegaConf.select(cfg, "skip_intermediate_obs_in_chunk"'),
    "actor.model.num_action_chunks": ("rlinf.config", "cfg.actor.model.num_action_chunks"),
}


def leaves(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


@pytest.fixture
def profile(tmp_path):
    return RolloutProfile(pipeline_stages=2, num_env_processes=2, total_num_envs=8, chunk_size=16,
                          skip_intermediate_obs=True, numba_cache_dir=str(tmp_path))


def test_overrides_land_where_rlinfs_code_reads_them(profile):
    from omegaconf import OmegaConf

    cfg = OmegaConf.merge(OmegaConf.create(RLINF_BASE), OmegaConf.create(rlinf_overrides(profile)))
    assert cfg.rollout.pipeline_stage_num == 2 and cfg.actor.model.num_action_chunks == 16
    for split in ("train", "eval"):
        env_cfg = cfg.env[split]  # what BehaviorProcessPool and BehaviorProcess are given
        assert env_cfg.total_num_envs == 8 and env_cfg.env_type == "behavior"
        assert OmegaConf.select(env_cfg, "num_env_subprocess", default=1) == 2
        assert OmegaConf.select(env_cfg, "skip_intermediate_obs_in_chunk", default=False) is True
        # RLinf's config checks: envs divide by the stage count (one env worker)
        assert env_cfg.total_num_envs % cfg.rollout.pipeline_stage_num == 0


def test_every_key_is_one_rlinf_reads(profile):
    written = {key.replace("env.eval.", "env.train.") for key in leaves(rlinf_overrides(profile))}
    assert written == set(READS)
    for key, (module, text) in READS.items():
        assert text in inspect.getsource(importlib.import_module(module)), (key, module)


def test_leaves_use_rlinfs_names_for_our_knobs(profile):
    """Each leaf's own name is the RLinf alias the profile accepts, and it reads back as the same knob."""
    flat = {key.rsplit(".", 1)[1]: value for key, value in leaves(rlinf_overrides(profile)).items()}
    assert RolloutProfile.from_dict({**flat, "numba_cache_dir": profile.numba_cache_dir}) == profile


def test_defaults_and_bad_input():
    fast = leaves(rlinf_overrides(None))
    assert fast["rollout.pipeline_stage_num"] == 1 and fast["env.train.total_num_envs"] == 1
    assert fast["actor.model.num_action_chunks"] == RolloutProfile().chunk_size
    assert leaves(rlinf_overrides({"pipeline_stage_num": 4, "total_num_envs": 8}))["rollout.pipeline_stage_num"] == 4
    with pytest.raises(TypeError, match="profile must be a RolloutProfile, a mapping or None"):
        rlinf_overrides("pipeline_stages: 2")
