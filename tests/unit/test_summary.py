"""summary.py on small hand-made records: entries, speedups, ranking and the summary (no TensorFlow)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from records_kit import ACC0, ACC1, HOST, LOGICAL, placement, record, run_doc, write_run

from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import load_records
from tfprof_towers.rundir.summary import build_summary, rank, variant_entry, with_ranks, with_speedups

#: A placement with work on both accelerators (records_kit's default uses only the first).
TWO_TOWERS = placement({HOST: (10, 0), ACC0: (3, 1000), ACC1: (3, 1000)})


def test_variant_entry_from_a_record() -> None:
    place = placement({HOST: (2, 0), ACC0: (5, 600)}, [(HOST, ACC0, 4096, 2)])
    e = variant_entry(record("single", 0.008, 0.007, 0.009, place=place), batch=4)
    assert (e.name, e.status, e.source, e.family) == ("single", "ok", "builtin", "tf1-graph")
    assert e.step_time_s.to_json() == {
        "median": 0.008,
        "p10": 0.007,
        "p90": 0.009,
        "min": 0.007,
        "max": 0.009,
        "n": 5,
    }
    assert e.profiled_median_s == pytest.approx(0.0088)
    assert e.examples_per_s == 500.0  # batch 4 / 8 ms
    assert {d: v.to_json() for d, v in e.devices.items()} == {HOST: {"ops": 2, "flops_per_step": 0},
                                                              ACC0: {"ops": 5, "flops_per_step": 600}}
    assert [t.to_json() for t in e.transfers] == [
        {"src": HOST, "dst": ACC0, "bytes_per_step": 4096, "tensors": 2}
    ]
    doc = e.to_json()
    assert doc["profiled_step_time_s"] == {"median": pytest.approx(0.0088)}
    assert (doc["rank"], doc["breakdown"], doc["audit"], doc["chrome_trace"]) == (None, None, None, None)


def test_failed_entry_has_no_numbers() -> None:
    e = variant_entry(record("broken", status="failed", error="crashed: exit code 1"), batch=4)
    assert (e.status, e.error, e.stderr_tail, e.examples_per_s) == (
        "failed",
        "crashed: exit code 1",
        "boom",
        None,
    )
    assert e.step_time_s.median is None and e.devices == {} and e.transfers == ()


def test_speedups_over_the_baseline_and_scaling_efficiency() -> None:
    entries = [
        variant_entry(r, 4)
        for r in (
            record("single", 0.010),
            record("replicated", 0.004, place=TWO_TOWERS),
            record("towers_bug", 0.050, place=TWO_TOWERS),
            record("broken", status="failed"),
        )
    ]
    out = {e.name: e for e in with_speedups(entries, accelerators=2)}
    assert (out["single"].speedup_vs_baseline, out["single"].scaling_efficiency) == (1.0, 1.0)  # uses 1
    assert (out["replicated"].speedup_vs_baseline, out["replicated"].scaling_efficiency) == (2.5, 1.25)
    assert out["towers_bug"].speedup_vs_baseline == pytest.approx(0.2)
    assert out["towers_bug"].scaling_efficiency == pytest.approx(0.1)
    assert (out["broken"].speedup_vs_baseline, out["broken"].scaling_efficiency) == (None, None)
    assert entries[1].speedup_vs_baseline is None  # the input entries are not changed


def test_scaling_efficiency_divides_by_the_accelerators_the_variant_used() -> None:
    """One denominator: a variant whose placement used one of the run's 4 accelerators divides by 1."""
    entries = [
        variant_entry(r, 4)
        for r in (
            record("single", 0.010),
            record("replicated", 0.004, place=TWO_TOWERS),
            record("towers_host_vars", 0.008, place=placement({HOST: (5, 10), ACC0: (3, 1000)})),
            record("towers_bug", 0.005, place=None),
        )
    ]
    assert [e.accelerators_used for e in entries] == [1, 2, 1, 1]  # records_kit's default: one accelerator
    out = {e.name: e for e in with_speedups(entries, accelerators=4)}
    assert out["replicated"].scaling_efficiency == 1.25
    assert out["towers_host_vars"].scaling_efficiency == 1.25  # 10/8 on the one accelerator it used
    unplaced = replace(entries[3], accelerators_used=None)
    [bug] = with_speedups([entries[0], unplaced], accelerators=4)[1:]
    assert bug.scaling_efficiency == 0.5  # no placement recorded: the run's 4 accelerators


