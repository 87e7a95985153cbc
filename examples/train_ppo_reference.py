"""PPO on the reference simulator's reach-and-touch task, through the rollout engine, in minutes on a CPU.

    python examples/train_ppo_reference.py                       # K = 2 hybrid pipeline + skip-obs; the curve
    python examples/train_ppo_reference.py --overlap             # collect the next batch while PPO updates
    python examples/train_ppo_reference.py --schedule lookahead  # K = 1, each chunk chosen d steps early (d = 0)

One training run over the engine's ``Collector``: a thread of the collector drives the engine and hands out
one batch of ``rounds`` rounds per iteration; the trainer runs PPO on it and posts the trained weights to the
behaviour copy that acts. The learner (PPO config, actor-critic, GAE, the PPO update, the loop) is
:mod:`behavior1k_fast.tools.train.learner`, shared with the time-to-train judge. To compare profiles over
seeds (learning curves, their spread, cross evaluation): ``behavior1k-fast train-compare``; to measure the
wall clock to a trained policy per layout: ``behavior1k-fast train-judge`` (docs/training.md).

Task: drive the base and arms until a grip point touches the red can (proprioception and the can's offset
from each grip point); reward per own action minus that distance in m, +5 on the touch, which ends the
episode. Profiles (``--profile``): ``k2_skip`` (hybrid partition, K = 2, on-demand observation), ``k1_skip``
(K = 1), ``stock`` (every optimisation off) and ``lookahead`` (``--schedule lookahead``: each chunk chosen
from the observation ``--lookahead-steps`` d steps before the current one ends; default d = 0, since a longer
lead costs samples in training). ``--overlap`` lets a batch hold chunks chosen by the weights one update old;
PPO then corrects for the lag as ``PPOConfig.correction`` says (default ``none``: plain clipped PPO against the
behaviour log-probs, docs/training.md), and the curve shows the measured lag. Bad arguments are
one-line usage errors (exit code 2) before torch is imported.
"""

from __future__ import annotations

import sys

from behavior1k_fast.tools.argtypes import Parser, lookahead_steps, positive_int
from behavior1k_fast.tools.argtypes import seed as seed_number
from behavior1k_fast.tools.train.layouts import PROFILES  # no torch: the learner is imported after parsing


def parse_args(argv: list[str] | None = None):
    """The options (torch is not imported yet: a usage error is immediate)."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default=None,
                        help="the profile of the run (not given: k2_skip; lookahead with --schedule lookahead)")
    parser.add_argument("--schedule", choices=("barrier", "lookahead"), default="barrier",
                        help="lookahead: the lookahead profile (default: %(default)s)")
    parser.add_argument("--lookahead-steps", type=lookahead_steps, default=None, metavar="D",
                        help="lead d of the lookahead schedule: an int below the chunk size (8) or auto (not given: "
                             "0); only with --schedule lookahead")
    parser.add_argument("--overlap", action="store_true",
                        help="collect the next batch while PPO updates on this one (Collector max_lag=1)")
    parser.add_argument("--seed", type=seed_number, default=0, help="the run's seed (default: %(default)s)")
    parser.add_argument("--iterations", type=positive_int, default=100,
                        help="PPO iterations (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.schedule == "lookahead" and args.profile not in (None, "lookahead"):
        parser.error(f"--schedule lookahead runs the lookahead profile, got --profile {args.profile}")
    args.profile = "lookahead" if args.schedule == "lookahead" else args.profile or "k2_skip"
    if args.lookahead_steps is not None and args.profile != "lookahead":
        parser.error(f"--lookahead-steps {args.lookahead_steps} sets the lead of the lookahead schedule, which this "
                     f"run does not use (--schedule lookahead)")
    args.lookahead_steps = 0 if args.lookahead_steps is None else args.lookahead_steps
    if args.lookahead_steps != "auto" and args.lookahead_steps >= 8:
        parser.error(f"--lookahead-steps {args.lookahead_steps}: must be below the chunk size 8")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from behavior1k_fast.tools.train.learner import PPOConfig, train  # imports torch

    config = PPOConfig(profile=args.profile, seed=args.seed, iterations=args.iterations,
                       lookahead_steps=args.lookahead_steps, max_lag=int(args.overlap))
    lead = f", lookahead lead d = {config.lookahead_steps}" if config.profile == "lookahead" else ""
    print(f"PPO on the reach task: profile {config.profile}{lead}, {config.processes} env processes x "
          f"{config.envs // config.processes} envs, {'overlap on: collect while PPO updates' if args.overlap else 'serial'}"
          f", {config.iterations} iterations", flush=True)

    def show(it: int, batch, entry) -> None:  # one line per iteration (entry: learner.IterationEntry)
        rate = "-" if entry.success_rate is None else f"{entry.success_rate:.2f}"
        ret = "-" if entry.mean_return is None else f"{entry.mean_return:.1f}"
        print(f"iter {it + 1:3d}  env steps {entry.env_steps:7d}  success {rate:>4}  return {ret:>6}  "
              f"policy lag {entry.policy_lag:.2f}  ({entry.wall_s:.0f} s)", flush=True)

    run, _ = train(config, show)
    print(f"done: {run.env_steps[-1]} env steps in {run.wall_s[-1]:.0f} s; measured policy lag "
          f"{sum(run.policy_lag) / len(run.policy_lag):.2f} updates on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
