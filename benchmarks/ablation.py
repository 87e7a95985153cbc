"""The ablation benchmark as a script: ``python benchmarks/ablation.py [bench options]``.

Same as ``behavior1k-fast bench``; runs from a source checkout without installing the console script
(e.g. on a lent GPU machine with the repo on ``PYTHONPATH``).
"""

import argparse
import sys

from behavior1k_fast.tools import bench

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="benchmarks/ablation.py")
    bench.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *sys.argv[1:]])
    sys.exit(args.func(args))
