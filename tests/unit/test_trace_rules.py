"""The trace rules (advice/trace_rules/): each on a synthetic trace that fires it and one that does not,
with exact numbers; and ``analyze``'s text, ``--json`` and ``--html`` output of the findings.

Times in microseconds (``US`` picoseconds); one step window [0, 1000) us from a ``train`` marker unless
a test says otherwise.  Kernels are launched by ``cudaLaunchKernel`` events on a host thread, joined to
them by ``correlation_id``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from trace_kit import US, TraceBuilder, memcpy_details

from tfprof_towers.advice.findings import ACCELERATOR_PLANES, HIGH, LOW, MEDIUM
from tfprof_towers.advice.trace_rules import (
    TRACE_RULES,
    TraceFacts,
    evaluate_trace,
    kernel_precision,
    known_accelerators,
)
from tfprof_towers.cli import main
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes


class GpuTrace:
    """A host plane (a ``train`` marker per step, a launch thread, an executor and a tf.data thread) and
    GPU planes; :meth:`kernel` adds a kernel with its launch."""

    def __init__(self, steps: int = 1, step_us: int = 1000) -> None:
        self.b = TraceBuilder()
        host = self.b.plane("/host:CPU")
        py = host.line("python")
        for i in range(steps):
            py.event("train", i * step_us * US, step_us * US, {"step_num": i, "_r": 1})
        self.launch = host.line("tf_gpu_private_0/1")
        self.executor = host.line("tf_Compute/2")
        self.data = host.line("tf_data_private/3")
        self.planes: dict[int, object] = {}
        self.streams: dict[tuple[int, str], object] = {}
        self.corr = 0

    def gpu(self, n: int):
        if n not in self.planes:
            self.planes[n] = self.b.plane(f"/device:GPU:{n}")
        return self.planes[n]

    def stream(self, n: int, name: str = "Stream #1(Compute)"):
        if (n, name) not in self.streams:
            self.streams[(n, name)] = self.gpu(n).line(name)
        return self.streams[(n, name)]

    def kernel(self, gpu: int, name: str, start_us: float, dur_us: float, launch_us: float | None = None,
               launch_dur_us: float = 2, stream: str = "Stream #1(Compute)") -> GpuTrace:
        self.corr += 1
        stats: dict = {"tf_op": "op:Op", "correlation_id": self.corr}
        if launch_us is not None:
            self.launch.event("cudaLaunchKernel", int(launch_us * US), int(launch_dur_us * US),
                              {"correlation_id": self.corr})
        self.stream(gpu, stream).event(name, int(start_us * US), int(dur_us * US), stats)
        return self

    def copy(self, gpu: int, name: str, start_us: float, dur_us: float, nbytes: int) -> GpuTrace:
        line = self.stream(gpu, f"Stream #9({name})")
        details = {"memcpy_details": memcpy_details(nbytes, gpu)}
        line.event(name, int(start_us * US), int(dur_us * US), details)
        return self

    def analysis(self):
        return analyze_trace(trace_from_bytes(self.b.to_bytes()))


def by_rule(ev) -> dict:
    return {f.rule: f for f in ev.findings}


def status(ev, rule: str) -> dict:
    return next(r.to_json() for r in ev.rules if r.rule == rule)


def us(x: float) -> float:
    return round(x / 1e-6, 6)


# ------------------------------------------------------------------ idle_accelerators


def test_idle_accelerators_named_even_without_lines() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0)
    t.gpu(1)  # a plane without lines
    t.copy(2, "MemcpyH2D", 0, 10, 100)  # a copy, no kernel
    ev = evaluate_trace(t.analysis())
    f = by_rule(ev)["idle_accelerators"]
    assert f.devices == ("/device:GPU:1", "/device:GPU:2")
    assert f.evidence["working"] == ["/device:GPU:0"]
    assert f.evidence["idle_share"] == pytest.approx(2 / 3)
    assert f.severity == HIGH  # two of three: at least half (high_at 0.5)
    assert "2 of the 3 accelerators" in f.message and "CUDA_VISIBLE_DEVICES" in f.suggestion


def test_idle_accelerators_silent_when_all_work_and_not_evaluated_on_cpu() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0).kernel(1, "volta_sgemm", 0, 500, launch_us=0)
    ev = evaluate_trace(t.analysis())
    assert "idle_accelerators" not in by_rule(ev) and status(ev, "idle_accelerators")["evaluated"]
    cpu = TraceBuilder()
    th = cpu.plane("/host:CPU").line("tf_Compute/1")
    th.event("train", 0, 100 * US, {"step_num": 0, "_r": 1})
    th.event("mm:MatMul", 10 * US, 50 * US)
    ev = evaluate_trace(analyze_trace(trace_from_bytes(cpu.to_bytes())))
    assert ev.findings == ()
    for rule in TRACE_RULES:
        s = status(ev, rule.name)
        assert not s["evaluated"]
        if ACCELERATOR_PLANES in rule.needs:  # not straggler's (tasks) nor the memory rules' (allocators)
            assert s["why_not"] == "the trace has no accelerator plane (a CPU-only capture)"


# ------------------------------------------------------------------ host_bound


def host_bound_trace(main_activity: str) -> GpuTrace:
    """GPU:0 runs [100, 200) and [800, 900), launched at 90 and 750: gaps [0, 100) and [200, 800) are host
    wait (700 us), [900, 1000) other; idle 800 us (80%).  In the host-wait gaps the host runs
    ``main_activity`` for 400 us, the other two of input / host compute / framework for less."""
    t = GpuTrace().kernel(0, "volta_sgemm", 100, 100, launch_us=90).kernel(0, "volta_sgemm", 800, 100,
                                                                          launch_us=750)
    spans = {"input": 100, "host_compute": 100, "framework": 50}
    spans[main_activity] = 400
    t.data.event("Iterator::Root::Prefetch", 250 * US, spans["input"] * US)
    t.executor.event("dense/MatMul:MatMul", 300 * US, spans["host_compute"] * US)
    t.executor.event("ExecutorState::Process", 650 * US - spans["framework"] * US, spans["framework"] * US)
    return t


@pytest.mark.parametrize("main_activity", ["input", "host_compute", "framework"])
def test_host_bound_says_what_the_host_did(main_activity: str) -> None:
    f = by_rule(evaluate_trace(host_bound_trace(main_activity).analysis()))["host_bound"]
    e = f.evidence
    assert f.devices == ("/device:GPU:0",) and f.severity == HIGH  # idle 80% >= 70%
    assert us(e["step_s"]) == 1000 and us(e["idle_s"]) == 800 and e["idle_share"] == pytest.approx(0.8)
    assert us(e["host_wait_s"]) == 700 and e["host_wait_share_of_idle"] == pytest.approx(0.875)
    assert us(e["gaps_s"]) == 700
    # the launches (cudaLaunchKernel at 90 and 750, 2 us each) are framework time inside the gaps
    expected = {"input": 100.0, "host_compute": 100.0, "framework": 54.0, "send_recv": 0.0, "collective": 0.0}
    expected[main_activity] = 400.0 + (4.0 if main_activity == "framework" else 0.0)
    assert {k: us(v) for k, v in e["host_in_gaps_s"].items()} == expected
    assert e["main_activity"] == main_activity
    suggestion = {"input": "prefetch(tf.data.AUTOTUNE)", "host_compute": "dense/MatMul (MatMul)",
                  "framework": "TF_GPU_THREAD_MODE=gpu_private"}[main_activity]
    assert suggestion in f.suggestion
    if main_activity == "host_compute":
        heaviest = {"op": "dense/MatMul", "op_type": "MatMul", "seconds": pytest.approx(400e-6)}
        assert e["heaviest_ops"] == [heaviest]
        assert "placement bug" in f.suggestion and "dense/MatMul (MatMul) 400 µs" in f.message
    if main_activity == "framework":
        assert "jit_compile=True" in f.suggestion and "larger batch per replica" in f.suggestion


def test_host_bound_silent_when_busy() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 450, launch_us=0)
    t.kernel(0, "volta_sgemm", 500, 400, launch_us=455)
    ev = evaluate_trace(t.analysis())  # idle 150 us: 15%
    assert "host_bound" not in by_rule(ev) and status(ev, "host_bound")["evaluated"]


def host_computes_trace(launch_b_us: float = 790) -> GpuTrace:
    """GPU:0 runs [0, 200) and [800, 1000) of a 1000 us step, the second kernel launched at ``launch_b_us``;
    the host computes [250, 650) (a MatMul on the executor)."""
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 200, launch_us=0).kernel(0, "volta_sgemm", 800, 200,
                                                                        launch_us=launch_b_us)
    t.executor.event("dense/MatMul:MatMul", 250 * US, 400 * US)
    return t


def test_host_bound_fires_when_the_host_computes() -> None:
    f = by_rule(evaluate_trace(host_computes_trace().analysis()))["host_bound"]
    e = f.evidence
    assert (f.severity, f.devices) == (MEDIUM, ("/device:GPU:0",))  # idle 60%: medium under 70%
    assert e["idle_share"] == pytest.approx(0.6) and e["host_wait_share_of_idle"] == pytest.approx(1.0)
    assert (us(e["idle_s"]), us(e["host_wait_s"]), us(e["host_in_gaps_s"]["host_compute"])) == (600, 600, 400)
    assert e["main_activity"] == "host_compute"
    # framework: the launch at 790 us (2 us); untraced: the rest of the 600 us gap
    assert f.message == (
        "/device:GPU:0 is idle 60.0% of its 1.00 ms step, 100.0% of that (600 µs per step) waiting on the "
        "host (the next kernel was launched only after the device ran out of work); in those gaps the host "
        "threads were in TF ops computing on the host 400 µs, framework, executor and kernel-launch overhead "
        "2.00 µs, and no traced host thread was busy for 198 µs; heaviest host ops: "
        "dense/MatMul (MatMul) 400 µs")


def test_host_bound_silent_when_the_host_launched_in_time() -> None:
    """The device idles 60%, but its next kernel was launched before the previous ended: not host wait."""
    ev = evaluate_trace(host_computes_trace(launch_b_us=100).analysis())
    assert "host_bound" not in by_rule(ev) and status(ev, "host_bound")["evaluated"]


def test_host_bound_reports_its_named_parameters() -> None:
    s = status(evaluate_trace(host_computes_trace().analysis()), "host_bound")
    assert s["params"] == {"min_idle_share": 0.4, "min_host_wait_share": 0.5, "untraced_share": 0.5}
    assert s["threshold"] == 0.4
    assert s["needs"] == ["accelerator_planes", "kernels", "launches"]


def test_host_bound_named_parameters_drive_the_check() -> None:
    from dataclasses import replace

    analysis = host_computes_trace().analysis()
    host_bound = next(r for r in TRACE_RULES if r.name == "host_bound")
    idler = replace(host_bound, params={**host_bound.params, "min_idle_share": 0.7})
    assert "host_bound" not in by_rule(evaluate_trace(analysis, [idler]))
    assert "host_bound" in by_rule(evaluate_trace(analysis, [host_bound]))


def test_run_status_lists_each_trace_rule_per_variant() -> None:
    """A run's list of the trace rules' status: per variant, as a run rule's."""
    from tfprof_towers.advice.trace_rules import NO_TRACE, run_status

    traced = evaluate_trace(host_computes_trace().analysis())
    rules = {r.rule: r.to_json() for r in run_status({"a": traced, "b": None}, skip={"straggler"})}
    assert list(rules) == [r.name for r in TRACE_RULES if r.name != "straggler"]
    assert rules["host_bound"]["evaluated"] is False
    assert rules["host_bound"]["not_evaluated"] == {"b": NO_TRACE}
    assert rules["host_bound"]["why_not"] == "not evaluated on 1 variant(s): b: no trace analysed"
    one_gpu = "only 1 accelerator ran kernels (/device:GPU:0)"
    assert rules["accelerator_imbalance"]["not_evaluated"] == {"a": one_gpu, "b": NO_TRACE}
    only = {r.rule: r.to_json() for r in run_status({"a": traced})}
    assert only["host_bound"]["evaluated"] is True and only["host_bound"]["not_evaluated"] == {}
    # one reason on every variant: that reason
    assert only["accelerator_imbalance"]["why_not"] == one_gpu
    none = {r.rule: r.to_json() for r in run_status({"a": None, "b": None})}
    assert none["host_bound"]["why_not"] == NO_TRACE and none["straggler"]["evaluated"] is False


