"""Reference-simulator costs on this machine: physics per env, boundary RGB per camera, per-step breakdown.

Measures (wall-clock ms, 224x224 unless --resolution is given):

1. physics: ``step(get_obs=False, render=False)`` per env (``physics_substeps`` MuJoCo steps, reward and
   termination) and one MuJoCo physics step per env, for E envs in one process, driven by the scripted
   expert so the arm moves and grasps (expert time excluded).
2. boundary RGB: ``observe()`` with the fast-path profile (rgb + proprio), per camera frame.
3. per-step breakdown from the profiler's stage spans: stock mode (every modality, viewport render
   targets, render and read after every step) against the fast path with on-demand observation
   (render and read once per chunk).

Writes ``reference_perf_<tag>.json`` and ``.png`` to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``:
the checkout's ``benchmarks/results/``). Run:
``python3 benchmarks/reference_perf.py`` (about two minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from behavior1k_fast.core.checks import MachineLimits
from behavior1k_fast.core.profile import RolloutProfile
from behavior1k_fast.core.tracing import STAGES, get_profiler
from behavior1k_fast.reference import ReferenceConfig, ReferenceVectorEnv, expert_actions
from behavior1k_fast.tools.argtypes import Parser, env_count, file_name, parse_checked, positive_int
from behavior1k_fast.tools.backend_args import PIXEL_BYTES
from behavior1k_fast.tools.measure.files import write_json
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir


def bench_physics(config: ReferenceConfig, num_envs: int, steps: int) -> dict:
    env = ReferenceVectorEnv(num_envs, profile=RolloutProfile(obs_modalities=("proprio",)), config=config)
    total = 0.0
    for _ in range(steps):
        actions = expert_actions(env)
        t0 = time.perf_counter()
        env.step(actions, get_obs=False, render=False)
        total += time.perf_counter() - t0
    import mujoco

    t0 = time.perf_counter()
    mujoco.mj_step(env.model, env.data, nstep=steps)
    mj = time.perf_counter() - t0
    substeps = env.frequencies.physics_substeps
    env.close()
    return {
        "num_envs": num_envs,
        "physics_substeps": substeps,
        "env_step_ms_per_env": 1e3 * total / (steps * num_envs),
        "mj_step_ms_per_env": 1e3 * mj / (steps * num_envs),
    }


def bench_boundary_rgb(config: ReferenceConfig, num_envs: int, frames: int) -> dict:
    env = ReferenceVectorEnv(num_envs, profile=RolloutProfile(obs_modalities=("rgb", "proprio")), config=config)
    env.observe()  # creates the GL context; not part of the per-frame cost
    t0 = time.perf_counter()
    for _ in range(frames):
        env.observe()
    per_camera = 1e3 * (time.perf_counter() - t0) / (frames * num_envs * len(config.cameras))
    env.close()
    return {"num_envs": num_envs, "rgb_ms_per_camera": per_camera}


#: Render work per camera frame, one switch at a time (name, obs_modalities, remove_headless_viewports).
RENDER_VARIANTS = (
    ("rgb", ("rgb",), True),
    ("rgb + viewport", ("rgb",), False),
    ("depth, depth_linear, normal", ("depth", "depth_linear", "normal"), True),
    ("seg_semantic, seg_instance", ("seg_semantic", "seg_instance"), True),
    ("stock: all + viewport", None, False),
)


def bench_render_variants(config: ReferenceConfig, frames: int) -> list[dict]:
    """ms per camera frame for each modality set (one env), rendering and annotator work included."""
    rows = []
    for name, modalities, no_viewport in RENDER_VARIANTS:
        profile = RolloutProfile(obs_modalities=modalities, remove_headless_viewports=no_viewport)
        env = ReferenceVectorEnv(1, profile=profile, config=config)
        env.observe()
        t0 = time.perf_counter()
        for _ in range(frames):
            env.observe()
        per_camera = 1e3 * (time.perf_counter() - t0) / (frames * len(config.cameras))
        rows.append({"variant": name, "ms_per_camera": per_camera})
        env.close()
    return rows


def bench_breakdown(config: ReferenceConfig, name: str, profile: RolloutProfile, num_envs: int, steps: int,
                    chunk: int | None) -> dict:
    """Per-step stage costs; ``chunk``: render and read only every ``chunk`` steps (None: every step)."""
    env = ReferenceVectorEnv(num_envs, profile=profile, config=config)
    env.observe()
    prof = get_profiler()
    prof.enabled = True
    prof.clear()
    t0 = time.perf_counter()
    for k in range(steps):
        boundary = chunk is None or (k + 1) % chunk == 0
        env.step(expert_actions(env), get_obs=boundary, render=boundary)
    wall = time.perf_counter() - t0
    summary = prof.summary(steps=steps, envs=num_envs)
    prof.enabled = False
    prof.clear()
    env.close()
    stages = {s: summary[s]["ms_per_env_step"] for s in STAGES if s in summary}
    return {
        "mode": name,
        "num_envs": num_envs,
        "chunk": chunk,
        "ms_per_env_step": stages,
        "wall_ms_per_env_step": 1e3 * wall / (steps * num_envs),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4.8))
    phys = result["physics"]
    e = [r["num_envs"] for r in phys]
    ax = axes[0]
    ax.plot(e, [r["env_step_ms_per_env"] for r in phys], "o-", label="env.step (substeps + task)")
    ax.plot(e, [r["mj_step_ms_per_env"] for r in phys], "s-", label="one MuJoCo physics step")
    ax.axhline(1.0, color="gray", ls="--", label="goal: 1 ms")
    ax.set(xlabel="envs per process (E)", ylabel="ms per env", title="Physics per env", xscale="log")
    ax.legend(fontsize=8)
    rgb = result["boundary_rgb"]
    ax = axes[1]
    ax.plot([r["num_envs"] for r in rgb], [r["rgb_ms_per_camera"] for r in rgb], "o-")
    ax.axhline(10.0, color="gray", ls="--", label="goal: 10 ms")
    ax.set(xlabel="envs per process (E)", ylabel="ms per camera frame", xscale="log", ylim=(0, None),
           title=f"Boundary RGB frame ({result['resolution'][0]}x{result['resolution'][1]})")
    ax.legend(fontsize=8)
    ax = axes[2]
    rows = result["breakdown"]
    bottom = np.zeros(len(rows))
    for stage in STAGES:
        vals = np.array([r["ms_per_env_step"].get(stage, 0.0) for r in rows])
        if vals.any():
            ax.bar(range(len(rows)), vals, bottom=bottom, label=stage)
            bottom += vals
    ax.set_xticks(range(len(rows)), [r["mode"] for r in rows], fontsize=8)
    ax.set(ylabel="ms per env-step", title=f"Per-step cost by stage (E={rows[0]['num_envs']})")
    ax.legend(fontsize=8)
    ax = axes[3]
    variants = result["render_variants"]
    ax.barh(range(len(variants)), [r["ms_per_camera"] for r in variants])
    ax.set_yticks(range(len(variants)), [r["variant"] for r in variants], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="ms per camera frame", title="Render + annotator work by modality set (E=1)")
    machine = result["machine"]
    fig.suptitle(f"Reference simulator on {machine['cpus']} CPU cores, MUJOCO_GL={machine['mujoco_gl']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resolution", type=positive_int, nargs=2, default=(224, 224), metavar=("H", "W"),
                        help="camera pixels, height and width (default: 224 224)")
    parser.add_argument("--envs", type=env_count, nargs="+", default=[1, 4, 8, 16],
                        help="env counts E of the physics and boundary-RGB rows (default: 1 4 8 16)")
    parser.add_argument("--steps", type=positive_int, default=150,
                        help="steps per physics / breakdown measurement (default: 150)")
    parser.add_argument("--tag", type=file_name, default="cpu", help="results file suffix (default: cpu)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    """The images of the most envs fit the memory (ValueError); ``out_dir`` resolved and made."""
    (height, width), most = args.resolution, max(args.envs)
    MachineLimits.here().check_memory(f"--resolution {height} {width} for {most} envs",
                                      most * height * width * PIXEL_BYTES)
    args.out_dir = checked_output_dir(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = ReferenceConfig(resolution=tuple(args.resolution))
    import mujoco

    result = {
        "resolution": list(config.resolution),
        "frequencies": {k: getattr(config.frequencies, k) for k in ("action_hz", "rendering_hz", "physics_hz")},
        "num_objects": config.num_objects,
        "cameras": list(config.cameras),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "mujoco": mujoco.__version__,
            "mujoco_gl": os.environ.get("MUJOCO_GL"),
        },
        "physics": [],
        "boundary_rgb": [],
        "breakdown": [],
        "render_variants": bench_render_variants(config, frames=10),
    }
    for row in result["render_variants"]:
        print("render", row, flush=True)
    for n in args.envs:
        result["physics"].append(bench_physics(config, n, args.steps))
        print("physics", result["physics"][-1], flush=True)
    for n in args.envs:
        result["boundary_rgb"].append(bench_boundary_rgb(config, n, frames=10))
        print("boundary rgb", result["boundary_rgb"][-1], flush=True)
    e = 2
    for name, profile, chunk in (
        ("stock", RolloutProfile.stock(), None),
        ("slim, every step", RolloutProfile(skip_intermediate_obs=False), None),
        ("slim, chunk 32", RolloutProfile(), 32),
    ):
        result["breakdown"].append(bench_breakdown(config, name, profile, e, min(args.steps, 64), chunk))
        print("breakdown", result["breakdown"][-1], flush=True)
    out = write_json(result, Path(args.out_dir) / f"reference_perf_{args.tag}.json")
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
