"""The memory rules (advice/memory_rules.py): each on a trace built in code that fires it and one that
does not, with exact numbers; the suggestion for every framework and vendor; the producer read in one
place; and the rules on the 8-GPU fixture (GPU 1 holds 4.0 GB and runs nothing).

One step window [0, 1000) us from a ``train`` marker; each GPU that "works" runs one kernel in it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from trace_kit import US, TraceBuilder

from tfprof_towers.advice.findings import HIGH, LOW, MEDIUM
from tfprof_towers.advice.memory_rules import (
    FRAMEWORKS,
    MEMORY_RULES,
    VENDORS,
    _producer,
    memory_suggestion,
)
from tfprof_towers.advice.trace_rules import TRACE_RULES, evaluate_trace
from tfprof_towers.testing.synth import Alloc, allocator_events
from tfprof_towers.trace.analysis import analyze_trace, analyze_xplane
from tfprof_towers.trace.load import trace_from_bytes

MIB = 1 << 20


def gpus(allocs: dict[int, tuple[int, int | None]], working: tuple[int, ...]) -> TraceBuilder:
    """GPU n's allocator: ``allocs[n] = (bytes allocated at 100 us by op "big/alloc", limit)`` (None: no
    ``bytes_available``), with nothing held before; GPUs in ``working`` run a kernel."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    for n, (nbytes, limit) in allocs.items():
        allocator_events(host.line(f"tf_Compute/{n}"), f"GPU_{n}_bfc",
                         [Alloc(100 * US, nbytes, n, "big/alloc")], limit=limit)
    for n in sorted(set(allocs) | set(working)):
        plane = b.plane(f"/device:GPU:{n}").stats({"memory_size": 16 << 30})
        if n in working:
            plane.line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US, {"tf_op": "mm:MatMul"})
    return b


def evaluate(b: TraceBuilder):
    ev = evaluate_trace(analyze_trace(trace_from_bytes(b.to_bytes())))
    return {f.rule: f for f in ev.findings}, {r.rule: r.to_json() for r in ev.rules}


def test_memory_rules_are_trace_rules() -> None:
    names = [r.name for r in TRACE_RULES]
    assert names[-3:] == ["memory_pressure", "idle_device_holds_memory", "memory_imbalance"]
    assert [r.name for r in MEMORY_RULES] == names[-3:]


# ------------------------------------------------------------------ memory_pressure


@pytest.mark.parametrize(("nbytes", "severity"), [(9_500_000, MEDIUM), (9_900_000, HIGH)])
def test_memory_pressure_fires_at_90_percent_of_capacity(nbytes: int, severity: str) -> None:
    found, _ = evaluate(gpus({0: (nbytes, 10_000_000)}, (0,)))
    f = found["memory_pressure"]
    assert f.severity == severity and f.devices == ("/device:GPU:0",)
    assert f.evidence["devices"]["/device:GPU:0"] == {"peak_bytes": nbytes, "capacity_bytes": 10_000_000,
                                                      "share": nbytes / 10_000_000}
    assert f.evidence["peak_op"] == "big/alloc"
    pct = f"{100 * nbytes / 10_000_000:.1f}%"
    assert f"/device:GPU:0 {nbytes / 1e6:.2f} MB of 10.0 MB ({pct})" in f.message
    assert "the allocation at the peak on /device:GPU:0 was by big/alloc" in f.message
    assert "batch size" in f.suggestion and "recompute activations" in f.suggestion


def test_memory_pressure_silent_below_90_percent_and_not_evaluated_without_capacity() -> None:
    found, rules = evaluate(gpus({0: (8_900_000, 10_000_000)}, (0,)))
    assert "memory_pressure" not in found and rules["memory_pressure"]["evaluated"]
    b = TraceBuilder()  # no limit written, and no device plane: nothing says what the capacity is
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    allocator_events(host.line("t"), "gpu_host_bfc", [Alloc(100 * US, 4096, 1, "x")])
    found, rules = evaluate(b)
    assert not rules["memory_pressure"]["evaluated"]
    assert rules["memory_pressure"]["why_not"].startswith("no allocator says its capacity")


def test_memory_rules_not_evaluated_without_allocator_events() -> None:
    b = TraceBuilder()
    b.plane("/host:CPU").line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    b.plane("/device:GPU:0").line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US)
    _, rules = evaluate(b)
    for r in MEMORY_RULES:
        assert not rules[r.name]["evaluated"]
        assert rules[r.name]["why_not"].startswith("the trace has no allocator events")


# ------------------------------------------------------------------ idle_device_holds_memory


def test_idle_device_holds_memory_fires_on_an_idle_gpu_holding_256_mib_or_more() -> None:
    found, _ = evaluate(gpus({0: (1_000_000, 10 << 30), 1: (300 * MIB, 10 << 30)}, (0,)))
    f = found["idle_device_holds_memory"]
    assert f.devices == ("/device:GPU:1",) and f.evidence == {"devices": {"/device:GPU:1": 300 * MIB},
                                                                "total_bytes": 300 * MIB}
    assert f.message == ("1 accelerator(s) ran no kernel in the analysed steps yet hold memory: "
                         "/device:GPU:1 315 MB (315 MB in all; the threshold is 256 MiB)")
    assert f.severity == HIGH  # 300 MiB of the 301 MB every allocator holds: over half
    found, _ = evaluate(gpus({0: (400 * MIB, 10 << 30), 1: (300 * MIB, 10 << 30)}, (0,)))
    assert found["idle_device_holds_memory"].severity == MEDIUM  # 300 of 700 MiB


