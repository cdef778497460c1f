"""Report rendering from saved run directories, the analysis page, exports, and escaping."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from report_kit import ACC0, HOST, HOSTILE, make_run_dir

from tfprof_towers.cli import main
from tfprof_towers.render import filters
from tfprof_towers.render.analysis_html import render_analysis_html
from tfprof_towers.render.chrome_trace import chrome_trace, chrome_trace_json
from tfprof_towers.render.html import render_report_text
from tfprof_towers.render.timeline import groups, median_step, step_timeline
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run
from tfprof_towers.trace.load import load_trace
from tfprof_towers.vocab.fmt import fmt_step

OUR_SCRIPTS = 2  # the JSON data block and the inlined report.js


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path / "run")


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path / "hostile", hostile=True)


def test_filters() -> None:
    assert [filters.fmt_seconds(x) for x in (None, 0, 1.5, 0.00123, 4.5e-7, 2e-10)] == [
        "–", "0 s", "1.50 s", "1.23 ms", "450 ns", "200 ps"]
    assert [filters.fmt_bytes(x) for x in (None, 12, 1536, 4.1e6, 12e9)] == [
        "–", "12 B", "1.54 kB", "4.10 MB", "12.0 GB"]
    assert filters.fmt_rate(12e9) == "12.0 GB/s"
    assert [filters.fmt_percent(x) for x in (None, 0.4123, 1.0)] == ["–", "41.2%", "100.0%"]
    assert filters.fmt_count(557056) == "557,056"
    assert filters.fmt_flops(2.3e12) == "2.30 TFLOP"
    assert filters.fmt_ratio(1.5) == "1.50×"


def test_step_format_of_the_projection() -> None:
    assert [fmt_step(x) for x in (None, 0.01234, 0.9999, 1.5)] == ["–", "12.34 ms", "999.90 ms", "1.500 s"]


def test_report_command_renders_summary_report_and_exports(run: Path) -> None:
    assert main(["report", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["recommendation"]["variant"] == "single"
    assert summary["recommendation"]["runner_up"] == "towers_bug"
    assert [(f["rule"], f["severity"], f["variant"]) for f in summary["findings"]] == [
        ("host_compute", "high", "towers_bug"), ("variables_remote", "low", "towers_bug")]
    for f in summary["findings"]:
        assert set(f) == {"rule", "severity", "variant", "message", "suggestion", "evidence", "sources"}
    bug = next(v for v in summary["variants"] if v["name"] == "towers_bug")
    assert bug["audit"]["host_flops_share"] == 0.6
    assert bug["audit"]["host_compute_share"] == 0.6  # 3 host ops of 200 ns, 1 per accelerator
    assert bug["breakdown"]["devices"][HOST]["window_s"] == 1.5e-6  # mean of 1, 2 and 1.5 µs
    assert bug["chrome_trace"] == "variants/towers_bug/trace.json"
    html = (run / "report.html").read_text()
    for anchor in ("recommendation", "ranking", "breakdown", "timelines", "transfers", "audit", "findings",
                   "open", "environment", "failed"):
        assert f'id="{anchor}"' in html
    assert "train.py:57" in html and "60.0%" in html
    assert f"tensorboard --logdir {run.resolve()}/tensorboard/towers_bug --port 6006" in html
    assert "crashed: exit code 1: boom" in html


def test_report_is_self_contained(run: Path) -> None:
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count("<script") == OUR_SCRIPTS


def test_hostile_names_are_escaped_everywhere(hostile_run: Path) -> None:
    summary = finish_run(RunDir(hostile_run))
    html = (hostile_run / "report.html").read_text()
    assert HOSTILE not in html
    assert "<img" not in html.lower()
    assert html.count("</script>") == OUR_SCRIPTS
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # shown, as text
    assert "\\u003c/script\\u003e\\u003cimg" in html  # and inside the chart data
    # the Chrome-trace export is JSON: the name survives unchanged
    exported = json.loads((hostile_run / "variants" / "towers_bug" / "trace.json").read_text())
    assert HOSTILE in {e["name"] for e in exported["traceEvents"]}
    assert summary["variants"][2]["error"].endswith(HOSTILE)


def test_the_chrome_trace_text_is_json_dumps_of_its_document(hostile_run: Path) -> None:
    """The export is written as text from the trace's columns: the same bytes as ``json.dumps`` of the
    document it parses to (compact separators, ASCII escapes, float reprs, key order), hostile and
    non-ASCII names included."""
    trace = load_trace(hostile_run / "tensorboard" / "towers_bug", node_devices={"block0/MatMul": ACC0})
    text = chrome_trace_json(trace, {"host": HOST, "accelerators": [ACC0]}, "caf\u00e9 \"q\" \\")
    doc = json.loads(text)
    assert json.dumps(doc, separators=(",", ":")) == text
    assert HOSTILE in {e["name"] for e in doc["traceEvents"]}
    assert doc["otherData"]["variant"] == "caf\u00e9 \"q\" \\"
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "step"]
    assert ops and all(set(e["args"]) <= {"category", "step", "tf_op", "op_type", "bytes"} for e in ops)
    assert len(ops) == trace.columns.n


def test_analysis_page_escapes_hostile_names(tmp_path: Path) -> None:
    doc = {"source": HOSTILE, "steps": 2, "window": "markers", "per_step": False, "notes": [HOSTILE],
           "devices": {HOSTILE: {"window_s": 2.0, "total": {"compute": {"count": 4, "seconds": 1.0}},
                                 "wall": {"compute": 1.0, "idle": 1.0}}},
           "links": [{"src": HOSTILE, "dst": "/device:GPU:0", "kind": "h2d", "bytes": 2000, "count": 2,
                      "seconds": 2e-6, "gbps": 1.0, "measured": True}]}
    out = tmp_path / "a.html"
    render_analysis_html(doc, out)
    html = out.read_text()
    assert HOSTILE not in html and "<img" not in html.lower() and html.count("</script>") == OUR_SCRIPTS
    assert "1.00 kB" in html  # 2000 bytes over 2 steps
    assert "1.00 µs" in html  # 2 µs over 2 steps


def test_missing_and_corrupt_records_still_render(run: Path) -> None:
    (run / "variants" / "single" / "record.json").write_text("{not json")
    shutil.rmtree(run / "variants" / "broken")
    summary = finish_run(RunDir(run))
    by = {v["name"]: v for v in summary["variants"]}
    assert by["single"]["status"] == "failed" and "unreadable" in by["single"]["error"]
    assert by["broken"]["error"] == "record.json is missing"
    assert summary["recommendation"]["variant"] == "towers_bug"
    html = (run / "report.html").read_text()
    assert "record.json is missing" in html


def test_no_variant_succeeded(run: Path) -> None:
    for name in ("single", "towers_bug"):
        (run / "variants" / name / "record.json").unlink()
    summary = finish_run(RunDir(run))
    assert summary["recommendation"]["variant"] is None
    assert "No recommendation" in (run / "report.html").read_text()


def test_unreadable_trace_keeps_the_rest_of_the_report(run: Path) -> None:
    xplane = next((run / "tensorboard" / "towers_bug").glob("plugins/profile/*/*.xplane.pb"))
    xplane.write_bytes(b"\x00garbage")
    summary = finish_run(RunDir(run))
    bug = next(v for v in summary["variants"] if v["name"] == "towers_bug")
    assert "error" in bug["breakdown"]
    assert bug["chrome_trace"] is None
    assert bug["audit"]["host_flops_share"] == 0.6  # placement facts do not need the trace
    assert "No trace timeline for this variant" in (run / "report.html").read_text()


def test_timeline_of_the_median_step(run: Path) -> None:
    trace = load_trace(run / "tensorboard" / "single", node_devices={"block0/MatMul": ACC0})
    assert median_step(trace.steps) == 2  # windows of 1, 2 and 1.5 µs
    tl = step_timeline(trace, "single", {"host": HOST, "accelerators": [ACC0]})
    assert tl["step"] == 2 and tl["duration_us"] == 1.5
    assert tl["rows"] == [{"label": ACC0, "lanes": 1}]
    assert tl["events"] == [[0, 0, 0.1, 0.2, "block0/MatMul:MatMul", "host_compute", 0]]
    assert not tl["truncated"]


def test_groups_name_each_row_s_group_and_each_group_s_first_row() -> None:
    import numpy as np

    first, group = groups(np.array([3, 1, 3, 1, 2]), np.array([0, 5, 0, 4, 9]))
    assert first.tolist() == [3, 1, 4, 0]  # groups in value order: (1, 4), (1, 5), (2, 9), (3, 0)
    assert group.tolist() == [3, 1, 3, 0, 2]
    assert [a.tolist() for a in groups(np.zeros(0, np.int64))] == [[], []]


def test_timeline_keeps_the_longest_events_when_truncated(run: Path) -> None:
    trace = load_trace(run / "tensorboard" / "towers_bug")
    tl = step_timeline(trace, "towers_bug", None, max_events=2)
    assert tl["truncated"] and tl["total_events"] > 2 and len(tl["events"]) == 2


def test_chrome_trace_export(run: Path) -> None:
    trace = load_trace(run / "tensorboard" / "single", node_devices={"block0/MatMul": ACC0})
    doc = chrome_trace(trace, {"host": HOST, "accelerators": [ACC0]}, "single")
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"Steps", ACC0, "/host:CPU"}
    steps = [e for e in events if e.get("cat") == "step"]
    assert [(e["ts"], e["dur"]) for e in steps] == [(0.0, 1.0), (1.0, 2.0), (3.0, 1.5)]
    ops = [e for e in events if e["name"] == "block0/MatMul:MatMul"]
    assert [(e["ts"], e["dur"], e["args"]["step"]) for e in ops] == [
        (0.1, 0.2, 0), (1.1, 0.2, 1), (3.1, 0.2, 2)]
    assert all(e["ph"] in ("X", "M") for e in events)


def test_report_from_the_8gpu_fixture_shows_measured_links(run: Path, fixture_8gpu: Path) -> None:
    """A GPU run whose variant trace is the real 8-GPU fixture: link times and bandwidth are measured."""
    gpu = {"kind": "gpu", "host": HOST, "accelerators": ["/device:GPU:4", "/device:GPU:6"]}
    run_json = json.loads((run / "run.json").read_text())
    run_json["topology"] = gpu
    (run / "run.json").write_text(json.dumps(run_json))
    record_path = run / "variants" / "single" / "record.json"
    record = json.loads(record_path.read_text())
    record["topology"] = gpu
    record["placement"]["transfers"] = [{"src": HOST, "dst": "/device:GPU:6", "bytes_per_step": 40560,
                                         "tensors": 101}]
    record_path.write_text(json.dumps(record))
    logdir = run / "tensorboard" / "single"
    shutil.rmtree(logdir)
    target = logdir / "plugins" / "profile" / "2020_01_01_00_00_00" / "worker.xplane.pb"
    target.parent.mkdir(parents=True)
    shutil.copyfile(fixture_8gpu, target)
    summary = finish_run(RunDir(run))
    single = next(v for v in summary["variants"] if v["name"] == "single")
    devices = single["breakdown"]["devices"]
    assert {"/device:GPU:4", "/device:GPU:6"} <= set(devices)
    [link] = single["audit"]["links"]
    assert link["measured_s"] is not None and link["achieved_bytes_per_s"] > 0
    assert single["audit"]["links_measured"]
    html = (run / "report.html").read_text()
    assert "achieved bandwidth" in html and "No GPUs on this machine" not in html


def test_analysis_page_from_the_8gpu_fixture(tmp_path: Path, fixture_8gpu: Path) -> None:
    out = tmp_path / "analysis.html"
    assert main(["analyze", str(fixture_8gpu), "--html", str(out)]) == 0
    html = out.read_text()
    for device in ("/device:GPU:4", "/device:GPU:6", "/host:CPU"):
        assert device in html
    assert "host→device copy" in html and 'id="breakdown-chart"' in html


def test_render_is_deterministic(run: Path) -> None:
    summary = finish_run(RunDir(run))
    assert render_report_text(summary, run.resolve()) == render_report_text(summary, run.resolve())


def visible(fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", fragment).replace("&#39;", "'").split())


def test_number_filters_for_the_math() -> None:
    assert [filters.FILTERS["fmt_float"](x) for x in (None, 0.4749059081, 0.072085708)] == [
        "–", "0.47490591", "0.072085708"]
    assert [filters.FILTERS["fmt_rel"](x) for x in (None, 0.0, 6.3e-08, 0.5, float("inf"), float("nan"))] == [
        "–", "0", "6.3e-08", "50.0%", "∞", "NaN"]


def test_the_report_shows_the_losses_side_by_side(run: Path) -> None:
    for name, norm in (("single", 0.14417072), ("towers_bug", 0.072085708)):
        path = run / "variants" / name / "record.json"
        doc = json.loads(path.read_text())
        doc["math"] = {"losses": [0.47490591, 0.47462937], "grad_norm": norm}
        path.write_text(json.dumps(doc))
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    sec = re.search(r'<section id="math">.*?</section>', html, re.S).group(0)
    assert 'href="#math"' in html
    assert "Compared with single (the baseline: one device); tolerances: 0.0001 relative for the losses, " \
           "0.001 for the gradient norm" in visible(sec)
    rows = {m.group(1): visible(m.group(2)) for m in
            re.finditer(r'<tr class="math-[a-z-]+" data-variant="([^"]+)">(.*?)</tr>', sec, re.S)}
    assert rows == {
        "single": "single 0.47490591 0.47462937 0.14417072 0, 0; 0 reference",
        "towers_bug": "towers_bug 0.47490591 0.47462937 0.072085708 0, 0; 50.0% differs : this placement "
                      "changes what is computed",
    }


def test_no_math_section_without_losses(run: Path) -> None:
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert 'id="math"' not in html and 'href="#math"' not in html


def test_the_idle_split_shows_in_the_breakdown_when_the_trace_analysis_gives_it(run: Path) -> None:
    summary = finish_run(RunDir(run))
    dev = summary["variants"][0]["breakdown"]["devices"][ACC0]
    dev["wall"]["idle"] = 0.25
    dev["idle_split"] = {"host_wait": 0.2, "kernel_wait": 0.03, "other": 0.02}
    html = render_report_text(summary, run)
    table = re.search(r'<table id="idle-split-table">.*?</table>', html, re.S).group(0)
    assert visible(table).endswith(f"{summary['variants'][0]['name']} {ACC0} 250 ms 200 ms 30.0 ms 20.0 ms")
    assert 'id="idle-split-table"' not in render_report_text(finish_run(RunDir(run)), run)


def test_the_box_says_projected_on_and_the_cpu_ranking_is_headed_as_what_it_is(run: Path) -> None:
    from report_kit import PROJECTION_PROFILE, write_projection

    write_projection(run)
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    box = visible(re.search(r'<section id="recommendation".*?</section>', html, re.S).group(0))
    assert box.startswith(f"Recommendation: single · projected on {PROJECTION_PROFILE} at the tiny preset")
    assert "towers_bug is not recommended: heavy compute on the host" in box
    assert "The CPU stand-in timings below would pick single ." in box
    ranking = visible(re.search(r'<section id="ranking">.*?</section>', html, re.S).group(0))
    assert ranking.startswith("CPU stand-in timings, measured here The accelerators here are logical CPU "
                              "devices sharing the same cores: placement, bytes and FLOPs are real; speed is "
                              "not GPU speed.")


def test_the_templates_compiled_code_is_kept_and_gives_the_same_report(tmp_path: Path, monkeypatch) -> None:
    """The templates' compiled code is kept between runs (``TemplateCache``): a second environment loads
    every template of a report from it without compiling one, and the page is the same; an environment
    with another option has another key, so it compiles; a cache folder that cannot be written only
    costs the compile."""
    from tfprof_towers.render import html

    run = make_run_dir(tmp_path / "run")
    cache = tmp_path / "cache"
    cache.mkdir()
    make = html.environment.__wrapped__  # a new environment each call

    def env_with(directory: Path) -> object:
        env = make()
        env.bytecode_cache = html.TemplateCache(env, str(directory))
        return env

    def report(env: object) -> str:
        monkeypatch.setattr(html, "environment", lambda: env)
        finish_run(RunDir(run))
        return (run / "report.html").read_text()

    def compiled(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled")

    first = report(env_with(cache))
    kept = sorted(p.name for p in cache.iterdir())
    assert kept and all(n.startswith("tfprof-towers-") and n.endswith(".cache") for n in kept)
    again = env_with(cache)
    again.compile = compiled  # every template comes from the cache, or this fails
    assert report(again) == first
    other = env_with(cache)
    other.trim_blocks = False
    key = html.TemplateCache(other).get_cache_key("report.html", "f")
    assert key != html.TemplateCache(again).get_cache_key("report.html", "f")
    other.compile = compiled
    with pytest.raises(AssertionError, match="compiled"):
        other.get_template("report.html")
    assert report(env_with(tmp_path / "no-such-folder")) == first  # nothing kept, nothing lost
    assert not (tmp_path / "no-such-folder").exists()
