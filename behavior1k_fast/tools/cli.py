"""``behavior1k-fast``: doctor | bench | validate | tune | selftest | train-judge | train-compare.

Each sub-command lives in its own module with ``register(subparsers)`` (adds its parser and sets ``func``)
and ``run(args) -> int``; the modules import their heavy dependencies only when run. Every user error is
one line on stderr and exit code 2, before any heavy work (:mod:`.argtypes`). A result file that cannot be
written (a full disk: :class:`~.measure.files.ResultWriteError`, raised once the command printed what it
measured) is one line too, exit code :data:`~.measure.files.EXIT_WRITE_FAILED` (74). ``--help`` shows each
command's description as plain text (the docstring's reST markup removed) and the examples of
:data:`EXAMPLES`.
"""

from __future__ import annotations

import argparse
import re
import sys

from ..core import __version__
from . import bench, doctor, selftest, train, tune, validate
from .argtypes import Parser, UsageError, fail, one_line
from .measure.files import EXIT_WRITE_FAILED, ResultWriteError

COMMANDS = (doctor, bench, validate, tune, selftest, train)
#: Command lines shown under ``--help`` (each parses: tests/unit/test_cli.py).
EXAMPLES = {
    "doctor": ["behavior1k-fast doctor", "behavior1k-fast doctor --json --profile my_profile.yaml",
               "behavior1k-fast doctor --upstream ~/BEHAVIOR-1K"],
    "bench": ["behavior1k-fast bench --quick", "behavior1k-fast bench --processes 8 --envs-per-process 2 --stages 2",
              "behavior1k-fast bench --backend omnigibson --backend-config examples/configs/behavior_task.yaml"],
    "validate": ["behavior1k-fast validate", "behavior1k-fast validate --chunks 10 --json validate.json",
                 "behavior1k-fast validate --backend omnigibson --backend-config examples/configs/behavior_task.yaml"],
    "tune": ["behavior1k-fast tune --quick", "behavior1k-fast tune --envs 16 --top 3 --out-dir ."],
    "selftest": ["behavior1k-fast selftest",
                 "behavior1k-fast selftest --backend-config my_task.yaml --out report.json"],
    "train-judge": ["behavior1k-fast train-judge --quick",
                    "behavior1k-fast train-judge --regime balanced --layouts k1_skip --seeds 5",
                    "behavior1k-fast train-judge --plot benchmarks/results/time_to_train_cpu2-k1.json"],
    "train-compare": ["behavior1k-fast train-compare --seeds 3",
                      "behavior1k-fast train-compare --profiles k1_skip,lookahead --lookahead-steps 1"],
}
#: reST roles (``:class:`~a.b.C``` -> ``C``, ``:func:`f``` -> ``f``) and inline literals (````x```` -> ``x``).
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str | None) -> str | None:
    """``text`` without reST markup, for a terminal."""
    if text is None:
        return None
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2).lstrip("."), text)
    return _LITERAL.sub(r"\1", text)


def _examples(commands: list[str]) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in commands)


def build_parser() -> Parser:
    parser = Parser(prog="behavior1k-fast", description=plain(__doc__.splitlines()[0]),
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog=_examples([lines[0] for lines in EXAMPLES.values()]))
    parser.add_argument("--version", action="version", version=f"behavior1k_fast {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True,
                                       metavar="{" + ",".join(EXAMPLES) + "}")
    for command in COMMANDS:
        command.register(subparsers)
    for name, sub in subparsers.choices.items():
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        sub.description = plain(sub.description)
        sub.epilog = _examples(EXAMPLES[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        return fail(args.command, exc)
    except ResultWriteError as exc:
        print(f"behavior1k-fast {args.command}: error: {one_line(exc)} (the results above were measured but "
              f"not saved)", file=sys.stderr)
        return EXIT_WRITE_FAILED


if __name__ == "__main__":
    sys.exit(main())