def test_host_bound_not_evaluated_without_launches() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 100, 100)
    s = status(evaluate_trace(t.analysis()), "host_bound")
    assert not s["evaluated"] and "no kernel is joined to its host launch" in s["why_not"]


# ------------------------------------------------------------------ launch_bound


def launch_trace(kernel_us: float, step_us: int = 800) -> GpuTrace:
    """50 kernels of ``kernel_us`` at 14 us apart from 0, each launched 8 us before it starts (a 2 us call):
    gaps of ``14 - kernel_us`` between kernels launched in time (kernel wait when under 5 us)."""
    t = GpuTrace(step_us=step_us)
    for i in range(50):
        t.kernel(0, "small_kernel", 14 * i + 100, kernel_us, launch_us=14 * i + 92)
    return t


def test_launch_bound_fires_on_many_short_kernels() -> None:
    # kernels 100..796: kernel wait 49 x 4 us = 196 us; [0, 100) is host wait (the first launch comes at 92)
    t = launch_trace(10, step_us=900)
    f = by_rule(evaluate_trace(t.analysis()))["launch_bound"]
    e = f.evidence
    assert f.devices == ("/device:GPU:0",) and f.severity == MEDIUM
    assert e["kernels_per_step"] == 50 and us(e["median_kernel_s"]) == 10 and e["short_kernel_share"] == 1.0
    assert us(e["kernel_s"]) == 500 and us(e["step_s"]) == 900
    assert e["kernel_wait_share"] == pytest.approx(196 / 900)
    assert e["host_wait_share"] == pytest.approx(100 / 900)
    assert e["gap_share"] == pytest.approx(296 / 900)
    assert e["launches_known"] == 50 and us(e["median_launch_delay_s"]) == 6
    assert e["launch_delay_outlier_share"] == 0.0 and e["shorter_than_launch_share"] == 0.0
    assert "50 kernels per step with a median of 10.0 µs" in f.message and "jit_compile=True" in f.suggestion


