"""Registry semantics on a synthetic upstream package written to a temp dir (no simulator involved)."""

import importlib
import inspect
import multiprocessing as mp
import os
import sys
import textwrap

import pytest

from behavior1k_fast.patching import (
    APPLIED,
    DISABLED,
    FAILED,
    PENDING,
    REVERTED,
    SKIPPED,
    WOULD_APPLY,
    Patch,
    PatchError,
    PatchRegistry,
)
from behavior1k_fast.patching import omnigibson as patching
from behavior1k_fast.core.profile import RolloutProfile

UPSTREAM = '''
class Sensor:
    calls = []

    def read(self, x):
        return x

    @classmethod
    def make(cls):
        return "made"

    @property
    def width(self):
        return 128


def launch(headless=True):
    return "launched"
'''


@pytest.fixture
def upstream(tmp_path, monkeypatch):
    """A fresh package ``fakeog`` with module ``fakeog.area``; removed from sys.modules afterwards."""
    pkg = tmp_path / "fakeog"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "area.py").write_text(textwrap.dedent(UPSTREAM))
    (pkg / "lazy.py").write_text(textwrap.dedent(UPSTREAM))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m == "fakeog" or m.startswith("fakeog.")]:
        del sys.modules[name]


FAST = RolloutProfile()


class DoubleRead(Patch):
    name = "double_read"
    module = "fakeog.area"
    targets = ("Sensor.read",)
    knobs = ("skip_intermediate_obs",)

    def wanted(self, profile):
        return profile.skip_intermediate_obs

    def skip_reason(self, module):
        if "already_doubled" in inspect.signature(module.Sensor.read).parameters:
            return "upstream already doubles"
        return None

    def install(self, module, profile, ctx):
        def read(wrapped, instance, args, kwargs):
            return 2 * wrapped(*args, **kwargs)

        def adapter(self, x, *, scale=1):
            """signature the patched method reports"""

        ctx.wrap(module.Sensor, "read", read, adapter=adapter)


class ClassAndProperty(Patch):
    name = "class_and_property"
    module = "fakeog.area"
    targets = ("Sensor.make", "Sensor.width", "launch")
    knobs = ("remove_headless_viewports",)

    def wanted(self, profile):
        return profile.remove_headless_viewports

    def install(self, module, profile, ctx):
        ctx.wrap(module.Sensor, "make", lambda wrapped, instance, args, kwargs: "patched-" + wrapped())
        ctx.set_attribute(module.Sensor, "width", property(lambda self: 224))
        ctx.wrap(module, "launch", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs).upper())


class EnvVar(Patch):
    name = "env_var"
    module = None
    targets = ("os.environ[B1KF_TEST_THREADS]",)
    knobs = ("intra_op_threads",)

    def wanted(self, profile):
        return profile.intra_op_threads is not None

    def install(self, module, profile, ctx):
        ctx.set_env("B1KF_TEST_THREADS", str(profile.intra_op_threads))


class Broken(Patch):
    name = "broken"
    module = "fakeog.area"
    targets = ("Sensor.missing",)
    knobs = ()

    def wanted(self, profile):
        return True

    def install(self, module, profile, ctx):
        ctx.wrap(module.Sensor, "missing", lambda *a: None)


def originals(area):
    return {k: area.Sensor.__dict__[k] for k in ("read", "make", "width")} | {"launch": area.launch}


def test_apply_report_and_behaviour(upstream):
    area = importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty(), EnvVar()])
    report = reg.apply(RolloutProfile(intra_op_threads=3))
    assert [o.state for o in report.outcomes] == [APPLIED, APPLIED, APPLIED]
    s = area.Sensor()
    assert (s.read(4), area.Sensor.make(), s.width, area.launch()) == (8, "patched-made", 224, "LAUNCHED")
    assert os.environ["B1KF_TEST_THREADS"] == "3"
    assert "scale" in inspect.signature(area.Sensor.read).parameters
    assert report["double_read"].targets == ("fakeog.area.Sensor.read",)
    reg.revert()


class MovedTarget(Patch):
    """Declares ``Sensor.read`` but, on this layout, binds ``Sensor.make`` (its target moved)."""

    name = "moved_target"
    module = "fakeog.area"
    targets = ("Sensor.read",)
    knobs = ()

    def wanted(self, profile):
        return True

    def bound_targets(self, module):
        return (f"{module.__name__}.Sensor.make",)

    def install(self, module, profile, ctx):
        ctx.wrap(module.Sensor, "make", lambda wrapped, instance, args, kwargs: "moved-" + wrapped())


