import json
import re
import shlex

import pytest

from behavior1k_fast import __version__
from behavior1k_fast.tools.cli import build_parser, main


def test_every_subcommand_is_wired_to_a_runner():
    parser = build_parser()
    for command in ("doctor", "bench", "validate", "tune", "selftest"):
        args = parser.parse_args([command])
        assert args.command == command and callable(args.func)


@pytest.mark.parametrize("command", [[], ["doctor"], ["bench"], ["validate"], ["tune"], ["selftest"]])
def test_help_is_plain_text_with_examples_that_parse(command, capsys):
    from behavior1k_fast.tools.cli import EXAMPLES

    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "``" not in out and not re.search(r":[a-z]+:`", out), out
    examples = out.split("\nexamples:\n", 1)[1].splitlines()
    expected = [lines[0] for lines in EXAMPLES.values()] if not command else EXAMPLES[command[0]]
    assert [line.strip() for line in examples] == expected
    parser = build_parser()
    for line in expected:
        argv = shlex.split(line)[1:]
        assert parser.parse_args(argv).command == argv[0]


def test_plain_drops_rest_markup():
    from behavior1k_fast.tools.cli import plain

    assert plain("``a b``: :class:`~x.y.Z`, :func:`.f` and :mod:`p.q`") == "a b: Z, f and p.q"


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and __version__ in capsys.readouterr().out


def test_doctor_json_through_the_cli(capsys):
    code = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["ok"] is True and report["python"] and report["patches"]


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["benchmark"])
    assert exc.value.code == 2 and "invalid choice: 'benchmark'" in capsys.readouterr().err


MISTYPED = [
    (["bench", "--quik"], "behavior1k-fast bench: error: unrecognized arguments: --quik (did you mean --quick?)"),
    (["tune", "--envz", "3"], "behavior1k-fast tune: error: unrecognized arguments: --envz 3 (did you mean --envs?)"),
    (["bench", "--quik", "--rouns=2"], "behavior1k-fast bench: error: unrecognized arguments: --quik --rouns=2 "
                                       "(did you mean --quick for --quik, --rounds for --rouns=2?)"),
    (["bnech"], "behavior1k-fast: error: argument {doctor,bench,validate,tune,selftest,train-judge,train-compare}: "
                "invalid choice: 'bnech' (choose from 'doctor', 'bench', 'validate', 'tune', 'selftest', 'train-judge', "
                "'train-compare') (did you mean bench?)"),
    (["bench", "--backend", "refrence"], "behavior1k-fast bench: error: argument --backend: invalid choice: "
                                         "'refrence' (choose from 'reference', 'omnigibson') (did you mean reference?)"),
    (["bench", "--xyzzy"], "behavior1k-fast bench: error: unrecognized arguments: --xyzzy"),
]


@pytest.mark.parametrize("argv, line", MISTYPED, ids=[" ".join(a) for a, _ in MISTYPED])
def test_a_mistyped_option_or_command_gets_the_closest_one_suggested_in_one_line(argv, line, no_heavy_work, capsys):
    assert run_cli(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def run_cli(argv):
    """Exit code of ``behavior1k-fast argv`` (argparse errors exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Any bench, validate or selftest run that gets past the input checks fails the test."""
    from behavior1k_fast.tools import selftest, validate
    from behavior1k_fast.tools.bench import ablation

    def heavy(*args, **kwargs):
        raise AssertionError("heavy work started before the input was checked")

    monkeypatch.setattr(ablation, "run_bench", heavy)
    monkeypatch.setattr(validate, "validate", heavy)
    monkeypatch.setattr(selftest, "run_selftest", heavy)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "typo.yaml").write_text("resolutoin: 32\n")
    (tmp_path / "broken.yaml").write_text("resolution: [32\n")
    (tmp_path / "abc.yaml").write_text("resolution: abc\n")
    (tmp_path / "not_a_dir").write_text("")
    return tmp_path


