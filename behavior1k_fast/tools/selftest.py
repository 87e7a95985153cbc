"""``behavior1k-fast selftest``: a field test of the patches and the engine on this BEHAVIOR-1K install.

For a user with OmniGibson and Isaac Sim who wants to trust the fast path on their own checkout. Four steps,
each passed / failed / skipped with its seconds and details, in one JSON report (``--out``, with a readable
``summary``) to attach to an issue:

1. ``doctor``: versions, the patch plan of the fast profile on this install, threads, CPU, GPU
   (:func:`.doctor.collect`).
2. ``seam checks``: the contract checks the CI runs at the ``og.sim`` seam, on real Isaac Sim (the tests marked
   ``isaacsim``: ``tests/omnigibson/test_isaacsim.py`` of the checkout this package is installed from, run by
   pytest in a subprocess; without a checkout, ``pip install -e .`` from a clone, the step is skipped and
   says so).
3. ``validate``: ``validate --backend omnigibson`` on the env config (``--backend-config``, default
   ``examples/configs/behavior_task.yaml`` of the checkout) with the task's episodes cut to
   ``--episode-steps`` own actions (``task.termination_config.max_steps``), so that every env ends
   episodes inside the run; at least two ends are required, and each fast boundary frame must be the current
   one (validate's frame check). Random actions seldom finish a BEHAVIOR task,
   so terminations are reported but not required (validate's OmniGibson default; it requires one on the
   reference simulator).
4. ``bench``: one env worker of 2 envs, ``--rounds`` rounds of chunks of ``--chunk-size`` random actions
   under the stock profile and the fast profile (every optimisation, K = 2 hybrid pipeline): ms per step (a
   step is one own action of every env), the speedup, and peak GPU memory (NVML, where ``pynvml`` imports)
   and RSS per env worker process.

Exit code 0 when every step that ran passed and none was skipped, 1 otherwise; without OmniGibson or Isaac
Sim one line and exit code 2 (a usage error, before anything runs).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..core.profile import RolloutProfile

#: The checkout this package is installed from (an editable install or a clone on the path), if any.
CHECKOUT = Path(__file__).resolve().parents[2]
SEAM_TESTS = CHECKOUT / "tests" / "omnigibson" / "test_isaacsim.py"
EXAMPLE_CONFIG = CHECKOUT / "examples" / "configs" / "behavior_task.yaml"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
#: Envs of the validate and bench runs (one worker: one Isaac Sim app).
NUM_ENVS = 2


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``selftest`` sub-command."""
    from .argtypes import positive_int

    p = subparsers.add_parser("selftest", help="field test on a real BEHAVIOR-1K install: seam checks, validate, "
                              "bench; one JSON report", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="behavior1k_fast_selftest.json",
                   help="the report file (default: behavior1k_fast_selftest.json)")
    p.add_argument("--chunks", type=positive_int, default=4, help="validate: action chunks (default: 4)")
    p.add_argument("--chunk-size", type=positive_int, default=8, help="actions per chunk (default: 8)")
    p.add_argument("--episode-steps", type=positive_int, default=None,
                   help="own actions per episode in validate (default: half the run, chunks x chunk size / 2)")
    p.add_argument("--rounds", type=positive_int, default=4, help="bench: timed rounds per profile (default: 4)")
    p.add_argument("--seam-timeout", type=positive_int, default=1800,
                   help="seconds the seam checks may take (default: 1800)")
    p.add_argument("--backend-config", default=None, metavar="PATH",
                   help=f"the OmniGibson env config YAML (default: {EXAMPLE_CONFIG.relative_to(CHECKOUT)} of the "
                        "checkout)")
    p.set_defaults(func=run, backend="omnigibson", resolution=None)
    return p


