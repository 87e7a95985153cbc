"""Auto-apply at interpreter start-up: the shipped ``.pth`` in a real site-packages, run by Python's ``site``
in a spawned interpreter and in Ray actors (``runtime_env`` env vars, and an actor that actor starts)."""

from __future__ import annotations

import json
import subprocess

import pytest

from behavior1k_fast.tools.measure.venvs import SOURCE_ROOT as ROOT, child_env, make_venv


@pytest.fixture(scope="module")
def hook_python(tmp_path_factory):
    """The ``python`` of a venv whose site-packages holds the auto-apply ``.pth``."""
    return make_venv(tmp_path_factory.mktemp("hook-venv") / "venv")


def run_child(python, tmp_path, value: str | None, args: list[str], strict: str | None = None):
    """A fresh interpreter with ``BEHAVIOR1K_FAST=value`` (and ``BEHAVIOR1K_FAST_STRICT=strict``)."""
    env = child_env(BEHAVIOR1K_FAST=value, BEHAVIOR1K_FAST_STRICT=strict, OMP_NUM_THREADS=None,
                    XDG_CACHE_HOME=str(tmp_path / "cache"))
    return subprocess.run([str(python), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def probe(python, tmp_path, value: str | None, *args: str) -> tuple[dict, list[str]]:
    """Run the probe in a fresh interpreter with ``BEHAVIOR1K_FAST=value``; its report and its stderr lines."""
    done = run_child(python, tmp_path, value, ["-m", "tests.autoapply.probe", *args])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr.splitlines()


@pytest.mark.parametrize("value", [None, "", "0", " 0 "])
def test_unset_empty_or_zero_variable_imports_nothing_of_this_package(hook_python, tmp_path, value):
    for name in ("0", " 0 "):  # a profile file of that name, in the working directory, is not what 0 means
        (tmp_path / name).write_text("intra_op_threads: 3\n")
    report, stderr = probe(hook_python, tmp_path, value)
    assert report["ours_imported"] is False and report["omp_num_threads"] is None
    assert stderr == []


TRAINER = (
    "import os, torch; torch.set_num_threads(2); import behavior1k_fast; behavior1k_fast.apply(); "
    "print(torch.get_num_threads(), os.environ.get('OMP_NUM_THREADS'), behavior1k_fast.status()['intra_op_threads'].state)"
)


def test_a_trainer_that_applies_the_fast_path_keeps_its_thread_pools(hook_python, tmp_path):
    """BEHAVIOR1K_FAST=1 and an explicit apply() in a process that never imports OmniGibson: the intra-op
    thread cap waits for `import omnigibson`; torch's pool and OMP_NUM_THREADS stay the trainer's."""
    done = run_child(hook_python, tmp_path, "1", ["-c", TRAINER])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.split() == ["2", "None", "pending"]


@pytest.mark.slow
def test_variable_1_applies_the_fast_path_before_omnigibson_is_imported(hook_python, tmp_path):
    report, stderr = probe(hook_python, tmp_path, "1", "--import-omnigibson")
    assert stderr == [] and report["startup"]["source"] == "preset '1'" and report["startup"]["error"] is None
    assert report["omnigibson_imported"] is False
    states = report["states"]
    assert states["intra_op_threads"] == "pending" and report["omp_num_threads"] is None  # not a simulator yet
    assert states["numba_cache_dir"] == "pending"
    for name in ("env_step_obs", "vector_env_step", "env_wrapper_forwarding", "headless_viewport"):
        assert states[name] == "pending"
    after = report["after_import"]
    for name in ("intra_op_threads", "numba_cache_dir", "env_step_obs", "vector_env_step", "env_wrapper_forwarding"):
        assert after["states"][name] == "applied"
    assert after["omp_num_threads"] == "1"
    assert after["step_signature"] == "(self, actions, env_indices=None, get_obs=True, render=True)"


def test_rlinf_preset_leaves_out_what_rlinf_does_itself(hook_python, tmp_path):
    report, stderr = probe(hook_python, tmp_path, "rlinf")
    assert stderr == [] and report["startup"]["source"] == "preset 'rlinf'"
    states = report["states"]
    assert states["gc_after_launch"] == states["texture_streaming_budget"] == "disabled"
    assert states["intra_op_threads"] == "disabled" and report["omp_num_threads"] is None
    assert states["vector_env_step"] == "pending" and states["kit_thread_caps"] == "pending"


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_profile_yaml_path_applies_that_profile(hook_python, tmp_path, relative):
    path = tmp_path / "profile.yaml"
    path.write_text("pipeline_stage_num: 2\nintra_op_threads: 3\nremove_headless_viewports: false\n")
    report, stderr = probe(hook_python, tmp_path, "profile.yaml" if relative else str(path))  # cwd: tmp_path
    assert stderr == [] and report["startup"]["source"] == f"profile file {str(path)!r}"
    assert report["startup"]["profile"]["pipeline_stages"] == 2
    assert report["startup"]["profile"]["intra_op_threads"] == 3 and report["states"]["intra_op_threads"] == "pending"
    assert report["states"]["headless_viewport"] == "disabled"


def test_an_unwritable_numba_cache_does_not_fail_a_process_that_runs_no_simulator(hook_python, tmp_path):
    (tmp_path / "a-file").write_text("")
    path = tmp_path / "profile.yaml"
    path.write_text(f"numba_cache_dir: {tmp_path / 'a-file' / 'numba'}\n")
    report, stderr = probe(hook_python, tmp_path, str(path))
    assert stderr == [] and report["startup"]["error"] is None and report["states"]["numba_cache_dir"] == "pending"


BAD_PROFILES = {
    "unknown key": ("pipeline_stage: 2\n", "unknown profile key 'pipeline_stage'"),
    "yaml syntax": ("pipeline_stage_num: [2\n", "does not load"),
    "bad value": ("pipeline_stage_num: 0\n", "pipeline_stages must be"),
    # 8 levels of 9 aliases: 450 bytes that expand to 9**8 values (a message that formats them never ends)
    "alias bomb": ("chunk_size: [&a0 [x, x, x, x, x, x, x, x, x], " + ", ".join(
        f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)) + "]\n",
        "YAML holds more than 100000 values once its aliases are expanded"),
}


def bad_value(tmp_path, case: str) -> tuple[str, str]:
    """``(BEHAVIOR1K_FAST value, expected text of the one line)`` for a bad-value case."""
    if case == "missing file":
        return "missing.yaml", f"and not a profile YAML file (no file {str(tmp_path / 'missing.yaml')!r})"
    path = tmp_path / "profile.yaml"
    path.write_text(BAD_PROFILES[case][0])
    return str(path), BAD_PROFILES[case][1]


@pytest.mark.parametrize("case", ["missing file", *BAD_PROFILES])
def test_bad_value_prints_one_line_and_applies_nothing(hook_python, tmp_path, case):
    value, expected = bad_value(tmp_path, case)
    report, stderr = probe(hook_python, tmp_path, value)
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith(f"behavior1k_fast: BEHAVIOR1K_FAST={value!r}")
    assert expected in stderr[0] and stderr[0].endswith("; nothing applied")
    assert report["startup"]["profile"] is None and report["startup"]["error"] in stderr[0]
    assert report["states"] == {} and report["omp_num_threads"] is None


@pytest.mark.parametrize("case", ["missing file", "yaml syntax"])
def test_strict_mode_makes_a_bad_value_fatal_at_start_up(hook_python, tmp_path, case):
    value, expected = bad_value(tmp_path, case)
    done = run_child(hook_python, tmp_path, value, ["-c", "print('ran')"], strict="1")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"behavior1k_fast: BEHAVIOR1K_FAST={value!r}") and expected in line
    assert line.endswith("; exiting (BEHAVIOR1K_FAST_STRICT is set)")


