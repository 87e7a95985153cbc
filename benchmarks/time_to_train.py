"""The time-to-train judge as a script: ``python benchmarks/time_to_train.py [train-judge options]``.

Same as ``behavior1k-fast train-judge`` (``behavior1k_fast/tools/train/``); runs from a source checkout without
installing the console script (e.g. on a lent GPU machine with the repo on ``PYTHONPATH``).
"""

import sys

from behavior1k_fast.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["train-judge", *sys.argv[1:]]))
