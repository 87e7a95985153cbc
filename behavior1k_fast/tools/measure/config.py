"""What a measured run is configured with, the command-line options that fill it, and their defaults.

:class:`RunConfig` holds what ``bench`` and ``tune`` both need (backend and its options, chunk size, rounds,
warm-up, policy sizing, device, executor, seed, output); ``bench``'s ``BenchConfig`` extends it with its
layout and rows. :func:`add_run_arguments` declares the shared options once, for both parsers, and
:func:`run_options` resolves them: ``--quick`` lowers the reference cameras to :data:`QUICK_RESOLUTION`,
``--behavior-like`` turns on BEHAVIOR's reset and contact costs in the reference simulator, ``--device
auto`` becomes ``cuda`` where torch sees a GPU, else ``cpu``; results go to :data:`DEFAULT_OUT_DIR` under
the working directory unless ``--out-dir`` names another, and ``--record`` writes the committed
``benchmarks/results/`` of a source checkout instead (:func:`record_dir`; with ``--quick`` only when
``--force-record`` says so: a quick run is not a result to commit). A quick run's files carry their own
names (:func:`~.files.result_stem`: ``bench_cpu2_quick.json``), so a quick run never replaces a full one.

The core rule, one for both commands (:func:`process_budget`, :func:`policy_threads`): a policy on the CPU
keeps one core for its forward and the driver, so at most cores - 1 env processes; a policy on a GPU keeps
none (the driver mostly waits on the GPU and the pipes; the CPU term of the pipeline model counts what it
does use), so at most one env process per core. ``--max-processes`` sets the budget instead. On the CPU the
policy's intra-op threads are the cores the env processes leave, at least one.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from ...backends import BACKENDS
from ...core.checks import check_int, check_number, check_positive_int, check_seed, check_writable_dir
from ..argtypes import (chunk_steps, device, file_name, nonnegative_int, path, positive_int, positive_number,
                       process_count, seed)
from ..backend_args import add_backend_arguments, backend_options
from .policy import MAX_MODEL_MS, check_width

#: Pixels per side of the reference cameras in ``--quick`` runs.
QUICK_RESOLUTION = 64
#: Timed rounds of a run unless ``--rounds`` says otherwise (``--quick``: each command's own count).
ROUNDS = 6
#: Where results go unless ``--out-dir`` or ``--record`` says otherwise (relative to the working directory).
DEFAULT_OUT_DIR = "behavior1k_fast_results"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one, else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def process_budget(cores: int, device: str) -> int:
    """Most env processes next to a policy on ``device`` on ``cores`` cores (module docs: the core rule)."""
    return max(1, cores - 1) if device == "cpu" else max(1, cores)


def record_dir() -> str:
    """The committed ``benchmarks/results/`` of the source checkout this package runs from (``--record``);
    ValueError when the package is not run from one."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    path = root / "benchmarks" / "results"
    if not path.is_dir():
        raise ValueError(f"--record writes the committed benchmarks/results/ of a source checkout; this package "
                         f"runs from {root}, which has none (use --out-dir)")
    return str(path)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out-dir`` and ``--record`` on ``parser`` (every command and script that writes results);
    :func:`output_dir` resolves them."""
    parser.add_argument("--out-dir", type=path, default=None,
                        help=f"where the JSON and the other files go (default: ./{DEFAULT_OUT_DIR})")
    parser.add_argument("--record", action="store_true",
                        help="write into the source checkout's committed benchmarks/results/ instead")


def output_dir(args: argparse.Namespace) -> str:
    """Where results go, from :func:`add_output_arguments`' options: ``--out-dir``, ``--record``'s
    :func:`record_dir`, else :data:`DEFAULT_OUT_DIR`; ValueError for both options at once."""
    if args.record and args.out_dir is not None:
        raise ValueError(f"--record writes benchmarks/results/; it cannot go with --out-dir {args.out_dir!r}")
    return record_dir() if args.record else (args.out_dir or DEFAULT_OUT_DIR)


def checked_output_dir(args: argparse.Namespace) -> str:
    """:func:`output_dir`, made and checked writable (ValueError naming ``--out-dir``): a script's last check."""
    return check_writable_dir("--out-dir", output_dir(args))