def test_launch_bound_silent_when_kernels_queue_after_their_launch() -> None:
    t = GpuTrace(step_us=900)
    for i in range(50):  # launched 150 us ahead: a median launch delay of 148 us, over HTA's 100 us
        t.kernel(0, "small_kernel", 14 * i + 100, 10, launch_us=14 * i - 50)
    ev = evaluate_trace(t.analysis())
    assert "launch_bound" not in by_rule(ev) and status(ev, "launch_bound")["evaluated"]


def test_launch_bound_silent_on_long_kernels() -> None:
    t = GpuTrace(step_us=6000)
    for i in range(50):
        t.kernel(0, "big_kernel", 104 * i, 100, launch_us=104 * i - 8 if i else None)
    ev = evaluate_trace(t.analysis())
    assert "launch_bound" not in by_rule(ev) and status(ev, "launch_bound")["evaluated"]


# ------------------------------------------------------------------ exposed_copies


def test_exposed_copies_fires_with_bytes_and_rate() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 200, launch_us=0)
    t.copy(0, "MemcpyH2D", 100, 400, 4_000_000)  # exposed [200, 500): 300 us
    t.copy(0, "MemcpyD2H", 600, 50, 1_000_000)  # exposed 50 us
    f = by_rule(evaluate_trace(t.analysis()))["exposed_copies"]
    e = f.evidence
    assert f.devices == ("/device:GPU:0",) and f.severity == MEDIUM  # 35%: under high_at 40%
    assert us(e["exposed_s"]) == 350 and e["share"] == pytest.approx(0.35)
    assert us(e["h2d_exposed_s"]) == 300 and us(e["d2h_exposed_s"]) == 50
    assert us(e["copy_s"]) == 450 and e["bytes_per_step"] == 5_000_000
    assert e["gbps"] == pytest.approx(5e6 / 450e-6 / 1e9)
    assert "5.00 MB per step at 11.1 GB/s" in f.message and "prefetch" in f.suggestion


