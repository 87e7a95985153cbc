"""On-demand observation and per-env stepping for OmniGibson's ``Environment``, ``VectorEnvironment`` and
``EnvironmentWrapper``, on both upstream layouts:

- single-scene (PyPI 1.1.1, v3.7.x): one ``Environment`` per env, ``VectorEnvironment`` steps N of them;
- multi-scene (main, #2329): one ``Environment`` owns ``num_envs`` scenes and has no ``_post_step``
  (:func:`is_multi_scene` tells them apart from the class).

Patched signatures (new parameters come after upstream's, so positional calls keep their meaning):

- ``Environment.step(self, action, n_render_iterations=1, render=True, get_obs=True)`` (both layouts;
  ``render`` where BEHAVIOR-1K 343d786a has it), and on single-scene ``Environment._post_step(self, action,
  get_obs=True)``: patch ``env_step_obs``
- multi-scene ``Environment.step(self, action, n_render_iterations=1, render=True, get_obs=True,
  env_indices=None)``: patch ``multi_scene_step`` (installed over ``env_step_obs``)
- ``VectorEnvironment.step(self, actions, env_indices=None, get_obs=True, render=True)`` (RLinf's order) and
  ``VectorEnvironment.reset(self, get_obs=True, env_indices=None, **kwargs)``: patch ``vector_env_step``
- ``EnvironmentWrapper.step(self, action, *args, **kwargs)`` and ``EnvironmentWrapper.reset(self, *args, **kwargs)``

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
- ``env_indices`` (the contract of :mod:`behavior1k_fast.core.contract`): only those envs take an action
  (rows of the action, in ``env_indices`` order) and get post-step work; every other env holds its last
  action while the shared physics advances all of them; the returned values are the selected envs' rows.

  - single-scene (``VectorEnvironment``): ``_pre_step``/``_post_step`` run for the selected envs only. From
    the shared ``og.sim.step()`` through the last ``_post_step`` (and so an automatic reset inside it, whose
    ``og.sim.step()`` would otherwise advance every scene) the simulator's scene list is scoped to their
    scenes: robot controllers, object states and visuals of the other scenes are not stepped, while PhysX
    still simulates every scene and flushes whatever targets the batched control views hold (whether those
    are exactly the last action's targets on Isaac Sim is unverified: upstream doc §6). If the controller
    views were rebuilt meanwhile, ``og.sim.update_handles()`` runs after the list is restored.
  - multi-scene (``Environment``): upstream's own ``step`` runs with the other envs' robots receiving
    nothing (their controllers keep the last goal, which ``ControllerView`` steps with everyone else's, so
    nothing is scoped); the selected envs' observation is one ``get_obs(env_indices)`` read (with tiled
    rendering one tiled read, sliced: no per-env render), only their scene-graph builders step, only their
    step counters advance, and an automatic reset resets only selected envs that ended. main's task is
    batched (``task.step(env, action)`` scores every env and takes no ``env_indices``): it runs once per step
    for all envs, is given the selected rows and, for every other env, the action it holds (the last array
    action it took; zeros before its first), and the other envs' rows of its result are dropped. A stateful
    reward function or termination condition therefore also sees the hold steps of an unselected env.
    Actions for a subset are array rows (dict actions only without ``env_indices``).
- ``reset(env_indices=...)`` resets only the selected envs (main's ``Environment.reset`` already does; on
  ``VectorEnvironment`` the upstream trap that reset every env, or raised ``TypeError`` in 1.1.1, is gone),
  each with its scene scoped as above, and returns ``(obs, infos)`` lists for the selected envs (``obs``
  entries ``None`` when ``get_obs=False``).
- Upstream's default paths are upstream's own code: calls without the new arguments call the original
  method with the caller's arguments, so they return what upstream returns (v3.7: ``reset(get_obs=False)``
  returns ``None``). Only where upstream's ``reset`` cannot take the call (1.1.1's ``reset()`` takes no
  arguments) does ``reset(get_obs=..., ...)`` reset every env as with ``env_indices`` selecting all, and
  return those lists.
- ``EnvironmentWrapper.step``/``reset`` pass every argument on to the wrapped env unchanged (upstream passes
  only named ones), so ``get_obs``, ``render``, ``env_indices`` and reset keywords reach a wrapped env.
- Each patch skips with a reason on the layout it is not for: ``vector_env_step`` on main (no
  ``VectorEnvironment`` of ``Environment`` objects), ``multi_scene_step`` on 1.1.1 and v3.7.

These patches are capabilities the engine needs on every profile (the stock path calls them with the
default ``get_obs=True, render=True``); ``skip_intermediate_obs`` and ``pipeline_stages`` decide how
the engine's chunk stepping (``behavior1k_fast.rollout.chunk``) calls them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref
from typing import Any, Callable, ContextManager, Iterable, Iterator, Sequence

import wrapt

from ...core.checks import check_positive_int
from ...core.contract import check_env_indices
from ...core.profile import RolloutProfile
from ..registry import Patch, PatchContext
from ._util import bind, class_in, has_parameter, instance_override, raw_member


def _og() -> Any:
    return sys.modules["omnigibson"]


# --- layout ----------------------------------------------------------------------------------------
def is_multi_scene(env_cls: Any) -> bool:
    """Whether ``env_cls`` is main's multi-scene ``Environment`` (#2329): it reads the observations of a subset
    of its envs (``get_obs(env_indices)``) and has no ``_post_step`` (its ``step`` does every env's post-step
    work). PyPI 1.1.1's and v3.7's single-scene ``Environment`` has ``_post_step``."""
    get_obs = getattr(env_cls, "get_obs", None)
    return (
        isinstance(env_cls, type)
        and callable(getattr(env_cls, "step", None))
        and callable(get_obs)
        and not hasattr(env_cls, "_post_step")
        and has_parameter(get_obs, "env_indices")
    )


MULTI_SCENE_REASON = (
    "upstream Environment is main's multi-scene layout (one Environment steps num_envs scenes): there is no "
    "VectorEnvironment of Environments to patch; per-env stepping is multi_scene_step's (Environment.step(env_indices))"
)
SINGLE_SCENE_REASON = (
    "upstream Environment holds one scene (VectorEnvironment steps N of them): per-env stepping is "
    "vector_env_step's (VectorEnvironment.step(env_indices))"
)


def multi_scene_reason(env_base: Any) -> str | None:
    """:data:`MULTI_SCENE_REASON` when ``env_base`` (the ``omnigibson.envs.env_base`` module) holds main's
    multi-scene ``Environment``, else ``None``."""
    return MULTI_SCENE_REASON if is_multi_scene(getattr(env_base, "Environment", None)) else None


# --- Environment: render, get_obs (both layouts) ---------------------------------------------------
def _env_step_signature(self, action, n_render_iterations=1, render=True, get_obs=True):
    """Signature of the patched ``Environment.step``."""


def _env_post_step_signature(self, action, get_obs=True):
    """Signature of the patched single-scene ``Environment._post_step``."""


class _StepRead:
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


def _per_env(num_envs: int, read: Iterable[tuple[int, Any, Any]] = ()) -> tuple[list, list]:
    """Multi-scene ``get_obs`` result lists of ``num_envs`` entries: ``(obs, info)`` of the ``(env, obs, info)``
    triples ``read``, ``(None, {})`` for every other env."""
    obs, info = [None] * num_envs, [{} for _ in range(num_envs)]
    for env_idx, env_obs, env_info in read:
        obs[env_idx], info[env_idx] = env_obs, env_info
    return obs, info


@contextlib.contextmanager
def _render_scope(render: bool) -> Iterator[None]:
    """``og.sim.render_on_step(False)`` when ``render`` is False (else nothing); the simulator's render flag is
    restored even when the block raises, which upstream's ``render_on_step`` does not do."""
    if render:
        yield
        return
    sim = _og().sim
    previous = sim._render_on_step
    try:
        with sim.render_on_step(False):
            yield
    finally:
        sim._render_on_step = previous