def test_a_variant_file_named_like_the_baseline_is_not_the_baseline() -> None:
    entries = [
        variant_entry(r, 4)
        for r in (record("single", 0.010, source="file:/x/single.py"), record("replicated", 0.005))
    ]
    assert [e.speedup_vs_baseline for e in with_speedups(entries, 2)] == [None, None]


def test_ranking_fastest_first_then_the_rest() -> None:
    entries = [
        variant_entry(r, 4)
        for r in (
            record("a", 0.03),
            record("b", status="failed"),
            record("c", 0.01),
            record("d", None),
            record("e", 0.02),
        )
    ]
    ranking = rank(entries)
    assert ranking == ["c", "e", "a", "b", "d"]
    assert [(e.name, e.rank) for e in with_ranks(entries, ranking)] == [
        ("a", 3),
        ("b", None),
        ("c", 1),
        ("d", None),
        ("e", 2),
    ]  # no median, no rank


def test_build_summary_from_a_run_directory(tmp_path: Path) -> None:
    records = [
        record("single", 0.010, 0.009, 0.011),
        record("towers_host_vars", 0.006, 0.005, 0.007, place=placement({ACC0: (3, 500), ACC1: (3, 500)})),
        record("broken", status="failed", error="timed out after 1 s"),
    ]
    rd = write_run(tmp_path / "run", run_doc(["single", "towers_host_vars", "broken"]), records)
    run = run_doc(["single", "towers_host_vars", "broken"])
    summary = build_summary(rd, run, load_records(rd, run))
    assert summary.ranking == ("towers_host_vars", "single", "broken")
    assert [(e.name, e.rank) for e in summary.variants] == [
        ("single", 2),
        ("towers_host_vars", 1),
        ("broken", None),
    ]
    thv = summary.entry("towers_host_vars")
    assert thv.speedup_vs_baseline == pytest.approx(10 / 6)
    assert thv.scaling_efficiency == pytest.approx(10 / 12)  # 2 accelerators in the topology
    assert thv.examples_per_s == pytest.approx(4 / 0.006)
    doc = summary.to_json()
    assert (doc["partial"], doc["topology"]["kind"], doc["config"]["preset"]["name"]) == (
        False,
        "logical-cpu",
        "tiny",
    )
    assert doc["recommendation"]["variant"] is None  # the advice step has not run yet
    assert doc["problems"] == []


def test_extra_variant_folders_follow_the_runs_order(tmp_path: Path) -> None:
    run = run_doc(["single"])
    rd = write_run(
        tmp_path / "run", run, [record("single"), record("zzz_extra", 0.02), record("aaa_extra", 0.03)]
    )
    assert list(load_records(rd, run)) == ["single", "aaa_extra", "zzz_extra"]


def test_unknown_accelerator_count_does_not_crash(tmp_path: Path) -> None:
    """No topology anywhere and ``config.accelerators`` null (every child died before reporting)."""
    run = run_doc(["towers_host_vars", "single"], topology=None, accelerators=None)
    records = [record("towers_host_vars", 0.02, topology=None), record("single", 0.01, topology=None)]
    rd = write_run(tmp_path / "run", run, records)
    summary = build_summary(rd, run, load_records(rd, run))
    assert summary.topology is None
    assert summary.entry("towers_host_vars").scaling_efficiency == 0.5  # speedup 0.5 over 1 accelerator


def test_topology_falls_back_to_the_records(tmp_path: Path) -> None:
    run = run_doc(["single"], topology=None)
    rd = write_run(tmp_path / "run", run, [record("single")])
    assert build_summary(rd, run, load_records(rd, run)).topology == LOGICAL


def test_interrupted_run_is_partial(tmp_path: Path) -> None:
    run = run_doc(["single", "replicated"], interrupted=True)
    rd = write_run(tmp_path / "run", run, [record("single")])
    summary = build_summary(rd, run, load_records(rd, run))
    assert summary.partial
    assert summary.entry("replicated").error == "not run: the profile was interrupted first"
    assert RunDir(rd.root).variant_names() == ["single"]
