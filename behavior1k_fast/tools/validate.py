"""``behavior1k-fast validate``: the fast path computes what the stock path computes.

Runs the stock profile and the fast profile (slim + on-demand observation, one stage) side by side on
the same backend kind, with the same seed and the same action chunks, for M chunks of N actions, and
compares per env and step: rewards, terminations / truncations / masked steps, the boundary observations
(proprioception and other state exactly or within a tolerance; rgb frames exactly on the reference
simulator, by PSNR on Isaac Sim; and each fast frame the current one, nearer the stock frame of its boundary than
the one a chunk before, which a frame offset of a chunk's single render would break) and the simulated seconds
per action. Exit code 1 when any measure is
past its threshold, or when the run ended fewer episodes than it must to test the end-of-episode path
(``min_episode_ends``, default 2, ``min_terminations`` of them by termination, default 1: timeouts alone
do not exercise a task's termination).

The actions are fixed-seed uniform random chunks, except on the reference simulator, where the scripted
expert (``backends.reference.expert``) drives the even envs to success. Its actions depend on the state,
so they are found first in a physics-only rehearsal on a third backend of the same seed, then both sides
replay them. The episode horizon defaults to the run's length (M x N own actions: the reference
``horizon``, OmniGibson's ``task.termination_config.max_steps``; a value the config sets is kept), so the
random envs are truncated at the last step. The default run (2 envs, 6 chunks of 32) thus ends one
episode by success and one by timeout on the reference simulator, and every episode by timeout on
OmniGibson, where no termination is required by default (random actions seldom finish a BEHAVIOR task).

On the reference simulator both sides run in this process. With ``--backend omnigibson`` each side runs
in its own spawned process (one Isaac Sim per process, patches applied there before the simulator starts).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.checks import STEP_BYTES, MachineLimits, check_int, check_number, check_positive_int, check_seed
from ..core.profile import RolloutProfile

#: Thresholds per backend kind: reward and state absolute tolerance, minimum frame PSNR (None = exact), and
#: the episodes the run must end by termination (random actions seldom finish a BEHAVIOR task, so on
#: OmniGibson timeouts are the ends a run can count on: module docs).
DEFAULT_THRESHOLDS = {
    "reference": {"reward_atol": 0.0, "state_atol": 0.0, "min_psnr_db": None, "min_terminations": 1},
    "omnigibson": {"reward_atol": 1e-4, "state_atol": 1e-3, "min_psnr_db": 30.0, "min_terminations": 0},
}


#: Action chunks of the default run: with the reference simulator's default horizon (the run's length) the
#: expert ends its episode and the random env is truncated (module docs).
DEFAULT_CHUNKS = 6


@dataclass(frozen=True)
class Thresholds:
    """Pass limits. ``min_psnr_db=None`` demands bit-identical frames. ``min_episode_ends`` and
    ``min_terminations``: episodes the stock side must end inside the run, in all and by termination."""

    reward_atol: float = 0.0
    state_atol: float = 0.0
    min_psnr_db: float | None = None
    #: Relative tolerance on simulated seconds per action.
    sim_time_rtol: float = 1e-9
    min_episode_ends: int = 2
    min_terminations: int = 1

    def __post_init__(self) -> None:
        for name in ("reward_atol", "state_atol", "sim_time_rtol"):
            check_number(name, getattr(self, name), 0.0)
        check_int("min_episode_ends", self.min_episode_ends, 0)
        check_int("min_terminations", self.min_terminations, 0, self.min_episode_ends)
        if self.min_psnr_db is not None:
            check_number("min_psnr_db", self.min_psnr_db, 0.0, low_open=True, unit="of dB")


@dataclass
class SideRecord:
    """What one side (stock or fast) recorded: per chunk ``[n, N]`` step arrays and boundary observations.
    (Named ``Trajectory`` before; the rollout layer's :class:`~behavior1k_fast.rollout.Trajectory` is the
    trainer's record of a rollout.)"""

    rewards: list[np.ndarray] = field(default_factory=list)
    terminated: list[np.ndarray] = field(default_factory=list)
    truncated: list[np.ndarray] = field(default_factory=list)
    applied: list[np.ndarray] = field(default_factory=list)
    #: Boundary observation per chunk: key -> ``[n, *shape]`` (the reset observation first).
    obs: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: Simulated seconds per global step (one own action at K = 1), per chunk.
    sim_seconds_per_action: list[float] = field(default_factory=list)


@dataclass
class ValidationReport:
    """Measured disagreement between the stock and the fast path, and the verdict."""

    backend: str
    num_envs: int
    chunks: int
    chunk_size: int
    seed: int
    max_abs_reward_delta: float
    termination_agreement: float
    #: Episodes that ended inside a chunk on the stock side (the masked-step and terminal-obs path ran),
    #: and how many of them by termination and by truncation.
    episodes_ended: int
    terminations: int
    truncations: int
    proprio_max_abs_error: float
    state_max_abs_error: float
    frames_compared: int
    frame_max_abs_diff: float
    frame_min_psnr_db: float
    #: Fast boundary frames nearer the stock frame a chunk before than the current one (:func:`stale_frames`).
    stale_boundary_frames: int
    sim_seconds_per_action_stock: float
    sim_seconds_per_action_fast: float
    thresholds: Thresholds
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data

    def format(self) -> str:
        t = self.thresholds
        frame_limit = "exact" if t.min_psnr_db is None else f">= {t.min_psnr_db:.1f} dB"
        lines = [
            f"validate ({self.backend}): {self.num_envs} envs x {self.chunks} chunks x {self.chunk_size} actions, "
            f"seed {self.seed}",
            f"  max |delta reward|          {self.max_abs_reward_delta:.3g}  (<= {t.reward_atol:g})",
            f"  termination agreement       {self.termination_agreement:.2%}  (= 100%)",
            f"  episode ends                {self.episodes_ended}: {self.terminations} terminated, "
            f"{self.truncations} truncated  (>= {t.min_episode_ends}, >= {t.min_terminations} terminated)",
            f"  proprio max abs error       {self.proprio_max_abs_error:.3g}  (<= {t.state_atol:g})",
            f"  other state max abs error   {self.state_max_abs_error:.3g}  (<= {t.state_atol:g})",
            f"  boundary frames             {self.frames_compared} compared, max abs diff "
            f"{self.frame_max_abs_diff:g}, min PSNR {self.frame_min_psnr_db:.1f} dB  ({frame_limit})",
            f"  stale boundary frames       {self.stale_boundary_frames}  (= 0: each is the current frame)",
            f"  sim seconds per action      stock {self.sim_seconds_per_action_stock:.6g}, "
            f"fast {self.sim_seconds_per_action_fast:.6g}",
        ]
        lines += [f"  FAIL: {f}" for f in self.failures] or ["  PASS"]
        return "\n".join(lines)


def _random_chunks(action_space: Any, chunks: int, num_envs: int, chunk_size: int, seed: int) -> np.ndarray:
    """Fixed-seed uniform actions in the action bounds: float64 ``[chunks, num_envs, chunk_size, dim]``."""
    low = np.asarray(action_space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(action_space.high, dtype=np.float64).reshape(-1)
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=(chunks, num_envs, chunk_size, low.size))


def _expert_chunks(factory: Callable[..., Any], num_envs: int, chunks: int, chunk_size: int, seed: int) -> np.ndarray:
    """The reference simulator's run: :func:`_random_chunks` with the scripted expert's actions for the even
    envs, found in a physics-only rehearsal of the run on ``factory(num_envs, seed, ...)`` (the same steps,
    masks and boundary resets as :func:`~behavior1k_fast.rollout.chunk.run_chunk` with auto-reset)."""
    from ..backends.reference.expert import expert_actions

    backend = factory(num_envs, seed, RolloutProfile(chunk_size=chunk_size, obs_modalities=("proprio",)))
    try:
        actions = _random_chunks(backend.action_space, chunks, num_envs, chunk_size, seed)
        backend.reset(get_obs=False)
        for chunk in actions:
            active = np.arange(num_envs)
            for t in range(chunk_size):
                if active.size == 0:
                    break
                expert = active[active % 2 == 0]
                if expert.size:
                    chunk[expert, t] = expert_actions(backend, expert)
                _, _, terminated, truncated, _ = backend.step(chunk[active, t], active, get_obs=False, render=False)
                active = active[~(np.asarray(terminated) | np.asarray(truncated))]
            ended = np.setdiff1d(np.arange(num_envs), active)
            if ended.size:
                backend.reset(ended, get_obs=False)
    finally:
        backend.close()
    return actions


def record(
    profile: RolloutProfile,
    factory: Callable[..., Any],
    num_envs: int,
    seed: int,
    actions: np.ndarray | None,
    chunks: int,
    wrap: Callable[[Any], Any] | None = None,
) -> SideRecord:
    """Step ``chunks`` chunks on ``factory(num_envs, seed, profile)`` (through ``wrap`` if given).

    ``actions=None`` draws them with :func:`_random_chunks` from the backend's action space and ``seed``.
    """
    from ..rollout.chunk import stack_obs, step_chunk

    backend = factory(num_envs, seed, profile)
    if wrap is not None:
        backend = wrap(backend)
    try:
        if actions is None:
            actions = _random_chunks(backend.action_space, chunks, num_envs, profile.chunk_size, seed)
        traj = SideRecord()
        obs, _ = backend.reset()
        traj.obs.append(stack_obs(obs, list(obs[0])))
        for c in range(chunks):
            res = step_chunk(backend, actions[c], skip_intermediate_obs=profile.skip_intermediate_obs)
            traj.rewards.append(res.rewards)
            traj.terminated.append(res.terminated)
            traj.truncated.append(res.truncated)
            traj.applied.append(res.applied)
            traj.obs.append(res.obs)
            traj.sim_seconds_per_action.append(float(res.sim_seconds[0]) / max(int(res.global_steps[0]), 1))
        return traj
    finally:
        backend.close()


def _psnr_db(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR of two uint8 images in dB (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


@dataclass
class _ObsErrors:
    """The largest disagreement of the boundary observations, by kind."""

    proprio: float = 0.0
    state: float = 0.0
    frames: int = 0
    frame_diff: float = 0.0
    min_psnr: float = math.inf
    stale_frames: int = 0


def _mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))


def stale_frames(before: np.ndarray, current: np.ndarray, fast: np.ndarray) -> int:
    """How many of the fast path's boundary frames ``fast`` (``[n, H, W, C]``) are no nearer the stock path's
    frame at the same boundary (``current``) than to its frame at the boundary before (``before``), among the
    envs whose stock frame changed over the chunk: a frame from before the chunk, as a render that returns
    before its frame is current would give (a frame offset)."""
    return sum(1 for b, c, f in zip(before, current, fast)
               if not np.array_equal(b, c) and _mse(f, c) >= _mse(f, b))


def _obs_errors(stock: SideRecord, fast: SideRecord) -> _ObsErrors:
    """Compare every boundary observation key both sides have: rgb frames (max abs diff, PSNR, and whether each
    fast frame is the current one: :func:`stale_frames`), proprio and the other state (max abs error)."""
    out = _ObsErrors()
    for k, (obs_s, obs_f) in enumerate(zip(stock.obs, fast.obs)):
        for key in sorted(set(obs_s) & set(obs_f)):
            a, b = np.asarray(obs_s[key]), np.asarray(obs_f[key])
            if key.endswith("::rgb"):
                if k > 0 and key in stock.obs[k - 1]:
                    out.stale_frames += stale_frames(np.asarray(stock.obs[k - 1][key]), a, b)
                out.frames += a.shape[0]
                out.frame_diff = max(out.frame_diff, float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))))
                out.min_psnr = min([out.min_psnr] + [_psnr_db(x, y) for x, y in zip(a, b)])
                continue
            err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            if key == "proprio" or key.endswith("::proprio"):
                out.proprio = max(out.proprio, err)
            else:
                out.state = max(out.state, err)
    return out


