"""Auto-apply of the OmniGibson patch set: one environment variable makes every Python process of an
environment apply a :class:`~behavior1k_fast.core.profile.RolloutProfile` with
:mod:`behavior1k_fast.patching.omnigibson` at interpreter start-up, before anything can import OmniGibson
(as ``COVERAGE_PROCESS_START`` makes coverage measure subprocesses).

This module is OmniGibson's, not generic: it reads the engine's profile and applies the OmniGibson set (the
generic part, which knows no simulator and no profile field, is :mod:`behavior1k_fast.patching.registry`;
what the variables below say is read by :mod:`.startup_env`, which imports no patch set).

``pip install`` (regular or editable) puts this folder's ``autoapply.pth`` into site-packages as
:data:`PTH_NAME`. Python's ``site`` runs its one line in every interpreter it starts. The line reads
``BEHAVIOR1K_FAST`` from ``os.environ`` (``site`` has imported ``os`` already) and imports nothing when the
variable is unset, empty or ``0``; otherwise it calls :func:`at_startup`, which reads the value as

- ``1``: the fast-path profile, ``RolloutProfile()``;
- ``rlinf``: :meth:`RolloutProfile.rlinf`, the fast path minus what RLinf's env worker does itself;
- anything else: the path of a profile YAML file (RLinf key names accepted; a relative path is resolved
  against the current directory and reported as the absolute path it named),

and applies it to the process-wide registry (``apply(profile)``, ``process="auto"``): every patch is
``pending`` until its module is imported, and the process settings (intra-op thread caps, numba cache dir and
preload, GPU binding) until the process imports OmniGibson, so a trainer, a Ray driver or any other process
that never runs the simulator keeps its thread pools and environment. A bad value, or a profile this install
cannot take, prints one line to stderr and applies nothing: start-up goes on, unless
``BEHAVIOR1K_FAST_STRICT`` is set (not empty, not ``0``), which makes that line fatal: the interpreter exits
with code 2 before running anything. The line is printed once per job: the process that prints it sets
:data:`REPORTED_VAR` to the value in its environment, and its children (the engine's env workers, any
subprocess, Ray workers it starts) inherit it and refuse the same value without a word (their
:func:`startup` record holds the error; under strict mode each still prints its fatal line). Every process
that inherits the environment applies it too:
multiprocessing and subprocess children, Ray workers (``runtime_env={"env_vars": {...}}``) and the actors
they start.

The ``.pth`` runs while ``site`` is still adding site directories, so this package and its dependencies
must live in the site-packages that holds the ``.pth`` or in one processed before it (pip's default: one
environment for all of them). An interpreter started with ``-S`` runs no ``site`` and applies nothing.
"""

from __future__ import annotations

import os
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.profile import RolloutProfile
from . import omnigibson as omnigibson_patches
from .registry import PatchReport
from .startup_env import ENV_VAR, STRICT_EXIT_CODE, STRICT_VAR, exception_line, profile_for, strict

#: Set, to the refused value, by the process that printed a refused value's line: its children inherit it
#: and stay quiet about that value (module docs: once per job).
REPORTED_VAR = "BEHAVIOR1K_FAST_REPORTED"
#: Name of the ``.pth`` file in site-packages (sorts after setuptools' ``__editable__`` finders, which
#: must have run so that an editable install imports).
PTH_NAME = "behavior1k_fast_autoapply.pth"
#: The ``.pth`` text this package ships (``setup.py`` installs it as :data:`PTH_NAME`).
PTH_SOURCE = Path(__file__).with_name("autoapply.pth")


@dataclass(frozen=True)
class StartupApply:
    """What :func:`at_startup` did in this process."""

    #: ``BEHAVIOR1K_FAST`` as read.
    value: str
    #: What the value named: ``preset '1'``, ``preset 'rlinf'``, ``profile file '/path.yaml'`` or ``a bad value``.
    source: str
    #: The profile applied; ``None`` when the value was bad or the profile could not apply.
    profile: RolloutProfile | None
    #: The one-line message printed instead of applying, or ``None``.
    error: str | None = None
    #: What ``apply()`` returned at start-up (``None`` when nothing was applied).
    report: PatchReport | None = None


_startup: StartupApply | None = None


def at_startup() -> StartupApply | None:
    """Apply the profile ``BEHAVIOR1K_FAST`` names to this process (the ``.pth`` line calls this).

    Never raises: a bad value, or a profile whose apply fails (rolled back), prints one line to stderr and is
    recorded in :func:`startup`; with :func:`strict` the process then exits with code
    :data:`STRICT_EXIT_CODE` (``os._exit``: nothing else has run yet). Returns the record, or ``None`` when
    the variable leaves it off. A second call with the same value returns the first record (CPython 3.11
    runs the ``.pth`` files of a venv twice at start-up)."""
    global _startup
    value = os.environ.get(ENV_VAR, "")
    if _startup is not None and _startup.value == value:
        return _startup
    # Start-up must go on whatever the value or the install: every exception becomes the one line.
    try:
        strict()
        profile, source = profile_for(value)
    except Exception as exc:
        _startup = _refused(value, "a bad value", exception_line(exc))
        return _startup
    if profile is None:
        return None
    try:
        report = omnigibson_patches.apply(profile)
    except Exception as exc:
        omnigibson_patches.revert()  # PatchError has rolled back already; anything else may not have
        _startup = _refused(value, source, f"{ENV_VAR}={value!r} ({source}) does not apply: {exception_line(exc)}")
    else:
        _startup = StartupApply(value, source, profile, report=report)
    return _startup


def _refused(value: str, source: str, message: str) -> StartupApply:
    try:
        fatal = strict()
    except ValueError:  # a strict setting that does not read is refused itself, as under strict mode
        fatal = True
    if fatal:
        print(f"behavior1k_fast: {message}; exiting ({STRICT_VAR} is set)", file=sys.stderr)
        sys.stderr.flush()
        os._exit(STRICT_EXIT_CODE)
    if os.environ.get(REPORTED_VAR) != value:  # a parent printed the line for this job already
        print(f"behavior1k_fast: {message}; nothing applied", file=sys.stderr)
        os.environ[REPORTED_VAR] = value
    return StartupApply(value, source, None, message)


def startup() -> StartupApply | None:
    """What the start-up hook did in this process; ``None`` if it did not run or the variable was off."""
    return _startup


def installed_pth() -> list[str]:
    """Paths of :data:`PTH_NAME` in this interpreter's site directories (site-packages, user site)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return [str(Path(d) / PTH_NAME) for d in dict.fromkeys(dirs) if (Path(d) / PTH_NAME).is_file()]