def test_exposed_copies_silent_when_hidden_behind_compute() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 900, launch_us=0)
    t.copy(0, "MemcpyH2D", 100, 400, 4_000_000)
    ev = evaluate_trace(t.analysis())
    assert "exposed_copies" not in by_rule(ev) and status(ev, "exposed_copies")["evaluated"]


def test_exposed_copies_counts_copies_between_devices() -> None:
    """Every kind of copy not hidden behind compute counts, a device-to-device one as a host one."""
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0).kernel(1, "volta_sgemm", 0, 900, launch_us=0)
    t.copy(0, "MemcpyD2D", 500, 300, 4_000_000)  # exposed [500, 800): 300 us of the 1000 us step
    f = by_rule(evaluate_trace(t.analysis()))["exposed_copies"]
    e = f.evidence
    assert (f.severity, e["device"], f.devices) == (MEDIUM, "/device:GPU:0", ("/device:GPU:0",))
    assert e["share"] == pytest.approx(0.3) and us(e["d2d_exposed_s"]) == 300
    assert us(e["h2d_exposed_s"]) == 0 and us(e["d2h_exposed_s"]) == 0
    assert f.message.startswith("copies not hidden behind other work on /device:GPU:0 are 30.0%")
    assert "device→device" in f.message and "Between accelerators" in f.suggestion