def _episode_shortfall(ends: int, terminations: int, t: Thresholds) -> str | None:
    """Why the run ended too few episodes to test the end-of-episode path (in all, or by termination), or
    ``None``."""
    advice = "the end-of-episode path is untested; run more chunks, shorten the episodes in the backend config, " \
             "or lower the minimums"
    if ends < t.min_episode_ends:
        return (f"the run ended {ends} episodes ({terminations} by termination), fewer than min_episode_ends = "
                f"{t.min_episode_ends}: {advice}")
    if terminations < t.min_terminations:
        return (f"the run ended {ends} episodes but {terminations} by termination, fewer than min_terminations = "
                f"{t.min_terminations} (timeouts alone do not exercise a task's termination): {advice}")
    return None


def _failures(reward_delta: float, agreement: float, obs: _ObsErrors, sim: tuple[float, float], ends: int,
              terminations: int, t: Thresholds) -> list[str]:
    """Every measure past its threshold, one line each."""
    failures = []
    if reward_delta > t.reward_atol:
        failures.append(f"max |delta reward| = {reward_delta:.3g} > reward_atol = {t.reward_atol:g}")
    if agreement < 1.0:
        failures.append(f"terminations/truncations/masked steps agree on {agreement:.2%} of steps")
    if obs.proprio > t.state_atol:
        failures.append(f"proprio max abs error = {obs.proprio:.3g} > state_atol = {t.state_atol:g}")
    if obs.state > t.state_atol:
        failures.append(f"other state max abs error = {obs.state:.3g} > state_atol = {t.state_atol:g}")
    if obs.frames == 0:
        failures.append("no rgb boundary frames to compare (no '<camera>::rgb' key on both sides)")
    elif t.min_psnr_db is None and obs.frame_diff > 0:
        failures.append(f"boundary frames differ (max abs diff {obs.frame_diff:g}); exact agreement required")
    elif t.min_psnr_db is not None and obs.min_psnr < t.min_psnr_db:
        failures.append(f"boundary frame PSNR {obs.min_psnr:.1f} dB < min_psnr_db = {t.min_psnr_db:.1f} dB")
    if obs.stale_frames:
        failures.append(f"{obs.stale_frames} boundary frames of the fast path are no nearer the stock frame of their "
                        "boundary than the one a chunk before (a frame offset: see headless_render_settings)")
    if not math.isclose(*sim, rel_tol=t.sim_time_rtol, abs_tol=0.0):
        failures.append(f"simulated seconds per action differ: stock {sim[0]:.6g}, fast {sim[1]:.6g}")
    shortfall = _episode_shortfall(ends, terminations, t)
    return failures + ([shortfall] if shortfall else [])


