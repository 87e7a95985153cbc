"""Command-line options that pick and configure a backend, shared by ``bench`` and ``validate``."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.checks import MachineLimits
from ..core.profile import parse_yaml
from .argtypes import path, positive_int


#: Bytes per pixel of one camera of one env at the least: an RGBA render target and the RGB observation.
PIXEL_BYTES = 7


def check_image_memory(args: argparse.Namespace, num_envs: int) -> None:
    """ValueError when ``--resolution`` images of ``num_envs`` envs do not fit this machine's memory."""
    if args.resolution is not None:
        MachineLimits.here().check_memory(f"--resolution {args.resolution} for {num_envs} envs",
                                          num_envs * args.resolution**2 * PIXEL_BYTES)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Backend options shared by ``bench`` and ``validate``."""
    parser.add_argument("--resolution", type=positive_int, default=None,
                        help="camera resolution in pixels, square (default: the backend's own)")
    parser.add_argument("--backend-config", type=path, default=None,
                        help="YAML file: ReferenceConfig fields (reference) or the OmniGibson env config "
                             "(omnigibson, required there)")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``make_factory`` keyword arguments from parsed ``add_backend_arguments`` options (and ``--backend``);
    a file that cannot be read or parsed is a ``ValueError`` naming ``--backend-config``."""
    options: dict[str, Any] = {}
    if args.backend_config is not None:
        path = args.backend_config
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ValueError(f"--backend-config {path!r}: {exc.strerror or exc}") from None
        data = parse_yaml(text, f"--backend-config {path!r}") or {}
        if not isinstance(data, dict):
            raise ValueError(f"--backend-config {path!r} must hold a mapping, got {type(data).__name__}")
        if args.backend == "omnigibson":
            options["config"] = data
        else:
            options.update(data)
    if args.resolution is not None:
        options["resolution"] = args.resolution
    return options
