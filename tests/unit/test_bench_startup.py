"""``make bench-startup``'s figures (benchmarks/bench_startup.py) from ``-X importtime`` lines written here:
each module's least self time over the runs, the package's own share, the wall time's median."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `benchmarks/` sits beside the package, not inside it
    sys.path.insert(0, str(REPO))
startup = importlib.import_module("benchmarks.bench_startup")

RUN_1 = """import time: self [us] | cumulative | imported package
import time:       120 |        120 |   tfprof_towers.vocab
import time:      1500 |       1620 | tfprof_towers
import time:      4000 |       4000 |     numpy._core
import time:       300 |       4300 |   numpy
package /somewhere/tfprof_towers
VmHWM 51200
"""
RUN_2 = """import time: self [us] | cumulative | imported package
import time:       100 |        100 |   tfprof_towers.vocab
import time:      1700 |       1800 | tfprof_towers
import time:      3000 |       3000 |     numpy._core
import time:       500 |       3500 |   numpy
import time:       250 |        250 | concurrent.futures
"""


def test_importtime_lines_are_read_and_the_rest_ignored() -> None:
    assert startup.self_times(RUN_1) == {"tfprof_towers.vocab": 120, "tfprof_towers": 1500,
                                         "numpy._core": 4000, "numpy": 300}


def test_each_module_counts_its_least_self_time_over_the_runs_that_imported_it() -> None:
    runs = [startup.self_times(RUN_1), startup.self_times(RUN_2)]
    assert startup.least(runs) == {"tfprof_towers.vocab": 100, "tfprof_towers": 1500, "numpy._core": 3000,
                                   "numpy": 300, "concurrent.futures": 250}
    s = startup.Startup.of(runs, [0.5, 0.3, 0.4])
    assert s.modules == 2
    assert s.package_ms == 1.6  # 100 + 1500 us
    assert s.import_ms == 5.15  # 100 + 1500 + 3000 + 300 + 250 us
    assert s.wall_s == 0.4


def test_a_module_that_only_starts_with_the_package_name_is_not_the_package() -> None:
    s = startup.Startup.of([{"tfprof_towers_extra": 900, "tfprof_towers.cli": 100}], [0.1])
    assert (s.modules, s.package_ms) == (1, 0.1)