def compare(
    stock: SideRecord, fast: SideRecord, thresholds: Thresholds, **meta: Any
) -> ValidationReport:
    """Measure the disagreement of two sides' records and list what is past ``thresholds``."""
    (rs, rf), (ts, tf), (us, uf), (as_, af) = (
        (np.stack(getattr(stock, name)), np.stack(getattr(fast, name)))
        for name in ("rewards", "terminated", "truncated", "applied")
    )
    reward_delta = float(np.max(np.abs(rs - rf))) if rs.size else 0.0
    agree = (ts == tf) & (us == uf) & (as_ == af)
    agreement = float(agree.mean()) if agree.size else 1.0
    obs = _obs_errors(stock, fast)
    sim = (float(np.mean(stock.sim_seconds_per_action)), float(np.mean(fast.sim_seconds_per_action)))
    ends, terminations = int((ts | us).sum()), int(ts.sum())
    return ValidationReport(
        max_abs_reward_delta=reward_delta, termination_agreement=agreement, episodes_ended=ends,
        terminations=terminations, truncations=int((us & ~ts).sum()), proprio_max_abs_error=obs.proprio,
        state_max_abs_error=obs.state, frames_compared=obs.frames, frame_max_abs_diff=obs.frame_diff,
        frame_min_psnr_db=obs.min_psnr, stale_boundary_frames=obs.stale_frames,
        sim_seconds_per_action_stock=sim[0], sim_seconds_per_action_fast=sim[1],
        thresholds=thresholds, failures=_failures(reward_delta, agreement, obs, sim, ends, terminations, thresholds),
        **meta,
    )


