"""``behavior1k-fast validate``: passes on the reference simulator, fails on a deliberately broken step."""

import argparse
import json
import math

import numpy as np
import pytest

from behavior1k_fast.tools import validate as v

#: Runs too short for the expert to finish: both envs are truncated at the horizon (the run's length), no termination.
NO_TERMINATION_NEEDED = v.Thresholds(min_terminations=0)
SMALL = dict(num_envs=2, chunks=2, chunk_size=8, backend_options={"resolution": 32}, thresholds=NO_TERMINATION_NEEDED)


class _Faulty:
    """Delegates to a backend; ``step`` number ``at`` is broken by ``breaks(obs, rewards, terminated)``."""

    def __init__(self, backend, at, breaks):
        self._backend, self._at, self._breaks, self._steps = backend, at, breaks, 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    @property
    def sim_time(self):
        return self._backend.sim_time

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        obs, rewards, terminated, truncated, infos = self._backend.step(actions, env_indices, get_obs, render)
        self._steps += 1
        if self._steps == self._at:
            self._breaks(obs, rewards, terminated)
        return obs, rewards, terminated, truncated, infos


def _add_reward(obs, rewards, terminated):
    rewards[0] += 0.25


def _darken_frame(obs, rewards, terminated):
    obs[0]["head::rgb"] = obs[0]["head::rgb"] // 2


def test_fast_path_matches_stock_on_the_reference_sim():
    report = v.validate(**SMALL)
    assert report.passed, report.format()
    assert report.max_abs_reward_delta == 0.0
    assert report.termination_agreement == 1.0
    assert report.proprio_max_abs_error == 0.0
    assert report.frames_compared == 3 * 2 * 3  # (reset + 2 boundaries) x 2 envs x 3 cameras
    assert report.frame_max_abs_diff == 0 and math.isinf(report.frame_min_psnr_db)
    assert report.sim_seconds_per_action_stock == pytest.approx(1 / 30)
    assert report.sim_seconds_per_action_fast == report.sim_seconds_per_action_stock
    assert "PASS" in report.format()


def test_the_default_run_ends_an_episode_by_success_and_one_by_timeout():
    report = v.validate(backend_options={"resolution": 32})
    assert report.passed, report.format()
    assert (report.chunks, report.episodes_ended, report.terminations, report.truncations) == (v.DEFAULT_CHUNKS, 2, 1, 1)
    assert "episode ends                2: 1 terminated, 1 truncated" in report.format()


def test_a_run_that_ends_too_few_episodes_fails():
    short = v.validate(num_envs=2, chunks=1, chunk_size=8, backend_options={"resolution": 32, "horizon": 500})
    assert short.episodes_ended == 0 and not short.passed
    assert short.failures == [
        "the run ended 0 episodes (0 by termination), fewer than min_episode_ends = 2: the "
        "end-of-episode path is untested; run more chunks, shorten the episodes in the backend config, or lower "
        "the minimums"
    ]


def test_a_run_short_of_terminations_names_terminations_as_the_shortfall():
    """Enough episode ends, all of them timeouts: the message names min_terminations, not the ends it met."""
    timeouts_only = v.validate(**{**SMALL, "thresholds": None})
    assert (timeouts_only.episodes_ended, timeouts_only.terminations) == (2, 0) and not timeouts_only.passed
    assert timeouts_only.failures == [
        "the run ended 2 episodes but 0 by termination, fewer than min_terminations = 1 (timeouts alone do not "
        "exercise a task's termination): the end-of-episode path is untested; run more chunks, shorten the "
        "episodes in the backend config, or lower the minimums"
    ]


