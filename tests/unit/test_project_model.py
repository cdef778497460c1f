"""Projection arithmetic on a tiny made-up profile, every number worked out by hand (to the microsecond).

The profile ("toy"): host 1 core x 1 GHz x 2 FLOPs/cycle x 0.5 = 1e9 FLOP/s, 1e9 B/s, 1 us per op;
two accelerators at 2e9 FLOP/s (5e9 for matmuls), 2e9 B/s, 2 us per op; host links 1e9 B/s + 10 us;
accelerator<->accelerator staged through the host at 0.5e9 B/s + 20 us.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tfprof_towers.projection.api import rank, recommend
from tfprof_towers.projection.calibrate import Point, fit, local_peak_flops, placement_check
from tfprof_towers.projection.hardware import Accelerator, Hardware, Host, Link, Peer
from tfprof_towers.projection.model import (
    CollectiveWork,
    CopyWork,
    GraphWork,
    OpWork,
    Rates,
    Task,
    build_tasks,
    project_work,
    ring_seconds,
    simulate,
)

US = 1e-6
CPU, G0, G1 = "/device:CPU:0", "/device:GPU:0", "/device:GPU:1"


def toy(peer: Peer | None = None) -> Hardware:
    host = Host("toy cpu", cores=1, clock_ghz=1.0, flops_per_cycle_vectorised=2.0,
                flops_per_cycle_unvectorised=1.0, tensorflow_build="vectorised", efficiency=0.5,
                memory_bandwidth_gbs=1.0, memory_efficiency=1.0, op_overhead_us=1.0, source="made up")
    accel = Accelerator("toy gpu", count=2, fp32_tflops=0.004, matmul_tflops=0.01,
                        memory_bandwidth_gbs=2.0, efficiency=0.5, memory_efficiency=1.0,
                        op_overhead_us=2.0, source="made up")
    host_link = Link("toy pcie", bandwidth_gbs=1.0, efficiency=1.0, latency_us=10.0, source="made up")
    staged = Peer("staged", "mesh", Link("toy staged", 0.5, 1.0, 20.0, "made up"))
    return Hardware("toy", "a made-up machine", host, accel, host_link, peer or staged, "test")


def towers_graph() -> GraphWork:
    """x on the host, fed to a matmul on each accelerator; GPU1's result summed on GPU0."""
    ops = (
        OpWork("x", "Mul", CPU, flops=1e6, bytes=1e5),
        OpWork("mm0", "MatMul", G0, flops=1e7, bytes=1e6, matmul=True, copies=(0,)),
        OpWork("mm1", "MatMul", G1, flops=1e7, bytes=1e6, matmul=True, copies=(1,)),
        OpWork("sum", "AddV2", G0, flops=1e5, bytes=2e5, deps=(1,), copies=(2,)),
    )
    copies = (
        CopyWork("x:0", 0, CPU, G0, 400_000),
        CopyWork("x:0", 0, CPU, G1, 400_000),
        CopyWork("mm1:0", 2, G1, G0, 100_000),
    )
    return GraphWork("toy_towers", CPU, (G0, G1), ops, copies)


def test_rates_of_the_toy_profile() -> None:
    r = Rates.of(toy())
    assert (r.host_flops, r.host_bytes, r.host_overhead_s) == (1e9, 1e9, 1e-6)
    assert r.accel_flops == pytest.approx(2e9)
    assert r.accel_matmul_flops == pytest.approx(5e9)
    assert (r.accel_bytes, r.accel_overhead_s) == (2e9, 2e-6)


def test_task_durations_by_hand() -> None:
    tasks = build_tasks(towers_graph(), toy(), Rates.of(toy()))
    got = [round(t.duration / US, 6) for t in tasks]
    # x: 1 + max(1e6/1e9, 1e5/1e9) s = 1 + 1000 us; mm: 2 + max(1e7/5e9, 1e6/2e9) = 2 + 2000 us;
    # sum: 2 + max(1e5/2e9, 2e5/2e9) = 2 + 100 us; host copies: 10 + 4e5/1e9 = 10 + 400 us;
    # staged GPU1->GPU0: 20 + 1e5/0.5e9 = 20 + 200 us.
    assert got == [1001, 2002, 2002, 102, 410, 410, 220]
    assert tasks[6].resources == ("d2h:1", "h2d:0")