@pytest.mark.parametrize("strict", ["false", "NO", "Off", "0"])
def test_strict_mode_false_no_or_off_lets_a_bad_value_start(hook_python, tmp_path, strict):
    value, expected = bad_value(tmp_path, "missing file")
    done = run_child(hook_python, tmp_path, value, ["-c", "print('ran')"], strict=strict)
    assert done.returncode == 0 and done.stdout == "ran\n"
    (line,) = done.stderr.splitlines()
    assert expected in line and line.endswith("; nothing applied")


def test_a_strict_setting_that_is_neither_on_nor_off_is_one_fatal_line_even_with_a_good_value(hook_python, tmp_path):
    done = run_child(hook_python, tmp_path, "1", ["-c", "print('ran')"], strict="maybe")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("behavior1k_fast: BEHAVIOR1K_FAST_STRICT='maybe' is neither on (1/true/yes/on) nor off")
    assert line.endswith("; exiting (BEHAVIOR1K_FAST_STRICT is set)")


def test_strict_mode_lets_a_good_value_start(hook_python, tmp_path):
    done = run_child(hook_python, tmp_path, "1", ["-c", "print('ran')"], strict="1")
    assert done.returncode == 0 and done.stdout == "ran\n" and done.stderr == ""


JOB_DRIVER = (
    "import json, subprocess, sys\n"
    "import numpy as np\n"
    "from behavior1k_fast.rollout import RolloutEngine\n"
    "from tests.rollout.pointmass import PointMassFactory\n"
    "if __name__ == '__main__':\n"
    "    profile = {'num_env_subprocess': 2, 'total_num_envs': 2, 'num_action_chunks': 4}\n"
    "    with RolloutEngine(PointMassFactory(), profile) as engine:\n"
    "        engine.rollout(lambda obs: np.zeros((len(obs['proprio']), 4, 2), np.float32), num_rounds=1)\n"
    "    child = subprocess.run([sys.executable, '-m', 'tests.autoapply.probe'], capture_output=True, text=True)\n"
    "    print(json.dumps({'stderr': child.stderr, 'report': json.loads(child.stdout)}))\n"
)


