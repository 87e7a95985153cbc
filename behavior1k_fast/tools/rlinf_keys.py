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

Two layout keys of a profile have no RLinf counterpart, so RLinf cannot run every layout the engine runs
(:func:`rlinf_unsupported` says why): RLinf's pipeline stages are env subsets of every env process (the
engine's ``partition: hybrid``), and its rollout steps the stages in turn, each round waiting for its envs
(the engine's ``schedule: barrier``); the engine's ``process`` partition and its ``async`` and ``lookahead``
schedules are its own.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

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


def rlinf_unsupported(profile: RolloutProfile | Mapping[str, Any] | None) -> list[str]:
    """Why RLinf cannot run ``profile``'s layout as the engine does (module docs), one reason per key; empty
    when :func:`rlinf_overrides` says all of it."""
    profile = RolloutProfile.coerce(profile)
    reasons = []
    if profile.pipeline_stages > 1 and profile.partition != "hybrid":
        reasons.append(f"partition {profile.partition!r}: RLinf's stages are env subsets of every env process "
                       f"(partition 'hybrid')")
    if profile.schedule != "barrier":
        reasons.append(f"schedule {profile.schedule!r}: RLinf steps its stages in turn, each waiting for its envs "
                       f"(schedule 'barrier')")
    return reasons


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def rlinf_dotted(profile: RolloutProfile | Mapping[str, Any] | None) -> list[str]:
    """:func:`rlinf_overrides` as Hydra's dotted overrides: ``["rollout.pipeline_stage_num=2", ...]``."""
    return [f"{key}={value}" for key, value in _leaves(rlinf_overrides(profile))]