@pytest.mark.parametrize(("held", "working"), [(200 * MIB, (0,)), (300 * MIB, (0, 1))])
def test_idle_device_holds_memory_silent_under_256_mib_or_when_it_works(held: int, working) -> None:
    found, rules = evaluate(gpus({0: (1_000_000, 10 << 30), 1: (held, 10 << 30)}, working))
    assert "idle_device_holds_memory" not in found and rules["idle_device_holds_memory"]["evaluated"]


# ------------------------------------------------------------------ memory_imbalance


def test_memory_imbalance_fires_at_one_and_a_half_times_the_others_median() -> None:
    found, _ = evaluate(gpus({0: (3_000_000, None), 1: (1_000_000, None), 2: (1_200_000, None)}, (0, 1, 2)))
    f = found["memory_imbalance"]
    assert f.devices == ("/device:GPU:0",) and f.severity == LOW  # 2.73x, under high_at 3
    assert f.evidence["ratio"] == pytest.approx(3_000_000 / 1_100_000)
    assert f.evidence["others_median_bytes"] == 1_100_000
    assert f.message.startswith("/device:GPU:0 peaks at 3.00 MB, 2.73× the median of the other 2 "
                                "accelerator(s) (1.10 MB)")
    found, _ = evaluate(gpus({0: (3_000_000, None), 1: (1_000_000, None)}, (0, 1)))
    assert found["memory_imbalance"].severity == HIGH  # 3.0x


def test_memory_imbalance_silent_when_balanced_and_not_evaluated_on_one_gpu() -> None:
    balanced = {0: (1_400_000, None), 1: (1_000_000, None), 2: (1_000_000, None)}
    found, rules = evaluate(gpus(balanced, (0, 1, 2)))
    assert "memory_imbalance" not in found and rules["memory_imbalance"]["evaluated"]
    # an idle GPU's memory is not a replica's: GPU 1 ran nothing, so only one accelerator is compared
    found, rules = evaluate(gpus({0: (3_000_000, None), 1: (1_000_000, None)}, (0,)))
    assert not rules["memory_imbalance"]["evaluated"]
    assert rules["memory_imbalance"]["why_not"] == (
        "fewer than two accelerators that ran kernels have allocator events")


# ------------------------------------------------------------------ the 8-GPU fixture


def test_fixture_gpu1_holds_memory_and_runs_nothing(fixture_8gpu) -> None:
    ev = evaluate_trace(analyze_xplane(fixture_8gpu))
    found = {f.rule: f for f in ev.findings}
    f = found["idle_device_holds_memory"]
    assert f.evidence == {"devices": {"/device:GPU:1": 4_013_344_768}, "total_bytes": 4_013_344_768}
    assert "memory_pressure" not in found  # 6.2 of 15.5 GB
    assert "memory_imbalance" not in found  # GPUs 4 and 6 peak within 0.02% of each other


# ------------------------------------------------------------------ the producer's language


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("vendor", VENDORS)
def test_every_suggestion_speaks_the_producers_language(framework: str, vendor: str) -> None:
    pressure = memory_suggestion("memory_pressure", framework, vendor)
    idle = memory_suggestion("idle_device_holds_memory", framework, vendor)
    imbalance = memory_suggestion("memory_imbalance", framework, vendor)
    for s in (pressure, idle, imbalance):
        assert s.startswith("Suggestion: ")
    tf_words = ("tf.config", "tf.keras", "tf.recompute_grad", "tf.distribute")
    jax_words = ("XLA_PYTHON_CLIENT", "jax.", "jnp.")
    every = pressure + idle + imbalance
    if framework == "tensorflow":
        assert "`tf.config.set_visible_devices`" in idle
        assert "`tf.config.experimental.set_memory_growth(gpu, True)`" in idle
        assert "tf.keras.mixed_precision" in pressure and "`tf.recompute_grad`" in pressure
        assert ("mixed_bfloat16" if vendor == "google-tpu" else "mixed_float16") in pressure
        assert not any(w in every for w in jax_words)
    elif framework == "jax":
        assert "`XLA_PYTHON_CLIENT_PREALLOCATE=false`" in idle and "`XLA_PYTHON_CLIENT_MEM_FRACTION`" in idle
        assert "`jax.checkpoint`" in pressure and "jax.sharding" in imbalance
        assert not any(w in every for w in tf_words)
    else:
        assert not any(w in every for w in tf_words + jax_words)
    if vendor == "nvidia":
        assert "`CUDA_VISIBLE_DEVICES`" in idle and "HIP_" not in idle and "ROCR_" not in idle
    elif vendor == "amd":
        assert "`HIP_VISIBLE_DEVICES`" in idle and "`ROCR_VISIBLE_DEVICES`" in idle and "CUDA_" not in idle
    elif vendor == "google-tpu":
        assert "no visible-devices variable" in idle and "CUDA_" not in idle and "HIP_" not in idle
        assert "bfloat16" in pressure and "native on TPUs" in pressure
    else:
        assert "`CUDA_VISIBLE_DEVICES` on NVIDIA" in idle and "`HIP_VISIBLE_DEVICES` on AMD" in idle
    if vendor != "google-tpu":
        assert "native on TPUs" not in pressure


def test_an_unknown_rule_has_no_suggestion() -> None:
    with pytest.raises(ValueError):
        memory_suggestion("nope", "tensorflow", "nvidia")
    assert memory_suggestion("memory_pressure", "pytorch", "intel") == memory_suggestion(
        "memory_pressure", "unknown", "unknown")


def test_the_producer_is_read_in_one_place() -> None:
    assert _producer(SimpleNamespace()) == ("unknown", "unknown")  # facts without a producer
    p = SimpleNamespace(framework="jax", vendor="amd")
    assert _producer(SimpleNamespace(producer=p)) == ("jax", "amd")
    odd = SimpleNamespace(framework="mxnet", vendor="intel")
    assert _producer(SimpleNamespace(producer=odd)) == ("unknown", "unknown")
