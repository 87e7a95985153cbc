"""Argument checks shared by every layer: one line per bad value, naming the argument and the value.

A wrong type raises ``TypeError``; a value of the right type out of range raises ``ValueError``. Every
check returns the value converted to the plain Python type (``np.int64(4)`` -> ``4``), so callers can keep
the result. ``bool`` is never accepted where a number is asked for (``True`` is an ``int`` in Python).

Machine limits (:class:`MachineLimits`): a count that starts processes or allocates per item has an upper
bound derived from this machine's usable cores and memory (psutil), so a typo such as 100000 processes is
one line before any work instead of minutes of start-up or a machine out of memory.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import reprlib
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Sequence


#: Characters of a value an error message shows at most (:func:`shown`).
SHOWN_CHARS = 200

_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 3, SHOWN_CHARS, SHOWN_CHARS, SHOWN_CHARS
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = _SHOWN.maxfrozenset = 10


def shown(value: Any) -> str:
    """``repr(value)`` as an error message shows it: nested containers cut after a few items and levels
    (``reprlib``; a value of millions of items costs no more than a short one), at most
    :data:`SHOWN_CHARS` characters."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _bound(value: float) -> str:
    """A bound as written: ints in full (``4294967295``), other numbers short (``0.5``, ``9.2e+09``)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _bound_text(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_bound(low)}, {_bound(high)}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {_bound(low)}"
    return f"<= {_bound(high)}" if high is not None else ""


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (``numpy.bool_`` included)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {shown(value)}")


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integer, not bool) within ``[low, high]``."""
    bound = _bound_text(low, high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int{' ' + bound if bound else ''}, got {shown(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an int {bound}, got {shown(value)}")
    return value


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an ``int >= 1``."""
    return check_int(name, value, low=1)


def check_optional_positive_int(name: str, value: Any) -> int | None:
    """``None``, or ``value`` as an ``int >= 1``."""
    return None if value is None else check_positive_int(name, value)


def check_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    unit: str = "",
    others: str = "",
) -> float:
    """``value`` as a finite ``float`` within the bounds (``low_open``: strictly above ``low``). ``others``
    names the other values the caller accepts, first in the message (e.g. ``"'auto', None or "``)."""
    unit_text = f" {unit}" if unit else ""
    bound = _bound_text(low, high, low_open)
    what = f"{others}a finite number{unit_text}{' ' + bound if bound else ''}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {shown(value)}")
    number = float(value)
    if (
        not math.isfinite(number)
        or (low is not None and (number <= low if low_open else number < low))
        or (high is not None and number > high)
    ):
        raise ValueError(f"{name} must be {what}, got {shown(value)}")
    return number


def check_picklable(name: str, value: Any, destination: str) -> bytes:
    """``pickle.dumps(value)``; ``TypeError`` naming ``name`` when it does not pickle (it must reach
    ``destination``, e.g. "the workers")."""
    import pickle

    try:
        return pickle.dumps(value)
    except Exception as exc:
        raise TypeError(f"{name} must be picklable to reach {destination}, got {shown(value)}: {exc}") from None


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {shown(value)}")
    return value


def check_seconds(name: str, value: Any, others: str = "") -> float | None:
    """A time limit: ``None`` (no limit) or a positive number of seconds that the OS can wait for
    (at most ``threading.TIMEOUT_MAX``: a larger one overflows in the first wait, after work has started).
    ``others``: as for :func:`check_number`."""
    if value is None:
        return None
    return check_number(name, value, low=0.0, high=threading.TIMEOUT_MAX, low_open=True, unit="of seconds",
                        others=others)


def check_writable_dir(name: str, path: str) -> str:
    """``path``, created if missing, once a file could be written in it; ``ValueError`` naming ``name``
    otherwise."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ValueError(f"{name}={path!r} is not a writable directory: {exc.strerror or exc}") from None
    return path


# --- machine limits -------------------------------------------------------------------------------
#: Worker processes per usable core this package starts at most on one machine: beyond that they only
#: queue for the cores (and every one of them imports a simulator).
PROCESSES_PER_CORE = 4
#: Memory one started process takes at the least (an interpreter with numpy and a simulator imported).
PROCESS_BYTES = 64 * 2**20
#: Memory one env takes at the least (its simulator state, renderer and observation buffers).
ENV_BYTES = 4 * 2**20
#: Memory one step of one env's chunk takes at the least in the driver and the worker (its action row,
#: reward and flags, the policy's tokens for it).
STEP_BYTES = 1024
#: Share of this machine's memory one allocation this package sizes from user input may take.
MEMORY_SHARE = 0.5
#: Largest seed: numpy's legacy seeding (``np.random.seed``, used by simulators) takes 32-bit seeds.
MAX_SEED = 2**32 - 1


def _gib(nbytes: float) -> str:
    gib = nbytes / 2**30
    return f"{gib:.3g} GiB" if gib < 1000 else f"{gib:,.0f} GiB"


@dataclass(frozen=True)
class MachineLimits:
    """Upper limits of counts that start processes or allocate, from ``cores`` usable by this process and
    ``memory_bytes`` of RAM (module docs)."""

    cores: int
    memory_bytes: int

    @classmethod
    @functools.lru_cache(maxsize=1)
    def here(cls) -> "MachineLimits":
        """This machine's limits (usable cores of this process's affinity, total RAM from psutil)."""
        import psutil

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cls(cores, int(psutil.virtual_memory().total))

    @property
    def budget_bytes(self) -> int:
        """Bytes one allocation sized from user input may take (:data:`MEMORY_SHARE` of the RAM)."""
        return int(self.memory_bytes * MEMORY_SHARE)

    @property
    def max_processes(self) -> int:
        """Most processes started at once: :data:`PROCESSES_PER_CORE` per core, and what the memory holds."""
        return max(1, min(PROCESSES_PER_CORE * self.cores, self.budget_bytes // PROCESS_BYTES))

    @property
    def max_envs(self) -> int:
        """Most envs on this machine (:data:`ENV_BYTES` each)."""
        return max(1, self.budget_bytes // ENV_BYTES)

    @property
    def max_chunk_steps(self) -> int:
        """Most steps of one env's chunk (:data:`STEP_BYTES` each)."""
        return max(1, self.budget_bytes // STEP_BYTES)

    def describe(self) -> str:
        return f"{self.cores} usable cores, {_gib(self.memory_bytes)} of memory"

    def check_count(self, name: str, value: Any, high: int, per: str) -> int:
        """``value`` as an int in ``[1, high]``; the message says where ``high`` comes from."""
        value = check_int(name, value, 1)
        if value > high:
            raise ValueError(f"{name} must be an int in [1, {high}] on this machine ({self.describe()}; {per}), "
                             f"got {shown(value)}")
        return value

    def check_processes(self, name: str, value: Any) -> int:
        """A number of processes to start on this machine."""
        return self.check_count(name, value, self.max_processes,
                                f"at most {PROCESSES_PER_CORE} processes per core, {PROCESS_BYTES >> 20} MiB each")

    def check_envs(self, name: str, value: Any) -> int:
        """A number of envs to build on this machine."""
        return self.check_count(name, value, self.max_envs,
                                f"{ENV_BYTES >> 20} MiB per env within {MEMORY_SHARE:.0%} of the memory")

    def check_chunk_steps(self, name: str, value: Any) -> int:
        """The steps of one chunk."""
        return self.check_count(name, value, self.max_chunk_steps,
                                f"{STEP_BYTES} bytes per step within {MEMORY_SHARE:.0%} of the memory")

    def check_memory(self, what: str, nbytes: float) -> None:
        """ValueError when ``what`` (e.g. ``"model_width=4096, model_depth=96"``) needs more than the
        memory budget."""
        if nbytes > self.budget_bytes:
            raise ValueError(f"{what} needs about {_gib(nbytes)} of memory, more than {MEMORY_SHARE:.0%} of this "
                             f"machine's ({self.describe()})")


def check_local_layout(num_processes: int, num_envs: int, chunk_size: int, processes: bool = True) -> None:
    """What one machine can run: ``num_processes`` started processes (``processes``: they are started
    here), ``num_envs`` envs, chunks of ``chunk_size`` steps for all of them (:class:`MachineLimits`)."""
    limits = MachineLimits.here()
    if processes:
        limits.check_processes("num_env_processes", num_processes)
    limits.check_envs("total_num_envs", num_envs)
    limits.check_chunk_steps("chunk_size", chunk_size)
    limits.check_memory(f"total_num_envs={num_envs} x chunk_size={chunk_size}", num_envs * chunk_size * STEP_BYTES)


def check_seed(name: str, value: Any) -> int:
    """A seed in ``[0, MAX_SEED]``."""
    return check_int(name, value, 0, MAX_SEED)
