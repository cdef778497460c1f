"""``analyze``'s text at pod scale (commands/analyze.py): one row per host -- its accelerators' median
and the one furthest from it -- instead of one per device; the links and allocators that matter most;
every device, link and allocator with ``--all``.  Rates above any link's peak are flagged and left out
of the findings."""

from __future__ import annotations

import io

from hosts_kit import hosts_doc
from trace_kit import US, TraceBuilder, memcpy_details

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.commands.analyze import POD_TOP, pod_scale, print_memory, print_tables
from tfprof_towers.trace.analysis import analyze_trace, links_doc
from tfprof_towers.trace.links import Link
from tfprof_towers.trace.load import trace_from_bytes


def pod_doc(hosts: int = 16):
    """``hosts`` hosts of 2 GPUs computing 1 s over 4 steps; host 3 has a third GPU idle half the time;
    one link per GPU (host i's GPU g: i * 10 + g us); one allocator per GPU."""
    doc = hosts_doc([[0.25] * 4 for _ in range(hosts)])
    doc["devices"]["/job:worker/task:3/device:GPU:2"] = {"window_s": 1.0, "total": {},
                                                         "wall": {"compute": 0.5, "idle": 0.5}}
    gpus = [d for d in doc["devices"] if "GPU" in d]
    doc["links"] = [{"src": d.replace(d[d.index("/device"):], "/host:CPU"), "dst": d, "kind": "h2d",
                     "bytes": 1000, "count": 4, "seconds": (int(d.split("task:")[1].split("/")[0]) * 10
                                                           + int(d[-1])) * 1e-6,
                     "gbps": 1.0, "measured": True} for d in gpus]
    doc["memory"] = {"devices": {d: {"allocator": "bfc", "peak_bytes": 1000 + i, "capacity_bytes": None,
                                     "fragmentation": None, "top_ops": [], "peak_in_steps_bytes": None,
                                     "before_trace_bytes": 0} for i, d in enumerate(gpus)}, "note": "n"}
    return doc


def text(doc, every: bool = False) -> str:
    out = io.StringIO()
    print_tables(doc, out, every=every)
    print_memory(doc, out, every=every)
    return out.getvalue()


def test_a_pod_is_one_row_per_host() -> None:
    doc = pod_doc()
    assert pod_scale(doc) and len(doc["devices"]) == 16 * 3 + 1
    short = text(doc)
    lines = short.splitlines()
    rows = [ln for ln in lines if ln.startswith("w") and ln.split()[1] in ("2", "3")]
    assert [r.split()[0] for r in rows] == [f"w{i}" for i in range(16)]
    w3 = next(r for r in rows if r.startswith("w3 "))
    assert w3.split()[1] == "3" and w3.endswith("GPU:2 50.0% (+50.0 pts)")
    assert all(r.endswith(" -") for r in rows if not r.startswith("w3 "))
    assert not any(ln.startswith("/job:worker/task:0/") for ln in lines)  # no device rows
    assert "slowest host" in short
    # links: the 10 with most time (host 15's and 14's GPUs), then a line saying how many there are
    link_rows = [ln for ln in lines if " h2d " in ln]
    assert len(link_rows) == POD_TOP and link_rows[0].split()[1] == "/job:worker/task:15/device:GPU:1"
    assert f"(the {POD_TOP} links with the most time of 33: --all prints every link)" in short
    mem_rows = [ln for ln in lines if " bfc " in ln]
    assert len(mem_rows) == POD_TOP
    assert f"(the {POD_TOP} largest peaks of 33 allocators: --all prints every one)" in short
    every = text(doc, every=True)
    assert len(every.splitlines()) > len(lines) + 60
    assert all(d in every for d in doc["devices"])
    assert "--all prints" not in every


def test_a_small_pod_is_still_printed_device_by_device() -> None:
    doc = hosts_doc([[0.25] * 4 for _ in range(4)])
    assert not pod_scale(doc)
    assert all(d in text(doc) for d in doc["devices"])


def test_an_impossible_rate_is_flagged_and_left_out_of_the_findings() -> None:
    rows = [Link("/host:CPU", "/device:GPU:0", "h2d", 2_510_000_000, 1, 343e-6, 2.51e9 / 343e-6 / 1e9, True),
            Link("/device:GPU:0", "/device:GPU:1", "d2d", 1_000_000, 1, 1e-5, 100.0, True)]
    doc = links_doc(rows)
    assert doc[0]["impossible"] is True and "impossible" not in doc[1]
    # a trace whose one H2D copy says 2.51 GB in 343 us, exposed (nothing else runs)
    b = TraceBuilder()
    b.plane("/host:CPU").line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    gpu = b.plane("/device:GPU:0")
    details = memcpy_details(2_510_000_000, 0, "pinned", "device")
    gpu.line("Stream #2(MemcpyH2D)").event("MemcpyH2D", 10 * US, 343 * US, {"memcpy_details": details})
    gpu.line("Stream #1(Compute)").event("volta_sgemm", 400 * US, 100 * US, {"tf_op": "mm:MatMul"})
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    found = {f.rule: f for f in evaluate_trace(a).findings}
    f = found["exposed_copies"]
    assert f.evidence["gbps"] is None and f.evidence["impossible_gbps"] > 7000
    assert "GB/s" not in f.message and "2.51 GB" not in f.message and "not per copy" in f.message
    out = io.StringIO()
    print_tables(a.to_doc(), out)
    assert "(!)" in out.getvalue() and "not per copy" in out.getvalue()


def test_the_all_flag_prints_every_device(tmp_path, capsys) -> None:
    from tfprof_towers.cli import main
    from tfprof_towers.testing.synth import pod_host_trace

    root = tmp_path / "pod"
    root.mkdir()
    for h in range(13):  # 26 GPUs
        pod_host_trace(h, 200, gpus=2, steps=2).write(root / f"h{h}.xplane.pb")
    assert main(["analyze", str(root)]) == 0
    short = capsys.readouterr().out
    assert main(["analyze", str(root), "--all"]) == 0
    every = capsys.readouterr().out
    gpu = "/job:h7/task:0/device:GPU:1 "
    assert not any(ln.startswith(gpu) for ln in short.splitlines())
    assert any(ln.startswith(gpu) for ln in every.splitlines())
    assert any(ln.startswith("h7 ") for ln in short.splitlines())
    assert len(short.splitlines()) < len(every.splitlines())


def test_the_page_flags_an_impossible_rate(tmp_path) -> None:
    from tfprof_towers.render.analysis_html import render_analysis_html

    doc = pod_doc(2)
    doc["links"][0].update(gbps=7303.0, impossible=True)
    doc["memory"] = {"devices": {}, "note": "none"}
    out = tmp_path / "a.html"
    render_analysis_html(doc, out, ["x"], {})
    assert out.read_text().count("(impossible: bytes not per copy)") == 1