BAD_INPUT = [
    (["bench", "--pipeline-stages", "0"], "argument --pipeline-stages: must be an int >= 1, got 0"),
    (["bench", "--pipeline-stages", "-2"], "argument --pipeline-stages: must be an int >= 1, got -2"),
    (["bench", "--rounds", "-1"], "argument --rounds: must be an int >= 1, got -1"),
    (["bench", "--processes", "two"], "argument --processes: expected an int, got 'two'"),
    (["bench", "--warmup", "-1"], "argument --warmup: must be an int >= 0, got -1"),
    (["bench", "--chunk-size", "0"], "argument --chunk-size: must be an int >= 1, got 0"),
    (["bench", "--envs-per-process", "0"], "argument --envs-per-process: must be an int >= 1, got 0"),
    (["bench", "--model-ms", "inf"], "argument --model-ms: must be a finite number > 0, got inf"),
    (["bench", "--model-ms", "0"], "argument --model-ms: must be a finite number > 0, got 0.0"),
    (["bench", "--scaling", "1,0"], "argument --scaling: expected comma-separated ints >= 1, got '1,0'"),
    (["bench", "--seed", "-1"], "argument --seed: must be an int in [0, 4294967295], got -1"),
    (["bench", "--device", "tpu"], "argument --device: expected auto, cpu, cuda or cuda:<index>, got 'tpu'"),
    (["bench", "--tag", "a/b"], "argument --tag: expected a name without '/', got 'a/b'"),
    (["bench", "--resolution", "0"], "argument --resolution: must be an int >= 1, got 0"),
    (["bench", "--pipeline-stages", "3", "--processes", "2", "--envs-per-process", "2"], "process partition needs pipeline_stages=3 to divide num_env_processes=2"),
    (["bench", "--pipeline-stages", "7", "--processes", "7", "--envs-per-process", "7"], "stages=7 is impossible"),
    (["bench", "--backend-config", "{files}/typo.yaml"],
     "unknown reference config key 'resolutoin'; did you mean 'resolution'?"),
    (["bench", "--backend-config", "{files}/broken.yaml"], "broken.yaml': invalid YAML at line 2, column 1"),
    (["bench", "--backend-config", "{files}/absent.yaml"], "absent.yaml': No such file or directory"),
    (["bench", "--backend-config", "{files}/abc.yaml"], "resolution must be a (height, width) pair, got 'abc'"),
    (["tune", "--backend-config", "{files}/abc.yaml"], "resolution must be a (height, width) pair, got 'abc'"),
    (["validate", "--backend-config", "{files}/abc.yaml"], "resolution must be a (height, width) pair, got 'abc'"),
    (["bench", "--out-dir", "{files}/not_a_dir"], "--out-dir='{files}/not_a_dir' is not a writable directory"),
    (["bench", "--resolution", "7"], "--resolution 7: the benchmark policy cuts each rgb image into 16x16 patches"),
    (["tune", "--resolution", "7"], "--resolution 7: the benchmark policy cuts each rgb image into 16x16 patches"),
    (["validate", "--chunks", "0"], "argument --chunks: must be an int >= 1, got 0"),
    (["validate", "--num-envs", "-1"], "argument --num-envs: must be an int >= 1, got -1"),
    (["validate", "--seed", "-3"], "argument --seed: must be an int in [0, 4294967295], got -3"),
    (["validate", "--reward-atol", "-1"], "argument --reward-atol: must be a finite number >= 0, got -1.0"),
    (["validate", "--min-psnr", "nan"], "argument --min-psnr: must be a finite number > 0, got nan"),
    (["validate", "--min-terminations", "3"], "min_terminations must be an int in [0, 2], got 3"),
    (["validate", "--json", "{files}/absent_dir/report.json"], "absent_dir': No such file or directory"),
    (["validate", "--json", "{files}"], "is a directory, expected a file path"),
    (["validate", "--backend-config", "{files}/typo.yaml"], "did you mean 'resolution'?"),
    (["doctor", "--profile", "{files}/broken.yaml"], "broken.yaml: invalid YAML at line 2, column 1"),
    (["doctor", "--profile", "{files}/absent.yaml"], "profile file"),
]


