"""``Environment.step(render, get_obs)`` on both upstream layouts (patch ``env_step_obs``), and the observation
and render helpers the other stepping patches share.

Patched signatures (new parameters after upstream's):

- ``Environment.step(self, action, n_render_iterations=1, render=True, get_obs=True)`` (both layouts;
  ``render`` where BEHAVIOR-1K 343d786a has it);
- single-scene only: ``Environment._post_step(self, action, get_obs=True)``.

Semantics:

- ``get_obs=False``: no sensor (and, with tiled rendering, no tile) is read; ``task.step`` (reward,
  termination), info, the terminated/truncated split and the step counters still run every step; ``obs``
  is ``None`` per env and ``info["obs_info"]`` is empty. An automatic reset inside the step still returns
  the new episode's first observation, as upstream.
- ``render=False``: the step's own ``og.sim.step()`` runs inside ``og.sim.render_on_step(False)``:
  physics-only substeps, the same simulated time (``sim_step_dt``) as a rendered step; an automatic reset
  inside the step runs as upstream (it renders the new episode before reading it). It excludes
  ``n_render_iterations > 1``. The render flag is restored even when the step raises (upstream's
  ``render_on_step`` restores it only on a normal exit).
- Calls without the new arguments call the original method with the caller's arguments, so they return
  what upstream returns.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, ContextManager, Iterable, Iterator

from ...core.checks import check_positive_int
from ._util import bind, instance_override, simulator
from .layout import class_in, is_multi_scene
from .methods import MethodPatch, NewKeywordsPatch, check_flags


def _env_step_signature(self, action, n_render_iterations=1, render=True, get_obs=True):
    """Signature of the patched ``Environment.step``."""


def _env_post_step_signature(self, action, get_obs=True):
    """Signature of the patched single-scene ``Environment._post_step``."""


class StepRead:
    """Stands in for ``env.get_obs`` during one step: the step's own read (the first call) returns ``read()``;
    later reads in the same call (an automatic reset's) go to the real ``get_obs``."""

    def __init__(self, env: Any, read: Callable[[], Any]) -> None:
        self._env = env
        self._read = read
        self._done = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._done:
            return type(self._env).get_obs(self._env, *args, **kwargs)
        self._done = True
        return self._read()


def per_env_obs(num_envs: int, read: Iterable[tuple[int, Any, Any]] = ()) -> tuple[list, list]:
    """Multi-scene ``get_obs`` result lists of ``num_envs`` entries: ``(obs, info)`` of the ``(env, obs, info)``
    triples ``read``, ``(None, {})`` for every other env."""
    obs, info = [None] * num_envs, [{} for _ in range(num_envs)]
    for env_idx, env_obs, env_info in read:
        obs[env_idx], info[env_idx] = env_obs, env_info
    return obs, info


@contextlib.contextmanager
def render_scope(render: bool) -> Iterator[None]:
    """``og.sim.render_on_step(False)`` when ``render`` is False (else nothing); the simulator's render flag is
    restored even when the block raises, which upstream's ``render_on_step`` does not do."""
    if render:
        yield
        return
    sim = simulator()
    previous = sim._render_on_step
    try:
        with sim.render_on_step(False):
            yield
    finally:
        sim._render_on_step = previous


@contextlib.contextmanager
def _own_sim_step_unrendered(render: bool) -> Iterator[None]:
    """For the block, the first ``og.sim.step()`` (the env step's own) runs in :func:`render_scope` of
    ``render``; later ones (an automatic reset's, which renders and reads the new episode) run as upstream."""
    if render:
        yield
        return
    sim = simulator()
    step = sim.step
    calls = 0

    def own_step_unrendered() -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return step()
        with render_scope(False):
            return step()

    with instance_override(sim, "step", own_step_unrendered):
        yield


def _env_post_step(wrapped, env, args, kwargs):
    a = bind(_env_post_step_signature, args, kwargs)
    check_flags(a)
    if a["get_obs"]:
        return wrapped(a["action"])
    with instance_override(env, "get_obs", StepRead(env, lambda: (None, {}))):
        return wrapped(a["action"])


def _single_scene_unobserved(env: Any) -> ContextManager:
    """Single-scene: the step's ``_post_step`` runs with ``get_obs=False``."""
    return instance_override(env, "_post_step", functools.partial(env._post_step, get_obs=False))


def _multi_scene_unobserved(env: Any) -> ContextManager:
    """Multi-scene: the step's own ``get_obs()`` reads nothing (no sensor, no tile) and returns ``None`` per env."""
    return instance_override(env, "get_obs", StepRead(env, functools.partial(per_env_obs, env.num_envs)))


def _env_step(unobserved: Callable[[Any], ContextManager], wrapped, env, args, kwargs):
    a = bind(_env_step_signature, args, kwargs)
    check_flags(a)
    n = a["n_render_iterations"]
    check_positive_int("n_render_iterations", n)
    if a["render"] is False and n != 1:
        raise ValueError(f"n_render_iterations={n} renders, which contradicts render=False")
    skip = contextlib.nullcontext() if a["get_obs"] else unobserved(env)
    with _own_sim_step_unrendered(a["render"]), skip:
        return wrapped(a["action"], n)


class EnvironmentStepPatch(NewKeywordsPatch):
    """``Environment.step(render, get_obs)``; on the single-scene layout also ``_post_step(get_obs)``."""

    name = "env_step_obs"
    module = "omnigibson.envs.env_base"
    owner = "Environment"
    methods = (
        MethodPatch("step", functools.partial(_env_step, _single_scene_unobserved), _env_step_signature,
                    ("render", "get_obs")),
        MethodPatch("_post_step", _env_post_step, _env_post_step_signature, ("get_obs",)),
    )
    multi_scene_methods = (
        MethodPatch("step", functools.partial(_env_step, _multi_scene_unobserved), _env_step_signature,
                    ("render", "get_obs")),
    )

    def methods_for(self, module: Any) -> tuple[MethodPatch, ...]:
        return self.multi_scene_methods if is_multi_scene(class_in(module, self.owner)) else self.methods