def _check_size(num_envs: int, chunks: int, chunk_size: int, seed: int) -> tuple[int, int, int, int]:
    """The run's size as ints, once it fits this machine (``core.checks.MachineLimits``): the envs of one
    side, and the actions of every chunk (drawn up front)."""
    limits = MachineLimits.here()
    num_envs = limits.check_envs("num_envs", num_envs)
    chunks = check_positive_int("chunks", chunks)
    chunk_size = limits.check_chunk_steps("chunk_size", chunk_size)
    limits.check_memory(f"chunks={chunks} x num_envs={num_envs} x chunk_size={chunk_size} (the actions, drawn "
                        f"up front)", chunks * num_envs * chunk_size * STEP_BYTES)
    return num_envs, chunks, chunk_size, check_seed("seed", seed)


def validate(
    backend: str = "reference",
    num_envs: int = 2,
    chunks: int = DEFAULT_CHUNKS,
    chunk_size: int = 32,
    seed: int = 0,
    thresholds: Thresholds | None = None,
    backend_options: dict[str, Any] | None = None,
    fault: Callable[[Any], Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ValidationReport:
    """Run stock and fast side by side and compare them (actions and the reference horizon: module docs).

    ``fault`` wraps the fast side's backend (fault injection: a deliberately broken step must fail here).
    ``progress`` is told, in a few words, each part of the run as it starts (the command line prints them).
    """
    say = progress or (lambda message: None)
    from ..backends import BACKENDS, isolate_sides, make_factory
    from ..rollout.bootstrap import call_with_profile

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    num_envs, chunks, chunk_size, seed = _check_size(num_envs, chunks, chunk_size, seed)
    if fault is not None and isolate_sides(backend):
        raise ValueError(f"fault injection runs in-process only; backend={backend!r} isolates each side")
    thresholds = thresholds or Thresholds(**DEFAULT_THRESHOLDS[backend])
    factory = make_factory(backend, **run_backend_options(backend, backend_options, chunks, chunk_size))
    size = f"{num_envs} envs x {chunks} chunks x {chunk_size} actions"
    actions = None
    if backend == "reference":
        say(f"finding the scripted expert's actions (a physics-only rehearsal, {size})")
        actions = _expert_chunks(factory, num_envs, chunks, chunk_size, seed)
    sides = []
    for name, profile, wrap in (("stock", RolloutProfile.stock(chunk_size=chunk_size), None),
                                ("fast", RolloutProfile(chunk_size=chunk_size), fault)):
        where = "in its own process" if isolate_sides(backend) else "here"
        cost = "; every step rendered: the slow side" if name == "stock" else ""
        say(f"recording the {name} side ({size}, {where}{cost})")
        sides.append(call_with_profile(isolate_sides(backend), record, profile, factory, num_envs, seed, actions,
                                       chunks, wrap))
    say("comparing the sides")
    return compare(*sides, thresholds, backend=backend, num_envs=num_envs, chunks=chunks,
                   chunk_size=chunk_size, seed=seed)


def run_backend_options(backend: str, options: dict[str, Any] | None, chunks: int, chunk_size: int) -> dict:
    """``make_factory`` options of the run: the episode horizon defaults to the run's length, ``chunks *
    chunk_size`` own actions (module docs)."""
    from ..backends.omnigibson.config import cut_episodes, episode_max_steps

    options = dict(options or {})
    if backend == "reference":
        options.setdefault("horizon", chunks * chunk_size)
    elif isinstance(options.get("config"), dict) and episode_max_steps(options["config"]) is None:
        options["config"] = cut_episodes(options["config"], chunks * chunk_size)
    return options


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``validate`` sub-command."""
    from ..backends import BACKENDS
    from .argtypes import chunk_steps, env_count, nonnegative_int, nonnegative_number, path, positive_int, positive_number, seed
    from .backend_args import add_backend_arguments

    p = subparsers.add_parser("validate", help="stock vs fast path with identical actions; exit 1 past thresholds",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=BACKENDS, default="reference", help="simulator (default: reference)")
    p.add_argument("--num-envs", type=env_count, default=2, help="envs per side (default: 2)")
    p.add_argument("--chunks", type=positive_int, default=DEFAULT_CHUNKS,
                   help=f"M action chunks (default: {DEFAULT_CHUNKS})")
    p.add_argument("--chunk-size", type=chunk_steps, default=32, help="N actions per chunk (default: 32)")
    p.add_argument("--seed", type=seed, default=0,
                   help="seed of the envs and the random actions (default: 0)")
    p.add_argument("--reward-atol", type=nonnegative_number, default=None,
                   help="max |delta reward| (default per backend)")
    p.add_argument("--state-atol", type=nonnegative_number, default=None,
                   help="max proprio/state error (default per backend)")
    p.add_argument("--min-psnr", type=positive_number, default=None,
                   help="min boundary-frame PSNR in dB (default: exact on reference, 30 dB on omnigibson)")
    p.add_argument("--min-episode-ends", type=nonnegative_int, default=2,
                   help="episodes the run must end, else exit 1 (default: 2)")
    p.add_argument("--min-terminations", type=nonnegative_int, default=None,
                   help="of them ended by termination, not timeout (default: 1 on reference, 0 on omnigibson)")
    p.add_argument("--json", type=path, default=None, help="also write the report as JSON to this path")
    add_backend_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Validate; print the report; 0 when every measure is within its threshold, else 1. Bad input raises
    :class:`~.argtypes.UsageError` before either side runs."""
    from ..backends import check_installed, make_factory
    from ..core.contract import check_backend_build
    from .argtypes import check_writable_file, usage_errors
    from .backend_args import backend_options, check_image_memory
    from .measure.files import write_json

    with usage_errors():
        check_installed(args.backend)
        _check_size(args.num_envs, args.chunks, args.chunk_size, args.seed)
        check_image_memory(args, args.num_envs)
        limits = dict(DEFAULT_THRESHOLDS[args.backend])
        for key, value in (("reward_atol", args.reward_atol), ("state_atol", args.state_atol),
                           ("min_psnr_db", args.min_psnr), ("min_terminations", args.min_terminations)):
            if value is not None:
                limits[key] = value
        thresholds = Thresholds(**limits, min_episode_ends=args.min_episode_ends)
        options = backend_options(args)
        factory = make_factory(args.backend, **run_backend_options(args.backend, options, args.chunks,
                                                                  args.chunk_size))
        for profile in (RolloutProfile.stock(chunk_size=args.chunk_size), RolloutProfile(chunk_size=args.chunk_size)):
            check_backend_build(factory, args.num_envs, args.seed, profile)
        if args.json is not None:
            check_writable_file("--json", args.json)
    report = validate(backend=args.backend, num_envs=args.num_envs, chunks=args.chunks,
                      chunk_size=args.chunk_size, seed=args.seed, thresholds=thresholds,
                      backend_options=options, progress=_tell)
    print(report.format())
    if args.json is not None:
        write_json(report.to_dict(), args.json)
    return 0 if report.passed else 1


def _tell(message: str) -> None:
    """One progress line on stderr (stdout holds the report)."""
    print(f"validate: {message} ...", file=sys.stderr, flush=True)
