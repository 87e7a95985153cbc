"""core.checks: one line per bad value, naming the argument and the value; TypeError for a wrong type."""

import math
import os

import numpy as np
import pytest

from behavior1k_fast.core.checks import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_optional_positive_int,
    check_positive_int,
    check_seconds,
    shown,
)


def test_ints_accept_numpy_integers_and_refuse_bools_and_floats():
    assert check_int("n", np.int64(4)) == 4 and type(check_int("n", np.int64(4))) is int
    for bad in (True, 4.0, "4", None):
        with pytest.raises(TypeError, match=f"n must be an int, got {bad!r}"):
            check_int("n", bad)


def test_int_bounds_are_named_in_the_message():
    assert check_int("stage", 1, 0, 1) == 1
    with pytest.raises(ValueError, match=r"stage must be an int in \[0, 1\], got 2"):
        check_int("stage", 2, 0, 1)
    with pytest.raises(ValueError, match="rounds must be an int >= 1, got 0"):
        check_positive_int("rounds", 0)
    assert check_optional_positive_int("threads", None) is None
    with pytest.raises(ValueError, match="threads must be an int >= 1, got -1"):
        check_optional_positive_int("threads", -1)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 1e400])
def test_numbers_must_be_finite(bad):
    with pytest.raises(ValueError, match="model_ms must be a finite number"):
        check_number("model_ms", bad, 0.0, low_open=True)


def test_number_bounds_and_types():
    assert check_number("budget", np.float32(0.5), 0.0, 1.0) == 0.5
    with pytest.raises(ValueError, match=r"budget must be a finite number in \[0, 1\], got 2"):
        check_number("budget", 2, 0.0, 1.0)
    with pytest.raises(ValueError, match="hz must be a finite number of Hz > 0, got 0"):
        check_number("hz", 0, 0.0, low_open=True, unit="of Hz")
    with pytest.raises(TypeError, match="hz must be a finite number, got True"):
        check_number("hz", True)


def test_bools_choices_and_seconds():
    assert check_bool("flag", np.bool_(True)) is True
    with pytest.raises(TypeError, match="flag must be a bool, got 1"):
        check_bool("flag", 1)
    assert check_choice("mode", "hybrid", ("hybrid", "process")) == "hybrid"
    with pytest.raises(ValueError, match=r"mode must be one of \('hybrid', 'process'\), got 'x'"):
        check_choice("mode", "x", ("hybrid", "process"))
    assert check_seconds("timeout_s", None) is None and check_seconds("timeout_s", 3) == 3.0
    for bad in (0, -1, math.inf, 1e400, 1e12):
        with pytest.raises(ValueError, match="timeout_s must be a finite number of seconds in \\(0, "):
            check_seconds("timeout_s", bad)


def test_check_writable_dir_creates_the_directory_and_names_the_argument(tmp_path):
    from behavior1k_fast.core.checks import check_writable_dir

    target = tmp_path / "a" / "b"
    assert check_writable_dir("out_dir", str(target)) == str(target) and target.is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"out_dir='.*file/sub' is not a writable directory: Not a directory"):
        check_writable_dir("out_dir", str(tmp_path / "file" / "sub"))


def test_machine_limits_come_from_cores_and_memory():
    from behavior1k_fast.core.checks import MachineLimits

    small = MachineLimits(cores=2, memory_bytes=8 * 2**30)
    assert (small.max_processes, small.max_envs, small.max_chunk_steps) == (8, 1024, 4 * 2**20)
    assert MachineLimits(cores=64, memory_bytes=2**30).max_processes == 8  # memory-bound: 512 MiB / 64 MiB
    assert small.check_processes("num_env_processes", np.int64(8)) == 8
    with pytest.raises(ValueError, match=r"num_env_processes must be an int in \[1, 8\] on this machine \(2 usable "
                                         r"cores, 8 GiB of memory; at most 4 processes per core, 64 MiB each\), "
                                         r"got 9"):
        small.check_processes("num_env_processes", 9)
    with pytest.raises(TypeError, match="total_num_envs must be an int >= 1, got 2.0"):
        small.check_envs("total_num_envs", 2.0)
    with pytest.raises(ValueError, match=r"a table needs about 5 GiB of memory, more than 50% of this machine's"):
        small.check_memory("a table", 5 * 2**30)
    here = MachineLimits.here()
    assert here.cores >= 1 and here.memory_bytes > 2**28 and here is MachineLimits.here()


def test_a_value_in_a_message_is_shown_cut_short_at_any_size():
    assert shown(4) == "4" and shown("rgb") == "'rgb'" and shown([1, 2]) == "[1, 2]"
    nested = [[list(range(1000))] * 1000] * 1000  # 10**9 leaves, shared: repr would never end
    assert shown(nested).startswith("[[[0, 1, 2,") and len(shown(nested)) <= 200
    assert len(shown("x" * 10**6)) <= 200
    with pytest.raises(TypeError, match=r"^n must be an int, got \[\[\[0, 1,") as info:
        check_int("n", nested)
    assert len(str(info.value)) < 250
