"""The real 8-GPU trace: per GPU and category, cross-checked against a plain-Python reading of
the same file through the full protobuf schema (no shared code beyond the schema)."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from tfprof_towers.trace.analysis import analyze_xplane
from tfprof_towers.trace.load import load_trace
from tfprof_towers.xplane.schema import XSpace

DERIVED = {"Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules"}


def independent_totals(path) -> dict[tuple[str, str], list[int]]:
    """(device, kind) -> [count, duration ps, bytes], for GPU planes, event by event."""
    space = XSpace.FromString(path.read_bytes())
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            if line.name in DERIVED or line.id < 0:
                continue
            for ev in line.events:
                name = plane.event_metadata[ev.metadata_id].name
                kind = {"MemcpyH2D": "h2d", "MemcpyD2H": "d2h"}.get(name, "compute")
                size = 0
                for st in ev.stats:
                    if stat_names.get(st.metadata_id) == "memcpy_details":
                        size = int(re.search(r"size:(\d+)", st.str_value).group(1))
                acc = out[(plane.name, kind)]
                acc[0] += 1
                acc[1] += ev.duration_ps
                acc[2] += size
    return dict(out)


def test_gpu_totals_match_independent_reading(fixture_8gpu) -> None:
    trace = load_trace(fixture_8gpu)
    ev = trace.events
    gpu = ev[ev["plane"].astype(str).str.startswith("/device:GPU:")]
    got = {
        (str(d), str(c)): [int(r["dur_ps"].size), int(r["dur_ps"].sum()), int(r["bytes"].sum())]
        for (d, c), r in gpu.groupby(["device", "category"], observed=True)
    }
    want = independent_totals(fixture_8gpu)
    assert got == want
    assert set(d for d, _ in want) == {"/device:GPU:1", "/device:GPU:4", "/device:GPU:6"}
    assert want[("/device:GPU:4", "compute")][0] == 665


def test_host_events_all_decoded(fixture_8gpu) -> None:
    space = XSpace.FromString(fixture_8gpu.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ev = load_trace(fixture_8gpu).events
    host_ev = ev[ev["plane"] == "/host:CPU"]
    assert len(host_ev) == sum(len(line.events) for line in host.lines)
    assert int(host_ev["dur_ps"].sum()) == sum(e.duration_ps for line in host.lines for e in line.events)
    assert not (host_ev["category"].isin(["h2d", "d2h"])).any()  # host-side Memcpy* API calls


def test_fixture_analysis_document(fixture_8gpu) -> None:
    doc = analyze_xplane(fixture_8gpu).to_doc()
    assert doc["window"] == "steps-line" and doc["steps"] == 1
    for name, dev in doc["devices"].items():
        assert sum(dev["wall"].values()) == pytest.approx(dev["window_s"]), name
    gpu4 = doc["devices"]["/device:GPU:4"]
    assert gpu4["total"]["compute"]["count"] == 665
    assert gpu4["wall"]["compute"] == pytest.approx(
        gpu4["total"]["compute"]["seconds"]
    )  # one stream: no overlap
    assert {(link["src"], link["dst"], link["kind"]) for link in doc["links"]} == {
        ("/host:CPU", "/device:GPU:4", "h2d"),
        ("/host:CPU", "/device:GPU:6", "h2d"),
        ("/device:GPU:4", "/host:CPU", "d2h"),
        ("/device:GPU:6", "/host:CPU", "d2h"),
    }
