"""Shared-memory observation buffers: layout from the observation space, exact copies, clean unlink."""

import os

import numpy as np
import pytest
from gymnasium import spaces

from behavior1k_fast.rollout.shm import SharedBuffers

from .helpers import our_segments

SPACE = spaces.Dict(
    {
        "head::rgb": spaces.Box(0, 255, (3, 5, 7), np.uint8),
        "head::depth": spaces.Box(0.0, np.inf, (5, 7), np.float32),
        "proprio": spaces.Box(-np.inf, np.inf, (3,), np.float64),
    }
)


def obs_for(i):
    return {
        "head::rgb": np.full((3, 5, 7), i, np.uint8),
        "head::depth": np.full((5, 7), i / 2, np.float32),
        "proprio": np.arange(3) + 10.0 * i,
    }


def test_write_in_one_attachment_read_in_another():
    owner = SharedBuffers.create(SPACE, 4)
    peer = SharedBuffers.attach(owner.spec)
    try:
        assert our_segments() == [owner.spec.name]
        peer.write([3, 0, 2], [obs_for(3), obs_for(0), obs_for(2)])
        for rows in ([2, 3], [0, 2], [3]):  # contiguous and gathered rows
            got = owner.read(rows)
            for key in SPACE.spaces:
                assert got[key].dtype == SPACE[key].dtype
                np.testing.assert_array_equal(got[key], np.stack([obs_for(r)[key] for r in rows]))
        out = {k: np.zeros((2, *b.shape), b.dtype) for k, b in SPACE.spaces.items()}
        assert owner.read([0, 3], out) is out
        np.testing.assert_array_equal(out["proprio"], np.stack([obs_for(0)["proprio"], obs_for(3)["proprio"]]))
        copy = owner.read([3])
        peer.write([3], [obs_for(9)])
        assert copy["head::rgb"].max() == 3  # reads are copies, not views into shared memory
    finally:
        peer.close()
        owner.close()
        owner.unlink()
    assert our_segments() == []


def test_observation_of_the_wrong_shape_is_refused():
    owner = SharedBuffers.create(SPACE, 1)
    try:
        bad = obs_for(1)
        bad["head::depth"] = np.zeros((7, 5), np.float32)
        with pytest.raises(ValueError, match=r"'head::depth' has shape \(7, 5\), its space says \(5, 7\)"):
            owner.write([0], [bad])
    finally:
        owner.close()
        owner.unlink()


def test_only_dict_of_box_spaces():
    with pytest.raises(TypeError, match="Dict of Box"):
        SharedBuffers.create(spaces.Dict({"task": spaces.Discrete(3)}), 2)


def dead_pid():
    """The pid of a process that is gone."""
    import subprocess
    import sys

    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)


def test_only_segments_of_owners_that_are_gone_are_stale(tmp_path):
    from behavior1k_fast.rollout.shm import SHM_PREFIX, remove_stale_segments, segment_owner, stale_segments

    dead = dead_pid()
    names = [f"{SHM_PREFIX}{dead}_0123456789ab", f"{SHM_PREFIX}{os.getpid()}_0123456789ab", f"{SHM_PREFIX}x{dead}_ab",
             "other_1_ab", f"{SHM_PREFIX}{dead}"]
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 10)
    assert segment_owner(names[0]) == dead and segment_owner(names[2]) is None and segment_owner(names[4]) is None
    assert stale_segments(str(tmp_path)) == [(names[0], 10)]
    assert remove_stale_segments(str(tmp_path)) == [(names[0], 10)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


def test_a_test_run_has_its_own_segment_namespace_that_no_other_engine_on_the_host_cleans(tmp_path):
    import subprocess
    import sys

    from behavior1k_fast.rollout.shm import SHM_PREFIX, SHM_PREFIX_ENV, remove_stale_segments, segment_owner

    assert SHM_PREFIX == f"b1kf_t{os.getpid()}_" == os.environ[SHM_PREFIX_ENV]  # tests/conftest.py, per run
    dead = dead_pid()
    ours, default, other_run = f"{SHM_PREFIX}{dead}_ab", f"b1kf_{dead}_ab", f"b1kf_t1{os.getpid()}_{dead}_ab"
    for name in (ours, default, other_run):
        (tmp_path / name).write_bytes(b"x")
    assert segment_owner(default) is None and segment_owner(other_run) is None
    # an engine of the default namespace (a user's, elsewhere on the host) removes only its own dead segments
    clean = ("import sys; from behavior1k_fast.rollout.shm import SHM_PREFIX, remove_stale_segments; "
             "print(SHM_PREFIX, [n for n, _ in remove_stale_segments(sys.argv[1])])")
    env = {k: v for k, v in os.environ.items() if k != SHM_PREFIX_ENV}
    done = subprocess.run([sys.executable, "-c", clean, str(tmp_path)], capture_output=True, text=True, env=env,
                          check=True)
    assert done.stdout.split(" ", 1) == ["b1kf_", f"['{default}']\n"]
    assert remove_stale_segments(str(tmp_path)) == [(ours, 1)]
    assert [p.name for p in tmp_path.iterdir()] == [other_run]


@pytest.mark.parametrize("value", ["", "b1kf", "x_", "b1kf_1_", "b1kf_a/b_", "b1kf_a"])
def test_a_bad_segment_namespace_is_one_line_naming_the_variable(value):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import behavior1k_fast.rollout.shm"], capture_output=True,
                          text=True, env={**os.environ, "BEHAVIOR1K_FAST_SHM_PREFIX": value})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (f"ValueError: BEHAVIOR1K_FAST_SHM_PREFIX={value!r}: expected b1kf_ or "
                                            f"b1kf_<name>_, the name a letter then letters and digits")


def test_a_segment_namespace_too_long_for_a_segment_name_is_refused_where_it_is_read():
    import subprocess
    import sys

    from behavior1k_fast.rollout.shm import NAME_MAX, SharedBuffers

    longest = "b1kf_a" + "b" * (NAME_MAX - len("b1kf_a_") - 7 - 1 - 12) + "_"  # pid (7 digits), "_", 12 hex
    env = {**os.environ, "BEHAVIOR1K_FAST_SHM_PREFIX": longest}
    make = ("import sys; from gymnasium import spaces; import numpy as np; "
            "from behavior1k_fast.rollout.shm import SharedBuffers; "
            "b = SharedBuffers.create(spaces.Dict({'x': spaces.Box(0, 1, (1,), np.float32)}), 1); "
            "print(len(b.spec.name)); b.close(); b.unlink()")
    done = subprocess.run([sys.executable, "-c", make], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and int(done.stdout) <= NAME_MAX  # the longest accepted fits
    too_long = longest[:-1] + "b_"
    done = subprocess.run([sys.executable, "-c", "import behavior1k_fast.rollout.shm"], capture_output=True,
                          text=True, env={**os.environ, "BEHAVIOR1K_FAST_SHM_PREFIX": too_long})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"ValueError: BEHAVIOR1K_FAST_SHM_PREFIX is {len(too_long)} characters long; a segment name "
        f"(<prefix><pid>_<12 hex digits>) must fit NAME_MAX={NAME_MAX}, so the prefix may have at most "
        f"{len(longest)}")
    assert SharedBuffers  # the module imports with the default namespace