def test_the_report_says_what_each_patch_was_installed_on(upstream):
    """``apply()``'s and ``status()``'s outcome names the target the patch bound on the loaded layout, and
    ``plan()`` the one it would bind; a patch that does not override ``bound_targets`` names its declared ones."""
    importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), MovedTarget()])
    planned = reg.plan(FAST)["moved_target"]
    assert planned.reason == "needed: would be installed on fakeog.area.Sensor.make"
    report = reg.apply(FAST)
    for outcome in (report["moved_target"], reg.status()["moved_target"]):
        assert outcome.reason == "installed on fakeog.area.Sensor.make"
        assert outcome.targets == ("fakeog.area.Sensor.make",)
    assert report["double_read"].reason == "installed on fakeog.area.Sensor.read"
    reg.revert()


def test_apply_twice_is_apply_once_and_revert_restores_identity(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    area = importlib.import_module("fakeog.area")
    before = originals(area)
    reg = PatchRegistry([DoubleRead(), ClassAndProperty(), EnvVar()])
    reg.apply(FAST)
    first = area.Sensor.__dict__["read"]
    assert first.__wrapped__ is before["read"]
    reg.apply(FAST)
    assert area.Sensor.__dict__["read"] is first  # no second wrapper
    assert area.Sensor().read(3) == 6
    reg.revert()
    after = originals(area)
    assert all(after[k] is before[k] for k in before)
    assert isinstance(area.Sensor.__dict__["make"], classmethod)
    assert "B1KF_TEST_THREADS" not in os.environ
    assert not reg.status().active and reg.status().outcomes == () and reg.profile is None


def test_disabled_and_skipped_change_nothing(upstream):
    area = importlib.import_module("fakeog.area")
    area.Sensor.read = lambda self, x, already_doubled=True: 2 * x
    before = originals(area)
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    report = reg.apply(RolloutProfile(remove_headless_viewports=False))
    assert report["double_read"].state == SKIPPED and report["double_read"].reason == "upstream already doubles"
    assert report["class_and_property"].state == DISABLED
    assert all(originals(area)[k] is before[k] for k in before)


def test_failed_patch_rolls_back_the_whole_profile(upstream):
    area = importlib.import_module("fakeog.area")
    before = originals(area)
    reg = PatchRegistry([DoubleRead(), ClassAndProperty(), Broken()])
    with pytest.raises(PatchError, match="'broken' failed .*rolled back") as err:
        reg.apply(FAST)
    states = {o.name: o.state for o in err.value.report.outcomes}
    assert states == {"double_read": APPLIED, "class_and_property": APPLIED, "broken": FAILED}
    assert "no attribute 'missing'" in err.value.report["broken"].reason
    assert all(originals(area)[k] is before[k] for k in before)
    assert not reg.status().active and reg.status().outcomes == () and reg.profile is None


def test_pending_until_import_then_applied(upstream):
    reg = PatchRegistry([DoubleRead()])
    report = reg.apply(FAST)
    assert report["double_read"].state == PENDING and "import fakeog.area" in report["double_read"].reason
    area = importlib.import_module("fakeog.area")
    assert reg.status()["double_read"].state == APPLIED
    assert area.Sensor().read(2) == 4
    reg.revert()
    assert area.Sensor().read(2) == 2


def test_revert_before_import_leaves_the_module_alone(upstream):
    reg = PatchRegistry([DoubleRead()])
    reg.apply(FAST)
    reg.revert()
    area = importlib.import_module("fakeog.area")
    assert not hasattr(area.Sensor.__dict__["read"], "__wrapped__")
    assert reg.status().outcomes == ()


def test_failure_at_import_time_raises_and_rolls_back(upstream):
    reg = PatchRegistry([EnvVar(), Broken()])
    reg.apply(RolloutProfile(intra_op_threads=2))
    assert os.environ["B1KF_TEST_THREADS"] == "2"
    with pytest.raises(PatchError, match="failed when fakeog.area was imported"):
        importlib.import_module("fakeog.area")
    assert "B1KF_TEST_THREADS" not in os.environ and reg.status().outcomes == ()


def test_missing_package_is_skipped_with_reason():
    class Absent(DoubleRead):
        name = "absent"
        module = "no_such_upstream_pkg.area"

    report = PatchRegistry([Absent()]).apply(FAST)
    assert report["absent"].state == SKIPPED and report["absent"].reason == "no_such_upstream_pkg is not installed"


def test_new_profile_reverts_then_applies(upstream):
    area = importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    reg.apply(FAST)
    report = reg.apply(RolloutProfile(skip_intermediate_obs=False))
    assert report["double_read"].state == DISABLED
    assert not hasattr(area.Sensor.__dict__["read"], "__wrapped__")
    assert area.Sensor().width == 224
    reg.revert()


def test_bad_profile_argument_is_a_type_error():
    with pytest.raises(TypeError, match="profile 42 has no field 'intra_op_threads', which patch 'env_var' reads"):
        PatchRegistry([EnvVar()]).apply(42)
    with pytest.raises(TypeError, match="profile must be a RolloutProfile"):
        patching.apply(42)
    with pytest.raises(ValueError, match=r"process must be one of \('auto', 'simulator'\), got 'trainer'"):
        PatchRegistry([EnvVar()]).apply(FAST, process="trainer")


def test_duplicate_patch_name_is_rejected():
    with pytest.raises(ValueError, match="already registered"):
        PatchRegistry([DoubleRead(), DoubleRead()])


def _child_applies(profile_dict, patch_set, queue):
    from behavior1k_fast.patching import omnigibson as patching
    from behavior1k_fast.rollout.bootstrap import bootstrap_process

    bootstrap_process(profile_dict, patch_set=patch_set)
    active = patching.active_profile()
    queue.put((active.to_dict() if active else None, patching.status().states, os.environ.get("B1KF_CHILD_OMP")))


def run_child(profile, patch_set):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_applies, args=(profile.to_dict(), patch_set, queue))
    proc.start()
    result = queue.get(timeout=120)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    return result


