"""Public face of the embedded reference simulator; the code lives in ``behavior1k_fast.backends.reference``.

Importing this package imports MuJoCo.
"""

from ..backends.reference import *  # noqa: F401,F403
from ..backends.reference import __all__  # noqa: F401