@pytest.mark.parametrize("argv, text", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_every_user_error_is_one_line_and_exit_code_2_before_any_work(argv, text, files, no_heavy_work, capsys):
    code = run_cli([a.format(files=files) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"behavior1k-fast {argv[0]}: error: ") and text.format(files=files) in err, err


def test_missing_simulator_and_missing_cuda_are_usage_errors(monkeypatch, no_heavy_work, capsys):
    import importlib.util

    import torch

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "omnigibson" else
                        find_spec(name, *a))
    assert run_cli(["bench", "--backend", "omnigibson"]) == 2
    assert "backend 'omnigibson' needs OmniGibson (a BEHAVIOR-1K install), but this Python has no module " \
           "'omnigibson'" in capsys.readouterr().err
    assert run_cli(["validate", "--backend", "omnigibson"]) == 2
    assert "needs OmniGibson" in capsys.readouterr().err
    assert run_cli(["selftest"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("behavior1k-fast selftest: error: backend 'omnigibson' needs OmniGibson") and err.count("\n") == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_cli(["bench", "--device", "cuda"]) == 2
    assert "--device cuda: CUDA is not available here" in capsys.readouterr().err


@pytest.fixture
def small_machine(monkeypatch):
    """This machine has 2 usable cores and 8 GiB: limits of 8 processes, 1024 envs, 4 Mi chunk steps."""
    from behavior1k_fast.core.checks import MachineLimits

    machine = MachineLimits(cores=2, memory_bytes=8 * 2**30)
    monkeypatch.setattr(MachineLimits, "here", classmethod(lambda cls: machine))
    return machine


ON_THIS_MACHINE = "on this machine (2 usable cores, 8 GiB of memory; "
PAST_THE_MACHINE = [
    (["bench", "--processes", "100000"], "argument --processes: must be an int in [1, 8] " + ON_THIS_MACHINE),
    (["bench", "--scaling", "1,100000"], "argument --scaling: expected comma-separated ints >= 1, got '1,100000': "
                                         "must be an int in [1, 8]"),
    (["bench", "--envs-per-process", "1000000"], "argument --envs-per-process: must be an int in [1, 1024] "),
    (["bench", "--chunk-size", "1000000000"], "argument --chunk-size: must be an int in [1, 4194304] "),
    (["bench", "--seed", str(2**70)], "argument --seed: must be an int in [0, 4294967295], got " + str(2**70)),
    (["bench", "--model-ms", "1e300"], "model_ms must be a finite number of ms in (0, 60000], got 1e+300"),
    (["bench", "--model-width", "64", "--model-depth", "100000000"],
     "the policy with model_width=64, model_depth=100000000, chunk_size=32 at a stage batch of "),
    (["bench", "--model-width", "1000000000"], "the policy with model_width=1000000000, model_depth=1"),
    (["bench", "--max-processes", "100000"], "argument --max-processes: must be an int in [1, 8] " + ON_THIS_MACHINE),
    (["bench", "--no-peers", "--envs-per-process", "500", "--resolution", "4096"],
     "--resolution 4096 for 500"),
    (["bench", "--no-peers", "--envs-per-process", "500", "--chunk-size", "4000000"],
     "x chunk_size=4000000 needs about"),
    (["validate", "--num-envs", "1000000"], "argument --num-envs: must be an int in [1, 1024] " + ON_THIS_MACHINE),
    (["validate", "--chunks", "100000000"], "chunks=100000000 x num_envs=2 x chunk_size=32 (the actions, drawn up "
                                            "front) needs about"),
    (["validate", "--seed", str(2**40)], "argument --seed: must be an int in [0, 4294967295]"),
    (["tune", "--envs", "100000"], "argument --envs: expected comma-separated ints >= 1, got '100000': must be an "
                                   "int in [1, 1024]"),
    (["tune", "--max-processes", "100000"], "argument --max-processes: must be an int in [1, 8] "),
    (["tune", "--chunk-size", "1000000000"], "argument --chunk-size: must be an int in [1, 4194304] "),
]


@pytest.mark.parametrize("argv, text", PAST_THE_MACHINE, ids=[" ".join(a) for a, _ in PAST_THE_MACHINE])
def test_counts_past_this_machines_limits_are_one_line_and_exit_code_2_before_any_work(
        argv, text, small_machine, no_heavy_work, monkeypatch, capsys):
    from behavior1k_fast.tools import tune

    monkeypatch.setattr(tune, "run_tune", lambda *a, **k: pytest.fail("heavy work started before the check"))
    code = run_cli(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"behavior1k-fast {argv[0]}: error: ") and text in err, err


def test_omnigibson_without_isaac_sim_is_a_usage_error(monkeypatch, no_heavy_work, tmp_path, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    installed = {"omnigibson": object(), "isaacsim": None}  # OmniGibson imports, Isaac Sim is absent
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: installed[name] if name in installed else
                        find_spec(name, *a))
    (tmp_path / "env.yaml").write_text("env: {action_frequency: 30}\n")
    for command in ("bench", "validate", "tune"):
        assert run_cli([command, "--backend", "omnigibson", "--backend-config", str(tmp_path / "env.yaml")]) == 2
        err = capsys.readouterr().err
        assert err == (f"behavior1k-fast {command}: error: backend 'omnigibson' needs Isaac Sim, but this Python has "
                       f"no module 'isaacsim'\n")


WRITES_NOTHING = [
    ["bench", "--backend-config", "{files}/typo.yaml"],
    ["bench", "--pipeline-stages", "7", "--processes", "7", "--envs-per-process", "7", "--no-peers"],
    ["bench", "--tuned", "{files}/absent.yaml"],
    ["bench", "--model-width", "100"],
    ["tune", "--backend-config", "{files}/broken.yaml"],
    ["tune", "--envs", "3", "--max-processes", "1", "--pipeline-stages", "2"],
]


@pytest.mark.parametrize("argv", WRITES_NOTHING, ids=[" ".join(a) for a in WRITES_NOTHING])
def test_a_usage_error_creates_no_output_directory(argv, files, no_heavy_work, capsys):
    out_dir = files / "new" / "results"
    assert run_cli([a.format(files=files) for a in argv] + ["--out-dir", str(out_dir)]) == 2
    assert "error: " in capsys.readouterr().err
    assert not (files / "new").exists()


EMPTY_PATHS = [
    ["doctor", "--profile", ""],
    ["doctor", "--upstream", ""],
    ["validate", "--json", ""],
    ["validate", "--backend-config", ""],
    ["bench", "--out-dir", ""],
    ["bench", "--tuned", " "],
    ["tune", "--out-dir", ""],
]


@pytest.mark.parametrize("argv", EMPTY_PATHS, ids=[" ".join(a) for a in EMPTY_PATHS])
def test_an_empty_path_is_a_usage_error_not_an_absent_option(argv, no_heavy_work, capsys):
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert err == f"behavior1k-fast {argv[0]}: error: argument {argv[1]}: expected a path, got {argv[2]!r}\n"