def test_a_worker_of_a_backend_naming_the_omnigibson_patch_set_applies_it_as_a_simulator_process(tmp_path):
    from behavior1k_fast.backends.omnigibson.backend import OmniGibsonBackendFactory
    from behavior1k_fast.core.contract import patch_set_of

    profile = RolloutProfile(pipeline_stages=2, chunk_size=8, numba_cache_dir=str(tmp_path))
    active, states, _ = run_child(profile, patch_set_of(OmniGibsonBackendFactory(config={})))
    assert active == profile.to_dict()
    assert states["intra_op_threads"] == states["numba_cache_dir"] == APPLIED  # process settings: at once
    assert set(states.values()) <= {APPLIED, PENDING, SKIPPED, DISABLED}


def test_a_worker_of_the_reference_backend_applies_no_patch_set():
    from behavior1k_fast.backends.reference import ReferenceFactory
    from behavior1k_fast.core.contract import patch_set_of

    assert patch_set_of(ReferenceFactory()) is None
    active, states, _ = run_child(RolloutProfile(), None)
    assert active is None and states == {}


def test_plan_reports_a_module_that_breaks_on_import(upstream):
    (upstream / "area.py").write_text("raise AssertionError('Torch not compiled with CUDA enabled')\n")
    report = PatchRegistry([DoubleRead()]).plan(FAST)
    assert report["double_read"].state == FAILED
    assert "importing fakeog.area raised AssertionError" in report["double_read"].reason


def test_plan_changes_nothing(upstream):
    area = importlib.import_module("fakeog.area")
    before = originals(area)
    report = PatchRegistry([DoubleRead(), ClassAndProperty()]).plan(RolloutProfile(remove_headless_viewports=False))
    assert report["double_read"].state == "would apply" and report["class_and_property"].state == DISABLED
    assert all(originals(area)[k] is before[k] for k in before)


def test_patch_error_is_a_value_error_naming_the_patch(upstream):
    importlib.import_module("fakeog.area")
    with pytest.raises(ValueError, match="'broken'"):
        PatchRegistry([Broken()]).apply(FAST)


class BrokenForShortChunks(Broken):
    name = "broken_for_short_chunks"
    knobs = ("chunk_size",)

    def wanted(self, profile):
        return profile.chunk_size < 16