@contextlib.contextmanager
def _own_sim_step_unrendered(render: bool) -> Iterator[None]:
    """For the block, the first ``og.sim.step()`` (the env step's own) runs in :func:`_render_scope` of
    ``render``; later ones (an automatic reset's, which renders and reads the new episode) run as upstream."""
    if render:
        yield
        return
    sim = _og().sim
    step = sim.step
    calls = 0

    def own_step_unrendered() -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return step()
        with _render_scope(False):
            return step()

    with instance_override(sim, "step", own_step_unrendered):
        yield


def _check_flags(arguments: dict) -> None:
    """TypeError naming ``get_obs`` / ``render`` when one is not a bool."""
    for name in ("get_obs", "render"):
        if name in arguments and not isinstance(arguments[name], bool):
            raise TypeError(f"{name} must be a bool, got {arguments[name]!r}")


def _env_post_step(wrapped, env, args, kwargs):
    a = bind(_env_post_step_signature, args, kwargs)
    _check_flags(a)
    if a["get_obs"]:
        return wrapped(a["action"])
    with instance_override(env, "get_obs", _StepRead(env, lambda: (None, {}))):
        return wrapped(a["action"])


def _single_scene_unobserved(env: Any) -> ContextManager:
    """Single-scene: the step's ``_post_step`` runs with ``get_obs=False``."""
    return instance_override(env, "_post_step", functools.partial(env._post_step, get_obs=False))


