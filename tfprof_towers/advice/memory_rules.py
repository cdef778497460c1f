"""The trace rules about device memory: ``memory_pressure``, ``idle_device_holds_memory`` and
``memory_imbalance``, on the allocators' figures of :mod:`tfprof_towers.trace.memory_peaks`
(``TraceFacts.memory``, from ``Analysis.memory``: per device its peak, capacity and the ops live at the peak).

They are trace rules (:mod:`.trace_rules` appends :data:`MEMORY_RULES` to its ``TRACE_RULES``; the engine asks
:func:`memory_unmet` why one cannot be evaluated): same engine, a :class:`~.findings.Rule` with named
parameters, facts the trace rules' ``TraceFacts`` (read here only through :class:`MemoryFacts`, so this
module does not import :mod:`.trace_rules`).  Each suggestion speaks the producer's language
(:func:`memory_suggestion`: TensorFlow, JAX or neutral; NVIDIA, AMD, TPU or neutral), read from the
trace in one place, :func:`_producer`.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tfprof_towers.advice.findings import ALLOCATOR_EVENTS, LOW, MEDIUM, MEMORY_FIT, Facts, Finding, Rule
from tfprof_towers.vocab.device_names import is_accelerator_plane
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_percent, fmt_ratio

if TYPE_CHECKING:
    from tfprof_towers.trace.memory_peaks import DeviceMemory
    from tfprof_towers.trace.producer import Producer

FRAMEWORKS = ("tensorflow", "jax", "unknown")
VENDORS = ("nvidia", "amd", "google-tpu", "unknown")
MIB = 1 << 20


class MemoryFacts(Protocol):
    """What these rules read of the trace rules' facts (``trace_rules.TraceFacts``)."""

    @property
    def producer(self) -> Producer: ...

    @property
    def memory(self) -> tuple[DeviceMemory, ...]: ...

    @property
    def idle_accelerators(self) -> tuple[str, ...]: ...

    @property
    def name(self) -> str: ...

    @property
    def working(self) -> tuple[str, ...]: ...


def _producer(facts: MemoryFacts) -> tuple[str, str]:
    """(framework, vendor) of the trace's producer; ``("unknown", "unknown")`` where the trace does not
    say (no ``producer``)."""
    p = getattr(facts, "producer", None)
    if p is None:
        return "unknown", "unknown"
    framework, vendor = str(getattr(p, "framework", "unknown")), str(getattr(p, "vendor", "unknown"))
    return (framework if framework in FRAMEWORKS else "unknown", vendor if vendor in VENDORS else "unknown")


def _visible_devices(vendor: str) -> str:
    """How to hide devices a job does not use, for the vendor."""
    return {
        "nvidia": "`CUDA_VISIBLE_DEVICES`",
        "amd": "`HIP_VISIBLE_DEVICES` (or `ROCR_VISIBLE_DEVICES`)",
        "google-tpu": "the TPU runtime's chip selection (there is no visible-devices variable for TPUs)",
        "unknown": "the vendor's visible-devices variable: `CUDA_VISIBLE_DEVICES` on NVIDIA, "
                   "`HIP_VISIBLE_DEVICES` on AMD",
    }[vendor]


def _low_precision(framework: str, vendor: str) -> str:
    tpu = vendor == "google-tpu"
    if framework == "tensorflow":
        policy = "mixed_bfloat16" if tpu else "mixed_float16"
        return (f"mixed precision (`tf.keras.mixed_precision.set_global_policy('{policy}')`"
                + ("; bfloat16 is native on TPUs)" if tpu else ")"))
    if framework == "jax":
        return ("bfloat16 activations and parameters (`jnp.bfloat16`"
                + ("; native on TPUs)" if tpu else ", or float16)"))
    return "16-bit activations (bfloat16, native on TPUs; or float16)" if tpu else \
        "16-bit activations (float16 or bfloat16)"


