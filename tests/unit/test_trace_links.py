"""Per-link table: measured GPU copies, and unmeasured send/recv links on logical-CPU runs."""

from __future__ import annotations

import math

import pytest
from trace_kit import logical_cpu_trace, two_gpu_trace

from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.links import link_table
from tfprof_towers.trace.load import trace_from_bytes


def test_copy_links_exact() -> None:
    links = link_table(trace_from_bytes(two_gpu_trace().to_bytes()))
    got = {
        (r.src, r.dst, r.kind): (int(r.bytes), r.count, round(r.seconds / 1e-6), r.gbps, r.measured)
        for r in links.itertuples()
    }
    assert got == {
        ("/host:CPU", "/device:GPU:0", "h2d"): (3000, 2, 180, pytest.approx(3000 / 180e-6 / 1e9), True),
        ("/host:CPU", "/device:GPU:1", "h2d"): (256, 1, 50, pytest.approx(256 / 50e-6 / 1e9), True),
        ("/device:GPU:0", "/host:CPU", "d2h"): (500, 1, 30, pytest.approx(500 / 30e-6 / 1e9), True),
        ("/device:GPU:0", "/device:GPU:1", "p2p"): (4000, 1, 80, pytest.approx(0.05), True),
        ("/device:GPU:0", "/device:GPU:0", "d2d"): (64, 1, 20, pytest.approx(64 / 20e-6 / 1e9), True),
    }




def test_logical_cpu_links_are_not_measured() -> None:
    nodes = {"x/_0": "/device:CPU:0", "h/_2": "/device:CPU:1", "mm": "/device:CPU:1", "x/_1": "/device:CPU:1"}
    trace = trace_from_bytes(logical_cpu_trace().to_bytes(), node_devices=nodes)
    a = analyze_trace(trace, kind="logical-cpu", edge_bytes={"edge_1_x": 4096, "edge_2_h": 128})
    doc = a.to_doc()
    assert doc["links"] == [
        {
            "src": "/device:CPU:0",
            "dst": "/device:CPU:1",
            "kind": "send_recv",
            "bytes": 8192,
            "count": 2,
            "seconds": None,
            "gbps": None,
            "measured": False,
        },
        {
            "src": "/device:CPU:1",
            "dst": "/device:CPU:2",
            "kind": "send_recv",
            "bytes": 256,
            "count": 2,
            "seconds": None,
            "gbps": None,
            "measured": False,
        },
    ]
    per_step = a.to_doc(per_step=True)
    assert [link["bytes"] for link in per_step["links"]] == [4096, 128]
    cpu1 = doc["devices"]["/device:CPU:1"]
    assert cpu1["total"]["host_compute"] == {"count": 2, "seconds": pytest.approx(200e-6)}
    assert cpu1["total"]["send_recv"]["count"] == 4  # one _Send and one async _Recv per step
    assert cpu1["wall"]["send_recv"] == pytest.approx(10e-6)  # the recv hides under the matmul


def test_send_links_without_edge_bytes_have_no_bytes() -> None:
    a = analyze_trace(trace_from_bytes(logical_cpu_trace().to_bytes()), kind="logical-cpu")
    assert [link["bytes"] for link in a.to_doc()["links"]] == [None, None]


def test_gpu_runs_do_not_list_send_links() -> None:
    a = analyze_trace(trace_from_bytes(logical_cpu_trace().to_bytes()), kind="gpu")
    assert a.to_doc()["links"] == []
    assert math.isclose(a.to_doc()["devices"]["/host:CPU"]["window_s"], 2000e-6)
