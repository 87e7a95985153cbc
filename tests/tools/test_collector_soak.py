"""The collector soak (``benchmarks/collector_soak.py``, ``tools/measure/soak.py``): its check of the batches
against each env's own log of applied actions finds each kind of fault, and a short run passes every check
and writes its results."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from behavior1k_fast.tools.measure.soak import check_action_logs

ROOT = Path(__file__).resolve().parents[2]

#: env 0's log: two worker processes (the first killed after "c"); collector 1 holds a, b; its batch with c
#: was in flight at the kill; collector 2 holds d; e, f ran in a batch the break-out to collector 3 dropped.
LOGS = {0: [["a", "b", "c"], ["d", "e", "f", "g"]]}
BATCHES = [(1, 0, "a"), (1, 0, "b"), (2, 0, "d"), (3, 0, "g")]


def test_batches_that_hold_each_applied_action_once_and_drop_only_at_kills_and_break_outs_pass():
    checks = check_action_logs(LOGS, BATCHES)
    assert checks["problem_count"] == 0, checks["problems"]
    assert checks["dropped"] == {"end_of_a_worker_log": 1, "before_the_next_collector": 2}
    assert (checks["applied_logged"], checks["in_batches"]) == (7, 4)


@pytest.mark.parametrize("batches, problem", [
    (BATCHES + [(3, 0, "d")], "action d is in 2 batches"),
    (BATCHES + [(3, 0, "x")], "action x of a batch is in no log"),
    ([(1, 0, "a"), (1, 0, "b"), (3, 0, "g")], "applied actions in no batch before one of collector 3 (the last before "
                                             "them: 1)"),  # d, e, f: a gap, but g's collector follows b's
    ([(1, 0, "a"), (1, 0, "b"), (2, 0, "e"), (2, 0, "d"), (3, 0, "g")], "ran before the one a batch before it holds"),
    ([(1, 0, "b"), (2, 0, "d"), (3, 0, "g")], "applied actions in no batch before one of collector 1"),  # a lost
    ([(2, 0, "a"), (1, 0, "b"), (2, 0, "d"), (3, 0, "g")], "an action of collector 1 after one of collector 2"),
])
def test_each_kind_of_fault_is_found(batches, problem):
    checks = check_action_logs(LOGS, batches)
    assert checks["problem_count"] >= 1 and any(problem in line for line in checks["problems"]), checks["problems"]


@pytest.mark.slow
def test_a_short_soak_with_kills_and_break_outs_passes_every_check_and_writes_its_results(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "collector_soak.py"), "--minutes", "0.25",
                           "--kill-every-s", "4", "--restart-every-s", "5", "--tag", "test"],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "behavior1k_fast_results"
    assert sorted(p.name for p in out.iterdir()) == ["collector_soak_test.json", "collector_soak_test.png"]
    result = json.loads((out / "collector_soak_test.json").read_text())
    assert result["checks"] == {"flat": True, "engine_idle_after_every_breakout": True, "every_kill_respawned": True,
                                "every_applied_action_in_at_most_one_batch_and_the_rest_dropped": True,
                                "nothing_left_after_close": True}
    assert result["ok"] and result["collectors"] >= 2 and len(result["kills"]) >= 2
    assert result["actions"]["dropped"]["before_the_next_collector"] > 0  # the break-outs landed mid-batch
    assert result["actions"]["in_batches"] > 0 and result["after_close"]["children"] == 0
