"""A torch chunk policy for the benchmark that costs what a vision-language-action model costs.

Shaped like the VLAs run on BEHAVIOR (pi-0 / pi-05: a transformer over image patch tokens and state
tokens with an action-chunk head): every rgb camera image is cut into ``PATCH`` x ``PATCH`` pixel patches,
each embedded as one token (a strided convolution, as a ViT stem does) with a learned position and camera
embedding; proprioception is projected into ``PROPRIO_TOKENS`` tokens; ``chunk_size`` learned action
query tokens follow. ``depth`` pre-norm transformer blocks of ``width`` (attention heads of ``HEAD_DIM``,
4x MLP, torch's scaled-dot-product attention) run over all tokens, and a linear head reads one action from
each query token. At 224 x 224 with three cameras that is 3 x 196 + 8 + 32 = 628 tokens per sample.

Its cost is what matters here: compute-bound at these sizes, so a forward grows about linearly with the
batch (bf16 on CUDA, float32 on CPU), as a real VLA's does, and splitting a batch over K pipeline stages
costs about the same model time per round (``../shared/docs/anchors.md``, "Model cost vs batch on the
H200"). :func:`calibrate_model_size` picks ``width`` and ``depth`` from measured forward times so that one
forward at the pipeline's stage batch takes a target time; :func:`model_cost_curve` records T_model(batch).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core.checks import MachineLimits, check_int, check_number, check_positive_int

#: Pixels per side of one image patch token.
PATCH = 16
#: Channels of one attention head; ``width`` is a multiple of it.
HEAD_DIM = 64
#: Tokens the proprioception vector is projected into.
PROPRIO_TOKENS = 8
#: Model widths :func:`calibrate_model_size` tries, narrow to wide (pi-0's language model is 2048 wide).
WIDTHS = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048)
#: Fewest blocks a calibrated model keeps (VLAs are deep); below that a narrower width is used.
MIN_DEPTH = 4
#: Most blocks a calibrated model gets.
MAX_DEPTH = 96
#: Longest forward (ms) a calibration may aim for: a VLA forward takes tens to hundreds of ms.
MAX_MODEL_MS = 60_000.0


def check_image_size(option: str, resolution: Any) -> None:
    """``ValueError`` naming ``option`` when images of ``resolution`` pixels (one side, or ``(height, width)``;
    ``None``: the backend's own) hold no ``PATCH x PATCH`` patch, which the benchmark policy embeds."""
    if resolution is None:
        return
    if isinstance(resolution, int):
        sides = (resolution, resolution)
    else:  # a reference config's key: named with its value when it is no pair of ints
        from ...backends.reference.config import check_resolution

        sides = check_resolution(resolution)
    if min(sides) < PATCH:
        raise ValueError(f"{option} {resolution}: the benchmark policy cuts each rgb image into {PATCH}x{PATCH} "
                         f"patches, so images need at least {PATCH}x{PATCH} pixels")


def _camera_rgb_keys(observation_space: Any) -> list[str]:
    """Observation keys holding rgb images (``"<camera>::rgb"``), sorted."""
    return sorted(k for k in observation_space.spaces if k.endswith("::rgb"))


def _proprio_keys(observation_space: Any) -> list[str]:
    """Observation keys holding proprioception (``"proprio"`` or ``"<robot>::proprio"``), sorted."""
    return sorted(k for k in observation_space.spaces if k == "proprio" or k.endswith("::proprio"))


def check_width(name: str, width: Any) -> int:
    """``width`` as an int: a positive multiple of ``HEAD_DIM``."""
    width = check_positive_int(name, width)
    if width % HEAD_DIM:
        raise ValueError(f"{name} must be a multiple of {HEAD_DIM} (the attention head size), got {width}")
    return width


def model_bytes(width: int, depth: int, chunk_size: int = 0, batch: int = 1) -> int:
    """Memory (bytes) the policy takes at the least: float32 weights of ``depth`` blocks of ``width``
    (12 width^2 each: attention and the 4x MLP), and for a forward of ``batch`` samples the MLP activations
    and one head's attention matrix over the ``chunk_size`` action query tokens (image tokens not counted)."""
    weights = 12 * width * width * depth
    activations = batch * chunk_size * 4 * width + batch * chunk_size * chunk_size
    return 4 * (weights + activations)


def _build_model(num_cameras: int, patches: int, proprio_dim: int, action_dim: int, chunk_size: int,
                 width: int, depth: int) -> Any:
    """The transformer (module docs), float32 on the current default device."""
    import torch
    from torch import nn

    class VLALike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch_embed = nn.Conv2d(3, width, PATCH, stride=PATCH)
            self.position = nn.Parameter(0.02 * torch.randn(1, patches, width))
            self.camera = nn.Parameter(0.02 * torch.randn(num_cameras, 1, width))
            self.proprio = nn.Linear(proprio_dim, PROPRIO_TOKENS * width)
            self.queries = nn.Parameter(0.02 * torch.randn(1, chunk_size, width))
            block = nn.TransformerEncoderLayer(width, width // HEAD_DIM, 4 * width, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, depth, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, action_dim)

        def forward(self, images: Sequence[Any], proprio: Any) -> Any:
            batch = proprio.shape[0]
            tokens = [self.patch_embed(img).flatten(2).transpose(1, 2) + self.position + self.camera[c]
                      for c, img in enumerate(images)]
            tokens.append(self.proprio(proprio).view(batch, PROPRIO_TOKENS, width))
            tokens.append(self.queries.expand(batch, -1, -1))
            x = self.blocks(torch.cat(tokens, dim=1))
            return torch.tanh(self.head(self.norm(x[:, -chunk_size:])))

    return VLALike()


class ChunkPolicy:
    """Batched torch policy: ``act(obs) -> actions [B, chunk_size, action_dim]`` (float64 numpy, in bounds).

    ``width`` (a multiple of ``HEAD_DIM``) and ``depth`` (transformer blocks) size the model; ``seed`` its
    weights. Deterministic: the same observations give the same actions (no sampling).
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        chunk_size: int = 32,
        width: int = 256,
        depth: int = 4,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        import torch

        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.width = check_width("width", width)
        self.depth = check_positive_int("depth", depth)
        seed = check_int("seed", seed, low=0)
        #: One env's observation and action spaces, as given.
        self.observation_space, self.action_space = observation_space, action_space
        self.rgb_keys = _camera_rgb_keys(observation_space)
        self.proprio_keys = _proprio_keys(observation_space)
        if not self.rgb_keys or not self.proprio_keys:
            raise ValueError(
                f"the policy needs '<camera>::rgb' and 'proprio' keys in the observation space, got keys "
                f"{sorted(observation_space.spaces)}"
            )
        height, image_width = observation_space[self.rgb_keys[0]].shape[:2]
        patches = (height // PATCH) * (image_width // PATCH)
        if patches == 0:
            raise ValueError(f"rgb images of {height}x{image_width} pixels hold no {PATCH}x{PATCH} patch")
        self.device = torch.device(device)
        #: bf16 on CUDA (as VLAs are served), float32 on CPU.
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.action_dim = int(np.prod(action_space.shape))
        self._low = np.asarray(action_space.low, dtype=np.float64).reshape(-1)
        self._high = np.asarray(action_space.high, dtype=np.float64).reshape(-1)
        proprio_dim = sum(int(np.prod(observation_space[k].shape)) for k in self.proprio_keys)
        #: Tokens per sample: image patches of every camera, proprioception, action queries.
        self.tokens = len(self.rgb_keys) * patches + PROPRIO_TOKENS + self.chunk_size
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), self.device:
            torch.manual_seed(seed)
            model = _build_model(len(self.rgb_keys), patches, proprio_dim, self.action_dim, self.chunk_size,
                                 self.width, self.depth)
        self.model = model.to(dtype=self.dtype).eval()
        #: Parameters of the model.
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Actions for a batched observation (key -> ``[B, ...]``): float64 ``[B, chunk_size, action_dim]``."""
        import torch

        batch = len(obs[self.proprio_keys[0]])
        if batch == 0:
            raise ValueError("obs must hold at least one env's observation, got an empty batch")
        flat = [np.asarray(obs[k], dtype=np.float32).reshape(batch, -1) for k in self.proprio_keys]
        with torch.inference_mode():
            proprio = torch.from_numpy(np.concatenate(flat, axis=1)).to(self.device, self.dtype)
            images = [torch.from_numpy(np.require(obs[k][..., :3], requirements=("C", "W"))).to(self.device)
                      .permute(0, 3, 1, 2).to(self.dtype).div_(255.0) for k in self.rgb_keys]
            out = self.model(images, proprio).float().cpu().numpy().astype(np.float64)
        return self._low + (out + 1.0) * 0.5 * (self._high - self._low)

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.act(obs)


def time_forward_ms(policy: Callable, obs: Mapping[str, np.ndarray], repeats: int = 5) -> float:
    """Best-of-``repeats`` wall ms of one batched forward (after one warm-up call; the minimum is the
    least disturbed by other load on the machine)."""
    policy(obs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy(obs)
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.min(samples))


def calibrate_model_size(
    build: Callable[[int, int], Callable],
    obs: Mapping[str, np.ndarray],
    target_ms: float,
    widths: Sequence[int] = WIDTHS,
    timer: Callable[[Callable, Mapping[str, np.ndarray]], float] = time_forward_ms,
) -> tuple[int, int]:
    """``(width, depth)`` whose forward of ``obs`` takes about ``target_ms``: the widest of ``widths`` that
    holds at least ``MIN_DEPTH`` blocks in the target (wide models stay compute-bound at small batches).

    Per width, ``timer(build(width, d), obs)`` at d = 1 and 2 gives the ms per block and the fixed ms; the
    depth that fits is ``(target_ms - fixed) / per_block``, rounded, at most ``MAX_DEPTH`` and at most what
    this machine's memory budget holds (:func:`model_bytes`, ``core.checks.MachineLimits``). Widths are tried
    narrow to wide and the search stops at the first that fits fewer than ``MIN_DEPTH`` blocks (in time or
    in memory); if even the first does, it gets the depth that fits (at least 1).
    """
    target_ms = check_number("target_ms", target_ms, 0.0, low_open=True, unit="of ms")
    if not widths:
        raise ValueError("widths must name at least one width, got an empty sequence")
    budget = MachineLimits.here().budget_bytes
    chosen: tuple[int, int] | None = None
    for width in widths:
        most = max(1, min(MAX_DEPTH, budget // model_bytes(width, 1)))
        if chosen is not None and most < MIN_DEPTH:
            break
        one, two = timer(build(width, 1), obs), timer(build(width, 2), obs)
        per_block = max(two - one, 1e-6)
        fits = (target_ms - max(one - per_block, 0.0)) / per_block
        if fits < MIN_DEPTH:
            if chosen is None:
                chosen = (width, int(min(max(round(fits), 1), most)))
            break
        chosen = (width, int(min(round(fits), most)))
    return chosen


def batch_of(rows: Sequence[Mapping[str, np.ndarray]], size: int) -> dict[str, np.ndarray]:
    """A batch of ``size`` observations cycling through ``rows`` (per-env observation dicts)."""
    keys = list(rows[0])
    return {k: np.stack([rows[i % len(rows)][k] for i in range(size)]) for k in keys}


def model_cost_curve(policy: Callable, rows: Sequence[Mapping[str, np.ndarray]], max_batch: int,
                     timer: Callable[[Callable, Mapping[str, np.ndarray]], float] = time_forward_ms
                     ) -> list[dict[str, float]]:
    """T_model(batch): ms of one forward for every batch 1..``max_batch`` (observations from ``rows``)."""
    max_batch = check_positive_int("max_batch", max_batch)
    curve = []
    for size in range(1, max_batch + 1):
        ms = timer(policy, batch_of(rows, size))
        curve.append({"batch": size, "ms": ms, "ms_per_sample": ms / size})
    return curve
