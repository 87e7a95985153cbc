"""Checks shared by every test folder, the test run's own shared-memory namespace, and the run's last line
about what it skipped."""

import os
from collections import Counter

import pytest

#: This test run's namespace of shared-memory segments (``behavior1k_fast.rollout.shm``), set before anything
#: imports that module and inherited by every process a test starts: an engine started elsewhere on the host
#: (another copy of the suite, a user's training) never removes the segments a test left to check, and this
#: run never removes theirs.
os.environ["BEHAVIOR1K_FAST_SHM_PREFIX"] = f"b1kf_t{os.getpid()}_"

#: Skip reasons that mean "no upstream OmniGibson texts of that line here" (``tests/upstream_lines.py``).
UPSTREAM_SKIPS = ("no upstream texts", "texts: ")


def pytest_configure(config):
    from behavior1k_fast.rollout import shm

    if shm.SHM_PREFIX != os.environ[shm.SHM_PREFIX_ENV]:
        raise pytest.UsageError(f"behavior1k_fast.rollout.shm was imported before tests/conftest.py set "
                                f"{shm.SHM_PREFIX_ENV}: its prefix is {shm.SHM_PREFIX!r}")


def skip_summary(reasons: list[str]) -> str | None:
    """One line: how many tests skipped and why, grouped, with how to run the upstream ones; ``None`` for none."""
    if not reasons:
        return None
    upstream = sum(any(key in reason for key in UPSTREAM_SKIPS) for reason in reasons)
    others = Counter(reason for reason in reasons if not any(key in reason for key in UPSTREAM_SKIPS))
    parts = []
    if upstream:
        parts.append(f"{upstream} need upstream OmniGibson texts that are not here (to check the patches on your "
                     f"own BEHAVIOR-1K checkout: link it as <folder>/main or <folder>/v3.7 and run with "
                     f"BEHAVIOR1K_FAST_UPSTREAM=<folder>; docs/testing.md)")
    parts += [f"{count}: {reason}" for reason, count in others.most_common()]
    return f"{len(reasons)} skipped: " + "; ".join(parts) + " (pytest -rs lists them)"


def pytest_terminal_summary(terminalreporter):
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons.append(reason.removeprefix("Skipped: "))
    line = skip_summary(reasons)
    if line:
        terminalreporter.write_line(line, yellow=True)


@pytest.fixture(autouse=True)
def no_leaked_process_patches():
    """A test must leave the process-wide patch set as it found it: a leaked profile patches every
    module imported later in the session (post-import hooks) and changes what other tests see."""
    from behavior1k_fast.patching import omnigibson as patching

    before = patching.active_profile()
    yield
    after = patching.active_profile()
    if after != before:
        patching.revert()
        pytest.fail(f"the test left the process-wide patch set applied (profile {after!r})")
