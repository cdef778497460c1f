"""XProf as the oracle: ``analyze`` against XProf's overview page on the same files.

XProf (``xprof.convert.raw_to_tool_data.xspace_to_tool_data([path], "overview_page", {})``)
reads each trace here from a directory of its own (it caches its results per directory).  Per
step it gives the step time, the device compute, the device collectives and, for copies named
in its own scheme, the host->device ("Input") and device->host ("Output") time.  Figures are
compared within 2%, step by step (XProf may drop a first and last step of long runs: rows are
matched by step number).

How XProf builds a GPU step, read from its source (``xprof/convert/xplane_to_step_events.cc``,
``step_events_to_steps_db.cc``), and where that differs from ``analyze``:

* **Step time**: per step, the longest of the devices' ``Steps``-line windows -- the rule
  ``analyze``'s ``step_time_s`` follows.  Equal.
* **Device compute**: the union, over *all* GPUs, of the device events carrying a
  ``group_id`` and a ``correlation_id``, within that longest window, with every event whose
  name its classifier does not know as a copy (it knows ``MEMCPYHToD``-style names, not the
  ``MemcpyH2D`` TensorFlow's CUPTI tracer writes) or an NCCL kernel counted as compute.
  ``analyze`` breaks each device down on its own, and ``MemcpyH2D`` is a copy there.  So where
  the definitions differ the tests compare XProf with that union computed from ``analyze``'s own
  events and windows (:func:`xprof_compute_ps`), and check ``analyze``'s per-device compute
  against it as the bound it must be.
* **Copies**: XProf reports host<->device copy time only for copies named in its scheme; those
  traces compare it with ``analyze``'s exposed (wall) ``h2d``/``d2h`` time, which is the same
  figure (copy time not under a kernel).

XProf needs a plausible XSpace: device events with ``group_id`` and ``correlation_id`` stats and a
derived ``Steps`` line per device whose events carry ``group_id`` -- what the TensorFlow
profiler's grouping leaves in a real trace, and what :func:`~tfprof_towers.testing.synth.group_steps`
adds to a trace built in code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from trace_kit import US, TraceBuilder, apart_trace, memcpy_details, two_gpu_trace

from tfprof_towers.testing.synth import copy_heavy_trace, group_steps
from tfprof_towers.trace.analysis import Analysis, analyze_trace, analyze_xplane
from tfprof_towers.trace.attribute import sweep
from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.trace.steps import aligned
from tfprof_towers.xplane import DEVICE

REL = 0.02  # the most a figure may differ from XProf's, relative
MS = 1e9  # picoseconds in a millisecond


def overview(xprof, path: Path) -> tuple[dict[str, str], dict[int, dict[str, float]]]:
    """XProf's overview page of one trace: its summary properties, and per step number its row
    (``stepTimeMs``, ``deviceComputeTimeMs``, ``infeedTimeMs``, ...)."""
    data, _ = xprof.xspace_to_tool_data([str(path)], "overview_page", {})
    page = json.loads(data)
    table = page[1]
    ids = [c["id"] for c in table["cols"]]
    rows = {}
    for r in table["rows"]:
        cells = dict(zip(ids, (c.get("v") for c in r["c"])))
        rows[int(cells.pop("stepnum"))] = {k: float(v) for k, v in cells.items() if k != "tooltip"}
    return table["p"], rows


def written(tmp_path_factory: pytest.TempPathFactory, name: str, b: TraceBuilder) -> Path:
    """The trace in a directory of its own (XProf caches per directory)."""
    return b.write(tmp_path_factory.mktemp(name) / "host.xplane.pb")


def longest_window(a: Analysis, i: int) -> tuple[int, int]:
    """The longest of the step windows' owners' windows of step index ``i`` (XProf's step)."""
    start, end = aligned(a.trace.step_table, a.trace.step_sources.tables)
    k = int(np.argmax(end[:, i] - start[:, i]))
    return int(start[k, i]), int(end[k, i])


def xprof_compute_ps(a: Analysis, i: int) -> int:
    """XProf's device compute of step index ``i``, from ``analyze``'s events: the union over every
    accelerator's events that are not collectives nor copies named ``MEMCPY...`` (XProf's copy
    names), within the longest owner's window."""
    c = a.trace.columns
    ws, we = longest_window(a, i)
    upper_copy = np.array([t.startswith("MEMCPY") for t in c.strings.items], dtype=bool)
    on_device = c.line_kind[c.line] == DEVICE
    keep = on_device & (c.category != CAT["collective"]) & ~upper_copy[c.name]
    s = np.maximum(c.start_ps[keep], ws)
    e = np.minimum(c.start_ps[keep] + c.dur_ps[keep], we)
    ok = e > s
    zero = np.zeros(int(ok.sum()), dtype=np.int64)
    return int(sweep(zero, zero, s[ok], e[ok], 1, 1)[0])


def close(got: float, want: float, why: str = "") -> None:
    assert got == pytest.approx(want, rel=REL, abs=1e-9), f"analyze {got!r} vs XProf {want!r}. {why}"


def check_steps(a: Analysis, rows: dict[int, dict[str, float]]) -> list[int]:
    """Every step XProf reports: ``analyze``'s step time and XProf's compute (from our events) agree."""
    doc = a.to_doc()
    index = {n: i for i, n in enumerate(doc["step_numbers"])}
    assert rows and set(rows) <= set(index), (rows.keys(), index)
    for n, row in rows.items():
        i = index[n]
        close(doc["step_time_s"][i] * 1e3, row["stepTimeMs"], f"step {n}: the longest device window")
        close(
            xprof_compute_ps(a, i) / MS,
            row["deviceComputeTimeMs"],
            f"step {n}: XProf's compute is the union over all GPUs of their non-collective events "
            "(MemcpyH2D-named copies included) in the longest window",
        )
    return sorted(rows)


# ------------------------------------------------------------------ the real 8-GPU trace


def test_8gpu_fixture_agrees_with_xprof(xprof, fixture_8gpu: Path, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("fixture8") / fixture_8gpu.name
    path.write_bytes(fixture_8gpu.read_bytes())
    props, rows = overview(xprof, path)
    a = analyze_xplane(fixture_8gpu)
    doc = a.to_doc()
    assert list(rows) == [0]
    # step time: 21.310352 ms, GPU 6's own window (XProf's "21.3 ms")
    close(doc["step_time_s"][0] * 1e3, rows[0]["stepTimeMs"])
    assert doc["step_time_s"][0] == pytest.approx(0.021310352, abs=1e-12)
    gpu4, gpu6 = doc["devices"]["/device:GPU:4"], doc["devices"]["/device:GPU:6"]
    assert gpu4["window_s"] == pytest.approx(0.019865491, abs=1e-12)  # each GPU in its own window
    assert gpu6["window_s"] == pytest.approx(0.021310352, abs=1e-12)
    # device compute: XProf 14.875539 ms = GPU 6's kernels and its 6 copies that carry a group_id,
    # unioned (XProf counts TensorFlow's MemcpyH2D/MemcpyD2H names as compute); analyze's GPU 6
    # compute is its kernels alone, 14.865363 ms: 10.2 us (0.07%) less, within 2%.  GPU 4's events
    # lie outside GPU 6's window, the step XProf measures.
    close(
        gpu6["wall"]["compute"] * 1e3,
        rows[0]["deviceComputeTimeMs"],
        "XProf adds GPU 6's grouped copies (named MemcpyH2D/MemcpyD2H) to its compute",
    )
    assert gpu6["wall"]["compute"] * 1e3 <= rows[0]["deviceComputeTimeMs"]
    assert gpu6["wall"]["compute"] == pytest.approx(0.014865363, abs=1e-12)
    assert 100 * gpu6["wall"]["compute"] / gpu6["window_s"] == pytest.approx(69.76, abs=0.01)
    assert 100 * gpu4["wall"]["compute"] / gpu4["window_s"] == pytest.approx(74.63, abs=0.01)
    # copies: XProf reports no host<->device time here (its "Input"/"Output" only count copies named
    # MEMCPYHToD/MEMCPYDToH; this trace's are MemcpyH2D/MemcpyD2H); analyze reports them as copies
    assert rows[0]["infeedTimeMs"] == 0.0, "XProf's Input counts copies named MEMCPYHToD only"
    assert rows[0]["outfeedTimeMs"] == 0.0, "XProf's Output counts copies named MEMCPYDToH only"
    assert gpu6["total"]["h2d"]["count"] == 11 and gpu6["total"]["d2h"]["count"] == 12
    assert float(props["steptime_ms_average"]) == pytest.approx(21.3)


# ------------------------------------------------------------------ synthetic GPU traces


def test_two_gpu_trace_agrees_with_xprof(xprof, tmp_path_factory) -> None:
    b = group_steps(two_gpu_trace(), [(0, 0, 500 * US), (1, 500 * US, 1000 * US)])
    _, rows = overview(xprof, written(tmp_path_factory, "two_gpu", b))
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    assert check_steps(a, rows) == [0, 1]
    doc = a.to_doc()
    assert doc["step_time_s"] == pytest.approx([500e-6, 500e-6], abs=1e-15)
    # XProf's compute of step 0 is 340 us: GPU 0's kernels, copies and memset and GPU 1's kernel and
    # copy, unioned; analyze's per-device compute (GPU 0: 300 us over two steps, GPU 1: 200 us) is
    # each device's kernels alone -- never more than the union
    assert rows[0]["deviceComputeTimeMs"] == pytest.approx(0.34)
    union = sum(r["deviceComputeTimeMs"] for r in rows.values())
    for name in ("/device:GPU:0", "/device:GPU:1"):
        assert doc["devices"][name]["wall"]["compute"] * 1e3 <= union
    # collectives: the NCCL kernel of step 0 (100 us) on both sides
    close(doc["devices"]["/device:GPU:0"]["wall"]["collective"] * 1e3, rows[0]["deviceCollectivesTimeMs"])


def test_copy_heavy_trace_agrees_with_xprof(xprof, tmp_path_factory) -> None:
    b = copy_heavy_trace(20_000, gpus=2, steps=3, groups=True)
    _, rows = overview(xprof, written(tmp_path_factory, "copy_heavy", b))
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    assert check_steps(a, rows) == [0, 1, 2]
    doc = a.to_doc()
    per_gpu = doc["devices"]["/device:GPU:0"]["wall"]["compute"] / 3 * 1e3
    assert all(per_gpu <= r["deviceComputeTimeMs"] for r in rows.values())  # one GPU's kernels <= the union


def copies_trace() -> TraceBuilder:
    """One GPU, two steps of 400 us; copies named in XProf's scheme (``MEMCPYHToD``, ``MEMCPYDToH``)
    half under a kernel, so both sides count their exposed part only."""
    b = TraceBuilder()
    py = b.plane("/host:CPU").line("python")
    g = b.plane("/device:GPU:0")
    comp, h2d = g.line("Stream #7(Compute)"), g.line("Stream #8(MemcpyH2D)")
    d2h = g.line("Stream #9(MemcpyD2H)")
    for k in range(2):
        t = k * 400 * US
        py.event("train", t, 400 * US, {"step_num": k, "_r": 1})
        comp.event("volta_sgemm", t + 50 * US, 100 * US)
        h2d.event("MEMCPYHToD", t + 10 * US, 60 * US, {"memcpy_details": memcpy_details(1 << 20, 0)})
        d2h.event("MEMCPYDToH", t + 120 * US, 80 * US, {"memcpy_details": memcpy_details(1 << 19, 0)})
    return group_steps(b, [(0, 0, 400 * US), (1, 400 * US, 800 * US)])


def test_copies_named_as_xprof_names_them(xprof, tmp_path_factory) -> None:
    b = copies_trace()
    _, rows = overview(xprof, written(tmp_path_factory, "copies", b))
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    assert sorted(rows) == [0, 1]
    doc = a.to_doc(per_step=False)
    gpu = doc["devices"]["/device:GPU:0"]
    steps = len(doc["step_numbers"])
    for row in rows.values():
        close(gpu["wall"]["h2d"] / steps * 1e3, row["infeedTimeMs"], "exposed H2D = XProf's Input")
        close(gpu["wall"]["d2h"] / steps * 1e3, row["outfeedTimeMs"], "exposed D2H = XProf's Output")
        close(gpu["wall"]["compute"] / steps * 1e3, row["deviceComputeTimeMs"])
    assert gpu["wall"]["h2d"] / steps == pytest.approx(40e-6)  # 60 us, 20 of them under the kernel
    assert gpu["wall"]["d2h"] / steps == pytest.approx(50e-6)  # 80 us, 30 of them under the kernel


# ------------------------------------------------------------------ the "done when" case


def test_gpus_apart_each_in_their_own_window_and_xprofs_step_time(xprof, tmp_path_factory) -> None:
    b = apart_trace()
    _, rows = overview(xprof, written(tmp_path_factory, "apart", b))
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert check_steps(a, rows) == [0, 1]
    # the step lasts as long as the longer window, GPU 1's 450 us -- exactly XProf's
    assert doc["step_time_s"] == pytest.approx([450e-6, 450e-6], abs=1e-15)
    assert [rows[n]["stepTimeMs"] for n in (0, 1)] == pytest.approx([0.45, 0.45], abs=1e-9)
    g0, g1 = doc["devices"]["/device:GPU:0"], doc["devices"]["/device:GPU:1"]
    # each GPU broken down within its own windows: 800 and 900 us, not the 5.9 ms they span together
    assert g0["window_s"] == pytest.approx(800e-6, abs=1e-15)
    assert g1["window_s"] == pytest.approx(900e-6, abs=1e-15)
    assert g0["wall"]["compute"] == pytest.approx(300e-6, abs=1e-15)  # 2 x (100 + 50)
    assert g1["wall"]["compute"] == pytest.approx(500e-6, abs=1e-15)  # 2 x (100 + 150)
    assert g0["wall"]["idle"] == pytest.approx(500e-6, abs=1e-15)
    assert g1["wall"]["idle"] == pytest.approx(400e-6, abs=1e-15)
    # XProf's compute per step is GPU 1's alone (GPU 0's kernels lie outside GPU 1's window): 250 us
    for n in (0, 1):
        close(g1["wall"]["compute"] / 2 * 1e3, rows[n]["deviceComputeTimeMs"])
    notes = [n for n in doc["notes"] if "did not step together" in n]
    assert len(notes) == 1
    assert notes[0].startswith("/device:GPU:0 and /device:GPU:1 ran 2 steps (0, 1) 4.6 to 4.7 ms apart")
