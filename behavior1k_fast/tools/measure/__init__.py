"""The measurement kit ``bench`` and ``tune`` share: one way to configure, calibrate, run and model a layout.

- :mod:`.config`: :class:`~.config.RunConfig` (backend, chunk size, rounds, policy sizing, device, seed,
  output), the command-line options that fill it (declared once, added to both parsers), the quick /
  BEHAVIOR-like / device resolution and the core rule (how many cores the driver and policy keep).
- :mod:`.policy`: the VLA-cost chunk policy and its size calibration; :mod:`.calibration` sizes it for a
  run (one forward at the reference layout's stage batch takes that layout's env ms per chunk).
- :mod:`.runs`: one layout run through the rollout engine (:func:`~.runs.run_engine_row`), measured.
- :mod:`.record`: :class:`~.record.RowMeasure`, the one typed record of what a run measured.
- :mod:`.pipeline`: the pipeline model: the round time of a layout from T_env and T_model. The bound bench
  prints and tune's prediction are the same function (:func:`~.pipeline.pipeline_round`).
- :mod:`.critical_path`: where a ``lookahead`` run's rounds go (send, deliver, to lead, collect, forward),
  from its profiler spans.
- :mod:`.layouts`: P x E x K layouts, partitions and schedules; the feasible space.
- :mod:`.resources`: CPU, RSS and GPU memory of the driver and its workers during a run.
- :mod:`.machine`: the machine a result was measured on (:func:`~.machine.describe_machine`, the file tag
  :func:`~.machine.machine_tag`) and how busy it was (:func:`~.machine.sample_load`).
- :mod:`.soak`: what an engine's processes hold over a long run (RSS, fds, segments, what is left after
  ``close()``), for ``benchmarks/soak.py`` and ``benchmarks/collector_soak.py``, and the collector soak
  itself (every applied action checked against each env's own log).
- :mod:`.files`: every result file written whole or not at all (:func:`~.files.write_json`,
  :func:`~.files.write_text`, :func:`~.files.save_figure`); a failed write is a
  :class:`~.files.ResultWriteError` (exit code 74 on the command line).
- :mod:`.venvs`: throw-away venvs with or without the auto-apply hook, as ``pip install`` leaves it (the
  start-up cost benchmark and the hook's tests).

Importing this package is light: torch, the engine and the backends are imported where a run needs them.
"""
