"""Placement audit: per-device shares, host compute groups with their source lines, moved ops, links."""

from __future__ import annotations

import typed_kit as typed
from report_kit import ACC0, ACC1, HOST, TOPOLOGY, variant_records

from tfprof_towers.analysis import audit
from tfprof_towers.rundir.placement_doc import PlacedNode, Placement

BUG = variant_records()["towers_bug"]
PLACED = Placement.from_json(BUG["placement"])


def nodes(docs: list[dict]) -> tuple[PlacedNode, ...]:
    return Placement.from_json({"nodes": docs}).nodes


def test_device_table_shares_flops_and_measured_compute() -> None:
    compute = {HOST: 3e-3, ACC0: 1e-3, ACC1: 0.0, "/host:CPU": 0.0}
    rows = audit.device_table(PLACED, TOPOLOGY, compute)
    assert [(r.device, r.role, r.flops_per_step) for r in rows] == [
        (HOST, "host", 600), (ACC0, "accelerator", 200), (ACC1, "accelerator", 200),
    ]
    assert [r.flops_share for r in rows] == [0.6, 0.2, 0.2]
    assert [r.compute_share for r in rows] == [0.75, 0.25, 0.0]


def test_host_compute_groups_name_scope_and_source_chain() -> None:
    groups = audit.host_compute_groups(PLACED.nodes, TOPOLOGY, total_flops=1000)
    assert [g.to_json() for g in groups] == [{
        "scope": "tower_0", "device": HOST, "ops": 1, "flops_per_step": 600, "op_types": {"MatMul": 1},
        "sources": ["/src/train.py:57", "/src/train.py:55"], "source_devices": ["/cpu:0", "/cpu:1"],
        "examples": ["tower_0/block0/MatMul"], "flops_share": 0.6,
    }]


def test_heavy_types_count_without_flops_and_fused_kernels_are_labelled() -> None:
    docs = [
        {"name": "a/conv", "type": "Conv2D", "kernel": "Conv2D", "device": HOST, "flops": 0, "sources": []},
        {"name": "a/relu", "type": "Relu", "kernel": "Relu", "device": HOST, "flops": 0, "sources": []},
        {"name": "b/Sigmoid", "type": "Sigmoid", "kernel": "_MklNativeFusedMatMul", "device": HOST,
         "flops": 10, "sources": []},
    ]
    groups = audit.host_compute_groups(nodes(docs), TOPOLOGY, total_flops=10)
    assert [(g.scope, g.op_types, g.sources) for g in groups] == [
        ("b", {"Sigmoid [_MklNativeFusedMatMul]": 1}, ()),
        ("a", {"Conv2D": 1}, ()),
    ]


def test_moved_ops_requested_vs_assigned() -> None:
    moved = audit.moved_ops(PLACED.nodes)
    assert [m.to_json() for m in moved] == [{
        "type": "Unique", "requested": ACC0, "assigned": HOST, "count": 1, "examples": ["moved/Unique"],
        "sources": []}]


def test_links_bytes_modeled_times_and_kinds() -> None:
    links = audit.link_table(PLACED, TOPOLOGY)
    by = {(x.src, x.dst): x.to_json() for x in links}
    h2d = by[(HOST, ACC0)]
    assert (h2d["kind"], h2d["bytes_per_step"], h2d["tensors"]) == ("host_to_device", 3072, 2)
    assert h2d["modeled_s"] == {"pcie3_x16": 3072 / 12e9, "pcie3_x8": 3072 / 6e9}
    assert h2d["measured_s"] is None and h2d["achieved_bytes_per_s"] is None
    assert [t["tensor"] for t in h2d["largest_tensors"]] == ["tower_0/block0/Sigmoid:0", "W/read:0"]
    assert by[(ACC0, HOST)]["kind"] == "device_to_host"


def test_links_measured_on_gpu_join_the_host_plane_to_the_host_device() -> None:
    topo = {"kind": "gpu", "host": HOST, "accelerators": ["/device:GPU:0"]}
    placement = {"transfers": [{"src": HOST, "dst": "/device:GPU:0", "bytes_per_step": 4000, "tensors": 2}],
                 "edges": []}
    breakdown = {"links": [
        {"src": "/host:CPU", "dst": "/device:GPU:0", "kind": "h2d", "bytes": 4000, "count": 2,
         "seconds": 2e-6, "gbps": 2.0, "measured": True},
        {"src": HOST, "dst": "/device:GPU:0", "kind": "send_recv", "bytes": 4000, "count": 2,
         "seconds": None, "gbps": None, "measured": False},
    ]}
    measured = audit.measured_links(typed.breakdown(breakdown), topo["host"])
    [row] = audit.link_table(Placement.from_json(placement), topo, measured)
    assert row.measured_s == 2e-6
    assert row.achieved_bytes_per_s == 2e9


def test_variable_pulls_and_their_source_lines() -> None:
    pulls = audit.variable_pulls(PLACED, TOPOLOGY)
    assert pulls.to_json() == {"bytes_per_step": 2048, "tensors": 2,
                               "by_accelerator": {ACC0: 1024, ACC1: 1024}, "from": [HOST],
                               "sources": ["/src/train.py:40"]}


def test_compute_per_device_adds_device_and_host_compute() -> None:
    breakdown = {"devices": {
        "/device:GPU:0": {"total": {"compute": {"seconds": 2.0}, "h2d": {"seconds": 1.0}}},
        HOST: {"total": {"host_compute": {"seconds": 0.5}}},
        "/host:CPU": {"total": {"framework": {"seconds": 9.0}}},
    }}
    assert audit.compute_per_device(typed.breakdown(breakdown)) == {"/device:GPU:0": 2.0, HOST: 0.5}


def test_audit_variant_shares_and_no_placement() -> None:
    breakdown = {"devices": {HOST: {"total": {"host_compute": {"seconds": 3.0}}},
                             ACC0: {"total": {"host_compute": {"seconds": 1.0}}}}, "links": []}
    a = audit.audit_variant(typed.record(BUG), typed.topology(TOPOLOGY), typed.breakdown(breakdown))
    assert a.host_flops_share == 0.6
    assert a.host_compute_share == 0.75
    assert a.total_flops_per_step == 1000
    assert not a.links_measured
    no_placement = typed.record({"name": "x", "placement": None})
    assert audit.audit_variant(no_placement, typed.topology(TOPOLOGY)) is None