def test_overlapped_and_serial_step_by_hand() -> None:
    doc = project_work(towers_graph(), toy())
    step = doc["projected_step_s"]
    # overlapped: x 0-1001; both host copies 1001-1411 (own channels); matmuls 1411-3413;
    # staged copy 3413-3633; sum 3633-3735.
    assert step["overlapped"] / US == pytest.approx(3735, abs=1e-6)
    # serial: a copy also holds both devices: copy to GPU1 waits for the host (1411-1821),
    # mm1 1821-3823, staged copy 3823-4043 (GPU0 is free since 3413), sum 4043-4145.
    assert step["serial"] / US == pytest.approx(4145, abs=1e-6)


def test_bottleneck_and_per_device_by_hand() -> None:
    doc = project_work(towers_graph(), toy())
    b = doc["bottleneck"]
    assert (b["kind"], b["resource"]) == ("accelerator compute", G0)
    assert b["busy_s"] / US == pytest.approx(2104)  # mm0 2002 + sum 102
    assert b["share"] == pytest.approx(2104 / 3735)
    dev = doc["per_device"]
    assert dev[CPU]["compute_s"] / US == pytest.approx(1001)
    assert dev[G1] == {"role": "accelerator", "compute_s": pytest.approx(2002e-6), "flops": 1e7,
                       "bytes": 1e6, "ops": 1}
    assert doc["busy_s"]["h2d:0"] / US == pytest.approx(630)  # 410 + the staged hop's 220


def test_per_link_by_hand() -> None:
    links = project_work(towers_graph(), toy())["per_link"]
    assert [(x["src"], x["dst"], x["bytes_per_step"], x["tensors"]) for x in links] == [
        (CPU, G0, 400_000, 1), (CPU, G1, 400_000, 1), (G1, G0, 100_000, 1),
    ]
    assert [round(x["seconds"] / US, 6) for x in links] == [410, 410, 220]
    assert links[2]["route"] == "toy staged"


def test_host_bound_variant_names_the_host() -> None:
    g = towers_graph()
    heavy = replace(g, ops=(replace(g.ops[0], flops=1e8), *g.ops[1:]))
    b = project_work(heavy, toy())["bottleneck"]
    assert (b["kind"], b["busy_s"] / US) == ("host compute", pytest.approx(100_001))


def test_link_bound_variant_names_the_link() -> None:
    g = towers_graph()
    big = replace(g, copies=(replace(g.copies[0], bytes=10_000_000), *g.copies[1:]))
    b = project_work(big, toy())["bottleneck"]
    assert b["kind"] == "link"
    assert b["text"] == f"link {CPU} -> {G0} (toy pcie)"
    assert b["busy_s"] / US == pytest.approx(10_010 + 220)


def test_direct_peer_link_uses_its_own_channel() -> None:
    direct = toy(Peer("direct", "mesh", Link("toy nvlink", 10.0, 1.0, 5.0, "made up")))
    tasks = build_tasks(towers_graph(), direct, Rates.of(direct))
    assert tasks[6].resources == ("peer:1->0",)
    assert tasks[6].duration / US == pytest.approx(5 + 10)  # 5 us + 1e5 / 1e10 s


def test_nccl_ring_all_reduce_by_hand() -> None:
    direct = toy(Peer("direct", "mesh", Link("toy nvlink", 1.0, 1.0, 5.0, "made up")))
    ops = (
        OpWork("g0", "MatMul", G0, 1e7, 1e6, matmul=True),
        OpWork("g1", "MatMul", G1, 1e7, 1e6, matmul=True),
        OpWork("ar0", "NcclAllReduce", G0, 0, 0, deps=(0,), collective=0),
        OpWork("ar1", "NcclAllReduce", G1, 0, 0, deps=(1,), collective=0),
        OpWork("use0", "AddV2", G0, 1e5, 2e5, deps=(2,)),
    )
    g = GraphWork("toy_replicated", CPU, (G0, G1), ops, (), (CollectiveWork("c0", (2, 3), 1_000_000),))
    # ring over 2 devices: 2(n-1)=2 latencies + 2(n-1)/n x 1e6 B / 1e9 B/s = 10 + 1000 us
    assert ring_seconds(1e6, 2, direct.peer.link) / US == pytest.approx(1010)
    doc = project_work(g, direct)
    # g0 and g1 2002 us in parallel, all-reduce 2002-3012, use0 3012-3114
    assert doc["projected_step_s"]["overlapped"] / US == pytest.approx(3114)
    assert [(x["src"], x["dst"], x["bytes_per_step"]) for x in doc["per_link"]] == [
        (G0, G1, 1_000_000), (G1, G0, 1_000_000),
    ]


