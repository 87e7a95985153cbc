"""Every script of ``examples/`` and ``benchmarks/`` (but ``train_ppo_reference.py`` and ``time_to_train.py``,
tested in their own files, and ``soak.py``) as a user meets it: ``--help`` shows every option's default, a bad
option is one line and exit code 2 before any work, and results go to ``./behavior1k_fast_results`` unless
``--record`` asks for the committed ``benchmarks/results/``."""

import re
import subprocess
import sys

import pytest

from .scripts import ROOT, load_script

#: script (folder, name) -> argument lists each of which is a usage error
BAD_ARGUMENTS = {
    ("examples", "omnigibson_rollout"): [["--rounds", "0"], ["--rounds", "-3"], ["--seed", "-1"],
                                         ["--executor", "ray"], ["--env-config", ""]],
    ("examples", "two_engines_ray"): [["--engines", "0"], ["--processes", "3"], ["--processes", "100000"],
                                      ["--envs-per-process", "3"], ["--pipeline-stages", "0"], ["--rounds", "0"],
                                      ["--resolution", "100000"], ["--resolution", "8"], ["--engine-cpus", "0"],
                                      ["--engine-gpus", "-1"],
                                      ["--placement", "everywhere"]],
    ("benchmarks", "autoapply_startup"): [["--rounds", "0"]],
    ("benchmarks", "collector_soak"): [["--minutes", "0"], ["--kill-every-s", "-1"], ["--restart-every-s", "0"],
                                       ["--processes", "0"], ["--envs-per-process", "3"], ["--resolution", "0"]],
    ("benchmarks", "behavior_costs"): [["--envs", "0"], ["--envs", "100000000"], ["--steps", "0"],
                                       ["--values", "-1"], ["--tag", "a/b"]],
    ("benchmarks", "hold_steps"): [["--label", "x", "--envs", "3"], ["--label", "x", "--envs", "0"],
                                   ["--label", "x", "--chunk", "0"], ["--label", "x", "--rounds", "0"],
                                   ["--label", "x", "--repeats", "0"], ["--label", "x", "--resolution", "100000"],
                                   ["--envs", "2"]],
    ("benchmarks", "recording_overhead"): [["--processes", "0"], ["--envs-per-process", "3"], ["--chunk-size", "0"],
                                           ["--rounds", "0"], ["--repeats", "0"], ["--resolution", "100000"],
                                           ["--resolution", "15"],
                                           ["--processes", "100000"]],
    ("benchmarks", "reference_perf"): [["--resolution", "0", "4"], ["--resolution", "100000", "100000"],
                                       ["--envs", "0"], ["--steps", "0"]],
    ("benchmarks", "transfer_cost"): [["--envs-per-process", "3"], ["--pipeline-stages", "0"], ["--chunk-size", "0"],
                                      ["--chunks", "0"], ["--warmup", "-1"], ["--resolution", "100000"]],
}
#: the scripts that write results (the others print them)
WRITERS = [script for script in BAD_ARGUMENTS if script[0] == "benchmarks"]
#: the arguments a script needs besides the ones under test
REQUIRED = {("benchmarks", "hold_steps"): ["--label", "x"]}


def load(script):
    folder, name = script
    return load_script(name, ROOT / folder)


def usage_error(script, argv, capsys):
    """stderr of ``script``'s option parsing of ``argv``, which must exit with code 2."""
    with pytest.raises(SystemExit) as exit_info:
        load(script).parse_args(argv)
    assert exit_info.value.code == 2, (script, argv)
    return capsys.readouterr().err


@pytest.mark.parametrize("script, argv", [(s, a) for s, cases in BAD_ARGUMENTS.items() for a in cases],
                         ids=lambda v: "/".join(v) if isinstance(v, tuple) else " ".join(v))