def test_exposed_copies_not_evaluated_without_an_accelerator_plane() -> None:
    t = GpuTrace()
    t.executor.event("op:MatMul", 0, 500 * US, {"tf_op": "op:MatMul"})
    st = status(evaluate_trace(t.analysis()), "exposed_copies")
    assert st["evaluated"] is False and st["why_not"].startswith("the trace has no accelerator plane")


# ------------------------------------------------------------------ accelerator_imbalance


def test_accelerator_imbalance_names_the_slowest() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 300, launch_us=0).kernel(1, "volta_sgemm", 0, 100, launch_us=0)
    f = by_rule(evaluate_trace(t.analysis()))["accelerator_imbalance"]
    assert f.evidence["slowest"] == "/device:GPU:0" and f.evidence["ratio"] == pytest.approx(3.0)
    assert {d: us(s) for d, s in f.evidence["busy_s"].items()} == {"/device:GPU:0": 300, "/device:GPU:1": 100}
    assert f.severity == HIGH and f.devices == ("/device:GPU:0", "/device:GPU:1")
    assert "the slowest accelerator, /device:GPU:0, sets the step" in f.message


def test_accelerator_imbalance_by_measured_time_is_low_under_two() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 750, launch_us=0).kernel(1, "volta_sgemm", 0, 500, launch_us=0)
    f = by_rule(evaluate_trace(t.analysis()))["accelerator_imbalance"]
    assert (f.severity, f.evidence["ratio"]) == (LOW, pytest.approx(1.5))
    compute = {d: us(s) for d, s in f.evidence["compute_s"].items()}
    assert compute == {"/device:GPU:0": 750, "/device:GPU:1": 500}


def test_accelerator_imbalance_silent_when_close_and_needs_two() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 110, launch_us=0).kernel(1, "volta_sgemm", 0, 100, launch_us=0)
    ev = evaluate_trace(t.analysis())
    assert "accelerator_imbalance" not in by_rule(ev) and status(ev, "accelerator_imbalance")["evaluated"]
    one = evaluate_trace(GpuTrace().kernel(0, "volta_sgemm", 0, 110, launch_us=0).analysis())
    assert status(one, "accelerator_imbalance")["why_not"] == "only 1 accelerator ran kernels (/device:GPU:0)"


