"""examples/seed_towers.py: the classic tower code is flagged with the right file and line.

Runs a real tiny profile of the example (a few seconds) and checks that the
host-compute finding names the example file and the line of its stray
``with tf.device(devices.host)`` scope, and says what share of the work ran there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.cli import main

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "seed_towers.py"
# tiny preset, 2 towers: 12 forward matmuls of 2*32*16*16 FLOPs on the host, of 34 in all
HOST_SHARE = 196608 / 557056


def stray_scope_line() -> int:
    """The host scope nested inside the per-accelerator tower scope (the second host scope)."""
    lines = EXAMPLE.read_text().splitlines()
    tower = next(i for i, t in enumerate(lines) if "with tf.device(devices.accelerators[i])" in t)
    return next(i + 1 for i, t in enumerate(lines) if i > tower and "with tf.device(devices.host):" in t)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("example") / "run"
    assert main(["profile", "--preset", "tiny", "--variant-file", str(EXAMPLE), "--out", str(out)]) == 0
    return out


def test_the_example_is_flagged_at_its_stray_scope(example_run: Path) -> None:
    summary = json.loads((example_run / "summary.json").read_text())
    [variant] = summary["variants"]
    assert (variant["name"], variant["status"]) == ("seed_towers", "ok")
    [finding] = [f for f in summary["findings"] if f["rule"] == "host_compute"]
    assert finding["severity"] == "high"
    assert finding["sources"] == [f"{EXAMPLE}:{stray_scope_line()}"]
    assert finding["evidence"]["host_flops_share"] == HOST_SHARE
    assert 0 < finding["evidence"]["host_compute_time_share"] <= 1
    assert {g["scope"] for g in variant["audit"]["host_compute"]} == {"tower_0", "tower_1"}


def test_the_report_names_the_file_line_and_host_share(example_run: Path) -> None:
    html = (example_run / "report.html").read_text()
    assert f"seed_towers.py:{stray_scope_line()}" in html
    assert f"{EXAMPLE}:{stray_scope_line()}" in html
    assert f"{HOST_SHARE * 100:.1f}%" in html  # "35.3%" of the estimated FLOPs