def test_a_profile_that_fails_leaves_the_profile_applied_before(upstream):
    area = importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty(), BrokenForShortChunks()])
    first = RolloutProfile()
    reg.apply(first)
    with pytest.raises(PatchError, match="'broken_for_short_chunks' failed .*the profile applied before is applied "
                                         "again") as err:
        reg.apply(RolloutProfile(chunk_size=8, skip_intermediate_obs=False))
    assert err.value.report["broken_for_short_chunks"].state == FAILED
    assert reg.profile == first and reg.status()["double_read"].state == APPLIED
    assert area.Sensor().read(2) == 4 and area.Sensor().width == 224
    reg.revert()


def test_apply_and_revert_cycles_before_the_import_register_one_import_hook(upstream):
    import wrapt.importer

    def hooks():
        return len(wrapt.importer._post_import_hooks.get("fakeog.area", []))

    before = hooks()
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    for _ in range(1000):
        reg.apply(FAST)
        reg.revert()
    assert hooks() == before + 1
    reg.apply(FAST)
    area = importlib.import_module("fakeog.area")
    assert reg.status()["double_read"].state == reg.status()["class_and_property"].state == APPLIED
    assert area.Sensor().read(2) == 4
    reg.revert()


def test_a_profile_differing_only_in_layout_fields_reinstalls_nothing(upstream):
    area = importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    reg.apply(FAST)
    installed = area.Sensor.__dict__["read"]
    worker = FAST.replace(schedule="async", chunk_size=8, pipeline_stages=2, num_env_processes=2)
    report = reg.apply(worker)
    assert area.Sensor.__dict__["read"] is installed  # not reverted and wrapped again
    assert reg.profile == worker and report.profile == worker
    assert report.knobs == {"skip_intermediate_obs": True, "remove_headless_viewports": True}
    reg.apply(FAST.replace(skip_intermediate_obs=False))  # a knob: reverted and applied anew
    assert not hasattr(area.Sensor.__dict__["read"], "__wrapped__")
    reg.revert()


class ReadsUndeclared(DoubleRead):
    name = "reads_undeclared"
    knobs = ()


def test_a_patch_sees_only_the_knobs_it_declares(upstream):
    area = importlib.import_module("fakeog.area")
    before = originals(area)
    reg = PatchRegistry([ClassAndProperty(), ReadsUndeclared()])
    with pytest.raises(PatchError) as err:
        reg.apply(FAST)
    reason = err.value.report["reads_undeclared"].reason
    assert "reads profile field 'skip_intermediate_obs', which is not one of its knobs ()" in reason
    assert all(originals(area)[k] is before[k] for k in before) and not reg.status().active


def test_a_patch_without_knobs_is_refused_at_registration():
    class NoKnobs(Patch):
        name = "no_knobs"
        module = None
        targets = ()

    with pytest.raises(TypeError, match="patch 'no_knobs' must declare knobs"):
        PatchRegistry([NoKnobs()])


def test_status_and_revert_return_the_report_type_of_apply(upstream):
    importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    nothing = reg.status()
    assert nothing.profile is None and not nothing.active and nothing.outcomes == () and str(nothing) == "nothing applied"
    applied = reg.apply(FAST.replace(remove_headless_viewports=False))
    assert type(reg.status()) is type(applied) and reg.status() == applied
    reverted = reg.revert()
    assert type(reverted) is type(applied) and not reverted.active
    assert reverted.states == {"double_read": REVERTED}  # the disabled one had nothing to undo
    assert str(reverted).splitlines()[0] == "nothing applied now; undone:"
    assert reg.status().outcomes == ()


def test_plan_and_apply_decide_alike(upstream):
    area = importlib.import_module("fakeog.area")
    area.Sensor.read = lambda self, x, already_doubled=True: 2 * x  # double_read: skipped
    patches = [DoubleRead(), ClassAndProperty(), EnvVar()]
    profile = FAST.replace(intra_op_threads=None)
    planned = PatchRegistry(patches).plan(profile)
    reg = PatchRegistry(patches)
    applied = reg.apply(profile)
    as_applied = {WOULD_APPLY: APPLIED}
    assert {o.name: as_applied.get(o.state, o.state) for o in planned.outcomes} == applied.states
    assert planned["double_read"].reason == applied["double_read"].reason == "upstream already doubles"
    assert planned["env_var"].state == DISABLED
    reg.revert()


RECORDS_ENV_AT_IMPORT = "import os\nSEEN = os.environ.get('B1KF_TEST_THREADS')\n"


