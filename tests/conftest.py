"""Checks shared by every test folder."""

import pytest


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
