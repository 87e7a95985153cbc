"""Our flat profile keys as RLinf's nested config keys (RLinf 0.3.0).

A :class:`~behavior1k_fast.core.profile.RolloutProfile` is flat (``pipeline_stages: 2``, ``total_num_envs: 4``);
RLinf's embodied configs nest the same knobs where its code reads them:

| profile key | RLinf key | read by (rlinf 0.3.0) |
|---|---|---|
| ``pipeline_stages`` | ``rollout.pipeline_stage_num`` | ``EnvWorker`` (``cfg.rollout.pipeline_stage_num``) and the config checks |
| ``total_num_envs`` (default: one env per process) | ``env.train.total_num_envs``, ``env.eval.total_num_envs`` | ``EnvWorker``, ``BehaviorProcessPool.acquire_shared`` |
| ``num_env_processes`` | ``env.train.num_env_subprocess``, ``env.eval.num_env_subprocess`` | ``BehaviorProcessPool.acquire_shared`` |
| ``skip_intermediate_obs`` | ``env.train.skip_intermediate_obs_in_chunk``, ``env.eval.skip_intermediate_obs_in_chunk`` | ``BehaviorProcess.__init__`` |
| ``chunk_size`` | ``actor.model.num_action_chunks`` | the model and the config checks |

Both env splits get the env keys, since RLinf builds a ``BehaviorProcessPool`` for each and checks that both
``total_num_envs`` divide by the stage count. The other profile keys (the patches' knobs) have no RLinf key: they
reach RLinf's env workers through ``BEHAVIOR1K_FAST`` (a preset or a profile YAML).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core.profile import RolloutProfile

#: RLinf's env config splits that build BEHAVIOR workers.
RLINF_ENV_SPLITS = ("train", "eval")


def rlinf_overrides(profile: RolloutProfile | Mapping[str, Any] | None) -> dict[str, Any]:
    """RLinf's nested config keys for ``profile`` (a profile, a flat mapping with our or RLinf's key names, or
    ``None`` for the fast path), as a dict to merge into an RLinf config (``OmegaConf.merge``) or write as YAML.
    Dotted Hydra overrides are its leaves: ``rollout.pipeline_stage_num=2``."""
    profile = RolloutProfile.coerce(profile)
    env = {
        "total_num_envs": profile.envs_per_process * profile.num_env_processes,
        "num_env_subprocess": profile.num_env_processes,
        "skip_intermediate_obs_in_chunk": profile.skip_intermediate_obs,
    }
    return {
        "rollout": {"pipeline_stage_num": profile.pipeline_stages},
        "env": {split: dict(env) for split in RLINF_ENV_SPLITS},
        "actor": {"model": {"num_action_chunks": profile.chunk_size}},
    }
