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
    SKIPPED,
    Patch,
    PatchError,
    PatchRegistry,
    resolve,
)
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


class DoubleRead(Patch):
    name = "double_read"
    module = "fakeog.area"
    targets = ("Sensor.read",)

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

    def wanted(self, profile):
        return profile.intra_op_threads is not None

    def install(self, module, profile, ctx):
        ctx.set_env("B1KF_TEST_THREADS", str(profile.intra_op_threads))


class Broken(Patch):
    name = "broken"
    module = "fakeog.area"
    targets = ("Sensor.missing",)

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


def test_apply_twice_is_apply_once_and_revert_restores_identity(upstream, monkeypatch):
    monkeypatch.delenv("B1KF_TEST_THREADS", raising=False)
    area = importlib.import_module("fakeog.area")
    before = originals(area)
    reg = PatchRegistry([DoubleRead(), ClassAndProperty(), EnvVar()])
    reg.apply()
    first = area.Sensor.__dict__["read"]
    assert first.__wrapped__ is before["read"]
    reg.apply()
    assert area.Sensor.__dict__["read"] is first  # no second wrapper
    assert area.Sensor().read(3) == 6
    reg.revert()
    after = originals(area)
    assert all(after[k] is before[k] for k in before)
    assert isinstance(area.Sensor.__dict__["make"], classmethod)
    assert "B1KF_TEST_THREADS" not in os.environ
    assert reg.status() == {} and reg.profile is None


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
        reg.apply()
    states = {o.name: o.state for o in err.value.report.outcomes}
    assert states == {"double_read": APPLIED, "class_and_property": APPLIED, "broken": FAILED}
    assert "no attribute 'missing'" in err.value.report["broken"].reason
    assert all(originals(area)[k] is before[k] for k in before)
    assert reg.status() == {} and reg.profile is None


def test_pending_until_import_then_applied(upstream):
    reg = PatchRegistry([DoubleRead()])
    report = reg.apply()
    assert report["double_read"].state == PENDING and "import fakeog.area" in report["double_read"].reason
    area = importlib.import_module("fakeog.area")
    assert reg.status()["double_read"].state == APPLIED
    assert area.Sensor().read(2) == 4
    reg.revert()
    assert area.Sensor().read(2) == 2


def test_revert_before_import_leaves_the_module_alone(upstream):
    reg = PatchRegistry([DoubleRead()])
    reg.apply()
    reg.revert()
    area = importlib.import_module("fakeog.area")
    assert not hasattr(area.Sensor.__dict__["read"], "__wrapped__")
    assert reg.status() == {}


def test_failure_at_import_time_raises_and_rolls_back(upstream):
    reg = PatchRegistry([EnvVar(), Broken()])
    reg.apply(RolloutProfile(intra_op_threads=2))
    assert os.environ["B1KF_TEST_THREADS"] == "2"
    with pytest.raises(PatchError, match="failed when fakeog.area was imported"):
        importlib.import_module("fakeog.area")
    assert "B1KF_TEST_THREADS" not in os.environ and reg.status() == {}


def test_missing_package_is_skipped_with_reason():
    class Absent(DoubleRead):
        name = "absent"
        module = "no_such_upstream_pkg.area"

    report = PatchRegistry([Absent()]).apply()
    assert report["absent"].state == SKIPPED and report["absent"].reason == "no_such_upstream_pkg is not installed"


def test_new_profile_reverts_then_applies(upstream):
    area = importlib.import_module("fakeog.area")
    reg = PatchRegistry([DoubleRead(), ClassAndProperty()])
    reg.apply()
    report = reg.apply(RolloutProfile(skip_intermediate_obs=False))
    assert report["double_read"].state == DISABLED
    assert not hasattr(area.Sensor.__dict__["read"], "__wrapped__")
    assert area.Sensor().width == 224
    reg.revert()


def test_bad_profile_argument_is_a_type_error():
    with pytest.raises(TypeError, match="profile must be a RolloutProfile"):
        PatchRegistry().apply(42)


def test_duplicate_patch_name_is_rejected():
    with pytest.raises(ValueError, match="already registered"):
        PatchRegistry([DoubleRead(), DoubleRead()])


def test_resolve_names_missing_targets(upstream):
    area = importlib.import_module("fakeog.area")
    owner, attr = resolve(area, "Sensor.read")
    assert owner is area.Sensor and attr == "read"
    with pytest.raises(AttributeError, match="fakeog.area.Sensor.nope does not exist"):
        resolve(area, "Sensor.nope")


def _child_applies(profile_dict, queue):
    from behavior1k_fast.patching import omnigibson as patching
    from behavior1k_fast.rollout.bootstrap import bootstrap_process

    bootstrap_process(profile_dict)
    active = patching.active_profile()
    queue.put((active.to_dict() if active else None, sorted(o.state for o in patching.status().values())))


def test_spawned_worker_applies_the_same_profile():
    profile = RolloutProfile(pipeline_stages=2, chunk_size=8)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_applies, args=(profile.to_dict(), queue))
    proc.start()
    active, states = queue.get(timeout=120)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    assert active == profile.to_dict()
    assert states and set(states) <= {APPLIED, PENDING, SKIPPED, DISABLED}


def test_plan_reports_a_module_that_breaks_on_import(upstream):
    (upstream / "area.py").write_text("raise AssertionError('Torch not compiled with CUDA enabled')\n")
    report = PatchRegistry([DoubleRead()]).plan()
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
        PatchRegistry([Broken()]).apply()


class BrokenForShortChunks(Broken):
    name = "broken_for_short_chunks"

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
        reg.apply()
        reg.revert()
    assert hooks() == before + 1
    reg.apply()
    area = importlib.import_module("fakeog.area")
    assert reg.status()["double_read"].state == reg.status()["class_and_property"].state == APPLIED
    assert area.Sensor().read(2) == 4
    reg.revert()