def test_cycle_is_rejected() -> None:
    t = (Task("a", "op", 1.0, ("d",), ("d",), (1,)), Task("b", "op", 1.0, ("d",), ("d",), (0,)))
    with pytest.raises(ValueError, match="cycle"):
        simulate(t, serial=False)


def test_accelerator_count_must_match() -> None:
    g = replace(towers_graph(), accelerators=(G0,))
    with pytest.raises(ValueError, match="1 accelerators"):
        project_work(g, toy())


def _entry(name: str, lo: float, hi: float) -> dict:
    return {"name": name, "projected_step_s": {"overlapped": lo, "serial": hi},
            "bottleneck": {"text": "accelerator compute (/device:GPU:0)"}}


def test_ranking_and_recommendation() -> None:
    entries = [_entry("single", 2.0, 2.0), _entry("replicated", 1.0, 1.5),
               _entry("towers_host_vars", 1.1, 1.2), {"name": "broken", "error": "boom"}]
    ranking = rank(entries)
    assert ranking == ["replicated", "towers_host_vars", "single"]
    rec = recommend(entries, ranking, "toy")
    assert rec["variant"] == "replicated"
    assert "2.00x single" in rec["reason"]
    assert "if copies never overlap compute, towers_host_vars is faster" in rec["reason"]


def test_simpler_single_wins_within_five_percent() -> None:
    entries = [_entry("single", 1.04, 1.04), _entry("replicated", 1.0, 1.0)]
    rec = recommend(entries, rank(entries), "toy")
    assert rec["variant"] == "single"


def test_calibration_fit_recovers_rate_and_overhead() -> None:
    pts = [Point("a", 1.0002, 1e9, 100), Point("b", 2.0006, 2e9, 300), Point("c", 0.502, 5e8, 1000)]
    f = fit(pts)
    assert f is not None and f.seconds_per_flop is not None
    assert 1 / f.seconds_per_flop == pytest.approx(1e9)
    assert f.overhead_s == pytest.approx(2e-6)


def test_calibration_fit_drops_the_rate_when_overhead_dominates() -> None:
    pts = [Point("a", 200e-6, 1e3, 100), Point("b", 600e-6, 2e3, 300)]
    f = fit(pts)
    assert f is not None and f.seconds_per_flop is None
    assert f.overhead_s == pytest.approx(2e-6)


def test_local_peak_from_cpuinfo() -> None:
    text = "model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz\nflags\t\t: sse avx avx2 fma\n"
    assert local_peak_flops(text, 4) == pytest.approx(4 * 2.5e9 * 32)
    assert local_peak_flops("cpu MHz : 2000\nflags : sse\n", 2) == pytest.approx(2 * 2e9 * 8)
    assert local_peak_flops("nothing here", 2) is None


def test_placement_check_compares_devices_and_bytes() -> None:
    record = {"placement": {
        "nodes": [{"name": "x", "device": CPU}, {"name": "mm0", "device": G0}, {"name": "mm1", "device": G0}],
        "transfers": [{"src": CPU, "dst": G0, "bytes_per_step": 400_000},
                      {"src": CPU, "dst": G1, "bytes_per_step": 400_000},
                      {"src": G1, "dst": G0, "bytes_per_step": 100_000}],
    }}
    check = placement_check(towers_graph(), record)
    assert (check["ops_compared"], check["ops_same_device"], check["links_agree"]) == (3, 2, True)


# --------------------------------------------------------------------------- op classes

