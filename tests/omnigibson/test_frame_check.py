"""``validate``'s current-frame check: with one render per chunk a frame offset (a render that returns before its
frame is current, or Replicator data of the frame before) hands the policy the frame of the boundary before; the
check flags each fast boundary frame no nearer the stock frame of its own boundary than the one a chunk before."""

from __future__ import annotations

import numpy as np

from behavior1k_fast.tools import validate as v

LIMITS = v.Thresholds(**v.DEFAULT_THRESHOLDS["omnigibson"], min_episode_ends=0)


def side(frames: list[np.ndarray]) -> v.SideRecord:
    """A record of one env: the reset frame, then one boundary frame per chunk (rewards etc. all zero)."""
    record = v.SideRecord()
    record.obs = [{"cam::rgb": f[None], "robot0::proprio": np.zeros((1, 2))} for f in frames]
    for _ in frames[1:]:
        for arr in (record.rewards, record.terminated, record.truncated, record.applied):
            arr.append(np.zeros((1, 4), dtype=float if arr is record.rewards else bool))
        record.sim_seconds_per_action.append(1 / 30)
    return record


def scene(n: int) -> list[np.ndarray]:
    """``n`` boundary frames of a scene that moves over each chunk (a bright square walking right)."""
    frames = []
    for k in range(n):
        frame = np.full((16, 16, 3), 40, dtype=np.uint8)
        frame[4:10, 2 * k:2 * k + 6] = 220
        frames.append(frame)
    return frames


def compare(stock: list, fast: list) -> v.ValidationReport:
    return v.compare(side(stock), side(fast), LIMITS, backend="omnigibson", num_envs=1, chunks=len(stock) - 1,
                     chunk_size=4, seed=0)


def test_the_current_frame_passes():
    frames = scene(4)
    noisy = [np.clip(f.astype(int) + 1, 0, 255).astype(np.uint8) for f in frames]  # renderer noise, same frame
    report = compare(frames, noisy)
    assert report.passed, report.format()
    assert report.stale_boundary_frames == 0
    assert "stale boundary frames       0" in report.format()


def test_a_frame_from_a_chunk_before_fails_even_where_psnr_would_let_it_through():
    frames = scene(4)
    lagging = [frames[0]] + frames[:-1]  # each boundary shows the frame of the boundary before
    report = v.compare(side(frames), side(lagging), v.Thresholds(min_psnr_db=1.0, state_atol=1e-3,
                                                                  reward_atol=1e-4, min_episode_ends=0,
                                                                  min_terminations=0),
                       backend="omnigibson", num_envs=1, chunks=3, chunk_size=4, seed=0)
    assert report.stale_boundary_frames == 3 and report.frame_min_psnr_db > 1.0
    assert any("3 boundary frames of the fast path are no nearer" in f for f in report.failures)


def test_a_scene_that_did_not_change_over_the_chunk_is_not_judged():
    still = [scene(1)[0]] * 3
    assert v.stale_frames(np.stack(still[:2]), np.stack(still[1:]), np.stack(still[:2])) == 0
