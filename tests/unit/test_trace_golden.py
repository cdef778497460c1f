"""Every decoded number pinned: the full analysis document of the real 8-GPU trace and of a
copy-heavy synthetic trace (varied ``memcpy_details`` sizes) against golden files, and the
events of small traces against an independent slow decode (protobuf + plain Python).

The golden files are the answers before the speed work; a change to them must be a change of
meaning, reviewed as such.  Regenerate with ``TFPROF_REGEN_GOLDEN=1 pytest tests/unit/test_trace_golden.py``.

Changes of meaning so far:

* Per-device step windows.  The 8-GPU files used to pin a wrong answer: one 669 ms
  step in which GPU 4 and GPU 6 were each 98% idle, because every device's window for step 0
  was merged into one (earliest start, latest end) although the two GPUs, each with its own
  ``Steps`` line, ran step 0 about 650 ms apart (627.7 ms from the end of GPU 4's window to
  the start of GPU 6's).  Each GPU is now broken down within its own window (GPU 4: 19.865 ms,
  74.6% compute; GPU 6: 21.310 ms, 69.8% compute), the step lasts as long as the longest of
  them -- ``step_time_s`` [0.021310352], XProf's overview page says 21.3 ms on the same file,
  with 14.9 ms of device compute -- and a note says the two did not step together.  GPU 1
  and the host threads have no ``Steps`` line of their own and keep the trace's window; six
  GPUs ran no kernel (``idle_accelerators``).  The copy-heavy files only gained the new keys
  (``step_time_s``, ``step_time_avg_s``, ``idle_accelerators``): one host's markers, one
  window shared by every device, every number as before.
* Who wrote the trace.  Every file only gained two keys: ``producer`` (the framework
  and vendor, with the evidence: TensorFlow on NVIDIA for both) and ``unread_planes`` (empty:
  every plane here is a host or a GPU).  Every number as before.
* Weighed producer signs.  Only the producer's ``evidence`` changed: a line per decision's confidence,
  the 8-GPU trace's tf.data threads named as shared (not counted), the count of GPU planes with a
  compute capability.  Every number as before.
* Impossible rates.  The copy-heavy trace's four host<->device links carry byte counts that give
  7-8 TB/s (its ``memcpy_details`` sizes are drawn, not per copy): each gained ``"impossible":
  true``, a rate above any such link's peak, left out of the findings.  Every number as before.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from slow_decode import exclusive_times, gpu_totals, slow_events
from trace_kit import US, logical_cpu_trace, two_gpu_trace

from tfprof_towers.testing.synth import copy_heavy_trace
from tfprof_towers.trace import attribute
from tfprof_towers.trace.analysis import analyze_trace, analyze_xplane
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.vocab.categories import WALL_ORDER

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
REGEN = os.environ.get("TFPROF_REGEN_GOLDEN") == "1"


def copy_heavy_bytes() -> bytes:
    return copy_heavy_trace(n_events=6000, gpus=2, steps=3, seed=7).to_bytes()


def same(got, want, where: str = "") -> None:
    """Equal documents: ints, strings, structure exactly; floats to 1e-12 relative."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            same(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, int | float), f"{where}: {got!r} is not a number"
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-18), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"


def check_golden(name: str, doc: dict) -> None:
    path = GOLDEN / name
    doc = json.loads(json.dumps(doc))  # what --json prints
    if REGEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    same(doc, json.loads(path.read_text()), name)


@pytest.mark.parametrize("per_step", [False, True])
def test_golden_8gpu_document(fixture_8gpu, per_step: bool) -> None:
    doc = analyze_xplane(fixture_8gpu).to_doc(per_step=per_step)
    doc["source"] = "gpu_multi_worker_8xV100.xplane.pb"
    check_golden(f"analysis_8gpu{'_per_step' if per_step else ''}.json", doc)


@pytest.mark.parametrize("per_step", [False, True])
def test_golden_copy_heavy_document(per_step: bool) -> None:
    doc = analyze_trace(trace_from_bytes(copy_heavy_bytes(), "copy-heavy")).to_doc(per_step=per_step)
    check_golden(f"analysis_copy_heavy{'_per_step' if per_step else ''}.json", doc)


@pytest.mark.parametrize("chunk", [7, 1000])
def test_time_slices_change_no_number(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """A device swept in slices of time (big traces) gets the same document as in one pass."""
    monkeypatch.setattr(attribute, "CHUNK", chunk)
    doc = analyze_trace(trace_from_bytes(copy_heavy_bytes(), "copy-heavy")).to_doc()
    same(json.loads(json.dumps(doc)), json.loads((GOLDEN / "analysis_copy_heavy.json").read_text()))


# --- against the independent slow decode


@pytest.mark.parametrize(
    "build",
    [two_gpu_trace, logical_cpu_trace, copy_heavy_bytes],
    ids=["two_gpu", "logical_cpu", "copy_heavy"],
)
def test_events_equal_the_slow_decode(build) -> None:
    data = build() if build is copy_heavy_bytes else build().to_bytes()
    ev = trace_from_bytes(data).events
    want = slow_events(data)
    got = list(
        zip(
            ev["plane"].astype(str), ev["line"].astype(str), ev["name"].astype(str),
            ev["start_ps"].tolist(), ev["dur_ps"].tolist(),
        )
    )
    assert got == [(e.plane, e.line, e.name, e.start_ps, e.dur_ps) for e in want]


def test_copy_heavy_gpu_totals_equal_the_slow_decode() -> None:
    data = copy_heavy_bytes()
    ev = trace_from_bytes(data).events
    gpu = ev[ev["plane"].astype(str).str.startswith("/device:GPU:")]
    got = {
        (str(d), str(c)): [int(r["dur_ps"].size), int(r["dur_ps"].sum()), int(r["bytes"].sum())]
        for (d, c), r in gpu.groupby(["device", "category"], observed=True)
    }
    want = gpu_totals(slow_events(data))
    assert got == want
    sizes = {int(b) for b in gpu.loc[gpu["category"].isin(["h2d", "d2h"]), "bytes"]}
    assert len(sizes) > 0.9 * int(gpu["category"].isin(["h2d", "d2h"]).sum())  # nearly all distinct


def test_copy_heavy_wall_equals_a_plain_sweep() -> None:
    """The GPU planes' exclusive wall time per step, elementary segment by segment in plain Python."""
    data = copy_heavy_bytes()
    trace = trace_from_bytes(data)
    rank = {c: i for i, c in enumerate(WALL_ORDER)}
    kinds = {"MemcpyH2D": "h2d", "MemcpyD2H": "d2h"}
    events = [e for e in slow_events(data) if e.plane.startswith("/device:GPU:")]
    b = analyze_trace(trace).breakdown
    for step, lo, hi in trace.steps[["step", "start_ps", "end_ps"]].itertuples(index=False):
        for plane in sorted({e.plane for e in events}):
            ivs = [
                (rank[kinds.get(e.name, "compute")], e.start_ps, e.start_ps + e.dur_ps)
                for e in events
                if e.plane == plane
            ]
            want = {WALL_ORDER[r] if r >= 0 else "idle": t for r, t in exclusive_times(ivs, lo, hi).items()}
            w = b.wall[(b.wall["device"] == plane) & (b.wall["step"] == step)]
            got = {c: int(t) for c, t in zip(w["category"], w["dur_ps"]) if t}
            assert got == want, (plane, step)
    assert sum(want.values()) == hi - lo and hi - lo > 100 * US
