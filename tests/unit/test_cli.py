import json

import pytest

from behavior1k_fast import __version__
from behavior1k_fast.tools.cli import build_parser, main


def test_every_subcommand_is_wired_to_a_runner():
    parser = build_parser()
    for command in ("doctor", "bench", "validate"):
        args = parser.parse_args([command])
        assert args.command == command and callable(args.func)


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
