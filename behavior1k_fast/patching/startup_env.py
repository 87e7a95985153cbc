"""What the auto-apply hook's environment variables say, read without applying anything: ``BEHAVIOR1K_FAST``
names a profile (:func:`profile_for`), ``BEHAVIOR1K_FAST_STRICT`` makes a refused value fatal at start-up
(:func:`strict`), and :func:`strict_refusal` tells why a process started with such an environment was ended.

Generic: it knows the profile (``core``) and no simulator. The hook that applies the profile with the
OmniGibson patch set is :mod:`.autoapply`; the rollout layer reads this module alone where a worker died at
start-up, so a driver never imports a simulator's patch set to explain a worker's death.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

from ..core.profile import RolloutProfile

#: The variable that switches auto-apply on.
ENV_VAR = "BEHAVIOR1K_FAST"
#: The variable that makes a refused value fatal at start-up (exit code :data:`STRICT_EXIT_CODE`).
STRICT_VAR = "BEHAVIOR1K_FAST_STRICT"
STRICT_EXIT_CODE = 2
#: Values that leave auto-apply off (after stripping white space).
OFF_VALUES = ("", "0")
#: :data:`STRICT_VAR` values (white space stripped, any case) that leave strict mode off (unset too) or turn
#: it on; any other value is refused as a bad value, fatally (:func:`strict`).
STRICT_OFF_VALUES = ("", "0", "false", "no", "off")
STRICT_ON_VALUES = ("1", "true", "yes", "on")
#: Profile each named value stands for; any other value is a profile YAML path.
PRESETS: dict[str, Callable[[], RolloutProfile]] = {"1": RolloutProfile, "rlinf": RolloutProfile.rlinf}


def profile_for(value: str) -> tuple[RolloutProfile | None, str]:
    """``(profile, source)`` for a ``BEHAVIOR1K_FAST`` value; ``(None, "off")`` when it leaves auto-apply off.

    The off values and presets are matched before any file (a file named ``0`` or ``1`` is never read). A
    path is resolved to an absolute one (``~`` expanded), which the source names. A value that is neither
    off, a preset nor an existing file, and a profile file that does not load, raise ValueError naming the
    variable and the value (one line)."""
    name = value.strip()
    if name in OFF_VALUES:
        return None, "off"
    if name.lower() in PRESETS:
        return PRESETS[name.lower()](), f"preset {name.lower()!r}"
    path = os.path.abspath(os.path.expanduser(name))
    if not os.path.isfile(path):
        raise ValueError(
            f"{ENV_VAR}={value!r} is not one of {', '.join(map(repr, (*OFF_VALUES, *PRESETS)))} "
            f"and not a profile YAML file (no file {path!r})"
        )
    try:
        profile = RolloutProfile.from_yaml(path)
    except Exception as exc:  # YAML syntax, unknown key, bad value: all reported as one line
        raise ValueError(f"{ENV_VAR}={value!r}: profile file {path!r} does not load: {exception_line(exc)}") from None
    return profile, f"profile file {path!r}"


def strict(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`STRICT_VAR` of ``environ`` (default: this process's) turns strict mode on (one of
    :data:`STRICT_ON_VALUES`, any case): a refused value ends start-up. Unset or one of
    :data:`STRICT_OFF_VALUES`: off. Any other value raises ValueError naming the variable and the value
    (one line)."""
    value = (os.environ if environ is None else environ).get(STRICT_VAR, "")
    word = value.strip().lower()
    if word in STRICT_OFF_VALUES or word in STRICT_ON_VALUES:
        return word in STRICT_ON_VALUES
    raise ValueError(f"{STRICT_VAR}={value!r} is neither on ({'/'.join(STRICT_ON_VALUES)}) nor off "
                     f"({'/'.join(STRICT_OFF_VALUES[1:])} or empty), in any case")


def strict_refusal(environ: Mapping[str, str]) -> str | None:
    """Why the start-up hook of a process started with the environment ``environ`` (in this working
    directory) ended it with :data:`STRICT_EXIT_CODE`, as its one line says it, read here with the same
    parsers; ``None`` where that environment leaves the hook off or not strict. A value that loads here
    but did not apply there is named with a pointer to that process's stderr."""
    value = environ.get(ENV_VAR, "")
    if value.strip() in OFF_VALUES:
        return None
    try:
        if not strict(environ):
            return None
        profile_for(value)
    except Exception as exc:
        return exception_line(exc)
    return f"{ENV_VAR}={value!r} loads, but did not apply there (its stderr has the line)"


def exception_line(exc: BaseException) -> str:
    """``exc`` as one line: its message with white space runs joined, or its type's name."""
    return " ".join(str(exc).split()) or type(exc).__name__


__all__ = ["ENV_VAR", "OFF_VALUES", "PRESETS", "STRICT_EXIT_CODE", "STRICT_OFF_VALUES", "STRICT_ON_VALUES", "STRICT_VAR",
           "exception_line", "profile_for", "strict", "strict_refusal"]
