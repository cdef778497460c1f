"""``python -m tfprof_towers``."""

import sys

from tfprof_towers.cli import main

if __name__ == "__main__":
    sys.exit(main())
