"""Shared-memory buffers between the driver and its process workers: one segment per worker for its
boundary observations (the worker writes them) and one for its chunk actions (the driver writes them).

Every segment is created and unlinked by the driver; its name is :data:`SHM_PREFIX`, the driver's pid and a
random part (``/dev/shm/b1kf_<pid>_<hex>`` on Linux), so a leak is easy to see and its owner is known. A
driver killed with its whole process group (as a cluster scheduler does) takes the resource tracker that
would unlink its segments with it: :func:`remove_stale_segments` unlinks the segments whose owner is gone,
at every engine start (:meth:`SharedBuffers.create`) and in ``behavior1k-fast doctor --clean``.

Those two look at their own namespace only: the prefix is ``b1kf_`` unless :data:`SHM_PREFIX_ENV` names
another, ``b1kf_<name>_``, read once at import (children inherit it). A test run sets its own, so that an
engine started elsewhere on the host never removes the segments a test left to check, and the test run
never removes another's.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Mapping, Sequence

import numpy as np

from .chunk import action_dtype

#: Environment variable that names this process's segment namespace, ``b1kf_<name>_`` (module docs).
SHM_PREFIX_ENV = "BEHAVIOR1K_FAST_SHM_PREFIX"
#: The longest segment name: a file name in ``/dev/shm`` (Linux's ``NAME_MAX``).
NAME_MAX = 255
#: Hex digits of a segment name's random part.
RANDOM_HEX = 12
#: Digits of the largest pid (Linux allows pids up to 2**22 = 4194304).
PID_DIGITS = 7
#: The longest prefix whose segment names ``<prefix><pid>_<hex>`` fit :data:`NAME_MAX`.
MAX_PREFIX = NAME_MAX - PID_DIGITS - 1 - RANDOM_HEX


def _prefix_from_env() -> str:
    value = os.environ.get(SHM_PREFIX_ENV, "b1kf_")
    if not re.fullmatch(r"b1kf_(?:[A-Za-z][A-Za-z0-9]*_)?", value):
        raise ValueError(f"{SHM_PREFIX_ENV}={value[:80]!r}: expected b1kf_ or b1kf_<name>_, the name a letter "
                         f"then letters and digits")
    if len(value) > MAX_PREFIX:
        raise ValueError(f"{SHM_PREFIX_ENV} is {len(value)} characters long; a segment name (<prefix><pid>_<"
                         f"{RANDOM_HEX} hex digits>) must fit NAME_MAX={NAME_MAX}, so the prefix may have at most "
                         f"{MAX_PREFIX}")
    return value


#: Name prefix of every shared-memory segment the engine creates (``/dev/shm/b1kf_*`` on Linux): ``b1kf_``,
#: or the namespace :data:`SHM_PREFIX_ENV` names.
SHM_PREFIX = _prefix_from_env()
#: Where the segments live as files (Linux); elsewhere stale segments are not looked for.
SHM_DIR = "/dev/shm"
#: Key of the chunk actions ``[chunk_size, action_dim]`` in a worker's action buffer.
ACTIONS_KEY = "actions"


@dataclass(frozen=True)
class BufferSpec:
    """Name and layout ``(key, shape, dtype, byte offset)`` of one worker's observation segment."""

    name: str
    num_envs: int
    layout: tuple[tuple[str, tuple[int, ...], str, int], ...]