def _multi_scene_unobserved(env: Any) -> ContextManager:
    """Multi-scene: the step's own ``get_obs()`` reads nothing (no sensor, no tile) and returns ``None`` per env."""
    return instance_override(env, "get_obs", _StepRead(env, functools.partial(_per_env, env.num_envs)))


def _env_step(unobserved: Callable[[Any], ContextManager], wrapped, env, args, kwargs):
    a = bind(_env_step_signature, args, kwargs)
    _check_flags(a)
    n = a["n_render_iterations"]
    check_positive_int("n_render_iterations", n)
    if a["render"] is False and n != 1:
        raise ValueError(f"n_render_iterations={n} renders, which contradicts render=False")
    skip = contextlib.nullcontext() if a["get_obs"] else unobserved(env)
    with _own_sim_step_unrendered(a["render"]), skip:
        return wrapped(a["action"], n)


class _NewKeywordsPatch(Patch):
    """Adds keyword arguments to methods of one upstream class.

    ``methods`` maps a method to ``(wrapper, adapter, new keywords)``; :meth:`methods_for` picks those of the
    loaded module's layout (default: all). The patch is skipped when upstream's methods already take every
    new keyword. Wanted on every profile: these are capabilities of the backend contract, and
    ``skip_intermediate_obs`` / ``pipeline_stages`` decide how the engine calls them."""

    owner: str
    methods: dict

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.targets = tuple(f"{cls.owner}.{attr}" for attr in cls.methods)
        cls.upstream_file = cls.module.replace(".", "/") + ".py"

    def wanted(self, profile: RolloutProfile) -> bool:
        return True

    def methods_for(self, module: Any) -> dict:
        """The methods this patch changes on ``module``'s layout."""
        return self.methods

    def skip_reason(self, module: Any) -> str | None:
        cls = class_in(module, self.owner)
        methods = self.methods_for(module)
        members = {attr: raw_member(cls, attr) for attr in methods}  # every target must exist
        if all(all(has_parameter(members[attr], kw) for kw in keywords) for attr, (_, _, keywords) in methods.items()):
            taken = "; ".join(f"{attr} takes {', '.join(kws)}" for attr, (_, _, kws) in methods.items())
            return f"upstream {self.owner} already has them: {taken}"
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        cls = class_in(module, self.owner)
        for attr, (wrapper, adapter, _) in self.methods_for(module).items():
            ctx.wrap(cls, attr, wrapper, adapter=adapter)


class EnvironmentStepPatch(_NewKeywordsPatch):
    """``Environment.step(render, get_obs)``; on the single-scene layout also ``_post_step(get_obs)``."""

    name = "env_step_obs"
    module = "omnigibson.envs.env_base"
    owner = "Environment"
    methods = {
        "step": (functools.partial(_env_step, _single_scene_unobserved), _env_step_signature, ("render", "get_obs")),
        "_post_step": (_env_post_step, _env_post_step_signature, ("get_obs",)),
    }
    multi_scene_methods = {
        "step": (functools.partial(_env_step, _multi_scene_unobserved), _env_step_signature, ("render", "get_obs")),
    }

    def methods_for(self, module: Any) -> dict:
        return self.multi_scene_methods if is_multi_scene(class_in(module, self.owner)) else self.methods