# ------------------------------------------------------------------ collective_bound


def test_collective_bound_with_overlap() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 300, launch_us=0)
    t.kernel(0, "ncclKernel_AllReduce_RING_LL_Sum_float", 200, 400, launch_us=190, stream="Stream #2(Nccl)")
    f = by_rule(evaluate_trace(t.analysis()))["collective_bound"]
    e = f.evidence
    assert us(e["collective_s"]) == 400 and e["share"] == pytest.approx(0.4) and f.severity == HIGH
    assert us(e["exposed_s"]) == 300 and us(e["overlap_s"]) == 100
    assert e["overlap_share"] == pytest.approx(0.25)
    assert "25.0% of that overlaps compute" in f.message and "bytes_per_pack" in f.suggestion


def test_collective_bound_silent_on_a_short_all_reduce() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 300, launch_us=0)
    t.kernel(0, "ncclKernel_AllReduce_RING_LL_Sum_float", 300, 50, launch_us=290)
    ev = evaluate_trace(t.analysis())
    assert "collective_bound" not in by_rule(ev) and status(ev, "collective_bound")["evaluated"]


# ------------------------------------------------------------------ precision


@pytest.mark.parametrize(("name", "bits"), [
    ("volta_sgemm_128x64_nn", "32"), ("volta_h884gemm_256x128_ldg8_nn", "16"),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "16"), ("turing_fp16_s1688gemm_fp16_256x128", "16"),
    ("ampere_bf16_s16816gemm_bf16_128x64", "16"), ("ampere_tf32_s1688gemm_tf32_128x128", "32"),
    ("void Eigen::internal::EigenMetaKernel<Eigen::TensorMap<Eigen::Tensor<float, 1, 1, long>>>", "32"),
    ("void Eigen::internal::EigenMetaKernel<Eigen::TensorMap<Eigen::Tensor<Eigen::half, 1, 1, long>>>", "16"),
    ("void cast_kernel<float16, float>", "16"), ("fusion_12", ""), ("redzone_checker", ""),
])
def test_kernel_precision_from_names(name: str, bits: str) -> None:
    assert kernel_precision(name) == bits


def test_precision_suggests_mixed_precision_when_mostly_32_bit() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm_128x64_nn", 0, 300, launch_us=0)
    t.kernel(0, "volta_h884gemm_64x64_nn", 300, 50, launch_us=290)
    t.kernel(0, "fusion_3", 400, 50, launch_us=390)
    f = by_rule(evaluate_trace(t.analysis()))["precision"]
    e = f.evidence
    assert e["fp32_share_of_known"] == pytest.approx(300 / 350)
    assert e["known_share"] == pytest.approx(350 / 400)
    assert {k: us(v) for k, v in e["seconds"].items()} == {"16": 50, "32": 300, "unknown": 50}
    assert f.severity == LOW and "mixed_float16" in f.suggestion and "85.7%" in f.message


def test_precision_silent_on_16_bit_and_not_evaluated_on_fusions() -> None:
    t = GpuTrace().kernel(0, "volta_h884gemm_64x64_nn", 0, 300, launch_us=0)
    t.kernel(0, "volta_sgemm_128x64_nn", 300, 50, launch_us=290)
    ev = evaluate_trace(t.analysis())
    assert "precision" not in by_rule(ev) and status(ev, "precision")["evaluated"]
    t = GpuTrace().kernel(0, "fusion_1", 0, 300, launch_us=0).kernel(0, "volta_sgemm_128x64_nn", 300, 50,
                                                                     launch_us=290)
    s = status(evaluate_trace(t.analysis()), "precision")
    assert not s["evaluated"]
    only_nccl = GpuTrace().kernel(0, "ncclKernel_AllReduce_RING_LL_Sum_float", 0, 100, launch_us=0)
    assert status(evaluate_trace(only_nccl.analysis()), "precision")["why_not"] == (
        "no compute kernel ran on an accelerator (collectives only)")
    assert s["why_not"].startswith(
        "the kernel names tell the precision of only 14.3% of 350 µs of compute time")


