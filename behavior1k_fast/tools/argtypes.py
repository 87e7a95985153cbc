"""Command-line input checks: every user error is one line on stderr and exit code 2, before any heavy work.

- Option values: argparse ``type=`` functions built from :mod:`behavior1k_fast.core.checks`
  (:func:`positive_int`, :func:`nonnegative_int`, :func:`positive_number`, :func:`nonnegative_number`,
  :func:`int_list`, :func:`lookahead_steps`, :func:`device`, :func:`file_name`, :func:`path`), so a bad value fails while parsing,
  named by its option. Counts that start processes or allocate have this machine's upper limits
  (:class:`~behavior1k_fast.core.checks.MachineLimits`: :func:`process_count`, :func:`process_list`,
  :func:`env_count`, :func:`env_list`, :func:`chunk_steps`, :func:`seed`). :class:`Parser` prints argparse's errors as one line (no usage block).
- Everything that needs more than one value or a look at the machine (does the backend import here, is
  CUDA there, is ``--out-dir`` writable, can the backend be built with these settings) is checked by each
  command right after parsing, inside :func:`usage_errors`, which turns the ``ValueError``, ``TypeError``
  and ``OSError`` raised there into :class:`UsageError`; ``behavior1k-fast`` prints those as one line and
  exits 2. Errors after that phase are failures of the run, not of its input.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
import tempfile
from typing import Any, Callable, Iterator, NoReturn

from ..core.checks import MachineLimits, check_int, check_number, check_seed
from ..core.profile import AUTO_LEAD


class UsageError(ValueError):
    """A bad command-line input found after parsing (one line, exit code 2)."""


#: argparse's message for a value outside an argument's choices (a sub-command name included).
_INVALID_CHOICE = re.compile(r"invalid choice: (?P<value>'[^']*') \(choose from (?P<choices>.*)\)$")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``prog: error: message``, and exit code 2; a mistyped
    option or choice (a sub-command name included) gets the closest one suggested
    (``unrecognized arguments: --quik (did you mean --quick?)``, :func:`did_you_mean`)."""

    subcommands: argparse.Action | None = None

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.subcommands = super().add_subparsers(**kwargs)
        return self.subcommands

    def option_strings(self) -> list[str]:
        """Every option string this parser takes (``--quick``, ``-h``, ...)."""
        return list(self._option_string_actions)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:  # said by the parser of the command that did not take them, with its options' hints
            command = self.command_parser(namespace)
            options = command.option_strings()
            hints = [(word, did_you_mean(word.split("=", 1)[0], options)) for word in extras if word.startswith("-")]
            hints = [(word, close) for word, close in hints if close]
            hint = "" if not hints else (f" (did you mean {hints[0][1]}?)" if len(hints) == 1 else
                                        f" (did you mean {', '.join(f'{c} for {w}' for w, c in hints)}?)")
            command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace

    def command_parser(self, namespace: argparse.Namespace) -> "Parser":
        """The parser of the (sub-)command ``namespace`` was parsed for: this one, or the sub-command's."""
        if self.subcommands is None:
            return self
        chosen = self.subcommands.choices.get(getattr(namespace, self.subcommands.dest or "", None))
        return chosen.command_parser(namespace) if isinstance(chosen, Parser) else self

    def error(self, message: str) -> NoReturn:
        invalid = _INVALID_CHOICE.search(one_line(message))
        if invalid:
            choices = re.findall(r"'([^']*)'", invalid["choices"])
            close = did_you_mean(invalid["value"].strip("'"), choices)
            message = f"{one_line(message)} (did you mean {close}?)" if close else message
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def did_you_mean(word: str, candidates: list[str]) -> str | None:
    """The closest of ``candidates`` to a mistyped ``word`` (``difflib.get_close_matches``), or ``None``."""
    close = difflib.get_close_matches(word, candidates, n=1)
    return close[0] if close else None


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Inside: a ``ValueError``, ``TypeError`` or ``OSError`` is the user's input error (module docs)."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError, OSError) as exc:
        raise UsageError(one_line(exc)) from exc


