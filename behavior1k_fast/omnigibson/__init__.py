"""Runtime patches for OmniGibson, one module per upstream area. Importing this imports no simulator."""

PATCHES: tuple = ()