# --- Environment: env_indices (multi-scene layout) -------------------------------------------------
def _multi_scene_step_signature(self, action, n_render_iterations=1, render=True, get_obs=True, env_indices=None):
    """Signature of the patched multi-scene ``Environment.step``."""


#: Environment -> ``(num_envs, action_dim)`` tensor: the array action each env holds (the last it took).
_HELD_ACTIONS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _hold_actions(env: Any, rows: Any, selected: Sequence[int]) -> Any:
    """The ``(num_envs, action_dim)`` actions every env executes this step: ``rows`` (one per selected env, in
    ``selected`` order) for the selected envs, and for every other env the action it holds (the last array
    action it took through ``step``; zeros before its first). Remembered as the held actions."""
    shape = (env.num_envs, rows.shape[-1])
    held = _HELD_ACTIONS.get(env)
    actions = held.to(rows).clone() if held is not None and tuple(held.shape) == shape else rows.new_zeros(shape)
    actions[list(selected)] = rows
    _HELD_ACTIONS[env] = actions
    return actions


def _ignore_action(action: Any) -> None:
    """``robot.apply_action`` of an env outside ``env_indices`` for one step: it receives nothing (its
    controllers keep their last goal)."""


class _HeldBuilder(wrapt.ObjectProxy):
    """The scene-graph builder of an env outside ``env_indices`` for one step: not stepped, read as it is."""

    def step(self, scene: Any) -> None:
        return None


class _SelectedReset:
    """Stands in for ``env.reset`` during a step on ``selected`` envs: upstream's automatic reset of the envs
    that ended resets only those among ``selected``; its observation list stays aligned with the envs it was
    asked for (``None`` for an env left alone)."""

    def __init__(self, env: Any, selected: set[int]) -> None:
        self._env = env
        self._selected = selected

    def __call__(self, env_indices: Any = None, get_obs: bool = True, **kwargs: Any) -> Any:
        import torch

        asked = range(self._env.num_envs) if env_indices is None else [int(i) for i in env_indices]
        kept = [i for i in asked if i in self._selected]
        if not kept:
            return ([None] * len(asked), {"obs_info": []}) if get_obs else None
        result = type(self._env).reset(self._env, env_indices=torch.as_tensor(kept), get_obs=get_obs, **kwargs)
        if result is None:
            return None
        obs, info = result
        by_env = dict(zip(kept, obs))
        return [by_env.get(i) for i in asked], info


def _selected_read(env: Any, selected: list[int]) -> tuple[list, list]:
    """The step's own observation read for the ``selected`` envs only: one ``get_obs(env_indices)`` call (with
    tiled rendering one tiled read, sliced per env), as ``num_envs`` entries."""
    obs, info = type(env).get_obs(env, env_indices=selected)
    return _per_env(env.num_envs, zip(selected, obs, info))


@contextlib.contextmanager
def _only_selected(env: Any, selected: list[int], observe: bool) -> Iterator[None]:
    """For one call of main's own ``step`` on every env, post-step work only for the ``selected`` envs: the
    other envs' robots ignore ``apply_action``, their scene-graph builders do not step, ``reset`` (the
    automatic one) resets only selected envs, the step's own ``get_obs()`` reads only the selected envs (when
    ``observe``), and the other envs' step counters are put back after the call."""
    chosen = set(selected)
    others = [i for i in range(env.num_envs) if i not in chosen]
    steps = env._current_steps.clone()
    with contextlib.ExitStack() as stack:
        for i in others:
            for robot in env.scenes[i].robots:
                stack.enter_context(instance_override(robot, "apply_action", _ignore_action))
        if env._scene_graph_builders:
            held = [b if i in chosen else _HeldBuilder(b) for i, b in enumerate(env._scene_graph_builders)]
            stack.enter_context(instance_override(env, "_scene_graph_builders", held))
        stack.enter_context(instance_override(env, "reset", _SelectedReset(env, chosen)))
        if observe:
            read = _StepRead(env, functools.partial(_selected_read, env, selected))
            stack.enter_context(instance_override(env, "get_obs", read))
        yield
    env._current_steps[others] = steps[others]


