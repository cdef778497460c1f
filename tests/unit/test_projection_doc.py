"""rundir/projection_doc.py: projection.json (both schemas) and summary.json's compact projection, typed."""

from __future__ import annotations

import json

import pytest

from tfprof_towers.rundir.fields import RecordError
from tfprof_towers.rundir.projection_doc import MemoryFit, ProjectionDoc, ProjectionSummary
from tfprof_towers.rundir.summary import Summary

GPU0 = "/device:GPU:0"


def _compact() -> dict:
    """summary.json -> projection as pipeline.compact_projection writes it: one projected row (schema 2,
    with its memory) and one that could not be projected."""
    return {
        "label": "projected", "hardware": "2x-gtx1060-pcie3",
        "preset": {"name": "seed", "batch": 64, "dim": 1000, "blocks": 6}, "tensorflow": "2.21.0",
        "assumptions": ["projected, not measured"],
        "profile": {"name": "2x-gtx1060-pcie3", "accelerator": {"model": "GTX 1060", "count": 2}},
        "calibrated": ["host_op_overhead"], "calibration_notes": ["fitted"],
        "variants": [
            {"name": "single", "rank": 1, "projected_step_s": {"overlapped": 0.75, "serial": 0.875},
             "bottleneck": "accelerator compute (/device:GPU:0)",
             "memory": {GPU0: {"peak_bytes": 2048, "basis": "estimated", "fits": True}},
             "memory_fit": {"fits": False, "verdict": "does not fit", "why": "big", "peak_bytes": 2048}},
            {"name": "towers_bug", "error": "graph build failed"},
        ],
        "memory": {"basis": "estimated", "headroom": 0.1, "headroom_why": "CUDA context", "note": None},
        "ranking": ["single"], "recommendation": {"variant": "single", "reason": "fastest"},
    }


def test_the_compact_projection_reads_typed_and_writes_the_same_json() -> None:
    doc = _compact()
    p = ProjectionSummary.from_json(doc)
    single, bug = p.variants
    assert (single.projected_step_s.serial, single.rank, single.projected) == (0.875, 1, True)
    assert (bug.projected, bug.error) == (False, "graph build failed")
    assert (p.preset.name, p.preset.keras_model, p.accelerator_count, p.headroom) == ("seed", None, 2, 0.1)
    assert p.row("towers_bug") is bug and p.recommendation.variant == "single"
    assert MemoryFit.of(single.memory_fit) == MemoryFit(False, "does not fit", "big")
    assert json.dumps(p.to_json()) == json.dumps(doc)
    assert p.hardware == "2x-gtx1060-pcie3" and p.to_json()["variants"][1] == bug.to_json()


@pytest.mark.parametrize("doc", [
    {"label": "projected", "error": "projection.json: not JSON"},  # the file could not be read
    {"label": "projected", "hardware": "8x-a100-nvlink", "preset": {"name": "seed", "batch": 64},
     "error": "not projected: the run was interrupted"},
])
def test_a_projection_that_failed_keeps_its_form(doc: dict) -> None:
    p = ProjectionSummary.from_json(doc)
    assert p.error == doc["error"] and p.variants == ()
    assert json.dumps(p.to_json()) == json.dumps(doc)


def test_a_summary_read_from_json_holds_the_projection_typed() -> None:
    s = Summary.from_json({"run_dir": "run", "variants": [], "projection": _compact()})
    assert isinstance(s.projection, ProjectionSummary) and s.projection.hardware == "2x-gtx1060-pcie3"
    assert s.to_json()["projection"] == _compact()


def _entry(schema: int) -> dict:
    e = {"name": "single", "projected_step_s": {"overlapped": 0.5, "serial": 0.625},
         "bottleneck": {"kind": "link", "resource": None, "busy_s": 0.4, "share": 0.8, "text": "link a -> b"},
         "per_device": {}, "per_link": [], "busy_s": {}, "rank": 1}
    if schema == 2:
        e |= {"memory": {GPU0: {"peak_bytes": 10}},
              "memory_fit": {"fits": True, "verdict": "fits", "why": ""}}
    return e


@pytest.mark.parametrize("schema", [1, 2])
def test_projection_json_of_either_schema_reads_typed(schema: int) -> None:
    doc = {"schema": schema, "label": "projected", "hardware": "4x-v100-nvlink", "profile": {"name": "x"},
           "preset": {"name": "tiny", "batch": 4, "dim": 16}, "assumptions": ["a"], "rates": {},
           "variants": [_entry(schema), {"name": "towers_bug", "error": "no"}], "ranking": ["single"],
           "recommendation": {"variant": "single", "reason": "only one"}, "calibration": None,
           "tensorflow": "2.21.0",
           **({"memory": {"basis": "estimated", "headroom": 0.1, "headroom_why": "w", "note": None}}
              if schema == 2 else {})}
    p = ProjectionDoc.from_json(doc)
    single = p.entry("single")
    assert (single.bottleneck.text, single.bottleneck.share, single.projected_step_s.overlapped) == (
        "link a -> b", 0.8, 0.5)
    assert single.fit.fits is (True if schema == 2 else None)
    assert (p.memory is None) is (schema == 1) and p.entry("towers_bug").error == "no"


def test_a_wrongly_typed_projection_names_the_field() -> None:
    with pytest.raises(RecordError, match=r"projection.json: variants\[0\].rank must be an integer"):
        ProjectionDoc.from_json({"variants": [{"name": "x", "rank": "first"}]})