def memory_suggestion(rule_name: str, framework: str, vendor: str) -> str:
    """The ``Suggestion:`` of memory rule ``rule_name`` worded for the producer (``framework`` in
    :data:`FRAMEWORKS`, ``vendor`` in :data:`VENDORS`; anything else is treated as unknown)."""
    framework = framework if framework in FRAMEWORKS else "unknown"
    vendor = vendor if vendor in VENDORS else "unknown"
    if rule_name == "memory_pressure":
        recompute = {"tensorflow": "(`tf.recompute_grad`)", "jax": "(`jax.checkpoint`)",
                     "unknown": "instead of keeping them"}[framework]
        low = _low_precision(framework, vendor)
        text = (f"Suggestion: lower the per-replica batch size; train in {low}; "
                f"recompute activations in the backward pass {recompute}.")
        if framework == "jax":
            text += (" JAX may use only `XLA_PYTHON_CLIENT_MEM_FRACTION` of the memory (75% by default): "
                     "raising it leaves the model more room.")
        return text
    if rule_name == "idle_device_holds_memory":
        hide = _visible_devices(vendor)
        if framework == "tensorflow":
            return ("Suggestion: TensorFlow maps memory on every GPU it can see: limit it to the ones the "
                    f"job uses with `tf.config.set_visible_devices` or {hide}, or let it grow only as needed "
                    "with `tf.config.experimental.set_memory_growth(gpu, True)`.")
        if framework == "jax":
            return ("Suggestion: JAX preallocates 75% of every device it can see: hide the unused ones with "
                    f"{hide}, or turn preallocation off (`XLA_PYTHON_CLIENT_PREALLOCATE=false`) or lower "
                    "it (`XLA_PYTHON_CLIENT_MEM_FRACTION`).")
        return (f"Suggestion: hide the devices the job does not use with {hide}; or have the framework "
                "allocate memory as needed instead of reserving it up front.")
    if rule_name == "memory_imbalance":
        if framework == "tensorflow":
            return ("Suggestion: keep a copy of the variables per replica (`tf.distribute.MirroredStrategy`, "
                    "the `replicated` placement) or spread them over several parameter devices, instead of "
                    "gathering every variable and its optimizer slots on one device "
                    "(`towers_accel0_vars`, `central_storage` with a GPU as its parameter device).")
        if framework == "jax":
            return ("Suggestion: shard the parameters and optimizer state over the devices "
                    "(`jax.sharding.NamedSharding`) instead of keeping them on one device.")
        return ("Suggestion: spread the parameters and optimizer state over the devices (a copy or a "
                "shard per device) instead of gathering them and their updates on one.")
    raise ValueError(f"no memory rule named {rule_name!r}")


#: The smallest median peak a device's peak is compared with (``memory_imbalance``).
MIN_MEDIAN_BYTES = 64 << 10  # 64 KiB: below it, a ratio compares allocators that barely ran


def _memory(facts: MemoryFacts) -> tuple[DeviceMemory, ...]:
    return facts.memory


def _capacity(d: DeviceMemory) -> int | None:
    """What the device may use: its allocator's limit, else the device's memory."""
    return d.capacity_bytes or d.device_memory_bytes


def memory_unmet(rule: Rule, facts: MemoryFacts) -> str | None:
    """Why a memory rule cannot be evaluated on this trace (None: it can, or ``rule`` is not one)."""
    if ALLOCATOR_EVENTS not in rule.needs:
        return None
    mem = _memory(facts)
    if not mem:
        return ("the trace has no allocator events (a CPU-only capture, or a framework that does not "
                "record them)")
    if rule.name == "memory_pressure" and not any(_capacity(d) for d in mem):
        return "no allocator says its capacity (no bytes_available, and no device plane with memory_size)"
    if rule.name == "memory_imbalance" and len(_busy_accelerators(facts)) < 2:
        return "fewer than two accelerators that ran kernels have allocator events"
    return None


