"""`report` on a copy of a real tiny run, without TensorFlow: the findings and the recommendation as
before, sources named by file and line, every variant's Chrome trace readable.  The rendering's
cases are in tests/unit/test_render.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tfprof_towers.cli import main
from tfprof_towers.session.report import finish_run


@pytest.mark.slow
def test_report_rerenders_a_real_run_without_tensorflow(tiny_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    (copy / "report.html").unlink()
    before = json.loads((tiny_run / "summary.json").read_text())
    assert main(["report", str(copy)]) == 0
    after = json.loads((copy / "summary.json").read_text())
    assert [(f["rule"], f["variant"]) for f in after["findings"]] == [
        (f["rule"], f["variant"]) for f in before["findings"]]
    assert after["recommendation"]["variant"] == before["recommendation"]["variant"]
    html = (copy / "report.html").read_text()
    assert "# the stray host scope" not in html  # sources are named by file:line, not pasted
    package = Path(finish_run.__code__.co_filename).resolve().parents[1]
    variants_py = package / "capture" / "tf1" / "builders.py"
    line = next(i for i, text in enumerate(variants_py.read_text().splitlines(), 1)
                if "# the stray host scope (towers_bug)" in text)
    bug = next(f for f in after["findings"] if f["rule"] == "host_compute")
    assert (bug["variant"], bug["sources"]) == ("towers_bug", [f"{variants_py}:{line}"])
    for v in after["variants"]:
        assert (copy / v["chrome_trace"]).is_file()
        json.loads((copy / v["chrome_trace"]).read_text())
