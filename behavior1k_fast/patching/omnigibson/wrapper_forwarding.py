"""``EnvironmentWrapper.step(self, action, *args, **kwargs)`` and ``reset(self, *args, **kwargs)`` pass every
argument on to the wrapped env unchanged (patch ``env_wrapper_forwarding``): upstream passes only named
ones, so ``get_obs``, ``render``, ``env_indices`` and reset keywords would not reach a wrapped env. Skipped
when upstream's already take ``**kwargs``.
"""

from __future__ import annotations

from .methods import MethodPatch, NewKeywordsPatch


def _wrapper_step_signature(self, action, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.step``."""


def _wrapper_reset_signature(self, *args, **kwargs):
    """Signature of the patched ``EnvironmentWrapper.reset``."""


def _forward_step(wrapped, wrapper, args, kwargs):
    return wrapper.env.step(*args, **kwargs)


def _forward_reset(wrapped, wrapper, args, kwargs):
    return wrapper.env.reset(*args, **kwargs)


class EnvironmentWrapperForwardingPatch(NewKeywordsPatch):
    """``EnvironmentWrapper.step``/``reset`` forward every argument to the wrapped env (module docs)."""

    name = "env_wrapper_forwarding"
    module = "omnigibson.envs.env_wrapper"
    owner = "EnvironmentWrapper"
    methods = (
        MethodPatch("step", _forward_step, _wrapper_step_signature, ("kwargs",)),
        MethodPatch("reset", _forward_reset, _wrapper_reset_signature, ("kwargs",)),
    )
