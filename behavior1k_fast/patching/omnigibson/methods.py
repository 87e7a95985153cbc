"""New keyword arguments on upstream methods: the typed record of one method change and the patch base that
installs a set of them on one upstream class (the stepping patches: :mod:`.env_step`,
:mod:`.multi_scene_step`, :mod:`.vector_env_step`, :mod:`.wrapper_forwarding`).

Patched signatures keep upstream's parameters first (positional calls keep their meaning) and add the new
ones after them; a call without the new arguments runs upstream's own code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..registry import Knobs, Patch, PatchContext
from .layout import class_in, has_parameter, raw_member


@dataclass(frozen=True)
class MethodPatch:
    """One method of the patched class and how it changes."""

    #: The method's name in the class ``__dict__``.
    attr: str
    #: ``wrapper(wrapped, instance, args, kwargs)``, the wrapt wrapper installed over upstream's method.
    wrapper: Callable[..., Any]
    #: A function whose signature the patched method reports (upstream's parameters, then the new ones).
    signature: Callable[..., Any]
    #: The keyword arguments the patch adds; upstream's method naming all of them needs no patch.
    keywords: tuple[str, ...]

    def upstream_has_it(self, member: Callable) -> bool:
        """Whether upstream's ``member`` already takes every new keyword."""
        return all(has_parameter(member, keyword) for keyword in self.keywords)


def check_flags(arguments: dict) -> None:
    """TypeError naming ``get_obs`` / ``render`` when one is not a bool."""
    for name in ("get_obs", "render"):
        if name in arguments and not isinstance(arguments[name], bool):
            raise TypeError(f"{name} must be a bool, got {arguments[name]!r}")


class NewKeywordsPatch(Patch):
    """Adds keyword arguments to methods of one upstream class, ``owner`` in ``module``.

    ``methods`` are the :class:`MethodPatch` records; :meth:`methods_for` picks those of the loaded module's
    layout (default: all). The patch is skipped when upstream's methods already take every new keyword.
    Wanted on every profile: these are capabilities of the backend contract, and ``skip_intermediate_obs`` /
    ``pipeline_stages`` decide how the engine calls them."""

    owner: str
    methods: tuple[MethodPatch, ...]
    knobs = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.targets = tuple(f"{cls.owner}.{method.attr}" for method in cls.methods)
        cls.upstream_file = cls.module.replace(".", "/") + ".py"

    def wanted(self, profile: Knobs) -> bool:
        return True

    def methods_for(self, module: Any) -> tuple[MethodPatch, ...]:
        """The methods this patch changes on ``module``'s layout."""
        return self.methods

    def bound_targets(self, module: Any) -> tuple[str, ...]:
        return tuple(f"{self.module}.{self.owner}.{method.attr}" for method in self.methods_for(module))

    def wrapper_for(self, method: MethodPatch) -> Callable[..., Any]:
        """The wrapper one installation of ``method`` uses (default: ``method.wrapper`` itself)."""
        return method.wrapper

    def skip_reason(self, module: Any) -> str | None:
        cls = class_in(module, self.owner)
        methods = self.methods_for(module)
        members = {m.attr: raw_member(cls, m.attr) for m in methods}  # every target must exist
        if all(m.upstream_has_it(members[m.attr]) for m in methods):
            taken = "; ".join(f"{m.attr} takes {', '.join(m.keywords)}" for m in methods)
            return f"upstream {self.owner} already has them: {taken}"
        return None

    def install(self, module: Any, profile: Knobs, ctx: PatchContext) -> None:
        cls = class_in(module, self.owner)
        for method in self.methods_for(module):
            ctx.wrap(cls, method.attr, self.wrapper_for(method), adapter=method.signature)
