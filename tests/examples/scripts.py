"""The scripts of ``examples/`` and ``benchmarks/``, loaded as modules by the tests that run them."""

import importlib.util
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_script(name: str, folder: Path = EXAMPLES) -> types.ModuleType:
    """``<folder>/<name>.py`` (default: ``examples/``) as the module ``name`` (registered in ``sys.modules``,
    as dataclasses need), once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
