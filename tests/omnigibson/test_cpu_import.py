"""The narrow import hook that lets omnigibson 1.1.1 import on CPU torch."""

from __future__ import annotations

from behavior1k_fast.patching.omnigibson import cpu_import


def test_finder_answers_only_for_vision_utils(og):
    import omnigibson.utils

    finder = cpu_import.RemapperOnCpuFinder()
    package_path = omnigibson.utils.__path__
    assert finder.find_spec("json") is None
    assert finder.find_spec("omnigibson.utils.usd_utils", package_path) is None
    spec = finder.find_spec(cpu_import.TARGET, package_path)
    assert spec is not None and spec.name == cpu_import.TARGET
    assert isinstance(spec.loader, cpu_import._RemapperOnCpuLoader)


def test_remappers_are_built_on_cpu_when_cuda_is_absent(og):
    from omnigibson.sensors.vision_sensor import VisionSensor
    from omnigibson.utils.vision_utils import Remapper

    if cpu_import.needed():
        assert cpu_import.installed()
        assert Remapper.__init__ is cpu_import._cpu_remapper_init
        remapper = VisionSensor.SEMANTIC_REMAPPER
        assert remapper.key_array.device.type == "cpu" and remapper.key_array.numel() == 0
        assert remapper.known_ids == set() and remapper.warning_printed == set()
    else:
        assert Remapper.__init__ is not cpu_import._cpu_remapper_init
