"""Runs the command line (:mod:`tfprof_towers.cli`) as ``python -m tfprof_towers``."""

import sys

from tfprof_towers.cli import main

if __name__ == "__main__":
    sys.exit(main())
