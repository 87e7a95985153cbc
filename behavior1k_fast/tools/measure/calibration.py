"""The policy of a measured run, sized like a VLA next to this simulator: :func:`calibrate`.

One rule for ``bench`` and ``tune``: one forward at the stage batch of the command's reference layout (bench:
its all-optimisations row; tune: the default layout) takes that layout's env ms per stage chunk, so T_model
is about T_env, the regime where a pipeline matters. ``--model-ms`` sets the target instead, and
``--model-width`` / ``--model-depth`` fix the size (a width alone: its depth is calibrated).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

from ...core.profile import RolloutProfile
from .config import RunConfig, policy_threads, usable_cores
from .runs import Row, backend_spaces, run_engine_row

#: A calibrated forward further than this factor from its target (either way) is reported as a miss.
CALIBRATION_TOLERANCE = 1.25


@dataclass(frozen=True)
class Calibration:
    """How the policy was sized, and what it costs."""

    #: Env ms per stage chunk of the reference layout, measured for the target (``None``: not measured).
    env_ms_per_stage_chunk: float | None
    #: The forward time the size was fitted to (``None``: the size was fixed).
    target_model_ms: float | None
    model_width: int
    model_depth: int
    model_parameters: int
    model_tokens_per_sample: int
    model_dtype: str
    #: Best-of-5 ms of one forward at ``stage_batch``.
    forward_ms_at_stage_batch: float
    #: Envs per stage of the reference layout.
    stage_batch: int
    policy_device: str
    #: Intra-op threads of the policy (torch's, set here on the CPU by :func:`~.config.policy_threads`).
    policy_threads: int
    #: T_model(batch): ``{"batch", "ms", "ms_per_sample"}`` for every batch 1..all envs of the layout.
    t_model_by_batch: list

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def target_ratio(self) -> float | None:
        """The forward's ms at the stage batch over its target (``None``: the size was fixed)."""
        if not self.target_model_ms:
            return None
        return self.forward_ms_at_stage_batch / self.target_model_ms

    def miss(self) -> str | None:
        """One line when the forward missed its target by more than :data:`CALIBRATION_TOLERANCE` (the sizes
        on offer could not reach it, or the machine's load moved the timing), else ``None``."""
        ratio = self.target_ratio
        if ratio is None or 1 / CALIBRATION_TOLERANCE <= ratio <= CALIBRATION_TOLERANCE:
            return None
        side = "slower" if ratio > 1 else "faster"
        return (f"warning: the policy calibration missed its target: one forward at the stage batch of "
                f"{self.stage_batch} takes {self.forward_ms_at_stage_batch:.1f} ms, {ratio:.2f}x the target "
                f"{self.target_model_ms:.1f} ms ({side}); T_model is not about T_env here (set --model-ms, or "
                f"--model-width and --model-depth)")

    @property
    def model_ms_by_batch(self) -> dict[int, float]:
        """Batch -> ms of one forward."""
        return {c["batch"]: c["ms"] for c in self.t_model_by_batch}


def calibrate(factory: Any, profile: RolloutProfile, config: RunConfig, max_processes: int,
              env_ms: float | None = None, spaces: tuple | None = None) -> tuple[Any, Calibration]:
    """The policy for runs of ``config`` with ``profile`` as the reference layout (module docs), and how it was
    sized; its T_model(batch) for batch 1..``profile.total_num_envs``.

    ``env_ms`` is the reference layout's env ms per stage chunk where the caller measured it; otherwise, when
    a target is needed, it is T_env of a short run of ``profile`` through the engine (the narrowest one-block
    policy, one warm-up and two timed rounds), what the pipeline sees with every worker busy. On the CPU the
    policy gets :func:`~.config.policy_threads` for ``max_processes`` env processes. ``spaces`` are reset
    observations, observation and action space of one backend (:func:`~.runs.backend_spaces`) where the
    caller has them; otherwise one backend of ``profile`` is built here for them, in a spawned process with
    the profile applied where the backend needs that.
    """
    import torch

    from ...backends import isolate_sides
    from ...rollout.bootstrap import call_with_profile
    from .policy import WIDTHS, ChunkPolicy, batch_of, calibrate_model_size, model_cost_curve, time_forward_ms

    if config.device == "cpu":
        torch.set_num_threads(policy_threads(usable_cores(), max_processes))
    if spaces is None:
        spaces = call_with_profile(isolate_sides(config.backend), backend_spaces, profile, factory, config.seed)
    obs, obs_space, act_space = spaces
    stage_batch = profile.total_num_envs // profile.pipeline_stages
    batch = batch_of(obs, stage_batch)

    def build(width: int, depth: int) -> ChunkPolicy:
        return ChunkPolicy(obs_space, act_space, chunk_size=config.chunk_size, width=width, depth=depth,
                           device=config.device, seed=config.seed)

    target = None
    width, depth = config.model_width, config.model_depth
    if depth is None:
        if config.model_ms is None and env_ms is None:
            probe = run_engine_row(factory, Row("calibration", "calibration", profile, overlap=True),
                                   build(WIDTHS[0], 1), replace(config, rounds=2, warmup=1))
            env_ms = probe.t_env_ms
            if env_ms is None:
                raise ValueError(f"calibration reads env worker spans, which executor={config.executor!r} does "
                                 f"not give: pass --model-ms, or --model-width and --model-depth")
        target = config.model_ms if config.model_ms is not None else env_ms
        width, depth = calibrate_model_size(build, batch, target, widths=WIDTHS if width is None else (width,))
    policy = build(width, depth)
    return policy, Calibration(
        env_ms_per_stage_chunk=env_ms if config.model_ms is None else None, target_model_ms=target,
        model_width=width, model_depth=depth, model_parameters=policy.num_parameters,
        model_tokens_per_sample=policy.tokens, model_dtype=str(policy.dtype).removeprefix("torch."),
        forward_ms_at_stage_batch=time_forward_ms(policy, batch), stage_batch=stage_batch,
        policy_device=config.device, policy_threads=torch.get_num_threads(),
        t_model_by_batch=model_cost_curve(policy, obs, profile.total_num_envs),
    )