def _checked(convert: Callable[[str], Any], what: str, check: Callable[[str, Any], Any]) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (else "expected <what>"), then ``check("value", ...)``, whose
    message loses its leading ``value`` (argparse names the option)."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            return check("value", value)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value ")) from None

    parse.__name__ = what
    return parse


positive_int = _checked(int, "an int", lambda name, v: check_int(name, v, 1))
nonnegative_int = _checked(int, "an int", lambda name, v: check_int(name, v, 0))
positive_number = _checked(float, "a number", lambda name, v: check_number(name, v, 0.0, low_open=True))
nonnegative_number = _checked(float, "a number", lambda name, v: check_number(name, v, 0.0))


process_count = _checked(int, "an int", lambda name, v: MachineLimits.here().check_processes(name, v))
env_count = _checked(int, "an int", lambda name, v: MachineLimits.here().check_envs(name, v))
chunk_steps = _checked(int, "an int", lambda name, v: MachineLimits.here().check_chunk_steps(name, v))
seed = _checked(int, "an int", check_seed)


def _list_of(item: Callable[[str], int]) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated values of the type ``item``, e.g. ``1,2,4``."""

    def parse(text: str) -> list[int]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected comma-separated ints >= 1, got {text!r}")
        try:
            return [item(part) for part in parts]
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"expected comma-separated ints >= 1, got {text!r}: {exc}") from None

    parse.__name__ = "comma-separated ints"
    return parse


int_list = _list_of(positive_int)
process_list = _list_of(process_count)
env_list = _list_of(env_count)


def lookahead_steps(text: str) -> int | str:
    """A lookahead lead (``--lookahead-steps``): ``auto`` or an int >= 0; the bound below the chunk size is the
    profile's to check, with the chunk size."""
    if text == AUTO_LEAD:
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an int >= 0 or {AUTO_LEAD}, got {text!r}")
    return value


def path(text: str) -> str:
    """A file or directory path: not empty (an empty value is a mistake, not "not given")."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:<index>``."""
    head, _, index = text.partition(":")
    if text in ("auto", "cpu", "cuda") or (head == "cuda" and index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:<index>, got {text!r}")


def file_name(text: str) -> str:
    """A name that can be part of a file name (no path separator)."""
    if not text or text in (".", "..") or os.sep in text or (os.altsep and os.altsep in text):
        raise argparse.ArgumentTypeError(f"expected a name without {os.sep!r}, got {text!r}")
    return text


# --- checks after parsing (raise ValueError / OSError; run them inside usage_errors) -------------
def check_writable_file(option: str, path: str) -> None:
    """``path`` can be written: not a directory, in a directory this process can write into."""
    if os.path.isdir(path):
        raise ValueError(f"{option} {path!r} is a directory, expected a file path")
    parent = os.path.dirname(os.path.abspath(path))
    try:
        with tempfile.NamedTemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise ValueError(f"{option} {path!r}: cannot write into {parent!r}: {exc.strerror or exc}") from None


def check_device(name: str) -> None:
    """A ``cuda`` device exists here (imports torch; ``cpu`` and ``auto`` need nothing)."""
    if not name.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available here (torch {torch.__version__})")
    index = int(name.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine shows {torch.cuda.device_count()} CUDA device(s)")


def parse_checked(parser: argparse.ArgumentParser, argv: list[str] | None,
                  check: Callable[[argparse.Namespace], Any]) -> argparse.Namespace:
    """``parser``'s options from ``argv`` once ``check(args)`` passed: a script's two phases (module docs) in
    one call. ``check`` raises ``ValueError``, ``TypeError`` or ``OSError`` for input it refuses, which is then
    ``parser.error``'s one line and exit code 2; it may set resolved values on ``args``."""
    args = parser.parse_args(argv)
    try:
        with usage_errors():
            check(args)
    except UsageError as exc:
        parser.error(str(exc))
    return args


def fail(command: str, error: Any) -> int:
    """Print ``error`` (an exception or a message) as the one-line error of ``command``; the exit code of a
    usage error."""
    print(f"behavior1k-fast {command}: error: {one_line(error)}", file=sys.stderr)
    return 2