class SharedBuffers:
    """One shared-memory segment holding ``[num_envs, *shape]`` per key of a gymnasium Dict of Box spaces.

    The driver creates (and unlinks) one for each worker's boundary observations (the worker writes
    them) and one for its chunk actions (the driver writes them). A row is written by one side only
    while the other side does not read it (the engine keeps at most one chunk in flight per env).
    """

    def __init__(self, shm: shared_memory.SharedMemory, spec: BufferSpec):
        self._shm = shm
        self.spec = spec
        self.arrays = {
            key: np.ndarray((spec.num_envs, *shape), dtype=np.dtype(dtype), buffer=shm.buf, offset=offset)
            for key, shape, dtype, offset in spec.layout
        }

    @classmethod
    def create(cls, observation_space: Any, num_envs: int) -> "SharedBuffers":
        """A new segment for ``num_envs`` rows of ``observation_space`` (a gymnasium Dict of Box)."""
        check_observation_space(observation_space)
        layout, offset = [], 0
        for key, space in observation_space.spaces.items():
            dtype = np.dtype(space.dtype)
            offset = -(-offset // 64) * 64  # 64-byte aligned rows
            layout.append((key, tuple(space.shape), dtype.str, offset))
            offset += num_envs * int(np.prod(space.shape, dtype=np.int64)) * dtype.itemsize
        remove_stale_segments()
        name = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:RANDOM_HEX]}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=max(offset, 1))
        return cls(shm, BufferSpec(name, num_envs, tuple(layout)))

    @classmethod
    def attach(cls, spec: BufferSpec) -> "SharedBuffers":
        return cls(shared_memory.SharedMemory(name=spec.name), spec)

    def write(self, rows: Sequence[int], values: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Copy one dict (key -> array of the space's shape) per row into the buffers; a value that the
        space's dtype cannot hold is a ``ValueError`` naming its key (:func:`cast_to_space`)."""
        for row, value in zip(rows, values):
            for key, arr in self.arrays.items():
                item = value[key]
                if np.shape(item) != arr.shape[1:]:
                    raise ValueError(f"{key!r} has shape {np.shape(item)}, its space says {arr.shape[1:]}")
                arr[row] = cast_to_space(key, item, arr.dtype)

    def read(self, rows: Sequence[int], out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """A copy of the observations of ``rows``: key -> ``[len(rows), *shape]``, into ``out`` if given."""
        rows = np.asarray(rows)
        if out is None:
            out = {k: np.empty((rows.size, *a.shape[1:]), a.dtype) for k, a in self.arrays.items()}
        first, last = int(rows[0]), int(rows[-1])
        contiguous = last - first + 1 == rows.size and np.all(np.diff(rows) == 1)
        for key, arr in self.arrays.items():
            if contiguous:
                out[key][...] = arr[first : last + 1]
            else:
                np.take(arr, rows, axis=0, out=out[key])
        return out

    def close(self) -> None:
        self.arrays = {}
        self._shm.close()

    def unlink(self) -> None:
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass


def cast_to_space(key: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of its space's ``dtype``; ``ValueError`` naming ``key`` when a value does not
    survive the cast: a finite number that becomes inf (``1e300`` as float32), or a number outside an
    integer dtype's range (``300`` as uint8) or NaN there. The same dtype is passed through unchecked."""
    value = np.asarray(value)
    if value.dtype == dtype or value.dtype.kind not in "biuf":
        return value
    if dtype.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            cast = value.astype(dtype)
        bad = np.isinf(cast) & np.isfinite(value)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        bad = ~((value >= info.min) & (value <= info.max))  # NaN compares False: bad too
        cast = None
    else:
        return value
    if bad.any():
        first = value[bad].flat[0]
        raise ValueError(f"observation {key!r} holds {first!r}, which its space's dtype {dtype} cannot hold "
                         f"(the backend's value of dtype {value.dtype} would become "
                         f"{'inf' if dtype.kind == 'f' else 'another number'})")
    return value if cast is None else cast


def stack_as_space(obs: Sequence[Mapping[str, np.ndarray]], space: Any) -> dict[str, np.ndarray]:
    """Per-env observation dicts -> key -> ``[n, *shape]`` in the dtypes of the Dict ``space``, each value
    through :func:`cast_to_space`."""
    return {key: np.stack([cast_to_space(key, o[key], np.dtype(box.dtype)) for o in obs])
            for key, box in space.spaces.items()}


def segment_owner(name: str) -> int | None:
    """The pid in a segment name ``<SHM_PREFIX><pid>_<hex>``; ``None`` for a name not of that form (another
    namespace's too)."""
    if not name.startswith(SHM_PREFIX):
        return None
    pid, sep, _ = name[len(SHM_PREFIX):].partition("_")
    if not sep or not pid.isdigit():
        return None
    return int(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale_segments(directory: str = SHM_DIR) -> list[tuple[str, int]]:
    """``(name, bytes)`` of every segment of this package's namespace in ``directory`` whose owner process is
    gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in sorted(names):
        pid = segment_owner(name)
        if pid is None or _alive(pid):
            continue
        try:
            out.append((name, os.stat(os.path.join(directory, name)).st_size))
        except OSError:  # unlinked meanwhile
            continue
    return out


def remove_stale_segments(directory: str = SHM_DIR) -> list[tuple[str, int]]:
    """Unlink the segments of :func:`stale_segments`; returns those removed (another process may be
    removing them at the same time: a segment already gone is not counted)."""
    removed = []
    for name, size in stale_segments(directory):
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            continue
        removed.append((name, size))
    return removed


def action_buffer_space(action_space: Any, chunk_size: int) -> Any:
    """The Dict space of one worker's action buffer: ``[chunk_size, action_dim]`` per env, in
    :func:`~.chunk.action_dtype` of the action space."""
    from gymnasium import spaces

    shape = (chunk_size, int(np.prod(action_space.shape)))
    return spaces.Dict({ACTIONS_KEY: spaces.Box(-np.inf, np.inf, shape, action_dtype(action_space))})


def check_observation_space(space: Any) -> None:
    """The engine needs a gymnasium Dict of Box spaces with fixed shapes and dtypes."""
    from gymnasium import spaces

    if not isinstance(space, spaces.Dict) or not all(isinstance(s, spaces.Box) for s in space.spaces.values()):
        raise TypeError(f"backend observation_space must be a gymnasium Dict of Box spaces, got {space!r}")
