"""Interpreter start-up cost of the auto-apply ``.pth``: without it, with it and the variable unset or ``0``
(inert), and with ``BEHAVIOR1K_FAST=1`` / ``rlinf`` (the profile applied at start-up).

Two throw-away venvs over this environment's packages (``behavior1k_fast.tools.measure.venvs``), one with the hook
in its site-packages and one without. Each round runs every case once, in turn: ``python -c pass`` timed
from the parent (wall ms, process spawn included), and ``python -X importtime -c pass`` for the cumulative
import time of ``site``, which is where ``.pth`` files run (µs). Medians over the rounds. Also, in this
process, ``site.addpackage`` on the hook with the variable unset against an empty ``.pth`` (µs per file; a
venv on CPython 3.11 processes each ``.pth`` twice).

Writes ``autoapply_startup.json`` to ``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the
checkout's ``benchmarks/results/``). Run: ``python3 benchmarks/autoapply_startup.py`` (about a minute on 2 CPU
cores; ``--rounds`` to change).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

from behavior1k_fast.patching.autoapply import PTH_SOURCE
from behavior1k_fast.patching.startup_env import ENV_VAR
from behavior1k_fast.tools.argtypes import Parser, parse_checked, positive_int
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir
from behavior1k_fast.tools.measure.files import write_json
from behavior1k_fast.tools.measure.venvs import child_env, make_venv

#: case -> (venv has the hook, BEHAVIOR1K_FAST value or None for unset)
CASES = {
    "no .pth": (False, None),
    ".pth, variable unset": (True, None),
    ".pth, BEHAVIOR1K_FAST=0": (True, "0"),
    ".pth, BEHAVIOR1K_FAST=1": (True, "1"),
    ".pth, BEHAVIOR1K_FAST=rlinf": (True, "rlinf"),
}
SITE_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| site$")


def site_import_us(python: Path, env: dict) -> int:
    """Cumulative import time of ``site`` (µs) reported by ``-X importtime``."""
    err = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True).stderr
    (match,) = [m for m in map(SITE_LINE.match, err.splitlines()) if m]
    return int(match.group(1))


def wall_ms(python: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return (time.perf_counter() - start) * 1e3


def addpackage_us(folder: Path) -> dict[str, float]:
    """``site.addpackage`` per call (µs, best of 5 x 2000) on the hook (variable unset) and on an empty file."""
    os.environ.pop(ENV_VAR, None)
    shutil.copyfile(PTH_SOURCE, folder / "hook.pth")
    (folder / "empty.pth").write_text("\n")
    return {
        name: min(timeit.repeat(lambda: site.addpackage(str(folder), f"{name}.pth", set()), number=2000, repeat=5))
        / 2000 * 1e6
        for name in ("hook", "empty")
    }


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p10": ordered[len(ordered) // 10],
        "p90": ordered[(9 * len(ordered)) // 10],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=40,
                        help="rounds, each running every case once (default: 40)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, lambda args: setattr(args, "out_dir", checked_output_dir(args)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        pythons = {hook: make_venv(Path(tmp) / f"venv-{hook}", hook=hook) for hook in (False, True)}
        envs = {
            case: child_env(BEHAVIOR1K_FAST=value, OMP_NUM_THREADS=None, XDG_CACHE_HOME=tmp)
            for case, (_, value) in CASES.items()
        }
        walls: dict[str, list[float]] = {case: [] for case in CASES}
        sites: dict[str, list[int]] = {case: [] for case in CASES}
        per_file = addpackage_us(Path(tmp))
        for _ in range(args.rounds):
            for case, (hook, _) in CASES.items():
                walls[case].append(wall_ms(pythons[hook], envs[case]))
                sites[case].append(site_import_us(pythons[hook], envs[case]))
    base_wall = statistics.median(walls["no .pth"])
    base_site = statistics.median(sites["no .pth"])
    rows = {
        case: {
            "wall_ms": summary(walls[case]),
            "site_import_us": summary(sites[case]),
            "wall_ms_over_no_pth": statistics.median(walls[case]) - base_wall,
            "site_import_us_over_no_pth": statistics.median(sites[case]) - base_site,
        }
        for case in CASES
    }
    result = {
        "what": "python -c pass start-up: wall ms (spawn included) and site's cumulative import µs (.pth files run there)",
        "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "rounds": args.rounds,
        "cases": rows,
        "site_addpackage_us": per_file,
    }
    path = write_json(result, Path(args.out_dir) / "autoapply_startup.json")
    width = max(map(len, CASES))
    print(f"{'case':<{width}}  wall ms (median, p10-p90)   site import µs   over no .pth")
    for case, row in rows.items():
        w, s = row["wall_ms"], row["site_import_us"]
        print(
            f"{case:<{width}}  {w['median']:7.1f} ({w['p10']:.1f}-{w['p90']:.1f})"
            f"   {s['median']:9.0f}   {row['wall_ms_over_no_pth']:+7.1f} ms {row['site_import_us_over_no_pth']:+8.0f} µs"
        )
    print(f"site.addpackage per .pth: hook {per_file['hook']:.1f} µs, empty file {per_file['empty']:.1f} µs")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
