"""Command-line options that pick and configure a backend, shared by ``bench`` and ``validate``."""

from __future__ import annotations

import argparse
from typing import Any


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Backend options shared by ``bench`` and ``validate``."""
    parser.add_argument("--resolution", type=int, default=None,
                        help="camera resolution in pixels, square (default: the backend's own)")
    parser.add_argument("--backend-config", default=None,
                        help="YAML file: ReferenceConfig fields (reference) or the OmniGibson env config "
                             "(omnigibson, required there)")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``make_factory`` keyword arguments from parsed ``add_backend_arguments`` options (and ``--backend``)."""
    options: dict[str, Any] = {}
    if args.backend_config:
        import yaml

        with open(args.backend_config, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"--backend-config {args.backend_config!r} must hold a mapping, got {type(data).__name__}")
        if args.backend == "omnigibson":
            options["config"] = data
        else:
            options.update(data)
    if args.resolution is not None:
        if args.resolution < 1:
            raise ValueError(f"--resolution must be >= 1 pixel, got {args.resolution}")
        options["resolution"] = args.resolution
    return options