def _action_rows(env: Any, action: Any, env_indices: Any, selected: list[int]) -> Any:
    """``action`` as main's ``step`` converts it, checked to be one array row per selected env."""
    import torch

    rows = env._convert_action_to_tensor(action)
    if not isinstance(rows, torch.Tensor):
        raise TypeError(
            f"action with env_indices must be array rows (one per selected env), got {type(action).__name__}"
        )
    if rows.dim() != 2 or rows.shape[0] != len(selected):
        raise ValueError(
            f"action has {rows.shape[0] if rows.dim() == 2 else 'no'} rows but env_indices={env_indices!r} "
            f"selects {len(selected)} envs (one row per selected env, in env_indices order)"
        )
    return rows


def _multi_scene_step(wrapped, env, args, kwargs):
    import torch

    a = bind(_multi_scene_step_signature, args, kwargs)
    _check_flags(a)
    flags = {name: a[name] for name in ("render", "get_obs") if a[name] is not True}  # upstream's defaults unsaid
    n, action = env.num_envs, a["action"]
    if a["env_indices"] is None:
        rows = env._convert_action_to_tensor(action)
        if isinstance(rows, torch.Tensor) and rows.dim() == 2 and rows.shape[0] == n:
            _hold_actions(env, rows, range(n))
        return wrapped(action, a["n_render_iterations"], **flags)
    selected = check_env_indices(a["env_indices"], n).tolist()
    rows = _action_rows(env, action, a["env_indices"], selected)
    with _only_selected(env, selected, observe=a["get_obs"]):
        result = wrapped(_hold_actions(env, rows, selected), a["n_render_iterations"], **flags)
    obs, rewards, terminated, truncated, infos = result
    at = torch.as_tensor(selected)
    return [obs[i] for i in selected], rewards[at], terminated[at], truncated[at], [infos[i] for i in selected]


class MultiSceneStepPatch(_NewKeywordsPatch):
    """``Environment.step(env_indices)`` on main's multi-scene layout (over ``env_step_obs``'s ``render`` and
    ``get_obs``); skipped on the single-scene layout, where ``vector_env_step`` does per-env stepping."""

    name = "multi_scene_step"
    module = "omnigibson.envs.env_base"
    owner = "Environment"
    methods = {"step": (_multi_scene_step, _multi_scene_step_signature, ("env_indices",))}

    def skip_reason(self, module: Any) -> str | None:
        cls = class_in(module, self.owner)
        if not is_multi_scene(cls):
            return SINGLE_SCENE_REASON
        raw_member(cls, "_convert_action_to_tensor")  # the step reads the action rows through it
        return super().skip_reason(module)


# --- VectorEnvironment -----------------------------------------------------------------------------
def _vector_step_signature(self, actions, env_indices=None, get_obs=True, render=True):
    """Signature of the patched ``VectorEnvironment.step``."""


def _vector_reset_signature(self, get_obs=True, env_indices=None, **kwargs):
    """Signature of the patched ``VectorEnvironment.reset``."""


@contextlib.contextmanager
def scoped_scenes(sim: Any, envs: Sequence[Any], num_envs: int) -> Iterator[None]:
    """Restrict ``sim``'s per-scene loops to the scenes of ``envs`` for the block (nothing when all envs
    are selected or the simulator keeps no ``_scenes`` list); see the module docs."""
    if len(envs) == num_envs or not hasattr(sim, "_scenes"):
        yield
        return
    from omnigibson.utils.usd_utils import ControllableObjectViewAPI

    selected = {id(env.scene) for env in envs}
    views = ControllableObjectViewAPI._VIEWS_BY_PATTERN
    all_scenes = sim._scenes
    sim._scenes = [scene for scene in all_scenes if id(scene) in selected]
    try:
        yield
    finally:
        sim._scenes = all_scenes
        if ControllableObjectViewAPI._VIEWS_BY_PATTERN is not views:
            sim.update_handles()


def _selected_envs(venv: Any, env_indices: Any) -> list[Any]:
    return [venv.envs[i] for i in check_env_indices(env_indices, venv.num_envs).tolist()]


