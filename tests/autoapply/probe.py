"""Reports, as JSON, what the auto-apply hook did in the process that runs it: ``python -m
tests.autoapply.probe [--import-omnigibson]`` in a child, or :class:`Reporter` as a Ray actor. Imports
nothing of this package itself before it has looked."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def report(import_omnigibson: bool = False) -> dict[str, Any]:
    """Whether the hook imported this package at start-up, whether omnigibson was imported already, the
    OpenMP thread variable, the hook's record and every patch state; with ``import_omnigibson``, the patch
    states and ``VectorEnvironment.step``'s signature after importing OmniGibson too."""
    out: dict[str, Any] = {
        "ours_imported": any(name.split(".")[0] == "behavior1k_fast" for name in sys.modules),
        "omnigibson_imported": "omnigibson" in sys.modules,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "pid": os.getpid(),
    }
    if not out["ours_imported"]:
        return out
    import behavior1k_fast
    from behavior1k_fast.patching import autoapply

    record = autoapply.startup()
    out["startup"] = record and {
        "value": record.value,
        "source": record.source,
        "error": record.error,
        "profile": record.profile and record.profile.to_dict(),
    }
    out["states"] = {name: str(state) for name, state in behavior1k_fast.status().states.items()}
    if import_omnigibson:
        import inspect

        from behavior1k_fast.patching.omnigibson import cpu_import

        cpu_import.import_omnigibson()
        from omnigibson.envs.vec_env_base import VectorEnvironment

        out["after_import"] = {
            "states": {name: str(state) for name, state in behavior1k_fast.status().states.items()},
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "step_signature": str(inspect.signature(VectorEnvironment.step)),
        }
    return out


class Reporter:
    """Ray actor body: its own report, and the report of an actor it starts without a ``runtime_env`` (as
    RLinf's env worker starts its ``BehaviorProcess`` actors)."""

    def report(self) -> dict[str, Any]:
        return report()

    def child_report(self) -> dict[str, Any]:
        import ray

        child = ray.remote(Reporter).remote()
        try:
            return ray.get(child.report.remote())
        finally:
            ray.kill(child)


if __name__ == "__main__":
    print(json.dumps(report(import_omnigibson="--import-omnigibson" in sys.argv)))