def test_the_episode_horizon_defaults_to_the_run_length_unless_the_config_sets_one():
    assert v.run_backend_options("reference", {"resolution": 32}, 6, 32) == {"resolution": 32, "horizon": 192}
    assert v.run_backend_options("reference", {"horizon": 7}, 6, 32) == {"horizon": 7}
    config = {"task": {"type": "BehaviorTask", "termination_config": {"max_pose_dist": 1.0}}}
    cut = v.run_backend_options("omnigibson", {"config": config}, 6, 32)["config"]
    assert cut == {"task": {"type": "BehaviorTask", "termination_config": {"max_pose_dist": 1.0, "max_steps": 192}}}
    assert config["task"]["termination_config"] == {"max_pose_dist": 1.0}  # the caller's config is not changed
    given = {"task": {"termination_config": {"max_steps": 40}}}
    assert v.run_backend_options("omnigibson", {"config": given}, 6, 32) == {"config": given}


def test_on_omnigibson_timeouts_suffice_by_default():
    """Random actions seldom finish a BEHAVIOR task: the OmniGibson default needs ends, not terminations."""
    assert v.Thresholds(**v.DEFAULT_THRESHOLDS["omnigibson"]).min_terminations == 0
    assert v.Thresholds(**v.DEFAULT_THRESHOLDS["reference"]).min_terminations == 1


def test_episode_ends_inside_chunks_agree():
    """A short horizon truncates episodes mid-chunk: masked steps, terminal observation and reset agree."""
    report = v.validate(num_envs=2, chunks=3, chunk_size=8, backend_options={"resolution": 32, "horizon": 5},
                        thresholds=NO_TERMINATION_NEEDED)
    assert report.passed, report.format()
    assert report.episodes_ended >= 2 * 3


def test_a_step_that_changes_a_reward_fails():
    report = v.validate(**SMALL, fault=lambda b: _Faulty(b, at=3, breaks=_add_reward))
    assert not report.passed
    assert report.max_abs_reward_delta == pytest.approx(0.25)
    assert any("reward" in f for f in report.failures)
    assert "FAIL: max |delta reward|" in report.format()


def test_a_wrong_boundary_frame_fails():
    report = v.validate(**SMALL, fault=lambda b: _Faulty(b, at=8, breaks=_darken_frame))
    assert not report.passed
    assert report.frame_max_abs_diff > 0
    assert any("frames differ" in f for f in report.failures)


def _trajectory(frame, proprio):
    t = v.SideRecord()
    for arr in (t.rewards, t.terminated, t.truncated, t.applied):
        arr.append(np.zeros((1, 4), dtype=float if arr is t.rewards else bool))
    t.obs.append({"cam::rgb": frame[None], "robot0::proprio": proprio[None]})
    t.sim_seconds_per_action.append(1 / 30)
    return t


def test_psnr_threshold_decides_frame_agreement_off_the_reference_sim():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
    near = np.clip(frame.astype(int) + rng.integers(-2, 3, size=frame.shape), 0, 255).astype(np.uint8)
    limits = v.Thresholds(**v.DEFAULT_THRESHOLDS["omnigibson"], min_episode_ends=0)
    proprio = np.zeros(3)
    ok = v.compare(_trajectory(frame, proprio), _trajectory(near, proprio), limits, backend="omnigibson",
                   num_envs=1, chunks=1, chunk_size=4, seed=0)
    assert ok.passed, ok.format()
    assert 30 < ok.frame_min_psnr_db < math.inf
    far = rng.integers(0, 256, size=frame.shape, dtype=np.uint8)
    bad = v.compare(_trajectory(frame, proprio), _trajectory(far, proprio + 0.1), limits, backend="omnigibson",
                    num_envs=1, chunks=1, chunk_size=4, seed=0)
    assert any("PSNR" in f for f in bad.failures)
    assert any("proprio" in f for f in bad.failures)


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="reward_atol"):
        v.Thresholds(reward_atol=-1.0)
    with pytest.raises(ValueError, match="min_psnr_db"):
        v.Thresholds(min_psnr_db=0.0)
    with pytest.raises(ValueError, match=r"min_terminations must be an int in \[0, 2\], got 3"):
        v.Thresholds(min_terminations=3)
    with pytest.raises(ValueError, match="chunks"):
        v.validate(chunks=0)
    with pytest.raises(ValueError, match=r"num_envs must be an int in \[1, \d+\] on this machine"):
        v.validate(num_envs=10**8)
    with pytest.raises(ValueError, match=r"chunks=1000000000 x num_envs=2 x chunk_size=32 .* needs about"):
        v.validate(chunks=10**9)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 4294967295\], got 1180591620717411303424"):
        v.validate(seed=2**70)
    with pytest.raises(ValueError, match="backend"):
        v.validate(backend="isaaclab")
    with pytest.raises(ValueError, match="fault injection"):
        v.validate(backend="omnigibson", backend_options={"config": {}}, fault=lambda b: b)