def policy_threads(cores: int, processes: int) -> int:
    """Intra-op threads of a policy on the CPU next to ``processes`` env processes on ``cores`` cores: one per
    core the env processes leave free, at least one (oversubscribed OpenMP barriers stall)."""
    return max(1, cores - processes)


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` where torch sees a GPU, else ``cpu``; any other name as given."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _behavior_like_options(backend: str) -> dict[str, Any]:
    """The ``ReferenceConfig`` fields that ``ReferenceConfig.behavior_like()`` turns on (BEHAVIOR's costs)."""
    if backend != "reference":
        raise ValueError(f"--behavior-like applies to the reference simulator, got --backend {backend}")
    from dataclasses import fields

    from ...backends.reference import ReferenceConfig

    preset, plain = ReferenceConfig.behavior_like(), ReferenceConfig()
    changed = (f.name for f in fields(preset))
    return {name: getattr(preset, name) for name in changed if getattr(preset, name) != getattr(plain, name)}


@dataclass(frozen=True)
class RunConfig:
    """Settings every measured run of a command shares.

    Args:
        backend: simulator name (``behavior1k_fast.backends.BACKENDS``).
        backend_options: ``make_factory`` keyword arguments of that backend.
        quick: the command's small, fast variant (recorded; the defaults it changed are already applied).
        chunk_size: N actions per chunk.
        rounds: timed rounds (one chunk per env each) of every run.
        warmup: untimed rounds before the timed ones.
        model_ms: target ms of one policy forward at the reference layout's stage batch, or ``None``: that
            layout's env ms per chunk, measured (:func:`~.calibration.calibrate`).
        model_width: fixed policy width (a multiple of 64), or ``None``: calibrated.
        model_depth: fixed policy depth in blocks (needs ``model_width``), or ``None``: calibrated.
        device: policy device, ``cpu`` or ``cuda[:i]``.
        executor: the engine's executor for the runs.
        seed: seed of worker 0 (worker w: seed + w) and of the policy's weights.
        max_processes: the process budget: most env processes of any run (``None``: :func:`process_budget`).
        repeats: runs of every layout, interleaved; a row is their median run, with their spread.
        out_dir: where the command writes its files.
        tag: machine tag in the file names, or ``None``: derived from the machine.
    """

    backend: str = "reference"
    backend_options: dict = field(default_factory=dict)
    quick: bool = False
    chunk_size: int = 32
    rounds: int = ROUNDS
    warmup: int = 1
    model_ms: float | None = None
    model_width: int | None = None
    model_depth: int | None = None
    device: str = "cpu"
    executor: str = "process"
    seed: int = 0
    max_processes: int | None = None
    repeats: int = 1
    out_dir: str = DEFAULT_OUT_DIR
    tag: str | None = None

    def __post_init__(self) -> None:
        for name in ("chunk_size", "rounds", "repeats"):
            check_positive_int(name, getattr(self, name))
        check_int("warmup", self.warmup, 0)
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {self.device!r}")
        if self.model_ms is not None:
            check_number("model_ms", self.model_ms, 0.0, MAX_MODEL_MS, low_open=True, unit="of ms")
        if self.model_width is not None:
            check_width("model_width", self.model_width)
        if self.model_depth is not None:
            check_positive_int("model_depth", self.model_depth)
            if self.model_width is None:
                raise ValueError(f"model_depth={self.model_depth} needs model_width too (a width alone has its "
                                 f"depth calibrated)")
            if self.model_ms is not None:
                raise ValueError(f"model_ms={self.model_ms} is a calibration target, and with model_width and "
                                 f"model_depth both given nothing is calibrated")
        check_seed("seed", self.seed)
        if self.max_processes is not None:
            check_positive_int("max_processes", self.max_processes)

    @property
    def process_budget(self) -> int:
        """Most env processes of any run: ``max_processes``, or the core rule's for this machine and device."""
        if self.max_processes is not None:
            return self.max_processes
        return process_budget(usable_cores(), self.device)


def add_run_arguments(parser: argparse.ArgumentParser, *, quick_help: str, quick_rounds: int, reference: str,
                      repeats: int, quick_repeats: int) -> None:
    """The options of :class:`RunConfig` (and the backend's), on ``parser``.

    ``quick_help`` says what ``--quick`` does for this command, ``quick_rounds`` and ``quick_repeats`` are
    its defaults of ``--rounds`` and ``--repeats`` there, ``repeats`` the default otherwise (kept in the
    parsed arguments for :func:`run_options`); ``reference`` names the layout the policy is calibrated on."""
    parser.set_defaults(quick_rounds=quick_rounds, default_repeats=(repeats, quick_repeats))
    parser.add_argument("--backend", choices=BACKENDS, default="reference", help="simulator (default: reference)")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--chunk-size", type=chunk_steps, default=32, help="N actions per chunk (default: 32)")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help=f"timed chunks per env of each run (default: {ROUNDS}, quick: {quick_rounds})")
    parser.add_argument("--warmup", type=nonnegative_int, default=1,
                        help="untimed rounds before each run's timed ones (default: 1)")
    parser.add_argument("--model-ms", type=positive_number, default=None,
                        help=f"target ms of one policy forward at the stage batch of {reference} (default: its "
                             f"env ms per stage chunk, measured at start); the model's width and depth are "
                             f"calibrated to it")
    parser.add_argument("--model-width", type=positive_int, default=None,
                        help="fix the policy transformer's width (a multiple of 64); its depth is calibrated unless "
                             "--model-depth is given too")
    parser.add_argument("--model-depth", type=positive_int, default=None,
                        help="fix the policy transformer's depth in blocks (needs --model-width; nothing calibrated)")
    parser.add_argument("--behavior-like", action="store_true",
                        help="reference backend: BEHAVIOR's reset and contact costs on (ReferenceConfig.behavior_like)")
    parser.add_argument("--device", type=device, default="auto",
                        help="policy device: cpu, cuda or auto (default: auto)")
    parser.add_argument("--max-processes", type=process_count, default=None,
                        help="process budget: most env processes of any layout, the engine's and the peers' "
                             "(default: cores - 1 with the policy on the CPU, cores with it on a GPU)")
    parser.add_argument("--repeats", type=positive_int, default=None,
                        help=f"runs of every layout, interleaved; each row is their median with min-max (default: "
                             f"{repeats}, quick: {quick_repeats})")
    add_output_arguments(parser)
    parser.add_argument("--force-record", action="store_true",
                        help="with --record --quick: commit the quick run to benchmarks/results/ too (under its own "
                             "<command>_<tag>_quick names, beside the full run)")
    parser.add_argument("--tag", type=file_name, default=None,
                        help="machine tag in the file names (default: derived, e.g. cpu2)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of worker 0 (worker w: seed + w)")
    add_backend_arguments(parser)


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`RunConfig` keyword arguments from options added by :func:`add_run_arguments`, resolved (module
    docs)."""
    options = backend_options(args)
    if args.behavior_like:
        options = _behavior_like_options(args.backend) | options
    if args.quick and args.backend == "reference":
        options.setdefault("resolution", QUICK_RESOLUTION)
    out_dir = output_dir(args)
    if args.record and args.quick and not args.force_record:
        raise ValueError("--record --quick would commit a quick run to benchmarks/results/, which holds full runs: "
                         "leave out --record (results go to --out-dir), or add --force-record")
    if args.force_record and not (args.record and args.quick):
        raise ValueError("--force-record only goes with --record --quick")
    repeats, quick_repeats = args.default_repeats
    return {
        "backend": args.backend, "backend_options": options, "quick": args.quick, "chunk_size": args.chunk_size,
        "rounds": args.rounds if args.rounds is not None else (args.quick_rounds if args.quick else ROUNDS),
        "warmup": args.warmup, "model_ms": args.model_ms, "model_width": args.model_width,
        "model_depth": args.model_depth, "device": resolve_device(args.device), "seed": args.seed,
        "max_processes": args.max_processes,
        "repeats": args.repeats if args.repeats is not None else (quick_repeats if args.quick else repeats),
        "out_dir": out_dir, "tag": args.tag,
    }


def check_run(config: RunConfig) -> None:
    """What can fail on this machine before a run (raise inside :func:`~..argtypes.usage_errors`): the backend
    is installed, the images hold the benchmark policy's patches, the device exists. A command checks its
    ``out_dir`` last (:func:`check_out_dir`)."""
    from ...backends import check_installed
    from ..argtypes import check_device
    from .policy import check_image_size

    check_installed(config.backend)
    check_image_size("--resolution", config.backend_options.get("resolution"))
    check_device(config.device)


def check_out_dir(config: RunConfig) -> None:
    """``out_dir`` is writable (made when absent: a fresh default directory is the usual case); a command's
    last check, so nothing is created for a run that its other input stops."""
    from ...core.checks import check_writable_dir

    check_writable_dir("--out-dir", config.out_dir)
