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
        cuda_graph: bool = True,
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
        #: On CUDA the denoise loop is captured once per (batch, steps) and replayed as one CUDA graph, as
        #: served VLA policies do; ``graph_error`` says why it fell back to eager launches, if it did.
        self.cuda_graph = cuda_graph and self.device.type == "cuda"
        self.graph_error: str | None = None
        self._graphs: dict[tuple[int, int], tuple[Any, Any, Any]] = {}

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Actions for a batched observation (key -> ``[B, ...]``): float64 ``[B, chunk_size, action_dim]``."""
        import torch

        batch = len(obs[self.proprio_keys[0]])
        if batch == 0:
            raise ValueError("obs must hold at least one env's observation, got an empty batch")
        with torch.no_grad():
            flat = [np.asarray(obs[k], dtype=np.float32).reshape(batch, -1) for k in self.proprio_keys]
            proprio = torch.from_numpy(np.concatenate(flat, axis=1))
            feats = []
            for key in self.rgb_keys:
                img = torch.from_numpy(np.ascontiguousarray(obs[key][..., :3])).to(self.device)
                feats.append(self.encoder(img.permute(0, 3, 1, 2).float().div_(255.0)))
            ctx = self.context(torch.cat([*feats, self.proprio_mlp(proprio.to(self.device))], dim=1))
            x = self._denoise_graphed(ctx) if self.cuda_graph else self._denoise(ctx)
            out = x.double().cpu().numpy()
        out = out.reshape(batch, self.chunk_size, self.action_dim)
        return self._low + (out + 1.0) * 0.5 * (self._high - self._low)

    def _denoise(self, ctx: Any) -> Any:
        """``denoise_steps`` Euler steps of the action head from the fixed start, squashed to [-1, 1]."""
        import torch

        x = self._start.expand(ctx.shape[0], -1)
        dt = 1.0 / self.denoise_steps
        for _ in range(self.denoise_steps):
            x = x + dt * self.head(torch.cat([x, ctx], dim=1))
        return torch.tanh(x)

    def _denoise_graphed(self, ctx: Any) -> Any:
        import torch

        key = (int(ctx.shape[0]), self.denoise_steps)
        if key not in self._graphs:
            try:
                static_ctx = ctx.clone()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._denoise(static_ctx)  # warm-up outside the capture
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = self._denoise(static_ctx)
            except RuntimeError as exc:  # capture unsupported here: eager launches, reason kept
                self.cuda_graph, self.graph_error = False, f"{type(exc).__name__}: {exc}"
                return self._denoise(ctx)
            self._graphs[key] = (graph, static_ctx, static_out)
        graph, static_ctx, static_out = self._graphs[key]
        static_ctx.copy_(ctx)
        graph.replay()
        return static_out

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.act(obs)


def time_forward_ms(policy: ChunkPolicy, obs: Mapping[str, np.ndarray], repeats: int = 5) -> float:
    """Best-of-``repeats`` wall ms of one batched forward (after one warm-up call; the minimum is the
    least disturbed by other load on the machine)."""
    policy.act(obs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy.act(obs)
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.min(samples))


def calibrate_denoise_steps(
    policy: ChunkPolicy, obs: Mapping[str, np.ndarray], target_ms: float, max_steps: int = 8192
) -> int:
    """Denoise steps so one batched forward of ``obs`` takes about ``target_ms``; sets it on ``policy``.

    Fits forward time = fixed + steps * per_step through a 1-step probe and a second point, twice (the
    second point is the first estimate); at least 1 step, at most ``max_steps``.
    """
    if not target_ms > 0:
        raise ValueError(f"target_ms must be > 0, got {target_ms!r}")
    policy.denoise_steps = 1
    t1 = time_forward_ms(policy, obs)
    steps = 33
    for _ in range(2):
        policy.denoise_steps = steps
        per_step = max((time_forward_ms(policy, obs) - t1) / (steps - 1), 1e-4)
        steps = min(max(int(round(1 + (target_ms - t1) / per_step)), 2), max_steps)
    policy.denoise_steps = steps
    return steps