def test_process_settings_wait_for_the_simulator_and_apply_before_its_code_runs(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    (upstream / "__init__.py").write_text(RECORDS_ENV_AT_IMPORT)
    reg = PatchRegistry([EnvVar(), DoubleRead()], simulator="fakeog")
    report = reg.apply(FAST.replace(intra_op_threads=3))
    assert report["env_var"].state == PENDING and "waits for `import fakeog`" in report["env_var"].reason
    assert "B1KF_TEST_THREADS" not in os.environ  # a trainer that never imports the simulator keeps its settings
    assert importlib.util.find_spec("fakeog") is not None and reg.status()["env_var"].state == PENDING
    area = importlib.import_module("fakeog.area")
    assert sys.modules["fakeog"].SEEN == "3"  # set before the package's own code ran
    assert reg.status().states == {"env_var": APPLIED, "double_read": APPLIED} and area.Sensor().read(1) == 2
    reg.revert()
    assert "B1KF_TEST_THREADS" not in os.environ


def test_revert_before_the_simulator_import_removes_its_hook(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    (upstream / "__init__.py").write_text(RECORDS_ENV_AT_IMPORT)
    hooks = len(sys.meta_path)
    reg = PatchRegistry([EnvVar()], simulator="fakeog")
    reg.apply(FAST)
    assert len(sys.meta_path) == hooks + 1
    reg.revert()
    assert len(sys.meta_path) == hooks
    importlib.import_module("fakeog")
    assert sys.modules["fakeog"].SEEN is None and "B1KF_TEST_THREADS" not in os.environ


def test_process_simulator_applies_process_settings_at_once(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    reg = PatchRegistry([EnvVar()], simulator="fakeog")
    reg.apply(FAST)
    assert reg.status()["env_var"].state == PENDING
    assert reg.apply(FAST, process="simulator")["env_var"].state == APPLIED  # same knobs: only the waiting ones
    assert os.environ["B1KF_TEST_THREADS"] == "1"
    reg.revert()
    assert PatchRegistry([EnvVar()], simulator="fakeog").plan(FAST, process="simulator")["env_var"].state == WOULD_APPLY


def test_process_settings_for_a_simulator_that_is_not_installed_are_skipped(monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    report = PatchRegistry([EnvVar()], simulator="no_such_simulator_pkg").apply(FAST)
    assert report["env_var"].state == SKIPPED and "no_such_simulator_pkg, which is not installed" in report["env_var"].reason
    assert "B1KF_TEST_THREADS" not in os.environ


def imported_names(module) -> set[str]:
    """Every module name (and ``from`` target) an ``import`` statement of ``module``'s source names."""
    import ast

    tree = ast.parse(inspect.getsource(module))
    names = {f"{node.module or ''}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    return names | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def test_the_generic_registry_imports_no_profile_and_no_simulator():
    import behavior1k_fast.patching.preimport as preimport
    import behavior1k_fast.patching.registry as registry

    for module in (registry, preimport):
        names = imported_names(module)
        assert not any("profile" in name or "omnigibson" in name for name in names), names


def test_the_rollout_layer_hard_wires_no_patch_set():
    import behavior1k_fast.rollout.bootstrap as bootstrap

    names = imported_names(bootstrap)
    assert not any("patching" in name for name in names), names


class TopLevelLaunch(Patch):
    """A patch of the simulator package's own module (as ``render_quality`` patches ``omnigibson.launch``)."""

    name = "top_level_launch"
    module = "fakeog"
    targets = ("launch",)
    knobs = ()

    def wanted(self, profile):
        return True

    def install(self, module, profile, ctx):
        ctx.wrap(module, "launch", lambda wrapped, instance, args, kwargs: "patched " + wrapped())


def test_a_patch_of_the_simulator_package_itself_and_process_settings_both_apply_at_its_import(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    (upstream / "__init__.py").write_text(RECORDS_ENV_AT_IMPORT + "def launch():\n    return 'launched'\n")
    reg = PatchRegistry([EnvVar(), TopLevelLaunch()], simulator="fakeog")
    assert set(reg.apply(FAST).states.values()) == {PENDING}
    fakeog = importlib.import_module("fakeog")
    assert fakeog.SEEN == "1" and fakeog.launch() == "patched launched"
    assert set(reg.status().states.values()) == {APPLIED}
    assert type(fakeog.__loader__).__name__ != "_CallbackLoader"  # upstream's loader is back on the module
    reg.revert()