def check_memory_pressure(rule: Rule, f: MemoryFacts) -> Finding | None:
    share_at = float(rule.param("min_peak_share"))
    hot = [(d, d.peak_bytes / cap) for d in _memory(f)
           if (cap := _capacity(d)) and d.peak_bytes / cap >= share_at]
    if not hot:
        return None
    hot.sort(key=lambda x: -x[1])
    worst, share = hot[0]
    cap = _capacity(worst)
    op = worst.peak_op or (worst.top_ops[0].op if worst.top_ops else "")
    parts = [f"{d.device} {fmt_bytes(d.peak_bytes)} of {fmt_bytes(_capacity(d))} ({fmt_percent(s)})"
             for d, s in hot]
    msg = (f"memory is nearly full, so the job risks running out (ResourceExhaustedError): peak in use "
           f"{'; '.join(parts)}, at least {fmt_percent(share_at, 0)} of the capacity"
           + (f"; the allocation at the peak on {worst.device} was by {op}" if op else ""))
    framework, vendor = _producer(f)
    evidence = {"devices": {d.device: {"peak_bytes": d.peak_bytes, "capacity_bytes": _capacity(d),
                                       "share": s} for d, s in hot},
                "worst": worst.device, "peak_op": op, "capacity_bytes": cap}
    return Finding(rule.name, rule.tier(share), f.name, msg, memory_suggestion(rule.name, framework, vendor),
                   evidence, (), tuple(d.device for d, _ in hot))


def check_idle_device_holds_memory(rule: Rule, f: MemoryFacts) -> Finding | None:
    least = int(rule.param("min_bytes"))
    idle = set(f.idle_accelerators)
    held = [d for d in _memory(f) if d.device in idle and d.peak_bytes >= least]
    if not held:
        return None
    total = sum(d.peak_bytes for d in held)
    msg = (f"{len(held)} accelerator(s) ran no kernel in the analysed steps yet hold memory: "
           + "; ".join(f"{d.device} {fmt_bytes(d.peak_bytes)}" for d in held)
           + f" ({fmt_bytes(total)} in all; the threshold is {least / MIB:g} MiB)")
    framework, vendor = _producer(f)
    evidence = {"devices": {d.device: d.peak_bytes for d in held}, "total_bytes": total}
    severity = rule.tier(total / max(sum(d.peak_bytes for d in _memory(f)), 1))
    return Finding(rule.name, severity, f.name, msg, memory_suggestion(rule.name, framework, vendor),
                   evidence, (), tuple(d.device for d in held))


def _busy_accelerators(f: MemoryFacts) -> list[DeviceMemory]:
    """The accelerators with allocator events that ran kernels in the analysed steps."""
    working = set(f.working)
    return [d for d in _memory(f) if is_accelerator_plane(d.device) and d.device in working]


def check_memory_imbalance(rule: Rule, f: MemoryFacts) -> Finding | None:
    import statistics  # only here, where two accelerators have allocator events: `analyze` often skips it

    devices = _busy_accelerators(f)
    ratios = []
    for d in devices:
        others = [o.peak_bytes for o in devices if o is not d]
        median = statistics.median(others)
        if median >= MIN_MEDIAN_BYTES:  # a ratio to a few bytes says nothing ("2e10x the median (0 B)")
            ratios.append((d.peak_bytes / median, d, median))
    if not ratios:
        return None
    ratio, top, median = max(ratios, key=lambda r: r[0])
    if ratio < float(rule.param("min_peak_ratio")):
        return None
    held = top.before_trace_bytes
    msg = (f"{top.device} peaks at {fmt_bytes(top.peak_bytes)}, {fmt_ratio(ratio)} the median of the "
           f"other {len(devices) - 1} accelerator(s) ({fmt_bytes(median)}): variables or their updates are "
           "gathered on one device" + (f"; {fmt_bytes(held)} of its peak was held from before the trace "
                               "(variables, optimizer slots)" if held else ""))
    framework, vendor = _producer(f)
    evidence: dict[str, Any] = {"device": top.device, "peak_bytes": top.peak_bytes,
                                "others_median_bytes": median, "ratio": ratio,
                                "peaks": {d.device: d.peak_bytes for d in devices}}
    return Finding(rule.name, rule.tier(ratio), f.name, msg, memory_suggestion(rule.name, framework, vendor),
                   evidence, (), (top.device,))


