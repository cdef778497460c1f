"""`tfprof-towers diff`: the noise test, each part of the comparison on run directories built in code,
the gate's exit code, --json/--html and one-line bad input."""

from __future__ import annotations

import copy
import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from records_kit import edit_record
from report_kit import ACC0, HOST, HOSTILE, make_run_dir
from trace_kit import two_gpu_trace

from tfprof_towers.cli import main
from tfprof_towers.frames import load
from tfprof_towers.frames.diff import diff
from tfprof_towers.frames.noise import mann_whitney, u_counts
from tfprof_towers.vocab.errors import EXIT_INCONCLUSIVE, EXIT_SLOWER

SINGLE = [0.010, 0.011, 0.009, 0.0105, 0.012, 0.0095]
BUG = [0.050, 0.051, 0.049, 0.0505, 0.052, 0.0495]



def _set_times(doc, xs) -> None:
    """The record's timed steps ``xs`` and their summary (a record whose summary is not of its steps is
    refused)."""
    from tfprof_towers.capture.stats import step_stats

    doc["timings"]["step_times_s"] = list(xs)
    doc["timings"]["step_time_s"] = step_stats(xs).to_json()


def _times(xs):
    def fn(doc):
        _set_times(doc, xs)
    return fn


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """BASE as report_kit builds it (with step samples and losses); NEW: ``single`` 50% slower, its
    MatMul moved to the host by a new scope, its losses changed; ``towers_bug`` the same."""
    top = tmp_path_factory.mktemp("diff")
    base = make_run_dir(top / "base")
    edit_record(base, "single", _times(SINGLE))
    edit_record(base, "towers_bug", _times(BUG))
    for name in ("single", "towers_bug"):
        edit_record(base, name, lambda d: d.update(math={"losses": [0.5, 0.25], "grad_norm": 1.0}))
    new = top / "new"
    shutil.copytree(base, new)

    def move(doc):
        _set_times(doc, [x * 1.5 for x in SINGLE])
        node = doc["placement"]["nodes"][0]
        node["device"] = HOST
        node["sources"] = [{"device": "/cpu:0", "file": f"/src/{HOSTILE}.py", "line": 12}]
        doc["placement"]["edges"] = []
        doc["math"] = {"losses": [0.5, 0.3], "grad_norm": 1.0}

    edit_record(new, "single", move)
    return base, new


@pytest.fixture(scope="module")
def base_vs_new_doc(runs) -> dict:
    """``diff`` of BASE against NEW with the gate at 10%, computed once for the tests that only read it
    (the gate adds ``doc["gate"]`` and changes nothing else)."""
    base, new = runs
    return diff(load(base), load(new), fail_if_slower=10)


@pytest.fixture
def base_vs_new(base_vs_new_doc) -> dict:
    """The module's BASE-against-NEW document, a copy for each test."""
    return copy.deepcopy(base_vs_new_doc)


def test_u_distribution_and_p_values() -> None:
    # the counts are the coefficients of the Gaussian binomial [m+n choose m]_q
    assert u_counts(2, 2).tolist() == [1, 1, 2, 1, 1]
    assert u_counts(3, 2).tolist() == [1, 1, 2, 2, 2, 1, 1]
    for m, n in ((3, 4), (5, 5)):
        assert u_counts(m, n).sum() == len(list(itertools.combinations(range(m + n), m)))
    t = mann_whitney([1, 5, 3, 7, 2], [4, 6, 8, 9, 10, 11])
    assert t.u == 3 and t.p == pytest.approx(2 * 7 / 462) and "exact" in t.method  # scipy: 0.030303
    assert mann_whitney([1, 2, 3], [4, 5, 6]).p == pytest.approx(0.1)  # the smallest 3-vs-3 can give
    assert mann_whitney([1, 2, 3], [4, 5, 6]).min_p == pytest.approx(0.1)
    tied = mann_whitney([1, 1, 2, 2, 3], [2, 3, 3, 4, 4])
    # by hand: ranks of BASE 1.5 1.5 4 4 7, U = 18 - 15 = 3; ties (2, 3, 3, 2): sum t^3 - t = 60;
    # var = 25/12 * (11 - 60/90); z = (|3 - 12.5| - 0.5) / sd
    sd = math.sqrt(25 / 12 * (11 - 60 / 90))
    assert tied.u == 3 and tied.p == pytest.approx(math.erfc(9 / sd / math.sqrt(2)))
    assert "normal approximation" in tied.method
    assert mann_whitney([1], [2, 3]).p is None
    assert mann_whitney([2, 2, 2], [2, 2, 2]).p == 1.0


