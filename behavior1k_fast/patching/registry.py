"""The generic patch registry: declared targets, feature detection, idempotent apply, exact revert, a report.

A :class:`Patch` declares the upstream module and the qualified names it changes, says from the code it
would patch whether it is needed (feature detection, never a version pin) and installs its change through
a :class:`PatchContext`, which records how to undo every step. The registry applies the patches a
:class:`~behavior1k_fast.core.profile.RolloutProfile` asks for:

- ``apply()`` twice with the same profile is the same as once; with another profile it reverts first.
- A target module that is not imported yet is patched when it is imported (wrapt post-import hook, one per
  module and registry however often profiles are applied and reverted); its entry reports ``pending``
  until then. Nothing here imports the simulator.
- If any wanted patch fails, every patch of that ``apply()`` is rolled back and :class:`PatchError` is
  raised with the report: nothing stays half-applied. The profile that was applied before stays applied
  (it is applied again; the error says so, or that nothing is applied when that failed too).
- ``revert()`` restores the original objects themselves (identity, raw class ``__dict__`` entries, so
  classmethods and properties come back intact), in reverse order.

Wrapped callables are ``wrapt.FunctionWrapper`` proxies whose ``__wrapped__`` is the original, so a
patched target can be recognised and undone from the outside too.

The ``from x import y`` copy problem: patches replace attributes of classes (methods, properties) and
module functions that upstream reaches through its own module globals. A name someone copied with
``from module import function`` *before* ``apply()`` keeps the old function; classes are never copied,
so class-level patches reach every holder of the class.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping

import wrapt

from ..core.profile import RolloutProfile

_MISSING = object()


class PatchState(str, enum.Enum):
    """What a patch is, for one profile. A ``str``: ``state == "applied"`` works, and JSON shows the value."""

    #: Installed now.
    APPLIED = "applied"
    #: Its module is not imported yet; a post-import hook installs it at ``import``.
    PENDING = "pending"
    #: Not needed on this upstream (feature detection says why) or its upstream is not installed.
    SKIPPED = "skipped"
    #: Wanted but cannot be installed: the upstream layout differs, or installing raised.
    FAILED = "failed"
    #: The profile does not ask for it.
    DISABLED = "disabled"
    #: ``plan()`` only: needed, and ``apply()`` would install it.
    WOULD_APPLY = "would apply"

    __str__ = str.__str__
    __format__ = str.__format__


APPLIED, PENDING, SKIPPED, FAILED, DISABLED, WOULD_APPLY = PatchState


class UpstreamLayoutError(AttributeError):
    """The loaded upstream code lacks what a patch expects (a class, method or property is missing or has
    another kind): the patch cannot apply to this upstream. Any other exception raised by a patch's feature
    detection is a bug in the patch and is reported as such, never as an unsupported upstream."""


class PatchError(ValueError):
    """The installed upstream code cannot take the requested profile (a wanted patch failed, e.g. an
    unsupported layout); every patch of that profile was rolled back. ``.report`` says which and why."""

    def __init__(self, message: str, report: "PatchReport"):
        super().__init__(message)
        self.report = report


class PatchContext:
    """Installs changes and remembers how to undo each one (LIFO)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set_attribute(self, owner: Any, attr: str, value: Any) -> None:
        """Set ``owner.attr``; undo restores the raw previous entry (or deletes it if there was none)."""
        raw = _raw_attribute(owner, attr)
        setattr(owner, attr, value)
        if raw is _MISSING:
            self._undo.append(lambda: delattr(owner, attr))
        else:
            self._undo.append(lambda: setattr(owner, attr, raw))

    def wrap(self, owner: Any, attr: str, wrapper: Callable, adapter: Callable | None = None) -> Any:
        """Replace ``owner.attr`` by a wrapt wrapper ``wrapper(wrapped, instance, args, kwargs)``.

        ``adapter`` is a function whose signature the patched callable reports (for new keyword
        arguments). Returns the installed wrapper.
        """
        original = _raw_attribute(owner, attr)
        if original is _MISSING:
            raise AttributeError(f"{_name_of(owner)} has no attribute {attr!r} to wrap")
        if isinstance(original, (classmethod, staticmethod)):
            inner = original.__func__
            wrapped = wrapt.decorator(wrapper, adapter=adapter)(inner) if adapter else wrapt.FunctionWrapper(inner, wrapper)
            new = type(original)(wrapped)
        else:
            new = wrapt.decorator(wrapper, adapter=adapter)(original) if adapter else wrapt.FunctionWrapper(original, wrapper)
        self.set_attribute(owner, attr, new)
        return new

    def set_env(self, name: str, value: str) -> None:
        """Set an environment variable; undo restores the previous value or removes it."""
        previous = os.environ.get(name)
        os.environ[name] = value

        def undo() -> None:
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous

        self._undo.append(undo)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Register an arbitrary undo step."""
        self._undo.append(fn)

    def undo_all(self) -> None:
        while self._undo:
            self._undo.pop()()


def _raw_attribute(owner: Any, attr: str) -> Any:
    if isinstance(owner, type):
        return owner.__dict__.get(attr, _MISSING)
    return getattr(owner, attr, _MISSING)


def _name_of(owner: Any) -> str:
    return getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None) or repr(owner)


def resolve(module: Any, qualname: str) -> tuple[Any, str]:
    """``(owner, attr)`` for a dotted qualified name inside ``module``; AttributeError if absent."""
    *path, attr = qualname.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    if _raw_attribute(owner, attr) is _MISSING and not hasattr(owner, attr):
        raise AttributeError(f"{module.__name__}.{qualname} does not exist")
    return owner, attr


class Patch:
    """One reversible change to one upstream area.

    Subclasses set ``name``, ``module`` (the module holding the targets; ``None`` for process settings
    such as environment variables), ``targets`` (qualified names inside ``module``) and implement
    :meth:`wanted`, :meth:`skip_reason` and :meth:`install`.
    """

    name: ClassVar[str]
    module: ClassVar[str | None]
    targets: ClassVar[tuple[str, ...]]
    #: Upstream source file the targets live in, relative to the repository's ``OmniGibson/`` folder.
    upstream_file: ClassVar[str | None] = None

    def wanted(self, profile: RolloutProfile) -> bool:
        """Whether the profile asks for this change."""
        raise NotImplementedError

    def skip_reason(self, module: Any) -> str | None:
        """Why the loaded upstream code does not need this patch, or ``None`` if it does."""
        return None

    def install(self, module: Any, profile: RolloutProfile, ctx: PatchContext) -> None:
        raise NotImplementedError

    def describe_targets(self) -> tuple[str, ...]:
        return tuple(f"{self.module}.{t}" if self.module else t for t in self.targets)


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    state: PatchState
    reason: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class PatchReport:
    profile: RolloutProfile
    outcomes: tuple[PatchOutcome, ...] = field(default_factory=tuple)

    def by_state(self, state: PatchState) -> list[PatchOutcome]:
        return [o for o in self.outcomes if o.state == state]

    @property
    def ok(self) -> bool:
        return not self.by_state(FAILED)

    def __getitem__(self, name: str) -> PatchOutcome:
        for o in self.outcomes:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.to_dict(),
            "patches": [
                {"name": o.name, "state": o.state, "reason": o.reason, "targets": list(o.targets)}
                for o in self.outcomes
            ],
        }

    def __str__(self) -> str:
        width = max((len(o.name) for o in self.outcomes), default=4)
        lines = [f"{o.name:<{width}}  {o.state:<8}  {o.reason}".rstrip() for o in self.outcomes]
        return "\n".join(lines)


class PatchRegistry:
    """Holds patches in application order and the state of the current profile."""

    def __init__(self, patches: Iterable[Patch] = ()) -> None:
        self._lock = threading.RLock()
        self._patches: dict[str, Patch] = {}
        self._contexts: dict[str, PatchContext] = {}  # name -> installed change
        self._outcomes: dict[str, PatchOutcome] = {}
        self._profile: RolloutProfile | None = None
        self._hooked: set[str] = set()  # modules whose post-import hook is registered and has not fired
        for p in patches:
            self.register(p)

    def register(self, patch: Patch) -> None:
        if patch.name in self._patches:
            raise ValueError(f"a patch named {patch.name!r} is already registered")
        self._patches[patch.name] = patch

    @property
    def patches(self) -> tuple[Patch, ...]:
        return tuple(self._patches.values())

    @property
    def profile(self) -> RolloutProfile | None:
        """The profile currently applied, or ``None``."""
        return self._profile

    # --- apply / revert ---------------------------------------------------------------------------
    def apply(self, profile: RolloutProfile | Mapping[str, Any] | None = None) -> PatchReport:
        profile = RolloutProfile.coerce(profile)
        with self._lock:
            if self._profile == profile:
                return self.report()
            previous = self._profile
            if previous is not None:
                self.revert()
            try:
                return self._apply_all(profile)
            except PatchError as exc:
                if previous is None:
                    raise
                try:
                    self._apply_all(previous)
                except PatchError:
                    raise PatchError(f"{exc}; applying the previous profile again failed too: nothing is applied "
                                     "now", exc.report) from exc
                raise PatchError(f"{exc}; the profile applied before is applied again", exc.report) from exc

    def _apply_all(self, profile: RolloutProfile) -> PatchReport:
        self._profile = profile
        for patch in self._patches.values():
            self._record(patch, self._apply_one(patch, profile), "")
        return self.report()

    def _record(self, patch: Patch, outcome: PatchOutcome, when: str) -> None:
        """Record an outcome; a failure rolls back every patch of the profile and raises PatchError."""
        self._outcomes[patch.name] = outcome
        if outcome.state == FAILED:
            report = self.report()
            self.revert()
            raise PatchError(
                f"patch {patch.name!r} failed{when} ({outcome.reason}); every patch of this profile was rolled back",
                report,
            )

    def _apply_one(self, patch: Patch, profile: RolloutProfile) -> PatchOutcome:
        targets = patch.describe_targets()
        if not patch.wanted(profile):
            return PatchOutcome(patch.name, DISABLED, "not asked for by the profile", targets)
        if patch.module is None:
            return self._install(patch, None, profile)
        top = patch.module.split(".")[0]
        if top not in sys.modules and importlib.util.find_spec(top) is None:
            return PatchOutcome(patch.name, SKIPPED, f"{top} is not installed", targets)
        if patch.module in sys.modules:
            return self._install(patch, sys.modules[patch.module], profile)
        self._outcomes[patch.name] = PatchOutcome(patch.name, PENDING, f"waits for `import {patch.module}`", targets)
        if patch.module not in self._hooked:
            self._hooked.add(patch.module)
            wrapt.register_post_import_hook(self._on_import, patch.module)
        return self._outcomes[patch.name]  # the hook may have run at once (imported meanwhile)

    def _on_import(self, module: Any) -> None:
        """Post-import hook of a target module: install the patches that wait for it under the profile
        applied now (none after a revert)."""
        with self._lock:
            self._hooked.discard(module.__name__)
            for patch in self._patches.values():
                current = self._outcomes.get(patch.name)
                if patch.module == module.__name__ and current is not None and current.state == PENDING:
                    outcome = self._install(patch, module, self._profile)
                    self._record(patch, outcome, f" when {patch.module} was imported")

    @staticmethod
    def _detect(patch: Patch, module: Any) -> PatchOutcome | None:
        """Feature detection: the skipped or failed outcome, or ``None`` when the patch is needed."""
        try:
            reason = patch.skip_reason(module)
        except UpstreamLayoutError as exc:
            return PatchOutcome(patch.name, FAILED, f"unsupported upstream layout: {exc}", patch.describe_targets())
        except Exception as exc:
            return PatchOutcome(
                patch.name, FAILED, f"feature detection raised {exc!r} (a bug in the patch, not in upstream)",
                patch.describe_targets(),
            )
        return PatchOutcome(patch.name, SKIPPED, reason, patch.describe_targets()) if reason else None

    def _install(self, patch: Patch, module: Any, profile: RolloutProfile) -> PatchOutcome:
        targets = patch.describe_targets()
        detected = self._detect(patch, module)
        if detected is not None:
            return detected
        ctx = PatchContext()
        try:
            patch.install(module, profile, ctx)
        except Exception as exc:
            ctx.undo_all()
            return PatchOutcome(patch.name, FAILED, f"{type(exc).__name__}: {exc}", targets)
        self._contexts[patch.name] = ctx
        return PatchOutcome(patch.name, APPLIED, "installed", targets)

    def revert(self) -> None:
        """Undo every installed patch, newest first; forget pending import hooks."""
        with self._lock:
            for name in reversed(list(self._contexts)):
                self._contexts.pop(name).undo_all()
            self._outcomes.clear()
            self._profile = None

    # --- introspection ----------------------------------------------------------------------------
    def report(self) -> PatchReport:
        profile = self._profile or RolloutProfile()
        return PatchReport(profile, tuple(self._outcomes[n] for n in self._patches if n in self._outcomes))

    def status(self) -> dict[str, PatchOutcome]:
        """Name -> outcome for the current profile (empty when nothing is applied)."""
        with self._lock:
            return dict(self._outcomes)

    def plan(self, profile: RolloutProfile | Mapping[str, Any] | None = None) -> PatchReport:
        """What ``apply(profile)`` would do to the modules imported now, without changing anything.

        Modules not imported yet are imported here (read-only use: ``doctor``)."""
        profile = RolloutProfile.coerce(profile)
        outcomes = []
        for patch in self._patches.values():
            targets = patch.describe_targets()
            if not patch.wanted(profile):
                outcomes.append(PatchOutcome(patch.name, DISABLED, "not asked for by the profile", targets))
                continue
            module = None
            if patch.module is not None:
                try:
                    module = importlib.import_module(patch.module)
                except ImportError as exc:
                    outcomes.append(PatchOutcome(patch.name, SKIPPED, f"cannot import {patch.module}: {exc}", targets))
                    continue
                except Exception as exc:  # the module exists but breaks on import (e.g. CUDA-only code on a CPU)
                    outcomes.append(
                        PatchOutcome(patch.name, FAILED, f"importing {patch.module} raised {exc!r}", targets)
                    )
                    continue
            why = "process setting" if patch.module is None else "needed"
            outcomes.append(self._detect(patch, module) or PatchOutcome(patch.name, WOULD_APPLY, why, targets))
        return PatchReport(profile, tuple(outcomes))