MEMORY_RULES: tuple[Rule, ...] = (
    Rule("memory_pressure", "a device's peak memory is close to its capacity: a risk of running out",
         severity=MEDIUM, high_at=0.98, check=check_memory_pressure,
         params={"min_peak_share": 0.90}, primary="min_peak_share", needs=(ALLOCATOR_EVENTS,)),
    Rule("idle_device_holds_memory", "an accelerator that ran no kernel holds memory",
         severity=MEDIUM, high_at=0.5, check=check_idle_device_holds_memory,
         params={"min_bytes": 256 * MIB}, primary="min_bytes", needs=(ALLOCATOR_EVENTS,)),
    Rule("memory_imbalance", "one accelerator's peak memory is far above the others'",
         severity=LOW, high_at=3.0, check=check_memory_imbalance,
         params={"min_peak_ratio": 1.5}, primary="min_peak_ratio", needs=(ALLOCATOR_EVENTS,)),
)


# ------------------------------------------------------------------------------------------
# The run's rule: a placement that does not fit the projection's target


def projected_fit(f: Facts) -> Mapping[str, Any] | None:
    """The variant's memory verdict on the projection's target (``summary.projection.variants[].memory_fit``),
    None where there is none or it was not checked."""
    row = None if f.projection is None else f.projection.row(f.name)
    fit = None if row is None else row.memory_fit
    return fit if fit is not None and fit.get("fits") is not None else None


def memory_fit_unmet(rule: Rule, f: Facts) -> str | None:
    """Why the run's memory rule cannot be evaluated on this variant (None: it can, or not this rule)."""
    if MEMORY_FIT not in rule.needs or projected_fit(f) is not None:
        return None
    proj = f.projection
    if proj is None or proj.error:
        return "no projection on a hardware profile (profile --project-on NAME)"
    note = (proj.memory or {}).get("note")
    return str(note) if note else "the projection has no memory verdict for it (its memory was not estimated)"


def check_does_not_fit(rule: Rule, f: Facts) -> Finding | None:
    fit = projected_fit(f)
    if fit is None or fit.get("peak_bytes") is None or not fit.get("capacity_bytes"):
        return None
    # the verdict's device is its worst; judged with this rule's headroom (the projection's, kept equal)
    if int(fit["peak_bytes"]) <= int(fit["capacity_bytes"]) * (1 - float(rule.param("headroom"))):
        return None
    hardware = (f.projection.hardware if f.projection is not None else None) or "the target"
    msg = f"on {hardware}, this placement {fit['verdict']}" + (f": {fit['why']}" if fit.get("why") else "")
    suggestion = ("Suggestion: a placement that splits the batch over the accelerators (towers, replicated, "
                  "mirrored) or keeps the variables and their optimizer slots on the host (towers_host_vars, "
                  "central_storage); a smaller per-replica batch; mixed precision.")
    evidence = {"hardware": hardware, **{k: fit.get(k) for k in ("device", "peak_bytes", "capacity_bytes")}}
    device = str(fit.get("device") or "")
    devices = (device,) if device else ()
    return Finding(rule.name, rule.severity, f.name, msg, suggestion, evidence, (), devices)


#: The run's memory rule (``rules.RULES`` appends it): projected, so it informs and never disqualifies a
#: measured pick; the projected recommender itself never picks a placement that does not fit.
DOES_NOT_FIT = Rule("does_not_fit", "the placement does not fit the projection target's memory",
                    severity=MEDIUM, check=check_does_not_fit, params={"headroom": 0.10}, primary="headroom",
                    needs=(MEMORY_FIT,))
