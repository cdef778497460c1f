"""Does a placement fit the target's memory?  Each variant's estimated peak per device against the
hardware profile's ``memory_gb``.

The estimate walks the variant's graph in the graph child with TensorFlow's executor rules
(:func:`.graphcost.estimate_memory`, :mod:`.liveness`: a buffer freed after its last reader, views and
in-place ops allocating nothing), plus the variables and optimizer slots placed on each device.  A device
fits when its peak is at most its memory less :data:`HEADROOM`.  No TensorFlow here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.projection.hardware import GIB, Hardware
from tfprof_towers.rundir.summary import fit_verdict, judged, verdict_device
from tfprof_towers.vocab.device_names import is_accelerator_plane, short_device
from tfprof_towers.vocab.fmt import fmt_gib

#: The share of a device's memory kept free: TensorFlow's allocator never gets all of it.
HEADROOM = 0.10
HEADROOM_WHY = (
    "10% of each device's memory is kept free for the CUDA context, the cuDNN/cuBLAS workspaces and "
    "the allocator's own reserve: on the shared 8xV100 trace, TensorFlow's allocator got 15.48 of the "
    "16.95 GB each V100 reports (8.7% less)"
)
ESTIMATED = "estimated (the step's tensors walked with TensorFlow's executor rules)"
MEASURED = "measured (the allocators' events in the trace)"
NOT_CHECKED = "memory fit not checked: the hardware profile gives no memory_gb"


def capacity_of(device: str, hw: Hardware) -> int | None:
    """The memory of ``device`` on ``hw``: an accelerator's or the host's; None where not given."""
    if is_accelerator_plane(device):
        return hw.accelerator.memory_bytes
    gb = hw.host.memory_gb
    return None if gb is None else int(gb * GIB)


@dataclass(frozen=True)
class Fit:
    """A variant's verdict on the target: whether every device's peak fits, and on which device it is
    tightest (or over)."""

    fits: bool | None  # None: not checked (no memory sizes, or no estimate); False: the low end is over
    verdict: str
    device: str | None = None
    peak_bytes: int | None = None
    capacity_bytes: int | None = None
    why: str = ""  # which tensors make the difference (a variant that does not fit)
    may_not_fit: bool = False  # the low end fits, the high end (another executor order) does not
    peak_high_bytes: int | None = None  # the high end of the range on ``device``

    def to_json(self) -> dict[str, Any]:
        return {"fits": self.fits, "verdict": self.verdict, "device": self.device,
                "peak_bytes": self.peak_bytes, "capacity_bytes": self.capacity_bytes, "why": self.why,
                "may_not_fit": self.may_not_fit, "peak_high_bytes": self.peak_high_bytes}


def device_rows(estimate: Mapping[str, Any], hw: Hardware) -> dict[str, dict[str, Any]]:
    """``projection.json`` -> ``variants[].memory``: per device ``peak_bytes`` (the queue's order),
    ``peak_low_bytes`` / ``peak_high_bytes`` (the range over the executor's orders), ``basis``,
    ``persistent_bytes``, ``transient_bytes``, ``capacity_bytes`` (None: not given), ``fits`` (None: not
    checked; False: the low end does not fit) and ``may_not_fit`` (only the low end fits)."""
    out = {}
    for dev, d in (estimate.get("devices") or {}).items():
        cap = capacity_of(dev, hw)
        peak = int(d["peak_bytes"])
        low, high = int(d.get("peak_low_bytes", peak)), int(d.get("peak_high_bytes", peak))
        fits, may_not = judged(low, high, cap, HEADROOM)
        out[dev] = {"peak_bytes": peak, "basis": "estimated", "peak_low_bytes": low, "peak_high_bytes": high,
                    "persistent_bytes": int(d.get("persistent_bytes", 0)),
                    "transient_bytes": int(d.get("transient_bytes", peak)), "capacity_bytes": cap,
                    "fits": fits, "may_not_fit": may_not}
    return out


def fit_of(rows: Mapping[str, Mapping[str, Any]], estimate: Mapping[str, Any] | None) -> Fit:
    """The verdict over a variant's devices (:func:`device_rows`)."""
    if estimate is None:
        return Fit(None, "memory not estimated")
    if estimate.get("error"):
        return Fit(None, f"memory not estimated: {estimate['error']}")
    checked = {d: r for d, r in rows.items() if r["capacity_bytes"]}
    if not checked:
        return Fit(None, NOT_CHECKED)
    dev = verdict_device(checked, lambda r: r["peak_bytes"], _high)
    r = checked[dev]
    verdict = fit_verdict(r, r["peak_bytes"], _high(r), short_device(dev), HEADROOM)
    if r["fits"] is False:
        why = why_on(dev, (estimate.get("devices") or {}).get(dev) or {})
        return Fit(False, verdict, dev, r["peak_bytes"], r["capacity_bytes"], why, peak_high_bytes=_high(r))
    if r.get("may_not_fit"):
        why = why_on(dev, (estimate.get("devices") or {}).get(dev) or {})
        return Fit(True, verdict, dev, r["peak_bytes"], r["capacity_bytes"], why, may_not_fit=True,
                   peak_high_bytes=_high(r))
    return Fit(True, verdict, dev, r["peak_bytes"], r["capacity_bytes"], peak_high_bytes=_high(r))

def _high(row: Mapping[str, Any]) -> int:
    """A device row's high end (its peak where the row has no range)."""
    return int(row.get("peak_high_bytes", row["peak_bytes"]))


def why_on(device: str, d: Mapping[str, Any]) -> str:
    """Which tensors make a device's peak: its variables and optimizer slots, and the largest tensors live
    at the peak (the walk's live buffers)."""
    parts = []
    if d.get("variables"):
        parts.append(f"the variables and their optimizer slots ({d['variables']} tensors, "
                     f"{fmt_gib(d.get('persistent_bytes'))}) on {short_device(device)}")
    top = d.get("top_tensors") or ()
    if top:
        shown = ", ".join(f"{name} {fmt_gib(n)}" for name, n in top[:4])
        parts.append(f"the largest tensors live at the peak: {shown}")
    transient = d.get("transient_bytes")
    if transient is not None:
        parts.append(f"{fmt_gib(transient)} of tensors live at once in all")
    return "; ".join(parts)


def with_memory(entry: dict[str, Any], estimate: Mapping[str, Any] | None, hw: Hardware) -> dict[str, Any]:
    """A projection entry with its ``memory`` (per device) and ``memory_fit`` (the verdict)."""
    rows = device_rows(estimate or {}, hw) if estimate and not estimate.get("error") else {}
    return {**entry, "memory": rows, "memory_fit": fit_of(rows, estimate).to_json()}
