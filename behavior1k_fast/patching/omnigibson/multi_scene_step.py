"""``Environment.step(env_indices)`` on main's multi-scene layout (patch ``multi_scene_step``, installed over
``env_step_obs``'s ``render`` and ``get_obs``; skipped on 1.1.1 and v3.7, where ``vector_env_step`` does
per-env stepping).

Patched signature: ``Environment.step(self, action, n_render_iterations=1, render=True, get_obs=True,
env_indices=None)``.

``env_indices`` (the contract of :mod:`behavior1k_fast.core.contract`): only those envs take an action (rows
of the action, in ``env_indices`` order) and get post-step work; every other env holds its last action
while the shared physics advances all of them; the returned values are the selected envs' rows. Upstream's
own ``step`` runs with the other envs' robots receiving nothing (their controllers keep the last goal, which
``ControllerView`` steps with everyone else's, so nothing is scoped); the selected envs' observation is one
``get_obs(env_indices)`` read (with tiled rendering one tiled read, sliced: no per-env render), only their
scene-graph builders step, only their step counters advance, and an automatic reset resets only selected
envs that ended. main's task is batched (``task.step(env, action)`` scores every env and takes no
``env_indices``): it runs once per step for all envs, is given the selected rows and, for every other env,
the action it holds (:class:`HeldActions`: the last array action it took; zeros before its first), and the
other envs' rows of its result are dropped. A stateful reward function or termination condition therefore
also sees the hold steps of an unselected env. Actions for a subset are array rows (dict actions only
without ``env_indices``). ``Environment.reset(env_indices=...)`` is upstream's own on main.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Callable, Iterator, Sequence

import wrapt

from ...core.contract import check_env_indices
from ._util import bind, instance_override
from .env_step import StepRead, per_env_obs
from .layout import SINGLE_SCENE_REASON, class_in, is_multi_scene, raw_member
from .methods import MethodPatch, NewKeywordsPatch, check_flags


def _multi_scene_step_signature(self, action, n_render_iterations=1, render=True, get_obs=True, env_indices=None):
    """Signature of the patched multi-scene ``Environment.step``."""


class HeldActions:
    """The array action each env of each multi-scene ``Environment`` holds (the last it took through ``step``).

    One record per installation of the patch: it lives from ``apply()`` to ``revert()`` (the wrapper holds
    it), and an env's entry lives as long as the env (weak keys)."""

    def __init__(self) -> None:
        self._by_env: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()

    def actions(self, env: Any, rows: Any, selected: Sequence[int]) -> Any:
        """The ``(num_envs, action_dim)`` actions every env executes this step: ``rows`` (one per selected env,
        in ``selected`` order) for the selected envs, and for every other env the action it holds (zeros
        before its first). Remembered as the held actions."""
        shape = (env.num_envs, rows.shape[-1])
        held = self._by_env.get(env)
        actions = held.to(rows).clone() if held is not None and tuple(held.shape) == shape else rows.new_zeros(shape)
        actions[list(selected)] = rows
        self._by_env[env] = actions
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
    return per_env_obs(env.num_envs, zip(selected, obs, info))


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
            read = StepRead(env, functools.partial(_selected_read, env, selected))
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


def _multi_scene_step(held: HeldActions, wrapped, env, args, kwargs):
    import torch

    a = bind(_multi_scene_step_signature, args, kwargs)
    check_flags(a)
    flags = {name: a[name] for name in ("render", "get_obs") if a[name] is not True}  # upstream's defaults unsaid
    n, action = env.num_envs, a["action"]
    if a["env_indices"] is None:
        rows = env._convert_action_to_tensor(action)
        if isinstance(rows, torch.Tensor) and rows.dim() == 2 and rows.shape[0] == n:
            held.actions(env, rows, range(n))
        return wrapped(action, a["n_render_iterations"], **flags)
    selected = check_env_indices(a["env_indices"], n).tolist()
    rows = _action_rows(env, action, a["env_indices"], selected)
    with _only_selected(env, selected, observe=a["get_obs"]):
        result = wrapped(held.actions(env, rows, selected), a["n_render_iterations"], **flags)
    obs, rewards, terminated, truncated, infos = result
    at = torch.as_tensor(selected)
    return [obs[i] for i in selected], rewards[at], terminated[at], truncated[at], [infos[i] for i in selected]


class MultiSceneStepPatch(NewKeywordsPatch):
    """``Environment.step(env_indices)`` on main's multi-scene layout (module docs)."""

    name = "multi_scene_step"
    module = "omnigibson.envs.env_base"
    owner = "Environment"
    methods = (MethodPatch("step", _multi_scene_step, _multi_scene_step_signature, ("env_indices",)),)

    def wrapper_for(self, method: MethodPatch) -> Callable[..., Any]:
        """Each installation holds its own :class:`HeldActions`, dropped with the wrapper at revert."""
        return functools.partial(method.wrapper, HeldActions())

    def skip_reason(self, module: Any) -> str | None:
        cls = class_in(module, self.owner)
        if not is_multi_scene(cls):
            return SINGLE_SCENE_REASON
        raw_member(cls, "_convert_action_to_tensor")  # the step reads the action rows through it
        return super().skip_reason(module)
