"""The benchmark's VLA-cost policy made trainable the way VLAs are fine-tuned: low-rank adapters (LoRA).

:class:`AdaptedVLA` is :class:`~.policy.ChunkPolicy`'s transformer with its weights frozen and a trainable
low-rank adapter added to both linear layers of every block's MLP (:class:`LowRankAdapter`: ``W x + (alpha /
rank) B A x``, ``B`` zero at the start so the adapted model begins as the frozen one). A loss on its output
backpropagates through every block above the first adapter (all of them), so an update step costs a
forward and a backward through the backbone, as a LoRA fine-tune of a VLA does, while only
``depth * 2 * rank * 5 * width`` parameters train.

The acting forward and the update forward are the same module (train mode: dropout is 0, so it is
deterministic; torch's fused inference path of the encoder layer, which reads the linear layers' weights
directly and would bypass the adapters, is never taken). :meth:`AdaptedVLA.forward` returns the tanh
outputs ``[B, chunk_size, action_dim]`` in ``[-1, 1]`` as float32; gradients flow when grad mode is on.

Pickling (a spawned worker process, ``copy.deepcopy``) rebuilds the frozen backbone from its constructor
arguments (its weights are a function of ``seed``) and carries only the trained state, the adapters.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from ...core.checks import check_positive_int
from .policy import ChunkPolicy

#: Default adapter rank (LoRA fine-tunes of VLAs use 8-64).
RANK = 16
#: Default adapter scale numerator: the update is ``alpha / rank`` times ``B A x``.
ALPHA = 32.0


class LowRankAdapter(nn.Module):
    """``base(x) + (alpha / rank) * B(A(x))`` around a frozen ``torch.nn.Linear`` ``base``: ``A`` (rank x in)
    starts at Kaiming-uniform values, ``B`` (out x rank) at zero; both in ``base``'s dtype and device."""

    def __init__(self, base: Any, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        options = dict(dtype=base.weight.dtype, device=base.weight.device)
        self.down = nn.Parameter(torch.empty(rank, base.in_features, **options))
        self.up = nn.Parameter(torch.zeros(base.out_features, rank, **options))
        nn.init.kaiming_uniform_(self.down, a=math.sqrt(5))

    def forward(self, x: Any) -> Any:
        return self.base(x) + self.scale * ((x @ self.down.T) @ self.up.T)


def _rebuild(arguments: dict, trained: dict) -> "AdaptedVLA":
    model = AdaptedVLA(**arguments)
    model.load_state_dict(trained, strict=False)
    return model


class AdaptedVLA(nn.Module):
    """:class:`~.policy.ChunkPolicy` (same arguments) with its transformer frozen and :class:`LowRankAdapter` s of
    ``rank`` in every block's MLP (module docs). ``policy``: the wrapped ChunkPolicy (its spaces, device,
    dtype, token count); :meth:`trained_state`: the adapters' tensors, all that training changes."""

    def __init__(self, observation_space: Any, action_space: Any, chunk_size: int = 32, width: int = 256,
                 depth: int = 4, device: str = "cpu", seed: int = 0, rank: int = RANK, alpha: float = ALPHA) -> None:
        super().__init__()
        rank = check_positive_int("rank", rank)
        self.arguments = dict(observation_space=observation_space, action_space=action_space, chunk_size=chunk_size,
                              width=width, depth=depth, device=device, seed=seed, rank=rank, alpha=alpha)
        self.policy = ChunkPolicy(observation_space, action_space, chunk_size=chunk_size, width=width, depth=depth,
                                  device=device, seed=seed)
        self.backbone = self.policy.model
        self.backbone.requires_grad_(False)
        devices = [self.policy.device] if self.policy.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed + 1)
            for block in self.backbone.blocks.layers:
                block.linear1 = LowRankAdapter(block.linear1, rank, alpha)
                block.linear2 = LowRankAdapter(block.linear2, rank, alpha)
        self.backbone.train()  # dropout 0: deterministic; keeps torch off the fused path that skips the adapters
        self.chunk_size, self.action_dim = self.policy.chunk_size, self.policy.action_dim

    def trained_state(self) -> dict:
        """Name -> tensor of every trainable parameter (the adapters)."""
        return {name: p for name, p in self.named_parameters() if p.requires_grad}

    def inputs(self, obs: Mapping[str, Any]) -> tuple[list, Any]:
        """(images, proprio) tensors on the model's device from a batched observation dict (numpy or torch)."""
        policy = self.policy
        batch = len(obs[policy.proprio_keys[0]])
        flat = [torch.as_tensor(np.asarray(obs[k]), dtype=torch.float32).reshape(batch, -1)
                for k in policy.proprio_keys]
        proprio = torch.cat(flat, dim=1).to(policy.device, policy.dtype)
        images = [torch.as_tensor(np.ascontiguousarray(np.asarray(obs[k])[..., :3])).to(policy.device)
                  .permute(0, 3, 1, 2).to(policy.dtype).div_(255.0) for k in policy.rgb_keys]
        return images, proprio

    def forward(self, obs: Mapping[str, Any]) -> Any:
        images, proprio = self.inputs(obs)
        return self.backbone(images, proprio).float()

    def __reduce__(self) -> tuple:
        return _rebuild, (self.arguments, {k: v.detach().cpu() for k, v in self.trained_state().items()})
