"""``behavior1k-fast``: doctor | bench | validate | tune | selftest.

Each sub-command lives in its own module with ``register(subparsers)`` (adds its parser and sets ``func``)
and ``run(args) -> int``; the modules import their heavy dependencies only when run. Every user error is
one line on stderr and exit code 2, before any heavy work (:mod:`.argtypes`).
"""

from __future__ import annotations

import sys

from ..core import __version__
from . import bench, doctor, selftest, tune, validate
from .argtypes import Parser, UsageError, fail

COMMANDS = (doctor, bench, validate, tune, selftest)


def build_parser() -> Parser:
    parser = Parser(prog="behavior1k-fast", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"behavior1k_fast {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="{doctor,bench,validate,tune,selftest}")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        return fail(args.command, exc)


if __name__ == "__main__":
    sys.exit(main())
