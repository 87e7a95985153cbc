"""Roll out a BEHAVIOR task on OmniGibson through the engine, with the fast path on.

    python examples/omnigibson_rollout.py                       # the configs in examples/configs/, 4 rounds
    python examples/omnigibson_rollout.py --env-config my_task.yaml --profile my_profile.yaml --rounds 16

``--env-config`` is an OmniGibson env config (default ``examples/configs/behavior_task.yaml``: one BEHAVIOR
task, an R1 robot with rgb + proprioception); ``--profile`` a rollout profile (default
``examples/configs/fast_2env.yaml``: one env worker with 2 envs in K = 2 pipeline stages, chunks of 8
actions, observations only at chunk boundaries, only the modalities the policy reads). The worker applies
the profile's patches before it imports OmniGibson, then builds what the installed OmniGibson has: a
``VectorEnvironment`` of 2 envs (1.1.1, v3.7) or main's ``Environment`` with ``num_envs = 2``. The policy
here draws uniform random chunks; put yours in its place (it gets a dict of batched numpy arrays, keys
``robot0::<camera>::rgb`` and ``robot0::proprio``, and returns ``[batch, chunk, action_dim]``).

Needs a BEHAVIOR-1K install (OmniGibson and Isaac Sim, its assets and dataset); without one it prints what is
missing in one line and exits 2. A bad option or config (YAML that does not parse, a section that is not a
mapping, a layout the config's frequencies refuse) is one line and exit code 2 as well, before OmniGibson
starts. ``tests/omnigibson/test_example_rollout.py`` runs this file on the real OmniGibson code of every
upstream line at the ``og.sim`` seam (``--executor inline``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from behavior1k_fast.core.profile import parse_yaml
from behavior1k_fast.tools.argtypes import Parser, one_line, path, positive_int, seed

HERE = Path(__file__).resolve().parent
ENV_CONFIG = HERE / "configs" / "behavior_task.yaml"
PROFILE = HERE / "configs" / "fast_2env.yaml"


class RandomPolicy:
    """Uniform random chunks in ``[-1, 1]`` (the config normalises actions), reproducible from ``seed``."""

    def __init__(self, chunk_size: int, action_dim: int, seed: int = 0) -> None:
        self.chunk_size, self.action_dim = chunk_size, action_dim
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: dict) -> np.ndarray:
        batch = next(iter(obs.values())).shape[0]
        return self.rng.uniform(-1.0, 1.0, (batch, self.chunk_size, self.action_dim)).astype(np.float32)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="\n".join(__doc__.splitlines()[2:4]))
    parser.add_argument("--env-config", type=path, default=str(ENV_CONFIG),
                        help=f"OmniGibson env config YAML (default: {ENV_CONFIG.relative_to(HERE.parent)})")
    parser.add_argument("--profile", type=path, default=str(PROFILE),
                        help=f"rollout profile YAML (default: {PROFILE.relative_to(HERE.parent)})")
    parser.add_argument("--rounds", type=positive_int, default=4, help="rounds of one chunk per stage (default: 4)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the envs and the policy (default: 0)")
    parser.add_argument("--executor", choices=("process", "inline"), default="process",
                        help="process: spawned env workers (default); inline: in this process")
    return parser.parse_args(argv)


def read_env_config(file: str) -> Any:
    """The YAML data of the env config ``file``: ValueError naming the option and file when it cannot be read,
    and the line and column for YAML that does not parse (its shape is the factory's to check)."""
    try:
        with open(file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ValueError(f"--env-config {file!r}: {exc.strerror or exc}") from None
    return parse_yaml(text, f"--env-config {file!r}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # first: a usage error is said before the engine and the backend are imported
    from behavior1k_fast import RolloutProfile
    from behavior1k_fast.backends import check_installed
    from behavior1k_fast.omnigibson import OmniGibsonBackendFactory
    from behavior1k_fast.rollout import RolloutEngine

    try:
        profile = RolloutProfile.from_yaml(Path(args.profile))
        factory = OmniGibsonBackendFactory(read_env_config(args.env_config))
        try:  # the config's shape, the stage count against its frequencies; nothing built, nothing imported
            factory.check(profile.envs_per_process, args.seed, profile)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"--env-config {args.env_config!r}: {exc}") from None
        check_installed("omnigibson")  # OmniGibson and Isaac Sim importable here, nothing imported yet
    except (OSError, ValueError, TypeError) as exc:
        print(f"omnigibson_rollout: error: {one_line(exc)}", file=sys.stderr)
        return 2
    with RolloutEngine(factory, profile, executor=args.executor, seed=args.seed) as engine:
        policy = RandomPolicy(engine.chunk_size, engine.action_dim, args.seed)
        print(f"{engine!r}; observations: {sorted(engine.observation_space.spaces)}")
        stats = engine.rollout(policy, args.rounds)
    print(f"{args.rounds} rounds: {int(stats.own_actions.sum())} own actions in {stats.wall_seconds:.1f} s "
          f"({stats.env_steps_per_second:.1f} env steps/s), {int(stats.episodes.sum())} episodes ended, "
          f"{stats.sim_seconds_per_own_action.mean():.4g} simulated s per own action")
    return 0


if __name__ == "__main__":  # the env workers are spawned: they import this file
    sys.exit(main())