def test_run_against_run(base_vs_new) -> None:
    doc = base_vs_new
    pairs = {p["new"]: p for p in doc["pairs"]}
    assert list(pairs) == ["single", "towers_bug", "broken"]
    single = pairs["single"]["step_time"]
    assert single["base_median_s"] == pytest.approx(0.01025)
    assert single["new_median_s"] == pytest.approx(0.015375)
    assert single["change_pct"] == pytest.approx(50.0)
    assert single["beyond_noise"] is True and single["test"]["p"] == pytest.approx(2 / 924)  # 6 vs 6, exact
    assert single["samples"] == "timed steps (record.json)" and single["base_steps_s"] == SINGLE
    bug = pairs["towers_bug"]["step_time"]
    assert bug["change_pct"] == 0 and bug["beyond_noise"] is False and bug["test"]["p"] == 1.0
    assert doc["gate"]["slower"] == ["single"]
    assert doc["gate"]["not_gated"] == ["broken"]  # failed on both sides: nothing to regress from
    assert doc["gate"]["regressed"] == [] and doc["gate"]["passed"] == ["towers_bug"]


def test_placement_moves_with_their_source_lines(base_vs_new) -> None:
    moves = base_vs_new["pairs"][0]["placement_moves"]
    assert moves == [{"node": "block0/MatMul", "op_type": "MatMul", "kernel": "MatMul", "fused": [],
                      "base_device": ACC0, "new_device": HOST, "flops": 1000,
                      "placed_by": f"{HOSTILE}.py:12".rsplit("/", 1)[-1],  # the file's name
                      "base_sources": "/src/s.py:3 (/cpu:1)",
                      "new_sources": f"/src/{HOSTILE}.py:12 (/cpu:0)"}]


def test_devices_ops_links_findings_and_math(runs, base_vs_new) -> None:
    base, _ = runs
    p = base_vs_new["pairs"][0]
    # the MatMul (200 ns per step) now runs on the host device: its time moved from ACC0 to HOST
    rows = {(r["device"], r["category"]): r for r in p["devices"]}
    assert rows[(ACC0, "host_compute")]["base_seconds"] == pytest.approx(200e-9)
    assert rows[(ACC0, "host_compute")]["new_seconds"] == 0
    assert rows[(HOST, "host_compute")]["change"] == pytest.approx(200e-9)
    assert abs(p["devices"][0]["change"]) >= abs(p["devices"][-1]["change"])  # biggest first
    assert p["ops"]["op"] == []  # the same op, the same time: nothing changed on ops
    assert p["links"] == []  # logical-CPU copies are send/recv links: none in this trace
    assert p["findings"]["appeared"] == [] and p["findings"]["gone"] == []
    assert p["math"]["same"] is False and p["math"]["loss_rel_diff"][1] == pytest.approx(0.2)
    same = diff(load(base), load(base))["pairs"][1]["math"]
    assert same["same"] is True


def test_two_variants_of_one_run(runs) -> None:
    base, _ = runs
    doc = diff(load(base / "variants" / "single"), load(base / "variants" / "towers_bug"))
    (p,) = doc["pairs"]
    assert (p["base"], p["new"]) == ("single", "towers_bug")
    assert [f["rule"] for f in p["findings"]["appeared"]] == ["host_compute", "variables_remote"]
    ops = {r["op_type"]: r for r in p["ops"]["op_type"]}
    assert ops["MatMul"]["base_count"] == 1 and ops["MatMul"]["new_count"] == 3
    assert ops["MatMul"]["change"] == pytest.approx(400e-9)


def test_traces(tmp_path: Path) -> None:
    a = two_gpu_trace().write(tmp_path / "a" / "host.xplane.pb")
    doc = diff(load(a), load(a))
    (p,) = doc["pairs"]
    assert p["step_time"]["samples"] == "the trace's step windows" and p["step_time"]["change_pct"] == 0
    assert p["step_time"]["test"]["n_base"] == 2 and p["placement_moves"] == [] and p["links"] == []
    assert all(r["change"] == 0 for r in p["devices"])


