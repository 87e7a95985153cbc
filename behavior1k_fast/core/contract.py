"""The backend contract the rollout engine drives: OmniGibson's ``VectorEnvironment`` API as extended here.

A backend holds ``num_envs`` envs that share one physics step (one process). The engine never imports a
concrete backend: it is handed a picklable :class:`BackendFactory` and calls it inside each worker process,
after the worker has applied the package profile.

Semantics (tested on every backend):

- ``step(actions, env_indices=None, get_obs=True, render=True)``: ``actions`` has one row per selected env,
  in ``env_indices`` order (all envs when ``None``). Only selected envs take the new action and get
  post-step work (reward, termination, observation); every other env holds its last action while the
  shared physics advances one global step for all envs. Stepping never resets an env.
- ``render=False``: nothing is rendered this step. ``get_obs=False``: no observation is read, the ``obs``
  entries are ``None``; reward, termination and info are still computed.
- ``get_obs=True, render=False`` reads the images of the last render (stale by design, as on OmniGibson).
- Returns ``obs`` (list of per-env dicts or ``None``), ``rewards`` float64 ``[n]``, ``terminated`` and
  ``truncated`` bool ``[n]``, ``infos`` (list of dicts), for the ``n`` selected envs in order.
- ``reset(env_indices=None, get_obs=True)`` resets only the selected envs and returns ``(obs, infos)``.
- ``observe(env_indices=None, render=True)`` renders once (if ``render``) and reads the observations of the
  selected envs without stepping: the terminal observation of an episode that ends inside a chunk.
- No automatic reset: the engine decides when an episode that ended is reset.
- ``sim_time``: simulated seconds since construction, shared by all envs of the backend.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class VectorBackend(Protocol):
    num_envs: int
    #: Action space of one env (gymnasium Box).
    action_space: Any
    #: Observation space of one env (gymnasium Dict of Box spaces, fixed shapes and dtypes).
    observation_space: Any

    def step(
        self,
        actions: np.ndarray,
        env_indices: Sequence[int] | None = None,
        get_obs: bool = True,
        render: bool = True,
    ) -> tuple[list[dict[str, np.ndarray] | None], np.ndarray, np.ndarray, np.ndarray, list[dict]]: ...

    def reset(
        self, env_indices: Sequence[int] | None = None, get_obs: bool = True
    ) -> tuple[list[dict[str, np.ndarray] | None], list[dict]]: ...

    def observe(
        self, env_indices: Sequence[int] | None = None, render: bool = True
    ) -> list[dict[str, np.ndarray]]: ...

    @property
    def sim_time(self) -> float: ...

    def close(self) -> None: ...


class BackendFactory(Protocol):
    """Picklable callable building one backend inside a worker process.

    ``profile`` is the package profile the worker applied; its ``pipeline_stages`` is the number of stages
    that share this backend's physics (K in hybrid partition, 1 in process partition), so the backend can
    rescale its physics frequency with ``behavior1k_fast.core.frequencies.rescale_for_stages``.

    Optionally a factory has ``check(num_envs, seed, profile)``: it raises the ``ValueError`` or
    ``TypeError`` that building with these arguments would raise, without building anything (no
    simulator import); the engine calls it in the driver before any worker starts
    (:func:`check_backend_build`).

    Optionally a factory names the patch set its backend needs in every process that builds it:
    ``patch_set``, the import path of a module with ``apply(profile, process=...)``, ``revert()`` and
    ``active_profile()`` (the OmniGibson factory: ``"behavior1k_fast.patching.omnigibson"``); a worker applies
    it before it unpickles the factory (the inline executor restores the profile active before on close). A
    factory without one (the reference simulator's) needs no patches (:func:`patch_set_of`).
    """

    def __call__(self, num_envs: int, seed: int, profile: Any) -> VectorBackend: ...


def check_backend_build(factory: Any, num_envs: int, seed: int, profile: Any) -> None:
    """``factory.check(num_envs, seed, profile)`` where the factory has one (see :class:`BackendFactory`).
    A factory class passed for its instance (a class whose instances are the callables) is a ``TypeError``."""
    if isinstance(factory, type) and any("__call__" in vars(c) for c in factory.__mro__[:-1]):
        raise TypeError(f"factory must be a factory instance, got the class {factory.__qualname__}: pass "
                        f"{factory.__name__}(...)")
    check = getattr(factory, "check", None)
    if callable(check):
        check(num_envs, seed, profile)


def patch_set_of(factory: Any) -> str | None:
    """The patch set ``factory`` names (see :class:`BackendFactory`), or ``None``."""
    patch_set = getattr(factory, "patch_set", None)
    if patch_set is not None and not isinstance(patch_set, str):
        raise TypeError(f"factory.patch_set must be a module path (str) or None, got {patch_set!r}")
    return patch_set


def check_env_indices(env_indices: Sequence[int] | None, num_envs: int) -> np.ndarray:
    """Validated selected env ids as an int array (all envs for ``None``)."""
    if env_indices is None:
        return np.arange(num_envs)
    idx = np.asarray(env_indices)
    # dtype kinds and Python min/max/set: this runs every step, and on a few ids these are the cheapest.
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError(f"env_indices must be a 1-D sequence of ints, got {env_indices!r}")
    ids = idx.tolist()
    if not ids:
        raise ValueError("env_indices must select at least one env, got an empty sequence")
    if min(ids) < 0 or max(ids) >= num_envs:
        raise ValueError(f"env_indices={list(idx)} out of range for num_envs={num_envs}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"env_indices={list(idx)} contains duplicates")
    return idx.astype(np.int64)


def check_plain_array(values: Any, argname: str, shape: str = "") -> None:
    """TypeError unless ``values`` is a numpy array and not a masked one (a masked action is no action);
    ``shape`` (e.g. ``" [envs, steps, action_dim]"``) is named in the message."""
    if not isinstance(values, np.ndarray):
        raise TypeError(f"{argname} must be a numpy array{shape}, got {type(values).__name__}")
    if isinstance(values, np.ma.MaskedArray):
        raise TypeError(f"{argname} must be a plain numpy array{shape}, got a masked array: every action is "
                        f"applied, so fill the masked ones first (e.g. {argname}.filled(0.0))")


def check_actions(actions: Any, n_rows: int, action_dim: int, argname: str = "actions") -> np.ndarray:
    """Validated float action rows ``[n_rows, action_dim]``; NaN or inf is an error."""
    check_plain_array(actions, argname)
    check_float_dtype(actions, argname)
    if actions.shape != (n_rows, action_dim):
        raise ValueError(f"{argname} must have shape ({n_rows}, {action_dim}), got {actions.shape}")
    check_finite(actions, argname, "[row, col]")
    return actions


def check_float_dtype(values: np.ndarray, argname: str) -> None:
    """TypeError unless ``values`` has a float dtype."""
    if values.dtype.kind != "f":  # cheaper than np.issubdtype, on every step of a backend
        raise TypeError(f"{argname} must have a float dtype, got {values.dtype}")


def check_finite(values: np.ndarray, argname: str, axes: str) -> None:
    """ValueError naming the first NaN or inf of ``values`` by its index, labelled ``axes``
    (e.g. ``"[env, step, dim]"``)."""
    finite = np.isfinite(values)
    if not finite.all():
        bad = np.argwhere(~finite)[0].tolist()
        raise ValueError(f"{argname} contains NaN or inf (first at {axes} = {bad})")