def classed_toy() -> Hardware:
    """The toy profile with every per-class term given: convolutions at 0.25 of the matmul peak
    (2.5e9 FLOP/s), reductions at half the bandwidth, small ops 1 us, 3x3 convolutions twice as
    fast as their FLOPs."""
    hw = toy()
    return replace(hw, accelerator=replace(hw.accelerator, conv_efficiency=0.25, reduction_efficiency=0.5,
                                           small_op_overhead_us=1.0, winograd_speedup=2.0))


@pytest.mark.parametrize(
    ("op", "expected_us"),
    [
        # matmul: 2 + 1e9 / 5e9 s
        (OpWork("mm", "MatMul", G0, 1e9, 1e6, matmul=True, op_class="matmul"), 2 + 200_000),
        # a convolution: 2 + 1e9 / 2.5e9; with Winograd: 2 + 1e9 / (2.5e9 x 2)
        (OpWork("c", "Conv2D", G0, 1e9, 1e6, matmul=True, op_class="matmul"), 2 + 400_000),
        (OpWork("c", "Conv2DBackpropFilter", G0, 1e9, 1e6, matmul=True, op_class="matmul", winograd=True),
         2 + 200_000),
        # elementwise: 2 + max(1e6 / 2e9, 2e8 / 2e9): the bytes bind
        (OpWork("r", "ReluGrad", G0, 1e6, 2e8, op_class="elementwise"), 2 + 100_000),
        # reduction: 2 + 2e8 / (2e9 x 0.5)
        (OpWork("s", "Sum", G0, 1e6, 2e8, op_class="reduction"), 2 + 200_000),
        # small: 1 + 4000 / 2e9 s = 1 + 2 us
        (OpWork("m", "Mul", G0, 1e3, 4e3, op_class="small"), 1 + 2),
        # a work document without classes: the matmul flag decides, no Winograd, the elementwise rate
        (OpWork("old", "MatMul", G0, 1e9, 1e6, matmul=True), 2 + 200_000),
        (OpWork("old2", "Sum", G0, 1e6, 2e8), 2 + 100_000),
        # a view: nothing
        (OpWork("v", "Reshape", G0, 0.0, 0.0, op_class="view"), 0),
    ],
)
def test_each_op_class_has_its_own_terms(op: OpWork, expected_us: float) -> None:
    from tfprof_towers.projection.model import op_seconds

    assert op_seconds(op, "accelerator", Rates.of(classed_toy())) / US == pytest.approx(expected_us)


def test_profile_without_class_terms_falls_back_to_the_old_ones() -> None:
    from tfprof_towers.projection.model import op_seconds

    r = Rates.of(toy())  # no conv_efficiency, reduction_efficiency, small_op_overhead_us, winograd_speedup
    assert (r.accel_reduction_bytes, r.accel_small_overhead_s, r.accel_winograd) == (2e9, 2e-6, 1.0)
    assert r.accel_conv_flops == pytest.approx(r.accel_matmul_flops)
    conv = OpWork("c", "Conv2D", G0, 1e9, 1e6, matmul=True, op_class="matmul", winograd=True)
    assert op_seconds(conv, "accelerator", r) / US == pytest.approx(2 + 200_000)


def test_host_ops_ignore_the_classes() -> None:
    from tfprof_towers.projection.model import op_seconds

    # host: 1 + max(1e6 / 1e9, 2e8 / 1e9) s, whatever the class
    for kind in ("reduction", "small", "elementwise"):
        op = OpWork("h", "Sum", CPU, 1e6, 2e8, op_class=kind)
        assert op_seconds(op, "host", Rates.of(classed_toy())) / US == pytest.approx(1 + 200_000)


def test_op_class_and_winograd_round_trip_through_json() -> None:
    doc = {"host": CPU, "accelerators": [G0, G1], "ops": [
        {"name": "c", "type": "Conv2D", "device": G0, "flops": 1.0, "bytes": 2.0, "matmul": True,
         "op_class": "matmul", "winograd": True},
        {"name": "a", "type": "AddV2", "device": G0, "flops": 1.0, "bytes": 2.0, "matmul": False}]}
    ops = GraphWork.from_json(doc).ops
    assert (ops[0].kind, ops[0].winograd) == ("matmul", True)
    assert (ops[1].kind, ops[1].winograd) == ("elementwise", False)