def test_cli_exit_code_and_json(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    v.register(parser.add_subparsers())
    out = tmp_path / "validate.json"
    args = parser.parse_args(["validate", "--resolution", "32", "--chunks", "1", "--chunk-size", "4",
                              "--min-terminations", "0", "--json", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr()
    assert "PASS" in printed.out
    # what runs is said as it starts, on stderr (the report alone on stdout)
    assert [line.split(" (")[0] for line in printed.err.splitlines()] == [
        "validate: finding the scripted expert's actions", "validate: recording the stock side",
        "validate: recording the fast side", "validate: comparing the sides ..."]
    assert "every step rendered: the slow side" in printed.err.splitlines()[1]  # why it takes the longest
    data = json.loads(out.read_text())
    assert data["passed"] and data["chunks"] == 1 and data["truncations"] == 2


def test_a_json_report_that_cannot_be_written_is_one_line_and_exit_74_after_the_report(tmp_path, monkeypatch,
                                                                                        capsys):
    """A full disk while the report is written: the verdict printed, one error line, the old file kept whole."""
    import errno
    import os

    from behavior1k_fast.tools.cli import main
    from behavior1k_fast.tools.measure import files

    out = tmp_path / "validate.json"
    out.write_text('{"old": true}\n')

    def full_disk(fd):  # the bytes reach the disk at the flush, which a full disk refuses
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    code = main(["validate", "--resolution", "32", "--chunks", "1", "--chunk-size", "4", "--min-terminations", "0",
                 "--json", str(out)])
    printed = capsys.readouterr()
    assert code == files.EXIT_WRITE_FAILED == 74
    assert "PASS" in printed.out and "Traceback" not in printed.err
    error = printed.err.splitlines()[-1]
    assert error.startswith("behavior1k-fast validate: error: cannot write ") and "No space left on device" in error
    assert json.loads(out.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validate.json"]  # no temporary file left


def test_a_side_recorded_in_its_own_process_matches_in_process():
    """The isolation used for Isaac Sim (one simulator per process) records the same trajectory."""
    from behavior1k_fast.backends import make_factory
    from behavior1k_fast.rollout.bootstrap import call_with_profile
    from behavior1k_fast.core.profile import RolloutProfile

    factory = make_factory("reference", resolution=32)
    profile = RolloutProfile(chunk_size=4)
    here = v.record(profile, factory, 1, 5, None, 2)
    there = call_with_profile(True, v.record, profile, factory, 1, 5, None, 2)
    report = v.compare(here, there, v.Thresholds(min_episode_ends=0, min_terminations=0), backend="reference",
                       num_envs=1, chunks=2, chunk_size=4, seed=5)
    assert report.passed, report.format()
    np.testing.assert_array_equal(np.stack(here.rewards), np.stack(there.rewards))


def test_cli_exits_1_past_a_threshold(monkeypatch, capsys):
    import functools

    broken = functools.partial(v.validate, fault=lambda b: _Faulty(b, at=2, breaks=_add_reward))
    monkeypatch.setattr(v, "validate", broken)
    parser = argparse.ArgumentParser()
    v.register(parser.add_subparsers())
    args = parser.parse_args(["validate", "--resolution", "32", "--chunks", "1", "--chunk-size", "4",
                              "--reward-atol", "0.1"])
    assert args.func(args) == 1
    assert "FAIL: max |delta reward| = 0.25 > reward_atol = 0.1" in capsys.readouterr().out
