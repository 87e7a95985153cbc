"""Writing a command's result files: every file whole or not at all.

A results disk can fill up, or a folder turn read-only, in the middle of a long measurement. Every file the
tools write (JSON, YAML, PNG) goes through :func:`write_text` / :func:`write_json` / :func:`save_figure`:
the bytes go to a temporary file in the target's folder, which then replaces the target in one rename
(``os.replace``), so a reader sees the old file or the new one, never a truncated one. A failed write
removes its temporary file and raises :class:`ResultWriteError`, which names the file and the cause; the
command line prints it as one line and exits with :data:`EXIT_WRITE_FAILED`, after printing what was
measured (:func:`~behavior1k_fast.tools.cli.main`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

#: Exit code of a command whose results could not be written (``EX_IOERR`` of BSD's sysexits.h).
EXIT_WRITE_FAILED = 74


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
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=target.suffix)
        os.close(fd)
        yield Path(temp)
        _sync(temp)
        os.replace(temp, target)
        temp = None
    except OSError as exc:
        raise ResultWriteError(target, exc) from exc
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


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
