"""A real torch chunk policy for the benchmark: rgb + proprio in, a chunk of N actions out.

Shaped like a small vision-language-action policy (pi-05 on BEHAVIOR): a convolutional encoder per camera
and an MLP over proprioception give a context vector; an action head refines a chunk of N actions from a
fixed starting point over ``denoise_steps`` flow-matching-like iterations conditioned on the context.
``denoise_steps`` sets the forward cost without changing memory; :func:`calibrate_denoise_steps` sizes it
so one batched forward takes a target number of ms (by default the optimised env time per chunk).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

#: Channels of the camera encoder's convolutions (stride 2 each).
ENCODER_CHANNELS = (16, 32, 64)


def camera_rgb_keys(observation_space: Any) -> list[str]:
    """Observation keys holding rgb images (``"<camera>::rgb"``), sorted."""
    return sorted(k for k in observation_space.spaces if k.endswith("::rgb"))


def proprio_keys(observation_space: Any) -> list[str]:
    """Observation keys holding proprioception (``"proprio"`` or ``"<robot>::proprio"``), sorted."""
    return sorted(k for k in observation_space.spaces if k == "proprio" or k.endswith("::proprio"))


class ChunkPolicy:
    """Batched torch policy: ``act(obs) -> actions [B, N, action_dim]`` (float64 numpy, in the action bounds).

    Deterministic: the same observations give the same actions (no sampling), so process-partition runs
    can be compared bit for bit with unpipelined ones.
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        chunk_size: int = 32,
        denoise_steps: int = 10,
        hidden: int = 256,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        import torch
        from torch import nn

        for name, value in (("chunk_size", chunk_size), ("denoise_steps", denoise_steps), ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.rgb_keys = camera_rgb_keys(observation_space)
        self.proprio_keys = proprio_keys(observation_space)
        if not self.rgb_keys or not self.proprio_keys:
            raise ValueError(
                f"the policy needs '<camera>::rgb' and 'proprio' keys in the observation space, got keys "
                f"{sorted(observation_space.spaces)}"
            )
        self.chunk_size = chunk_size
        self.denoise_steps = denoise_steps
        self.device = torch.device(device)
        self.action_dim = int(np.prod(action_space.shape))
        self._low = np.asarray(action_space.low, dtype=np.float64).reshape(-1)
        self._high = np.asarray(action_space.high, dtype=np.float64).reshape(-1)
        proprio_dim = sum(int(np.prod(observation_space[k].shape)) for k in self.proprio_keys)
        rgb_channels = observation_space[self.rgb_keys[0]].shape[-1]

        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        layers: list[Any] = []
        c_in = min(rgb_channels, 3)
        for c_out in ENCODER_CHANNELS:
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.ReLU()]
            c_in = c_out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.encoder = nn.Sequential(*layers)
        self.proprio_mlp = nn.Sequential(nn.Linear(proprio_dim, hidden), nn.ReLU())
        context_dim = ENCODER_CHANNELS[-1] * len(self.rgb_keys) + hidden
        self.context = nn.Sequential(nn.Linear(context_dim, hidden), nn.ReLU())
        chunk_dim = chunk_size * self.action_dim
        self.head = nn.Sequential(
            nn.Linear(chunk_dim + hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, chunk_dim),
        )
        self._start = torch.randn(1, chunk_dim, generator=gen)
        self._modules = nn.ModuleList([self.encoder, self.proprio_mlp, self.context, self.head])
        self._modules.to(self.device).eval()
        self._start = self._start.to(self.device)

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Actions for a batched observation (key -> ``[B, ...]``): float64 ``[B, chunk_size, action_dim]``."""
        import torch

        batch = len(obs[self.proprio_keys[0]])
        if batch == 0:
            raise ValueError("obs must hold at least one env's observation, got an empty batch")
        with torch.inference_mode():
            flat = [np.asarray(obs[k], dtype=np.float32).reshape(batch, -1) for k in self.proprio_keys]
            proprio = torch.from_numpy(np.concatenate(flat, axis=1))
            feats = []
            for key in self.rgb_keys:
                img = torch.from_numpy(np.ascontiguousarray(obs[key][..., :3])).to(self.device)
                feats.append(self.encoder(img.permute(0, 3, 1, 2).float().div_(255.0)))
            ctx = self.context(torch.cat([*feats, self.proprio_mlp(proprio.to(self.device))], dim=1))
            x = self._start.expand(batch, -1)
            dt = 1.0 / self.denoise_steps
            for _ in range(self.denoise_steps):
                x = x + dt * self.head(torch.cat([x, ctx], dim=1))
            out = torch.tanh(x).double().cpu().numpy()
        out = out.reshape(batch, self.chunk_size, self.action_dim)
        return self._low + (out + 1.0) * 0.5 * (self._high - self._low)

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.act(obs)


def time_forward_ms(policy: ChunkPolicy, obs: Mapping[str, np.ndarray], repeats: int = 3) -> float:
    """Median wall ms of one batched forward (after one warm-up call)."""
    policy.act(obs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy.act(obs)
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def calibrate_denoise_steps(
    policy: ChunkPolicy, obs: Mapping[str, np.ndarray], target_ms: float, max_steps: int = 4096
) -> int:
    """Denoise steps so one batched forward of ``obs`` takes about ``target_ms``; sets it on ``policy``.

    Fits forward time = fixed + steps * per_step from two probe sizes; at least 1 step.
    """
    if not target_ms > 0:
        raise ValueError(f"target_ms must be > 0, got {target_ms!r}")
    probes = (1, 9)
    times = []
    for steps in probes:
        policy.denoise_steps = steps
        times.append(time_forward_ms(policy, obs))
    per_step = max((times[1] - times[0]) / (probes[1] - probes[0]), 1e-4)
    fixed = times[0] - per_step
    steps = int(round((target_ms - fixed) / per_step))
    policy.denoise_steps = min(max(steps, 1), max_steps)
    return policy.denoise_steps