def test_gate_exit_codes_json_and_html(runs, tmp_path: Path, capsys) -> None:
    base, new = runs
    assert main(["diff", str(base), str(new), "--fail-if-slower", "10"]) == EXIT_SLOWER == 5
    out = capsys.readouterr().out
    assert "FAIL: more than 10% slower, or no longer runs: single" in out
    assert "  single: slower: median +50.0%, beyond noise (p = 0.00216), more than 10%" in out
    assert "placement moves (1 nodes" in out and f"{HOSTILE}.py:12".rsplit("/", 1)[-1] in out
    assert main(["diff", str(base), str(new), "--fail-if-slower", "60"]) == 0
    assert "pass: no variant slower by more than 60%" in capsys.readouterr().out
    assert main(["diff", str(base), str(base), "--fail-if-slower", "0"]) == 0
    capsys.readouterr()
    html = tmp_path / "d.html"
    assert main(["diff", str(base), str(new), "--json", "--html", str(html)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pairs"][0]["placement_moves"][0]["node"] == "block0/MatMul"
    page = html.read_text()
    assert HOSTILE not in page and "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script" not in page and "http" not in page.split("<style>")[0] and "<style>" in page


@pytest.mark.parametrize("case", ["kinds", "missing-variant", "unreadable", "no-such-variant-dir", "nothing"])
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path: Path, capsys, case: str) -> None:
    base, new = runs
    trace = two_gpu_trace().write(tmp_path / "t" / "host.xplane.pb")
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff garbage")
    empty = tmp_path / "empty"
    (empty / "variants").mkdir(parents=True)
    argv = {
        "kinds": [str(base), str(trace)],
        "missing-variant": [str(base), str(new), "--variant", "replicated"],
        "unreadable": [str(trace), str(bad)],
        "no-such-variant-dir": [str(base / "variants" / "nope"), str(base / "variants" / "single")],
        "nothing": [str(base), str(empty)],
    }[case]
    assert main(["diff", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfprof-towers: error:"), err


# ------------------------------------------------------------------------------------------
# The gate under hostile use: too few steps, a side that did not run, the hint


NAP_BASE = [623e-6, 610e-6, 640e-6]  # the tiny preset's 3 timed steps
NAP_NEW = [0.0520, 0.0518, 0.0523]  # the same step plus a 50 ms nap (tests/variants/sleepy_towers.py)


def _pair_runs(top: Path, base_steps, new_steps) -> tuple[Path, Path]:
    """Two run directories that differ only in ``single``'s timed steps (towers_bug: identical)."""
    base = make_run_dir(top / "base")
    edit_record(base, "single", _times(base_steps))
    edit_record(base, "towers_bug", _times(BUG))
    new = top / "new"
    shutil.copytree(base, new)
    edit_record(new, "single", _times(new_steps))
    return base, new


def test_a_huge_slowdown_on_three_steps_fails_the_gate(tmp_path: Path, capsys) -> None:
    base, new = _pair_runs(tmp_path, NAP_BASE, NAP_NEW)
    doc = diff(load(base), load(new), only=["single"], fail_if_slower=5)
    st = doc["pairs"][0]["step_time"]
    assert st["test"]["p"] == pytest.approx(0.1) and st["beyond_noise"] is False  # the test cannot decide
    assert st["change_pct"] == pytest.approx((0.0520 - 623e-6) / 623e-6 * 100)  # +8,247%
    assert doc["gate"]["slower"] == ["single"]
    (v,) = doc["gate"]["verdicts"]
    assert v["outcome"] == "slower"
    assert "every NEW step is more than 5% slower than every BASE step" in v["why"]
    assert main(["diff", str(base), str(new), "--variant", "single", "--fail-if-slower", "5"]) == EXIT_SLOWER
    out = capsys.readouterr().out
    assert "FAIL: more than 5% slower, or no longer runs: single" in out
    assert "decided without a p-value" in out


def test_too_few_overlapping_steps_are_inconclusive_and_fail_unless_allowed(tmp_path: Path, capsys) -> None:
    base, new = _pair_runs(tmp_path, [0.001, 0.002, 0.003], [0.0015, 0.0025, 0.0035])
    argv = ["diff", str(base), str(new), "--variant", "single", "--fail-if-slower", "5"]
    assert main(argv) == EXIT_INCONCLUSIVE == 6
    out = capsys.readouterr().out
    assert "INCONCLUSIVE: too few steps to tell whether single got more than 5% slower" in out
    assert "profile both sides with more --steps" in out  # the samples are record.json's timed steps
    assert main([*argv, "--allow-inconclusive"]) == 0
    out = capsys.readouterr().out
    assert "pass: no variant slower by more than 5% (inconclusive, allowed: single)" in out
    assert main(["diff", str(base), str(new), "--allow-inconclusive"]) == 2  # only with the gate
    assert "applies with --fail-if-slower" in capsys.readouterr().err


def test_too_few_steps_all_within_pct_pass_without_a_p_value(tmp_path: Path) -> None:
    base, new = _pair_runs(tmp_path, [0.0100, 0.0101, 0.0102], [0.0100, 0.0101, 0.0103])
    base_p, new_p = load(base), load(new)  # the gate reads them; two gates, one loading
    doc = diff(base_p, new_p, only=["single"], fail_if_slower=5)
    # max(NEW) = 10.3 ms <= min(BASE) * 1.05 = 10.5 ms
    assert doc["gate"]["passed"] == ["single"]
    assert "within 5% of the fastest BASE step" in doc["gate"]["verdicts"][0]["why"]
    strict = diff(base_p, new_p, only=["single"], fail_if_slower=2)
    assert strict["gate"]["inconclusive"] == ["single"]  # 10.3 ms > 10.0 ms * 1.02: neither rule decides


def _fail_all(doc: dict) -> None:
    doc.update(status="failed", error="ran out of memory (OOM killer)", timings={})


@pytest.mark.parametrize("case", ["failed", "corrupt", "nan", "missing"])
def test_ok_to_failed_missing_or_unreadable_fails_the_gate(runs, tmp_path: Path, capsys, case: str) -> None:
    base, _ = runs
    new = tmp_path / "new"
    shutil.copytree(base, new)
    rec = new / "variants" / "single" / "record.json"
    if case == "failed":
        for name in ("single", "towers_bug"):
            edit_record(new, name, _fail_all)
    elif case == "corrupt":
        rec.write_text(rec.read_text()[:40])
    elif case == "nan":
        doc = json.loads(rec.read_text())
        doc["timings"]["step_times_s"][1] = float("nan")
        rec.write_text(json.dumps(doc))  # json writes NaN
    else:
        shutil.rmtree(new / "variants" / "single")
        run = json.loads((new / "run.json").read_text())
        run["config"]["variants"] = [v for v in run["config"]["variants"] if v["name"] != "single"]
        (new / "run.json").write_text(json.dumps(run))
    assert main(["diff", str(base), str(new), "--fail-if-slower", "5"]) == EXIT_SLOWER
    out = capsys.readouterr().out
    why = {"failed": "single: regressed: ok -> failed: ran out of memory (OOM killer)",
           "corrupt": "single: regressed: ok -> failed: record.json is unreadable:",
           "nan": "single: regressed: ok -> failed: record.json is",
           "missing": "single: regressed: ok -> missing: not in NEW"}[case]
    assert why in out, out
    if case == "failed":
        assert "towers_bug: regressed: ok -> failed: ran out of memory" in out


def test_a_side_without_data_shows_its_reason_and_no_change_tables(runs, tmp_path: Path, capsys) -> None:
    base, _ = runs
    new = tmp_path / "new"
    shutil.copytree(base, new)
    rec = new / "variants" / "single" / "record.json"
    rec.write_text(rec.read_text()[:40])
    assert main(["diff", str(base), str(new), "--variant", "single"]) == 0
    out = capsys.readouterr().out
    assert f"status: ok -> failed (record.json is unreadable: {rec}: corrupt JSON" in out
    assert "not compared: NEW has no data (failed): no change tables against it" in out
    assert "wall time per step" not in out and "after" not in out and "math:" not in out
    (p,) = diff(load(base), load(new), only=["single"])["pairs"]
    assert p["devices"] == [] and p["ops"] == {"op_type": [], "op": []} and p["no_data"] == {"NEW": "failed"}


def test_the_hint_names_the_option_for_what_was_compared(tmp_path: Path) -> None:
    from tfprof_towers.frames.diff import more_samples_hint
    from tfprof_towers.frames.diff_view import verdict

    assert "--steps" in more_samples_hint("timed steps (record.json)", "run")
    assert "--profile-steps" in more_samples_hint("the trace's step windows", "run")
    hint = more_samples_hint("the trace's step windows", "trace")
    assert hint.startswith("capture more steps in each trace")
    a = two_gpu_trace().write(tmp_path / "a" / "host.xplane.pb")
    doc = diff(load(a), load(a))
    text = verdict(doc["pairs"][0]["step_time"], doc["kind"])
    assert "2 and 2 steps can never reach p < 0.05: capture more steps in each trace" in text
    assert "--steps" not in text


def test_a_logdir_with_several_runs_says_which_and_takes_run(tmp_path: Path, capsys) -> None:
    from trace_kit import logical_cpu_trace

    logdir = tmp_path / "logs"
    two_gpu_trace().write(logdir / "plugins" / "profile" / "2024_01" / "h.xplane.pb")
    logical_cpu_trace().write(logdir / "plugins" / "profile" / "2024_02" / "h.xplane.pb")
    doc = diff(load(logdir), load(logdir))
    assert doc["notes"][0] == f"BASE: 2 runs under {logdir}; using the newest, 2024_02 (choose with --run)"
    assert main(["diff", f"{logdir}:2024_01", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert f"note: NEW: 2 runs under {logdir}; using the newest" in out and "note: BASE:" not in out
    assert "/device:GPU:0" in out  # BASE is the older run, the GPU trace
    assert main(["diff", str(logdir), str(logdir), "--run", "2024_01"]) == 0
    assert "note:" not in capsys.readouterr().out
    assert main(["diff", f"{logdir}:nope", str(logdir)]) == 2
    assert "--run nope: no such run" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["loop", "fifo", "inf"])
def test_more_bad_input_is_one_line_and_exit_2(runs, tmp_path: Path, capsys, case: str) -> None:
    import os

    base, _ = runs
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    fifo = tmp_path / "f.xplane.pb"
    os.mkfifo(fifo)
    argv = {"loop": [str(loop), str(base)], "fifo": [str(base), str(fifo)],
            "inf": [str(base), str(base), "--fail-if-slower", "inf"]}[case]
    try:
        code = main(["diff", *argv])
    except SystemExit as exc:  # a usage error: argparse exits
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfprof-towers") and "Traceback" not in err[0], err
    expect = {"loop": "symbolic link loop", "fifo": "a FIFO", "inf": "must be a finite percentage"}[case]
    assert expect in err[0]


def test_bidi_names_are_isolated_in_the_page_and_visible_in_the_terminal(runs, tmp_path: Path,
                                                                          capsys) -> None:
    base, _ = runs
    evil = "\u202eevil"
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(base, a)

    def rename(device: str):
        def fn(doc):
            doc["placement"]["nodes"][0].update(name=f"{evil}/MatMul", device=device)
        return fn

    edit_record(a, "single", rename(ACC0))
    shutil.copytree(a, b)
    edit_record(b, "single", rename(HOST))
    page = tmp_path / "d.html"
    assert main(["diff", str(a), str(b), "--variant", "single", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "<U+202E>evil/MatMul" in out
    html = page.read_text()
    assert "\u202e" not in html and "<bdi>&lt;U+202E&gt;evil/MatMul</bdi>" in html


def test_the_smallest_p_value_each_sample_size_allows() -> None:
    from tfprof_towers.frames.noise import smallest_p

    assert smallest_p(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3): the tiny preset can never reach 0.05
    assert smallest_p(3, 4) == pytest.approx(2 / 35)  # 0.057: still not
    assert smallest_p(4, 4) == pytest.approx(2 / 70)  # 0.029: the first that can
    assert smallest_p(2000, 2000) == 0.0  # lgamma: no overflow of C(4000, 2000)
    tied = mann_whitney([1, 1, 2], [2, 3, 3])  # ties: the normal approximation, read against the same bound
    assert "normal" in tied.method and tied.min_p == pytest.approx(0.1) and not tied.can_reach(0.05)
    assert mann_whitney([1, 2, 3, 4], [5, 6, 7, 8]).can_reach(0.05)


def test_nothing_gated_is_inconclusive(runs, tmp_path: Path, capsys) -> None:
    base, new = runs
    dead = tmp_path / "dead"
    shutil.copytree(base, dead)
    for name in ("single", "towers_bug"):
        edit_record(dead, name, _fail_all)
    assert main(["diff", str(dead), str(new), "--fail-if-slower", "5"]) == EXIT_INCONCLUSIVE
    out = capsys.readouterr().out
    assert "no variant could be gated: none ran on BASE" in out
    assert "single: not gated: BASE did not run (failed: ran out of memory (OOM killer))" in out
