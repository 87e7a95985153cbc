"""The generic patch registry: declared targets and knobs, feature detection, idempotent apply, exact revert,
one report type.

A :class:`Patch` declares the upstream module and the qualified names it changes and the profile fields it
reads (its ``knobs``), says from the code it would patch whether it is needed (feature detection, never a
version pin) and installs its change through a :class:`PatchContext`, which records how to undo every step.
The registry applies the patches a profile asks for. A profile is any object with the knobs as attributes
(the OmniGibson patch set passes a :class:`~behavior1k_fast.core.profile.RolloutProfile`); this module imports
neither the profile nor any simulator (as OpenTelemetry's ``BaseInstrumentor`` knows its target only by name).

- ``apply(profile)`` is idempotent on the knobs: a profile whose knob values equal the applied one's (it
  differs in layout fields only: ``schedule``, ``chunk_size``, ``pipeline_stages`` ...) reinstalls nothing
  and becomes the applied profile; one that changes a knob reverts first and applies anew.
- A target module that is not imported yet is patched when it is imported (wrapt post-import hook, one per
  module and registry however often profiles are applied and reverted); its entry reports ``pending``
  until then.
- Process settings (``module=None``: environment variables, thread pools) change the whole process. With a
  ``simulator`` module named (``PatchRegistry(patches, simulator="omnigibson")``) they apply only in a
  process that runs it: when that module is about to execute (a before-import hook,
  :mod:`.preimport`), at once if it is imported already, or with ``apply(profile, process="simulator")``;
  until then they report ``pending``, and ``skipped`` where the simulator is not installed at all.
- If any wanted patch fails, every patch of that ``apply()`` is rolled back and :class:`PatchError` is
  raised with the report: nothing stays half-applied. The profile that was applied before stays applied
  (it is applied again; the error says so, or that nothing is applied when that failed too).
- ``revert()`` restores the original objects themselves (identity, raw class ``__dict__`` entries, so
  classmethods and properties come back intact), in reverse order.
- ``plan()`` says what ``apply()`` would do, through the same decision function, changing nothing.
- ``apply()``, ``status()``, ``revert()`` and ``plan()`` all return a :class:`PatchReport`; its ``profile``
  is ``None`` when nothing is applied.

Wrapped callables are ``wrapt.FunctionWrapper`` proxies whose ``__wrapped__`` is the original, so a
patched target can be recognised and undone from the outside too.

The ``from x import y`` copy problem: patches replace attributes of classes (methods, properties) and
module functions that upstream reaches through its own module globals. A name someone copied with
``from module import function`` *before* ``apply()`` keeps the old function; classes are never copied,
so class-level patches reach every holder of the class.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping

import wrapt

from ..core.checks import check_choice
from .preimport import BeforeImport

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
    #: ``revert()`` only: it was applied (or pending) and is undone.
    REVERTED = "reverted"

    __str__ = str.__str__
    __format__ = str.__format__


APPLIED, PENDING, SKIPPED, FAILED, DISABLED, WOULD_APPLY, REVERTED = PatchState


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


class Patch:
    """One reversible change to one upstream area.

    Subclasses set ``name``, ``module`` (the module holding the targets; ``None`` for process settings
    such as environment variables), ``targets`` (qualified names inside ``module``), ``knobs`` (the profile
    fields the patch reads) and implement :meth:`wanted`, :meth:`skip_reason` and :meth:`install`.
    """

    name: ClassVar[str]
    module: ClassVar[str | None]
    targets: ClassVar[tuple[str, ...]]
    #: The profile fields :meth:`wanted` and :meth:`install` read (``()``: none). They are all a patch sees of
    #: a profile (:class:`Knobs`), and the registry reinstalls patches only when one of them changes.
    knobs: ClassVar[tuple[str, ...]]
    #: Upstream source file the targets live in, relative to the repository's ``OmniGibson/`` folder.
    upstream_file: ClassVar[str | None] = None

    def wanted(self, knobs: "Knobs") -> bool:
        """Whether the profile asks for this change."""
        raise NotImplementedError

    def skip_reason(self, module: Any) -> str | None:
        """Why the loaded upstream code does not need this patch, or ``None`` if it does."""
        return None

    def install(self, module: Any, knobs: "Knobs", ctx: PatchContext) -> None:
        raise NotImplementedError

    def describe_targets(self) -> tuple[str, ...]:
        return tuple(f"{self.module}.{t}" if self.module else t for t in self.targets)

    def bound_targets(self, module: Any) -> tuple[str, ...]:
        """What :meth:`install` changes on the loaded layout of ``module`` (qualified names; the report's
        "installed on ..."). Default: the declared targets; a patch whose target moves between layouts says
        where it binds."""
        return self.describe_targets()


class Knobs(Mapping[str, Any]):
    """What one patch sees of a profile: its declared knobs, as attributes (``knobs.intra_op_threads``) or
    items. Reading another field raises AttributeError naming the patch: a patch that reads an undeclared
    field would not be reinstalled when that field changes."""

    def __init__(self, patch: str, values: Mapping[str, Any]) -> None:
        self.__dict__["_patch"] = patch
        self.__dict__["_values"] = dict(values)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__["_values"]
        if name in values:
            return values[name]
        raise AttributeError(
            f"patch {self.__dict__['_patch']!r} reads profile field {name!r}, which is not one of its knobs "
            f"{tuple(values)}: declare it in the patch's knobs"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Knobs are read-only")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Knobs({self._patch!r}, {self._values!r})"


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    state: PatchState
    reason: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class PatchReport:
    """What ``apply()``, ``status()``, ``revert()`` and ``plan()`` return: one outcome per patch."""

    #: The profile applied (``plan``: planned); ``None`` when nothing is applied.
    profile: Any | None
    outcomes: tuple[PatchOutcome, ...] = ()
    #: The patch knobs of ``profile`` the outcomes were decided for (empty when nothing is applied).
    knobs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def active(self) -> bool:
        """Whether a profile is applied (``False``: nothing is; after ``revert()`` the outcomes say what was)."""
        return self.profile is not None

    @property
    def states(self) -> dict[str, PatchState]:
        """Patch name -> state."""
        return {o.name: o.state for o in self.outcomes}

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
        to_dict = getattr(self.profile, "to_dict", None)
        return {
            "profile": to_dict() if callable(to_dict) else self.profile,
            "knobs": dict(self.knobs),
            "patches": [
                {"name": o.name, "state": o.state, "reason": o.reason, "targets": list(o.targets)}
                for o in self.outcomes
            ],
        }

    def __str__(self) -> str:
        width = max((len(o.name) for o in self.outcomes), default=4)
        lines = [] if self.active else ["nothing applied" + (" now; undone:" if self.outcomes else "")]
        lines += [f"{o.name:<{width}}  {o.state:<8}  {o.reason}".rstrip() for o in self.outcomes]
        return "\n".join(lines)


#: ``apply(process=...)``: ``auto``: process settings wait until the registry's simulator module is imported
#: in this process; ``simulator``: this process runs the simulator, process settings apply now.
PROCESS_MODES = ("auto", "simulator")


class PatchRegistry:
    """Holds patches in application order and the state of the current profile.

    ``simulator`` names the module whose import marks a process that runs the simulator (``"omnigibson"``):
    process settings (patches with ``module=None``) wait for it (module docs). ``None``: they apply at once.
    """

    def __init__(self, patches: Iterable[Patch] = (), simulator: str | None = None) -> None:
        self.simulator = simulator
        self._lock = threading.RLock()
        self._patches: dict[str, Patch] = {}
        self._contexts: dict[str, PatchContext] = {}  # name -> installed change
        self._outcomes: dict[str, PatchOutcome] = {}
        self._profile: Any | None = None
        self._knobs: dict[str, Any] = {}  # knob values of the applied profile
        self._runs_simulator = False  # apply(process="simulator"), or the simulator module began executing
        self._hooked: set[str] = set()  # modules whose post-import hook is registered and has not fired
        self._before_import: BeforeImport | None = None  # waits for the simulator module (process settings)
        for p in patches:
            self.register(p)

    def register(self, patch: Patch) -> None:
        if patch.name in self._patches:
            raise ValueError(f"a patch named {patch.name!r} is already registered")
        knobs = getattr(patch, "knobs", None)
        if not isinstance(knobs, tuple) or not all(isinstance(k, str) for k in knobs):
            raise TypeError(
                f"patch {patch.name!r} must declare knobs, a tuple of the profile fields it reads (() for none), "
                f"got {knobs!r}"
            )
        self._patches[patch.name] = patch

    @property
    def patches(self) -> tuple[Patch, ...]:
        return tuple(self._patches.values())

    @property
    def profile(self) -> Any | None:
        """The profile currently applied, or ``None``."""
        return self._profile

    def knob_values(self, profile: Any) -> dict[str, Any]:
        """The values of every registered patch's knobs in ``profile`` (what idempotence compares)."""
        values = {}
        for patch in self._patches.values():
            for knob in patch.knobs:
                if knob not in values:
                    try:
                        values[knob] = getattr(profile, knob)
                    except AttributeError:
                        raise TypeError(
                            f"profile {profile!r} has no field {knob!r}, which patch {patch.name!r} reads"
                        ) from None
        return values

    def where(self, patch: Patch) -> str:
        """In which processes ``patch`` applies, in words (``doctor``)."""
        if patch.module is not None:
            return f"processes that import {patch.module}"
        if self.simulator is None:
            return "the process that calls apply()"
        return f"processes that run {self.simulator} (at `import {self.simulator}`, or apply(process='simulator'))"

    # --- apply / revert ---------------------------------------------------------------------------
    def apply(self, profile: Any, process: str = "auto") -> PatchReport:
        """Apply the patches ``profile`` asks for (module docs); ``process`` is one of :data:`PROCESS_MODES`.

        Idempotent on the patch knobs: a profile whose knobs equal the applied one's (another ``schedule``,
        ``chunk_size`` ...) reinstalls nothing and becomes the applied profile."""
        check_choice("process", process, PROCESS_MODES)
        knobs = self.knob_values(profile)
        with self._lock:
            simulator = process == "simulator" or self._runs_simulator
            if self._profile is not None and knobs == self._knobs:
                self._profile = profile
                if simulator and not self._runs_simulator:
                    self._simulator_runs("")
                return self.status()
            previous = self._profile
            if previous is not None:
                self._undo()
            try:
                return self._apply_all(profile, knobs, simulator)
            except PatchError as exc:
                if previous is None:
                    raise
                try:
                    self._apply_all(previous, self.knob_values(previous), simulator)
                except PatchError:
                    raise PatchError(f"{exc}; applying the previous profile again failed too: nothing is applied "
                                     "now", exc.report) from exc
                raise PatchError(f"{exc}; the profile applied before is applied again", exc.report) from exc

    def _apply_all(self, profile: Any, knobs: dict[str, Any], simulator: bool) -> PatchReport:
        self._profile, self._knobs, self._runs_simulator = profile, knobs, simulator
        for patch in self._patches.values():
            self._record(patch, self._settle(patch), "")
        return self.status()

    def _record(self, patch: Patch, outcome: PatchOutcome, when: str) -> None:
        """Record an outcome; a failure rolls back every patch of the profile and raises PatchError."""
        self._outcomes[patch.name] = outcome
        if outcome.state == FAILED:
            report = self.status()
            self._undo()
            raise PatchError(
                f"patch {patch.name!r} failed{when} ({outcome.reason}); every patch of this profile was rolled back",
                report,
            )

    def _in_simulator_process(self, simulator: bool) -> bool:
        return self.simulator is None or simulator or self.simulator in sys.modules

    def _decide(self, patch: Patch, knobs: Mapping[str, Any], simulator: bool, load: bool) -> tuple[PatchOutcome, Any]:
        """The one decision of ``apply`` and ``plan``: ``(outcome, module)``. The outcome is final (disabled,
        skipped, failed), ``pending`` (waits for an import) or ``would apply`` (``apply`` installs it into
        ``module``). ``simulator``: the process runs the simulator; ``load``: import a target module that is
        not imported yet (``plan``) instead of waiting for it."""
        targets = patch.describe_targets()

        def outcome(state: PatchState, reason: str) -> tuple[PatchOutcome, Any]:
            return PatchOutcome(patch.name, state, reason, targets), None

        try:
            wanted = patch.wanted(Knobs(patch.name, {k: knobs[k] for k in patch.knobs}))
        except Exception as exc:
            return outcome(FAILED, f"wanted() raised {exc!r} (a bug in the patch)")
        if not wanted:
            return outcome(DISABLED, "not asked for by the profile")
        module = None
        if patch.module is None:
            if not self._in_simulator_process(simulator):
                top = self.simulator.split(".")[0]
                if not _installed(top):
                    return outcome(SKIPPED, f"a process setting for {self.simulator}, which is not installed")
                return outcome(PENDING, f"a process setting: waits for `import {self.simulator}` (only a process "
                                        "that runs the simulator takes it)")
        else:
            top = patch.module.split(".")[0]
            if not _installed(top):
                return outcome(SKIPPED, f"{top} is not installed")
            module = sys.modules.get(patch.module)
            if module is None and not load:
                return outcome(PENDING, f"waits for `import {patch.module}`")
            if module is None:
                try:
                    module = importlib.import_module(patch.module)
                except ImportError as exc:
                    return outcome(SKIPPED, f"cannot import {patch.module}: {exc}")
                except Exception as exc:  # the module exists but breaks on import (e.g. CUDA-only code on a CPU)
                    return outcome(FAILED, f"importing {patch.module} raised {exc!r}")
        detected = self._detect(patch, module)
        if detected is not None:
            return detected, None
        if patch.module is None:
            return PatchOutcome(patch.name, WOULD_APPLY, "process setting", targets), module
        try:
            targets = patch.bound_targets(module)
        except Exception as exc:
            return outcome(FAILED, f"bound_targets() raised {exc!r} (a bug in the patch)")
        return PatchOutcome(patch.name, WOULD_APPLY, f"needed: would be installed on {', '.join(targets)}",
                            targets), module

    def _settle(self, patch: Patch) -> PatchOutcome:
        """:meth:`_decide` for the applied profile, acted on: install, or wait for the import."""
        decided, module = self._decide(patch, self._knobs, self._runs_simulator, load=False)
        if decided.state == WOULD_APPLY:
            return self._install(patch, module)
        if decided.state != PENDING:
            return decided
        self._outcomes[patch.name] = decided
        if patch.module is None:
            if self._before_import is None:
                self._before_import = BeforeImport(self.simulator, self._on_simulator_import)
                self._before_import.install()
        elif patch.module not in self._hooked:
            self._hooked.add(patch.module)
            wrapt.register_post_import_hook(self._on_import, patch.module)
        return self._outcomes[patch.name]  # the hook may have run at once (imported meanwhile)

    def _settle_pending(self, module: str | None, when: str) -> None:
        for patch in self._patches.values():
            current = self._outcomes.get(patch.name)
            if patch.module == module and current is not None and current.state == PENDING:
                self._record(patch, self._settle(patch), when)

    def _on_import(self, module: Any) -> None:
        """Post-import hook of a target module: install the patches that wait for it under the profile
        applied now (none after a revert)."""
        with self._lock:
            self._hooked.discard(module.__name__)
            self._settle_pending(module.__name__, f" when {module.__name__} was imported")

    def _on_simulator_import(self) -> None:
        """Before-import hook of the simulator module: this process runs the simulator."""
        with self._lock:
            self._before_import = None
            self._simulator_runs(f" when {self.simulator} was imported")

    def _simulator_runs(self, when: str) -> None:
        self._runs_simulator = True
        self._settle_pending(None, when)

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

    def _install(self, patch: Patch, module: Any) -> PatchOutcome:
        targets = patch.describe_targets()
        ctx = PatchContext()
        try:
            targets = patch.bound_targets(module)
            patch.install(module, Knobs(patch.name, {k: self._knobs[k] for k in patch.knobs}), ctx)
        except Exception as exc:
            ctx.undo_all()
            return PatchOutcome(patch.name, FAILED, f"{type(exc).__name__}: {exc}", targets)
        self._contexts[patch.name] = ctx
        return PatchOutcome(patch.name, APPLIED, f"installed on {', '.join(targets)}", targets)

    def revert(self) -> PatchReport:
        """Undo every installed patch, newest first; forget pending import hooks. Returns what it reverted
        (``reverted`` outcomes) in a report of nothing applied."""
        with self._lock:
            reverted = tuple(
                PatchOutcome(o.name, REVERTED, "original restored" if o.state == APPLIED else "no longer waits for its import",
                             o.targets)
                for o in self.status().outcomes if o.state in (APPLIED, PENDING)
            )
            self._undo()
            return PatchReport(None, reverted)

    def _undo(self) -> None:
        with self._lock:
            for name in reversed(list(self._contexts)):
                self._contexts.pop(name).undo_all()
            self._outcomes.clear()
            self._profile, self._knobs, self._runs_simulator = None, {}, False
            if self._before_import is not None:
                self._before_import.remove()
                self._before_import = None

    # --- introspection ----------------------------------------------------------------------------
    def status(self) -> PatchReport:
        """The current state: the applied profile and its outcomes (``profile=None``: nothing applied)."""
        with self._lock:
            outcomes = tuple(self._outcomes[n] for n in self._patches if n in self._outcomes)
            return PatchReport(self._profile, outcomes, dict(self._knobs))


    def plan(self, profile: Any, process: str = "auto") -> PatchReport:
        """What ``apply(profile, process)`` would do to this process, without changing anything.

        Modules not imported yet are imported here (read-only use: ``doctor``)."""
        check_choice("process", process, PROCESS_MODES)
        knobs = self.knob_values(profile)
        simulator = process == "simulator"
        outcomes = tuple(self._decide(p, knobs, simulator, load=True)[0] for p in self._patches.values())
        return PatchReport(profile, outcomes, knobs)


def _installed(top: str) -> bool:
    return top in sys.modules or importlib.util.find_spec(top) is not None
