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
    (tmp_path / "not_a_dir").write_text("")
    return tmp_path


BAD_INPUT = [
    (["bench", "--pipeline-stages", "0"], "argument --pipeline-stages/--stages: must be an int >= 1, got 0"),
    (["bench", "--stages", "-2"], "argument --pipeline-stages/--stages: must be an int >= 1, got -2"),
    (["bench", "--rounds", "-1"], "argument --rounds: must be an int >= 1, got -1"),
    (["bench", "--processes", "two"], "argument --processes: expected an int, got 'two'"),
    (["bench", "--warmup", "-1"], "argument --warmup: must be an int >= 0, got -1"),
    (["bench", "--chunk-size", "0"], "argument --chunk-size: must be an int >= 1, got 0"),
    (["bench", "--envs-per-process", "0"], "argument --envs-per-process: must be an int >= 1, got 0"),
    (["bench", "--model-ms", "inf"], "argument --model-ms: must be a finite number > 0, got inf"),
    (["bench", "--model-ms", "0"], "argument --model-ms: must be a finite number > 0, got 0.0"),
    (["bench", "--scaling", "1,0"], "argument --scaling: expected comma-separated ints >= 1, got '1,0'"),
    (["bench", "--seed", "-1"], "argument --seed: must be an int >= 0, got -1"),
    (["bench", "--device", "tpu"], "argument --device: expected auto, cpu, cuda or cuda:<index>, got 'tpu'"),
    (["bench", "--tag", "a/b"], "argument --tag: expected a name without '/', got 'a/b'"),
    (["bench", "--resolution", "0"], "argument --resolution: must be an int >= 1, got 0"),
    (["bench", "--stages", "3", "--processes", "2", "--envs-per-process", "2"], "process partition needs pipeline_stages=3 to divide num_env_processes=2"),
    (["bench", "--stages", "7", "--processes", "7", "--envs-per-process", "7"], "stages=7 is impossible"),
    (["bench", "--backend-config", "{files}/typo.yaml"],
     "unknown reference config key 'resolutoin'; did you mean 'resolution'?"),
    (["bench", "--backend-config", "{files}/broken.yaml"], "broken.yaml': invalid YAML at line 2, column 1"),
    (["bench", "--backend-config", "{files}/absent.yaml"], "absent.yaml': No such file or directory"),
    (["bench", "--out-dir", "{files}/not_a_dir"], "--out-dir='{files}/not_a_dir' is not a writable directory"),
    (["bench", "--resolution", "7"], "--resolution 7: the benchmark policy cuts each rgb image into 16x16 patches"),
    (["tune", "--resolution", "7"], "--resolution 7: the benchmark policy cuts each rgb image into 16x16 patches"),
    (["validate", "--chunks", "0"], "argument --chunks: must be an int >= 1, got 0"),
    (["validate", "--num-envs", "-1"], "argument --num-envs: must be an int >= 1, got -1"),
    (["validate", "--seed", "-3"], "argument --seed: must be an int >= 0, got -3"),
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
