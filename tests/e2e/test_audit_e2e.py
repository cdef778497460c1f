"""The placement audit of a real tiny run: ``towers_bug``'s host compute names the stray host scope's
line and its share of the FLOPs.  The audit's arithmetic is in tests/unit/test_audit.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.analysis import audit
from tfprof_towers.rundir.records import VariantRecord


@pytest.mark.slow
def test_towers_bug_points_at_the_stray_scope_in_variants_py(tiny_run: Path) -> None:
    variants_py = Path(audit.__file__).resolve().parents[1] / "capture" / "tf1" / "builders.py"
    line = next(i for i, text in enumerate(variants_py.read_text().splitlines(), 1)
                if "# the stray host scope (towers_bug)" in text)
    doc = json.loads((tiny_run / "variants" / "towers_bug" / "record.json").read_text())
    record = VariantRecord.from_json(doc)
    a = audit.audit_variant(record, record.topology)
    assert {g.scope for g in a.host_compute} == {"tower_0", "tower_1"}
    assert {g.sources[0] for g in a.host_compute} == {f"{variants_py}:{line}"}
    # tiny preset: the forward matmuls are 1/3 of the matmul FLOPs minus the first block's input grad
    assert a.host_flops_share == 196608 / 557056
