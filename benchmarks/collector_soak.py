"""Collector soak: batches of a ``Collector`` on the reference simulator for ``--minutes`` (10), a worker
SIGKILLed every ``--kill-every-s`` (20) and the trainer breaking out of its loop and starting a new
``Collector`` on the same engine every ``--restart-every-s`` (60). Not part of CI.

Records RSS, open fds and ``b1kf_`` segments of the driver and every worker over time (flat?), the engine's
state after every break-out (idle?), every applied action against each env's own log (in at most one batch;
the rest dropped by a kill or a break-out) and what is left after ``close()``
(``behavior1k_fast.tools.measure.soak`` says how). Writes ``collector_soak_<tag>.json`` and ``.png`` to
``./behavior1k_fast_results`` (``--out-dir``; ``--record``: the checkout's ``benchmarks/results/``); exit code
1 when a check fails. Run: ``python3 benchmarks/collector_soak.py`` (``--minutes 1`` for a short check).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from behavior1k_fast.tools.argtypes import (Parser, env_count, file_name, parse_checked, positive_int, positive_number,
                                           process_count)
from behavior1k_fast.tools.measure.config import add_output_arguments, checked_output_dir
from behavior1k_fast.tools.measure.files import save_figure, write_json
from behavior1k_fast.tools.measure.machine import describe_machine, machine_tag
from behavior1k_fast.tools.measure.soak import CollectorSoakConfig, collector_soak, plot_collector_soak


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (a bad one: one line, exit code 2); ``out_dir`` resolved and writable."""
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=positive_number, default=10.0, help="how long (default: 10)")
    parser.add_argument("--kill-every-s", type=positive_number, default=20.0,
                        help="SIGKILL one worker, in turn, this often (default: 20)")
    parser.add_argument("--restart-every-s", type=positive_number, default=60.0,
                        help="break out and start a new Collector this often (default: 60)")
    parser.add_argument("--processes", type=process_count, default=2, help="env processes (default: 2)")
    parser.add_argument("--envs-per-process", type=env_count, default=2,
                        help="envs per process, a multiple of the 2 stages (default: 2)")
    parser.add_argument("--resolution", type=positive_int, default=16, help="camera pixels per side (default: 16)")
    parser.add_argument("--tag", type=file_name, default=None, help="machine tag in the file name (default: derived)")
    add_output_arguments(parser)
    return parse_checked(parser, argv, check_args)


def check_args(args: argparse.Namespace) -> None:
    if args.envs_per_process % 2:
        raise ValueError(f"--envs-per-process must be a multiple of the 2 stages, got {args.envs_per_process}")
    args.out_dir = checked_output_dir(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = CollectorSoakConfig(minutes=args.minutes, kill_every_s=args.kill_every_s,
                                 restart_every_s=args.restart_every_s, processes=args.processes,
                                 envs_per_process=args.envs_per_process, resolution=args.resolution)
    with tempfile.TemporaryDirectory(prefix="collector_soak_logs_") as logs:
        result = collector_soak(config, logs)
    result["machine"] = describe_machine("cpu")
    stem = Path(args.out_dir) / f"collector_soak_{args.tag or machine_tag(result['machine'])}"
    write_json(result, stem.with_suffix(".json"))
    save_figure(plot_collector_soak(result), stem.with_suffix(".png"))
    print(json.dumps({key: result[key] for key in ("minutes_run", "collectors", "batches", "restarts", "actions",
                                                  "after_close", "checks", "ok")}, indent=2))
    print(f"wrote {stem}.json and {stem}.png")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