def test_a_bad_option_is_one_line_naming_it_and_exit_code_2(script, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = usage_error(script, argv, capsys)
    assert err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, err
    named = next((a for a in argv if a.startswith("--") and a != "--label"), "--label")
    assert named in err or "the following arguments are required: --label" in err, err
    assert not list(tmp_path.iterdir()), "a refused run created files"


@pytest.mark.parametrize("script", WRITERS, ids="/".join)
def test_results_go_to_the_working_directory_unless_record_asks_for_the_committed_folder(script, capsys, tmp_path,
                                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = REQUIRED.get(script, [])
    module = load(script)
    assert module.parse_args(extra).out_dir == "behavior1k_fast_results"
    assert (tmp_path / "behavior1k_fast_results").is_dir()
    assert module.parse_args([*extra, "--out-dir", "mine"]).out_dir == "mine"
    assert module.parse_args([*extra, "--record"]).out_dir == str(ROOT / "benchmarks" / "results")
    err = usage_error(script, [*extra, "--record", "--out-dir", "mine"], capsys)
    assert err.count("\n") == 1 and "--record" in err and "--out-dir" in err
    (tmp_path / "file").write_text("")
    err = usage_error(script, [*extra, "--out-dir", "file/sub"], capsys)
    assert err.count("\n") == 1 and "--out-dir='file/sub' is not a writable directory" in err


def help_entries(text: str) -> list[str]:
    """The option entries of an argparse ``--help`` text, each with its wrapped help joined on one line."""
    options = text.split("options:\n", 1)[1].split("\n\n", 1)[0]
    return [" ".join(entry.split()) for entry in re.split(r"\n(?=  -)", options)]


@pytest.mark.parametrize("script", list(BAD_ARGUMENTS), ids="/".join)
def test_help_shows_the_default_of_every_option_that_takes_a_value(script, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(script).parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    entries = help_entries(text)
    takes_value = [e for e in entries if re.match(r"(-\w, )?--[\w-]+ [A-Z{]", e)]
    assert takes_value, entries
    for entry in takes_value:
        assert "default" in entry or "--label" in entry.split()[0], entry  # --label is required
    assert "below" not in text  # the usage lines under --help point at nothing that is not there


@pytest.mark.parametrize("script", [("examples", "omnigibson_rollout"), ("benchmarks", "hold_steps")], ids="/".join)
def test_a_script_run_with_a_bad_option_prints_no_traceback(script, tmp_path):
    folder, name = script
    done = subprocess.run([sys.executable, str(ROOT / folder / f"{name}.py"), "--rounds", "0"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "argument --rounds: must be an int >= 1, got 0" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script, argv", [
    (("benchmarks", "behavior_costs"), ["--envs", "1", "--steps", "1", "--values", "0", "0"]),
    (("benchmarks", "hold_steps"), ["--label", "x", "--envs", "2", "--resolution", "8", "--chunk", "1",
                                    "--rounds", "1", "--repeats", "1"]),
    (("benchmarks", "reference_perf"), ["--resolution", "8", "8", "--envs", "1", "--steps", "1"]),
], ids=lambda v: "/".join(v) if isinstance(v, tuple) else None)
def test_a_benchmark_at_its_smallest_sizes_writes_its_results_to_the_working_directory(script, argv, tmp_path):
    folder, name = script
    committed = sorted((ROOT / "benchmarks" / "results").iterdir())
    stamps = [p.stat().st_mtime_ns for p in committed]
    done = subprocess.run([sys.executable, str(ROOT / folder / f"{name}.py"), *argv], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = sorted(p.suffix for p in (tmp_path / "behavior1k_fast_results").iterdir())
    assert written == [".json", ".png"], written
    assert [p.stat().st_mtime_ns for p in committed] == stamps  # benchmarks/results/ untouched


@pytest.mark.parametrize("text, message", [
    ("env:\n  physics_frequency: [120\n", "invalid YAML at line 3, column 1"),
    ("env:\n\tphysics_frequency: 120\n", "invalid YAML at line 2, column 1: found character '\\t'"),
    ("", "the env config must be a mapping of sections (env, scene, robots, task, ...), got nothing"),
    ("- env\n- robots\n", "must be a mapping of sections (env, scene, robots, task, ...), got list ['env', 'robots']"),
    ("env: 5\n", "env config key 'env' must be a mapping of its settings, got int 5"),
    ("scene: Rs_int\n", "env config key 'scene' must be a mapping of its settings, got str 'Rs_int'"),
    ("robots: 5\n", "env config key 'robots' must be a list of robot configs, got int 5"),
    ("robots: [R1]\n", "env config key robots[0] must be a mapping of robot settings, got str 'R1'"),
    ("env: {physics_frequency: 100}\n", "--env-config"),  # frequencies OmniGibson's dt rules refuse
], ids=["syntax", "tab", "empty", "list", "env", "scene", "robots", "robot", "frequencies"])
def test_the_omnigibson_example_refuses_a_bad_env_config_in_one_line_before_it_checks_for_isaac_sim(
        text, message, tmp_path, monkeypatch, capsys):
    from behavior1k_fast import backends

    def no_engine(backend):
        raise AssertionError("the example went past its config checks")

    monkeypatch.setattr(backends, "check_installed", no_engine)
    config = tmp_path / "env.yaml"
    config.write_text(text)
    assert load(("examples", "omnigibson_rollout")).main(["--env-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"omnigibson_rollout: error: --env-config {str(config)!r}: ")
    assert message in err, err