# ------------------------------------------------------------------ straggler (a multi-host logdir)

MS = 1000 * US
T0 = 1_700_000_000_000_000_000


def worker(name: str, delay_ms: int, wait_ms: int) -> TraceBuilder:
    """Steps 0 and 1 of 10 ms, ``delay_ms`` after worker 0's, each ending in an all-reduce of ``wait_ms``."""
    b = TraceBuilder(hostname=name)
    ts = T0 + delay_ms * 1_000_000
    host = b.plane("/host:CPU")
    py, ex = host.line("python", timestamp_ns=ts), host.line("tf_Compute/1", timestamp_ns=ts)
    for step in range(2):
        t = ts * 1000 + step * 10 * MS
        py.event("train", t, 10 * MS, {"step_num": step, "_r": 1})
        ex.event("ar/CollectiveReduceV2:CollectiveReduceV2", t + (10 - wait_ms) * MS, wait_ms * MS)
    return b


def two_workers(root: Path, late_ms: int) -> Path:
    worker("worker0", 0, 1 + late_ms).write_logdir(root, host="worker0")
    worker("worker1", late_ms, 1).write_logdir(root, host="worker1")
    return root


def test_straggler_on_a_multi_host_logdir(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(two_workers(tmp_path, 3)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    f = next(x for x in doc["findings"] if x["rule"] == "straggler")
    e = f["evidence"]
    # worker 1 arrives at 3 + 10 - 1 = 12 ms, worker 0 at 10 - 4 = 6 ms: 6 ms late in 10 ms steps
    assert f["devices"] == ["/job:worker1/task:0"] and e["late_steps"] == [0, 1]
    assert round(e["late_s_median"] * 1e3, 6) == 6.0 and e["late_share"] == pytest.approx(0.6)
    assert round(e["others_wait_s_median"] * 1e3, 6) == 4.0 and f["severity"] == HIGH
    assert next(r for r in doc["rules"] if r["rule"] == "straggler")["evaluated"]


def test_straggler_silent_when_tasks_step_together(tmp_path: Path) -> None:
    from tfprof_towers.trace.analysis import analyze_xplane

    ev = evaluate_trace(analyze_xplane(two_workers(tmp_path, 0)))
    assert "straggler" not in by_rule(ev) and status(ev, "straggler")["evaluated"]


# ------------------------------------------------------------------ the analyze command


def fixture_trace(tmp_path: Path) -> Path:
    t = host_bound_trace("input")
    t.gpu(1)  # idle
    return t.b.write_logdir(tmp_path / "logdir")


def test_analyze_prints_findings_after_tables_most_severe_first(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(fixture_trace(tmp_path))]) == 0
    out = capsys.readouterr().out
    tables, _, findings = out.partition("\nfindings from the trace (most severe first):\n")
    assert "per link, per step" in tables and findings
    heads = [ln for ln in findings.splitlines() if ln.startswith("[")]
    # both high (one of two GPUs idle: high_at 0.5; idle 80%: high_at 0.7) in the rules' order, then low
    expected = ["[high] idle_accelerators", "[high] host_bound", "[low] precision"]
    assert [h.split(" (")[0] for h in heads] == expected
    assert "    Suggestion: " in findings
    assert "could not be evaluated, because" in findings  # straggler: a single-host trace


def test_analyze_json_has_findings_and_rules(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(fixture_trace(tmp_path)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in doc["findings"]] == ["idle_accelerators", "host_bound", "precision"]
    for f in doc["findings"]:
        assert {"rule", "severity", "message", "suggestion", "evidence", "devices"} <= set(f)
    assert [r["rule"] for r in doc["rules"]] == [r.name for r in TRACE_RULES]
    s = {r["rule"]: r for r in doc["rules"]}
    assert s["launch_bound"]["params"] == {"short_kernel_s": 50e-6, "launch_delay_cutoff_s": 100e-6,
                                           "min_kernels_per_step": 20, "min_gap_share": 0.2}
    assert s["straggler"]["evaluated"] is False
    assert s["straggler"]["why_not"].startswith("fewer than two tasks")


def test_analyze_html_shows_findings_above_tables_escaped(tmp_path: Path) -> None:
    t = host_bound_trace("host_compute")
    t.executor.event("<b>evil</b>:MatMul", 310 * US, 1 * US)
    path = t.b.write_logdir(tmp_path / "logdir")
    out = tmp_path / "page.html"
    assert main(["analyze", str(path), "--html", str(out)]) == 0
    text = out.read_text()
    assert "<b>evil</b>" not in text and html.escape("<b>evil</b>") in text
    assert text.index('id="findings"') < text.index('id="breakdown"')
    assert "host_bound" in text and "Suggestion:" in text


def test_known_accelerators_and_facts_of_the_builder() -> None:
    t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0)
    t.gpu(3)
    a = t.analysis()
    assert known_accelerators(a) == ("/device:GPU:0", "/device:GPU:3")
    assert TraceFacts.of(a).working == ("/device:GPU:0",)


# ------------------------------------------------------------------ profile's report


def test_report_runs_the_trace_rules_on_every_variant(tmp_path: Path) -> None:
    """A saved run whose ``single`` variant's trace is GPU-shaped (host bound): its summary entry gets the
    trace rules' findings, the others' none (logical CPU devices: not evaluated), and the report shows
    them below the run's own findings."""
    from report_kit import make_run_dir

    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.session.report import finish_run

    run = make_run_dir(tmp_path / "run")
    (xplane,) = (run / "tensorboard" / "single").rglob("*.xplane.pb")
    xplane.write_bytes(host_bound_trace("input").b.to_bytes())
    doc = finish_run(RunDir(run))
    found = {v["name"]: [f["rule"] for f in v["trace_findings"]] for v in doc["variants"]}
    assert found["single"] == ["host_bound", "precision"]
    assert all(not rules for name, rules in found.items() if name != "single")
    host_bound = next(v for v in doc["variants"] if v["name"] == "single")["trace_findings"][0]
    assert host_bound["devices"] == ["/device:GPU:0"] and host_bound["variant"] == "single"
    assert [f["rule"] for f in doc["findings"]] == ["host_compute", "variables_remote"]  # the run's own
    page = (run / "report.html").read_text()
    assert page.index('id="findings"') < page.index('id="trace-findings"')
    assert "prefetch(tf.data.AUTOTUNE)" in page


def test_host_bound_when_no_traced_host_thread_is_busy() -> None:
    """Only the two 2 us launches in 700 us of host-wait gaps: the wait is outside the traced threads."""
    t = GpuTrace().kernel(0, "volta_sgemm", 100, 100, launch_us=90).kernel(0, "volta_sgemm", 800, 100,
                                                                          launch_us=750)
    f = by_rule(evaluate_trace(t.analysis()))["host_bound"]
    assert f.evidence["main_activity"] == "untraced" and us(f.evidence["host_busy_in_gaps_s"]) == 4
    assert "no traced host thread was busy for 696 µs" in f.message
    assert "python_tracer_level=1" in f.suggestion


def test_summary_entry_keeps_trace_findings() -> None:
    from tfprof_towers.rundir.rule_docs import TraceFinding
    from tfprof_towers.rundir.summary import SummaryEntry

    found = TraceFinding("host_bound", "high", "single", "idle", "Suggestion: ...", {"x": 1},
                         devices=("/device:GPU:0",))
    entry = SummaryEntry(name="single", status="ok", trace_findings=(found,))
    again = SummaryEntry.from_json(entry.to_json())
    assert again.trace_findings == (found,) and SummaryEntry.from_json(
        {k: v for k, v in entry.to_json().items() if k != "trace_findings"}).trace_findings == ()
