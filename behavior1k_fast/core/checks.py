"""Argument checks shared by every layer: one line per bad value, naming the argument and the value.

A wrong type raises ``TypeError``; a value of the right type out of range raises ``ValueError``. Every
check returns the value converted to the plain Python type (``np.int64(4)`` -> ``4``), so callers can keep
the result. ``bool`` is never accepted where a number is asked for (``True`` is an ``int`` in Python).
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
import threading
from typing import Any, Sequence


def _bound_text(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    return f"<= {high:g}" if high is not None else ""


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (``numpy.bool_`` included)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` (Python or numpy integer, not bool) within ``[low, high]``."""
    bound = _bound_text(low, high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int{' ' + bound if bound else ''}, got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an int {bound}, got {value!r}")
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
) -> float:
    """``value`` as a finite ``float`` within the bounds (``low_open``: strictly above ``low``)."""
    unit_text = f" {unit}" if unit else ""
    bound = _bound_text(low, high, low_open)
    what = f"a finite number{unit_text}{' ' + bound if bound else ''}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    number = float(value)
    if (
        not math.isfinite(number)
        or (low is not None and (number <= low if low_open else number < low))
        or (high is not None and number > high)
    ):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return number


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_seconds(name: str, value: Any) -> float | None:
    """A time limit: ``None`` (no limit) or a positive number of seconds that the OS can wait for
    (at most ``threading.TIMEOUT_MAX``: a larger one overflows in the first wait, after work has started)."""
    if value is None:
        return None
    return check_number(name, value, low=0.0, high=threading.TIMEOUT_MAX, low_open=True, unit="of seconds")


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