def _vector_step(wrapped, venv, args, kwargs):
    a = bind(_vector_step_signature, args, kwargs)
    _check_flags(a)
    envs = _selected_envs(venv, a["env_indices"])
    actions = a["actions"]
    try:
        rows = len(actions)
    except TypeError:
        raise TypeError(f"actions must be a sequence of per-env actions, got {type(actions).__name__}") from None
    if rows != len(envs):
        raise ValueError(
            f"actions has {rows} rows but env_indices={a['env_indices']!r} selects {len(envs)} envs "
            f"(one row per selected env, in env_indices order)"
        )
    get_obs = a["get_obs"]
    if not get_obs and not has_parameter(type(envs[0])._post_step, "get_obs"):
        raise TypeError("VectorEnvironment.step(get_obs=False) needs Environment._post_step(get_obs); "
                        "the env_step_obs patch is not applied")
    if a["env_indices"] is None and get_obs and a["render"]:
        return wrapped(actions)  # upstream's own step
    sim = _og().sim
    for env, action in zip(envs, actions):
        env._pre_step(action)
    post_kwargs = {} if get_obs else {"get_obs": False}
    with scoped_scenes(sim, envs, venv.num_envs):
        with _render_scope(a["render"]):
            sim.step()
        results = [env._post_step(action, **post_kwargs) for env, action in zip(envs, actions)]
    obs, rewards, terminated, truncated, infos = (list(column) for column in zip(*results))
    return obs, rewards, terminated, truncated, infos


def _takes(fn: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the bound method ``fn`` accepts ``args`` and ``kwargs``."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _vector_reset(wrapped, venv, args, kwargs):
    a = bind(_vector_reset_signature, args, kwargs)
    _check_flags(a)
    if a["env_indices"] is None:
        # the caller's arguments without env_indices (the second positional one, or a keyword)
        upstream_args, upstream_kwargs = args[:1], {k: v for k, v in kwargs.items() if k != "env_indices"}
        if _takes(wrapped, upstream_args, upstream_kwargs):
            return wrapped(*upstream_args, **upstream_kwargs)  # upstream's own reset
    envs = _selected_envs(venv, a["env_indices"])
    obs, infos = [], []
    for env in envs:
        with scoped_scenes(_og().sim, [env], venv.num_envs):
            result = env.reset(get_obs=a["get_obs"], **a["kwargs"])
        ob, info = result if result is not None else (None, {})
        obs.append(ob)
        infos.append(info)
    return obs, infos


class VectorEnvironmentStepPatch(_NewKeywordsPatch):
    """``VectorEnvironment.step(env_indices, get_obs, render)`` and ``reset(get_obs, env_indices)``; also
    fixes upstream's reset-all trap. Skipped where ``Environment`` is main's multi-scene layout."""

    name = "vector_env_step"
    module = "omnigibson.envs.vec_env_base"
    owner = "VectorEnvironment"
    methods = {
        "step": (_vector_step, _vector_step_signature, ("env_indices", "get_obs", "render")),
        "reset": (_vector_reset, _vector_reset_signature, ("get_obs", "env_indices")),
    }

    def skip_reason(self, module: Any) -> str | None:
        return multi_scene_reason(sys.modules.get("omnigibson.envs.env_base")) or super().skip_reason(module)


# --- EnvironmentWrapper ----------------------------------------------------------------------------
def _wrapper_step_signature(self, action, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.step``."""


def _wrapper_reset_signature(self, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.reset``."""


def _forward_step(wrapped, wrapper, args, kwargs):
    return wrapper.env.step(*args, **kwargs)


def _forward_reset(wrapped, wrapper, args, kwargs):
    return wrapper.env.reset(*args, **kwargs)


class EnvironmentWrapperForwardingPatch(_NewKeywordsPatch):
    """``EnvironmentWrapper.step``/``reset`` forward every argument to the wrapped env; skipped when upstream's
    already take ``**kwargs``."""

    name = "env_wrapper_forwarding"
    module = "omnigibson.envs.env_wrapper"
    owner = "EnvironmentWrapper"
    methods = {
        "step": (_forward_step, _wrapper_step_signature, ("kwargs",)),
        "reset": (_forward_reset, _wrapper_reset_signature, ("kwargs",)),
    }