def test_a_bad_value_is_printed_once_per_job_by_its_driver_and_children_refuse_it_quietly(hook_python, tmp_path):
    """A driver with two env workers and a subprocess, all started with a missing profile file: one line, the
    driver's; the child refused the value too (its record holds the error), without a word."""
    value, expected = bad_value(tmp_path, "missing file")
    done = run_child(hook_python, tmp_path, value, ["-c", JOB_DRIVER])
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"behavior1k_fast: BEHAVIOR1K_FAST={value!r}") and expected in line
    child = json.loads(done.stdout.splitlines()[-1])
    assert child["stderr"] == "" and child["report"]["startup"]["profile"] is None
    assert expected in child["report"]["startup"]["error"]


def test_a_child_given_another_bad_value_than_its_parent_prints_its_own_line(hook_python, tmp_path):
    value, _ = bad_value(tmp_path, "missing file")
    other, expected = bad_value(tmp_path, "yaml syntax")
    driver = ("import os, subprocess, sys\n"
              f"os.environ['BEHAVIOR1K_FAST'] = {other!r}\n"
              "subprocess.run([sys.executable, '-c', 'pass'])\n")
    done = run_child(hook_python, tmp_path, value, ["-c", driver])
    assert done.returncode == 0, done.stderr
    first, second = done.stderr.splitlines()
    assert "no file" in first and expected in second and second.endswith("; nothing applied")


STRICT_DRIVER = (
    "import os, sys\n"
    "from behavior1k_fast.rollout import RolloutEngine, WorkerDiedError\n"
    "from tests.rollout.pointmass import PointMassFactory\n"
    "os.environ.update(BEHAVIOR1K_FAST=sys.argv[1], BEHAVIOR1K_FAST_STRICT=sys.argv[2])  # for the workers only\n"
    "try:\n"
    "    RolloutEngine(PointMassFactory(), {'num_env_subprocess': 1, 'total_num_envs': 2, 'num_action_chunks': 4})\n"
    "except WorkerDiedError as exc:\n"
    "    print(exc)\n"
    "print(' '.join(m for m in sys.modules if m.startswith('behavior1k_fast.patching.')))\n"
)


@pytest.mark.parametrize("case, strict", [("missing file", "1"), ("yaml syntax", "yes"), ("missing file", "maybe")])
def test_a_worker_ended_by_strict_mode_names_the_refusal_in_the_worker_died_error(hook_python, tmp_path, case,
                                                                                   strict):
    """... and the driver reads why from the hook's variables alone: it imports no simulator patch set (nor
    the OmniGibson hook) to say so."""
    value, expected = bad_value(tmp_path, case)
    if strict == "maybe":
        expected = "BEHAVIOR1K_FAST_STRICT='maybe' is neither on (1/true/yes/on) nor off"
    done = run_child(hook_python, tmp_path, None, ["-c", STRICT_DRIVER, value, strict])
    assert done.returncode == 0, done.stderr
    message, driver_patching = done.stdout.splitlines()
    assert "behavior1k_fast.patching.startup_env" in driver_patching.split()  # the refusal was read
    assert not [m for m in driver_patching.split() if ".omnigibson" in m or m.endswith(".autoapply")], driver_patching
    assert message.startswith("worker 0 (envs [0, 1]) died while running 'init': pid ")
    assert " exit code 2 (ended at start-up by the auto-apply hook under BEHAVIOR1K_FAST_STRICT: " in message
    assert expected in message


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)  # its own cluster, never a running one
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_actor_from_runtime_env_and_the_actor_it_starts_apply_before_omnigibson(ray_local, hook_python, tmp_path):
    from .probe import Reporter

    runtime_env = {
        "py_executable": str(hook_python),
        "env_vars": {"BEHAVIOR1K_FAST": "1", "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)},
    }
    actor = ray_local.remote(Reporter).options(runtime_env=runtime_env).remote()
    try:
        own, child = ray_local.get([actor.report.remote(), actor.child_report.remote()], timeout=120)
    finally:
        ray_local.kill(actor)
    assert own["pid"] != child["pid"]
    for report in (own, child):
        assert report["startup"]["source"] == "preset '1'" and report["omnigibson_imported"] is False
        # Ray sets OMP_NUM_THREADS in its workers itself; the patch's thread cap waits for `import omnigibson`
        assert report["states"]["intra_op_threads"] == "pending"
        assert report["states"]["vector_env_step"] == "pending"
