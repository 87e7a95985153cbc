"""Writing a command's result files: every file whole or not at all.

A results disk can fill up, or a folder turn read-only, in the middle of a long measurement. Every file the
tools write (JSON, YAML, PNG) goes through :func:`write_text` / :func:`write_json` / :func:`save_figure`:
the bytes go to a temporary file in the target's folder, which then replaces the target in one rename
(``os.replace``), so a reader sees the old file or the new one, never a truncated one. A failed write
removes its temporary file and raises :class:`ResultWriteError`, which names the file and the cause; the
command line prints it as one line and exits with :data:`EXIT_WRITE_FAILED`, after printing what was
measured (:func:`~behavior1k_fast.tools.cli.main`). A written file has the mode a plain ``open(path, "w")``
would give it: a new file ``0666`` less the process's umask (``0644`` under the usual ``022``), a replaced
file the mode it had.

Result files are named once, here (:func:`result_stem`): ``<command>_<machine tag>``, and a quick run's
(``--quick``) carry :data:`QUICK_SUFFIX` (``bench_cpu2_quick.json``), so a quick run never replaces a
full one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterator

#: Exit code of a command whose results could not be written (``EX_IOERR`` of BSD's sysexits.h).
EXIT_WRITE_FAILED = 74
#: What a quick run's result names carry before the extension (``bench_cpu2_quick.json``).
QUICK_SUFFIX = "_quick"


def result_stem(command: str, tag: str, *, quick: bool = False) -> str:
    """The stem of ``command``'s result files on the machine tagged ``tag``
    (:func:`~.machine.machine_tag`, or ``--tag``): ``bench_cpu2``, and ``bench_cpu2_quick`` for a quick
    run, so a quick run never replaces a full one."""
    return f"{command}_{tag}{QUICK_SUFFIX if quick else ''}"


class ResultWriteError(OSError):
    """A result file could not be written (disk full, folder read-only, ...); the old file, if any, is kept.

    Args:
        path: the file that was to be written.
        cause: the ``OSError`` the write raised.
    """

    def __init__(self, path: str | os.PathLike, cause: OSError) -> None:
        self.path = str(path)
        self.cause = cause
        super().__init__(cause.errno, f"cannot write {self.path}: {cause.strerror or cause}")

    def __str__(self) -> str:
        return self.args[1]


@contextlib.contextmanager
def _replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in ``path``'s folder (made where absent) that replaces ``path`` when the block ends
    without an error; on an error the temporary file goes and an ``OSError`` becomes a
    :class:`ResultWriteError`."""
    target = Path(path)
    temp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = _new_file(target)
        yield Path(temp)
        _sync(temp)
        _keep_mode(target, temp)  # once written: a read-only target's mode would stop the write
        os.replace(temp, target)
        temp = None
    except OSError as exc:
        raise ResultWriteError(target, exc) from exc
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _new_file(target: Path) -> str:
    """An empty file beside ``target``, created with ``0666`` so the umask applies as in a plain write
    (``tempfile.mkstemp`` makes ``0600``)."""
    name = str(target.with_name(f".{target.name}.{secrets.token_hex(4)}{target.suffix}"))
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return name


def _keep_mode(target: Path, temp: str) -> None:
    """``temp`` takes ``target``'s mode where ``target`` exists (a plain write keeps a file's mode)."""
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        return
    os.chmod(temp, mode)


def _sync(path: str) -> None:
    """Flush ``path``'s bytes to the disk (where a full disk shows at the latest)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_with(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """``write(temporary_path)``, then the temporary file replaces ``path`` (module docs); ``path``."""
    with _replacing(path) as temp:
        write(temp)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``text`` (UTF-8) as the whole of ``path``, atomically (module docs); ``path``."""
    return write_with(path, lambda temp: temp.write_text(text, encoding="utf-8"))


def write_json(data: Any, path: str | os.PathLike) -> Path:
    """``data`` as indented JSON (numpy scalars as floats), atomically; ``path``."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=False, default=float) + "\n")


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Lay out matplotlib figure ``fig``, write it to ``path`` atomically (the format from its suffix), close
    it; ``path``."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        return write_with(path, lambda temp: fig.savefig(temp, dpi=110, format=Path(path).suffix.lstrip(".") or None))
    finally:
        plt.close(fig)
