"""The analysis page's Hosts section (render/hosts.py): step-time heatmap, slowest vs fastest, failures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hosts_kit import hosts_doc

from tfprof_towers.render.analysis_html import render_analysis_html
from tfprof_towers.render.hosts import accelerator_wall, colour, host_steps, hosts_view, on_task

# 4 hosts x 3 steps; task 2 is the straggler (mean 0.25 s), task 3 the fastest (mean 0.09 s)
TIMES = [[0.10, 0.10, 0.10], [0.11, 0.12, 0.10], [0.20, 0.30, 0.25], [0.09, 0.08, 0.10]]
# wall totals over the host's 3 steps, per GPU
WALLS = {2: {"compute": 0.15, "h2d": 0.03, "idle": 0.57}, 3: {"compute": 0.15, "h2d": 0.06, "idle": 0.06}}
EVIL = "<script>alert(1)</script>\u202eevil"


def page(tmp_path: Path, doc: dict) -> str:
    out = tmp_path / "analysis.html"
    render_analysis_html(doc, out)
    return out.read_text(encoding="utf-8")


def test_slowest_and_fastest_hosts_and_the_grown_category() -> None:
    view = hosts_view(hosts_doc(TIMES, WALLS))
    assert view is not None
    assert view.slowest.host == "w2" and view.slowest.mean_s == pytest.approx(0.25)
    assert view.fastest.host == "w3" and view.fastest.mean_s == pytest.approx(0.09)
    # per step, averaged over the host's 2 GPUs: idle 0.57 / 3 = 0.19 vs 0.06 / 3 = 0.02
    assert view.grown is not None and view.grown.category == "idle"
    assert view.grown.fastest_s == pytest.approx(0.02) and view.grown.slowest_s == pytest.approx(0.19)
    assert view.grown.diff_s == pytest.approx(0.17)
    diffs = {d.category: d.diff_s for d in view.diffs}
    assert diffs == pytest.approx({"idle": 0.17, "compute": 0.0, "h2d": -0.01})
    assert [d.category for d in view.diffs] == ["idle", "compute", "h2d"]  # largest growth first
    assert view.steps == [0, 1, 2]


def test_accelerator_wall_counts_only_the_hosts_accelerators() -> None:
    doc = hosts_doc(TIMES, WALLS)
    wall = accelerator_wall(doc, host_steps(doc)[2])
    # per GPU (2 alike): no host_compute of the CPU
    assert wall == pytest.approx({"compute": 0.05, "h2d": 0.01, "idle": 0.19})
    assert accelerator_wall({**doc, "per_step": True}, host_steps(doc)[2])["compute"] == pytest.approx(0.15)


def test_a_task_prefix_is_a_whole_path_segment() -> None:
    assert on_task("/job:worker/task:1/device:GPU:0", "/job:worker/task:1")
    assert not on_task("/job:worker/task:10/device:GPU:0", "/job:worker/task:1")
    assert not on_task("/job:worker/task:1/device:GPU:0", "")


def test_hosts_sorted_by_task_numerically() -> None:
    doc = hosts_doc([[0.1]] * 12)
    assert [h.task for h in host_steps(doc)] == [f"/job:worker/task:{i}" for i in range(12)]


def test_heatmap_has_one_cell_per_host_and_step_with_its_tooltip() -> None:
    view = hosts_view(hosts_doc(TIMES, WALLS))
    assert view is not None
    svg = str(view.svg)
    assert svg.count('<rect class="cell"') == 4 * 3
    assert "<title>w2, step 1: 300.000 ms</title>" in svg
    assert "<title>w3, step 1: 80.000 ms</title>" in svg
    # the slowest step darkest, the fastest lightest; the legend gives the scale's ends in seconds
    assert f'fill="{colour(1.0)}"><title>w2, step 1:' in svg
    assert f'fill="{colour(0.0)}"><title>w3, step 1:' in svg
    assert ">80.0 ms</text>" in svg and ">300 ms</text>" in svg


def test_a_missing_step_is_a_grey_cell() -> None:
    view = hosts_view(hosts_doc([[0.1, 0.2], [0.1]]))
    assert view is not None
    assert str(view.svg).count('<rect class="cell"') == 4
    assert "w1, step 1: no such step" in str(view.svg)


def test_the_page_shows_the_section(tmp_path: Path) -> None:
    doc = hosts_doc(TIMES, WALLS)
    doc["failed_hosts"] = [{"host": "w9", "file": "w9.xplane.pb", "reason": "truncated protobuf"}]
    html = page(tmp_path, doc)
    section = html[html.index('<section id="hosts">'):html.index('<section id="breakdown">')]
    assert re.search(r'Slowest host: <strong class="mono">w2</strong>', section)
    assert '<strong id="hosts-grown">idle</strong>' in section and "by\n170 ms per step" in section
    assert '<tr class="grown"><td>idle</td>' in section
    assert "+170 ms" in section and "20.0 ms" in section and "190 ms" in section
    assert "truncated protobuf" in section and "w9.xplane.pb" in section
    assert section.count("<svg") == 1


def test_names_from_the_trace_are_escaped(tmp_path: Path) -> None:
    html = page(tmp_path, hosts_doc(TIMES, WALLS, hosts=[EVIL, "b", "c", "d"]))
    assert "<script>alert" not in html and "\u202e" not in html
    shown = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;U+202E&gt;evil"
    assert f"<title>{shown}, step 0: 100.000 ms</title>" in html  # the heatmap's tooltip
    view = hosts_view(hosts_doc(TIMES, WALLS, hosts=["a", "b", EVIL, "d"]))
    assert view is not None and view.slowest.host == EVIL
    html = page(tmp_path, hosts_doc(TIMES, WALLS, hosts=["a", "b", EVIL, "d"]))
    assert f"<bdi>{shown}</bdi>" in html  # the slowest host, named in the text


def test_one_host_gets_no_hosts_section(tmp_path: Path) -> None:
    doc = hosts_doc([[0.1, 0.2]])
    assert hosts_view(doc) is None
    assert 'id="hosts"' not in page(tmp_path, doc)


def test_a_straggler_is_told_by_its_time_before_the_collectives() -> None:
    """A synchronous step: every host's window is 10 ms, but w1 reached the all-reduce after 8 ms and
    the others after 5 ms (they waited 5 ms in collectives, w1 2 ms): w1 is the slowest, by 3 ms."""
    doc = hosts_doc([[0.010] * 3] * 3)
    for t in doc["tasks"]:
        for s in t["steps"]:
            s["collective_s"] = 0.002 if t["host"] == "w1" else 0.005
    view = hosts_view(doc)
    assert view is not None
    assert view.slowest.label == "w1" and view.fastest.label in ("w0", "w2")
    assert view.slowest.times == {0: pytest.approx(0.008), 1: pytest.approx(0.008), 2: pytest.approx(0.008)}
    assert view.fastest.mean_s == pytest.approx(0.005)
