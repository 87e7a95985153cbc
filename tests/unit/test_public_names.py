"""Every package a script or a user imports from says what it exports (``__all__``), and every name it lists
is there: ``from package import *`` and the layer tests' rule for scripts (public names only) rest on it.
``behavior1k_fast.rollout`` lists the user's names, not the engine's own machinery."""

from __future__ import annotations

import importlib

import pytest

#: The packages whose ``__init__`` scripts and users import from, with the command packages of ``tools``.
PACKAGES = [
    "behavior1k_fast",
    "behavior1k_fast.core",
    "behavior1k_fast.patching",
    "behavior1k_fast.backends",
    "behavior1k_fast.reference",
    "behavior1k_fast.omnigibson",
    "behavior1k_fast.rollout",
    "behavior1k_fast.rollout.schedules",
    "behavior1k_fast.rollout.transports",
    "behavior1k_fast.tools.bench",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_a_package_exports_is_there(name):
    package = importlib.import_module(name)
    exported = package.__all__
    assert isinstance(exported, list) and exported and len(set(exported)) == len(exported), exported
    missing = [n for n in exported if not hasattr(package, n)]  # a lazy name (``apply``) loads here
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_the_rollout_layer_exports_the_users_names_and_not_the_engines_machinery():
    from behavior1k_fast import rollout

    users = {"RolloutEngine", "EngineState", "RolloutStats", "ChunkResult", "PartitionPlan", "TrajectoryRecorder",
             "Trajectory", "Episodes", "Collector", "EngineVectorEnv", "PolicyProcess", "CommittedActions",
             "COMMITTED_KEY", "committed_width", "engine_shard", "merge_stats", "RestartPolicy", "WorkerDiedError",
             "ClosedError", "EngineBusyError"}
    machinery = {"EngineDriver", "Supervisor", "Transport", "SharedBuffers", "StageSlice", "call_policy",
                 "check_chunk_actions", "Chunk", "WorkerSpec", "EnvWorker", "make_executor"}
    assert users <= set(rollout.__all__), sorted(users - set(rollout.__all__))
    assert not machinery & set(rollout.__all__), sorted(machinery & set(rollout.__all__))
