"""The lowest layer: the rollout profile, frequencies and the K-stage rescale, tracing, the backend contract
and the argument checks. Imports nothing else of the package.
"""

__version__ = "0.4.0"

__all__ = ["__version__"]