def _step(name: str, body: Callable[[], tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """``body()`` -> (status, one-line summary, details), timed; an exception fails the step, not the test."""
    start = time.perf_counter()
    try:
        status, summary, details = body()
    except Exception as exc:  # every step reports, whatever broke
        status, summary = FAILED, f"{type(exc).__name__}: {exc}".splitlines()[0]
        details = {"traceback": traceback.format_exc()}
    return {"name": name, "status": status, "summary": summary, "seconds": round(time.perf_counter() - start, 2),
            **details}


def _doctor_step() -> tuple[str, str, dict[str, Any]]:
    from . import doctor

    report = doctor.collect(RolloutProfile())
    states: dict[str, int] = {}
    for patch in report["patches"]:
        states[patch["state"]] = states.get(patch["state"], 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) + " patches"
    return (PASSED if report["ok"] else FAILED), summary, {"doctor": report}


def _parse_junit(path: Path) -> list[dict[str, str]]:
    """``[{"test", "outcome", "message"}]`` per test case of a pytest JUnit XML file."""
    cases = []
    for case in ElementTree.parse(path).iter("testcase"):
        outcome, message = PASSED, ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = SKIPPED if child.tag == "skipped" else FAILED
                message = (child.get("message") or "").splitlines()[0] if child.get("message") else ""
        cases.append({"test": case.get("name", "?"), "outcome": outcome, "message": message})
    return cases


def seam_step(tests: Path, timeout_s: float) -> tuple[str, str, dict[str, Any]]:
    """Run the ``isaacsim`` tests of ``tests`` (a file of the checkout) with pytest in a subprocess."""
    if not tests.is_file():
        return SKIPPED, (f"{tests} not found: the seam checks ship with the repository; install from a clone "
                         "(pip install -e .) to run them"), {}
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-m", "isaacsim", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={xml}", str(tests)]
        done = subprocess.run(command, cwd=tests.parents[2], capture_output=True, text=True, timeout=timeout_s)
        cases = _parse_junit(xml) if xml.exists() else []
    counts = {o: sum(c["outcome"] == o for c in cases) for o in (PASSED, FAILED, SKIPPED)}
    details = {"command": command, "exit_code": done.returncode, "tests": cases,
               "output_tail": (done.stdout + done.stderr)[-4000:]}
    summary = f"{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped"
    reasons = sorted({c["message"] for c in cases if c["outcome"] == SKIPPED and c["message"]})
    if reasons:
        summary += f" ({'; '.join(reasons)})"
    if done.returncode != 0:  # 1: a test failed; 5: none collected; else pytest itself failed
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
        return FAILED, summary if cases else f"pytest exit code {done.returncode}: {tail[0]}", details
    return (PASSED if counts[PASSED] else SKIPPED), summary, details


def _validate_step(config: dict, chunks: int, chunk_size: int, episode_steps: int, seed: int
                  ) -> tuple[str, str, dict[str, Any]]:
    from ..backends.omnigibson.config import cut_episodes
    from . import validate

    report = validate.validate(backend="omnigibson", num_envs=NUM_ENVS, chunks=chunks, chunk_size=chunk_size,
                               seed=seed, backend_options={"config": cut_episodes(config, episode_steps)})
    summary = (f"{report.episodes_ended} episode ends ({report.terminations} terminated), max |delta reward| "
               f"{report.max_abs_reward_delta:.3g}, min PSNR {report.frame_min_psnr_db:.1f} dB, "
               f"{report.stale_boundary_frames} stale boundary frames")
    if report.failures:
        summary += f"; FAIL: {report.failures[0]}"
    return (PASSED if report.passed else FAILED), summary, {"validate": report.to_dict(), "text": report.format()}


def _bench_profiles(chunk_size: int) -> dict[str, RolloutProfile]:
    """The two layouts of the bench step: stock and every optimisation, one worker of :data:`NUM_ENVS` envs."""
    layout = dict(num_env_processes=1, total_num_envs=NUM_ENVS, chunk_size=chunk_size)
    return {"stock": RolloutProfile.stock(**layout), "fast": RolloutProfile(**layout, pipeline_stages=2)}


def _bench_step(factory: Any, rounds: int, chunk_size: int, seed: int, executor: str
               ) -> tuple[str, str, dict[str, Any]]:
    from ..rollout import RolloutEngine
    from .measure.resources import ResourceMonitor

    rows = {}
    for name, profile in _bench_profiles(chunk_size).items():
        rng = np.random.default_rng(seed)
        with RolloutEngine(factory, profile, executor=executor, seed=seed) as engine:
            low, high = engine.action_space.low, engine.action_space.high

            def policy(obs: dict) -> np.ndarray:
                batch = next(iter(obs.values())).shape[0]
                return rng.uniform(low, high, (batch, engine.chunk_size, engine.action_dim)).astype(np.float32)

            engine.rollout(policy, 1)  # warm-up: first renders, kernel compiles
            monitor = ResourceMonitor().start()
            stats = engine.rollout(policy, rounds, reset=False)
            usage = monitor.stop()
            pids = engine.worker_pids
        rows[name] = {
            "ms_per_step": stats.wall_seconds * 1e3 / (rounds * chunk_size),
            "env_steps_per_second": stats.env_steps_per_second,
            "gpu_mib_per_process": {str(pid): usage.gpu_mib_by_pid.get(pid) for pid in pids},
            "rss_mib_per_process": {str(pid): usage.worker_peak_rss_mib.get(pid) for pid in pids},
            "profile": profile.to_dict(),
        }
    speedup = rows["stock"]["ms_per_step"] / rows["fast"]["ms_per_step"]
    gpu = {name: [v for v in row["gpu_mib_per_process"].values() if v is not None] for name, row in rows.items()}
    summary = (f"stock {rows['stock']['ms_per_step']:.1f} ms/step, fast {rows['fast']['ms_per_step']:.1f} ms/step "
               f"({speedup:.2f}x); GPU MiB per env process: "
               + ", ".join(f"{name} {max(v):.0f}" if v else f"{name} unknown" for name, v in gpu.items()))
    return PASSED, summary, {"rows": rows, "speedup": speedup, "rounds": rounds, "num_envs": NUM_ENVS}


def run_selftest(config: dict, *, chunks: int = 4, chunk_size: int = 8, episode_steps: int | None = None,
                 rounds: int = 4, seed: int = 0, seam_tests: Path = SEAM_TESTS, seam_timeout_s: float = 1800,
                 executor: str = "process") -> dict[str, Any]:
    """Every step on the OmniGibson env ``config`` (module docs); the report as a JSON-ready dict."""
    from ..backends import make_factory
    from ..core import __version__

    episode_steps = episode_steps or max(1, chunks * chunk_size // 2)
    factory = make_factory("omnigibson", config=config)
    steps = [
        _step("doctor", _doctor_step),
        _step("seam checks", lambda: seam_step(seam_tests, seam_timeout_s)),
        _step("validate", lambda: _validate_step(config, chunks, chunk_size, episode_steps, seed)),
        _step("bench", lambda: _bench_step(factory, rounds, chunk_size, seed, executor)),
    ]
    passed = all(step["status"] == PASSED for step in steps)
    report = {
        "behavior1k_fast": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": steps[0].get("doctor", {}).get("versions", {}),
        "settings": {"chunks": chunks, "chunk_size": chunk_size, "episode_steps": episode_steps, "rounds": rounds,
                     "seed": seed, "num_envs": NUM_ENVS, "env_config": config},
        "steps": steps,
        "passed": passed,
    }
    report["summary"] = _summary_lines(report)
    return report


def _summary_lines(report: dict[str, Any]) -> list[str]:
    """The readable part of the report: one line per step."""
    versions = ", ".join(f"{name} {report['versions'].get(name) or '-'}" for name in ("omnigibson", "isaacsim", "torch"))
    lines = [f"behavior1k-fast selftest: {'PASSED' if report['passed'] else 'FAILED'} (behavior1k_fast "
             f"{report['behavior1k_fast']}, {versions}, Python {report['python']})"]
    width = max(len(step["name"]) for step in report["steps"])
    lines += [f"  {s['name']:<{width}}  {s['status']:<7}  {s['summary']}  [{s['seconds']:.0f} s]"
              for s in report["steps"]]
    return lines


def run(args: argparse.Namespace) -> int:
    """Check the input (Isaac Sim present, config readable, report writable), run, write the report."""
    from ..backends import check_installed, make_factory
    from ..core.contract import check_backend_build
    from .argtypes import check_writable_file, usage_errors
    from .backend_args import backend_options

    with usage_errors():
        check_installed("omnigibson")
        if args.backend_config is None:
            if not EXAMPLE_CONFIG.is_file():
                raise ValueError(f"give --backend-config PATH (an OmniGibson env config): {EXAMPLE_CONFIG} is absent")
            args.backend_config = str(EXAMPLE_CONFIG)
        config = backend_options(args)["config"]
        factory = make_factory("omnigibson", config=config)
        for profile in _bench_profiles(args.chunk_size).values():
            check_backend_build(factory, NUM_ENVS, 0, profile)
        check_writable_file("--out", args.out)
    report = run_selftest(config, chunks=args.chunks, chunk_size=args.chunk_size, episode_steps=args.episode_steps,
                          rounds=args.rounds, seam_timeout_s=args.seam_timeout)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, default=str)
    print("\n".join(report["summary"]))
    print(f"Report: {Path(args.out).resolve()}")
    return 0 if report["passed"] else 1
