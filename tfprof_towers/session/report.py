"""A run directory in, ``summary.json``, the Chrome traces and ``report.html`` out.

A Chrome trace that cannot be written leaves ``chrome_trace_error`` on its entry, and the rest
renders.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tfprof_towers.advice import rules as advise
from tfprof_towers.analysis.pipeline import (
    VariantTrace,
    analyze_traces,
    load_projection,
    topology_of,
    with_audits,
    with_breakdowns,
    with_calibration,
    with_cluster,
    with_memory,
    with_projection,
)
from tfprof_towers.analysis.scaling_run import with_scaling
from tfprof_towers.rundir.paths import RunDir, is_disk_error, write_json
from tfprof_towers.rundir.records import load_records, load_run_or_skip
from tfprof_towers.rundir.summary import Summary, SummaryEntry, build_summary
from tfprof_towers.vocab.errors import TowersError

CHROME_TRACE = "trace.json"


def with_advice(summary: Summary) -> Summary:
    """Findings, the rules' status (with their parameters), the losses side by side and the
    recommendation."""
    advice = advise.advise(summary)
    return replace(summary, findings=advice.findings, rules=advice.rules,
                   recommendation=advice.recommendation, math=advice.math)


def with_trace_findings(summary: Summary, analyses: Mapping[str, VariantTrace]) -> Summary:
    """Each analysed variant's findings of the trace rules (:mod:`tfprof_towers.advice.trace_rules`): the
    same diagnosis ``analyze`` gives a trace captured anywhere, below the run's own rules; and each trace
    rule's status over the variants, after the run rules' in ``rules``."""
    from tfprof_towers.advice.trace_rules import TraceEvaluation, evaluate_trace, run_status

    evaluations: dict[str, TraceEvaluation | None] = {}
    for e in summary.variants:
        t = analyses.get(e.name)
        if e.ok:
            evaluations[e.name] = None if t is None or t.pod is None else evaluate_trace(t.pod.facts)

    def one(e: SummaryEntry) -> SummaryEntry:
        ev = evaluations.get(e.name)
        return replace(e, trace_findings=() if ev is None else ev.findings)

    trace_rules = run_status(evaluations, skip={r.rule for r in summary.rules})
    return replace(summary.map_entries(one), rules=(*summary.rules, *trace_rules))


def export_chrome_traces(
    run_dir: RunDir, summary: Summary, analyses: Mapping[str, VariantTrace]
) -> Summary:
    """Write ``variants/<name>/trace.json`` for each analysed trace; entries name it (or why not)."""
    from tfprof_towers.render.chrome_trace import write_chrome_trace

    topology = topology_of(summary)

    def one(e: SummaryEntry) -> SummaryEntry:
        t = analyses.get(e.name)
        if t is None or t.pod is None:
            return replace(e, chrome_trace=None, chrome_trace_error=None)
        path = run_dir.variant_dir(e.name) / CHROME_TRACE
        try:
            write_chrome_trace(t.trace, path, topology, e.name)
        except OSError as exc:
            why = f"cannot write {path}: {exc.strerror or exc}"
            return replace(e, chrome_trace=None, chrome_trace_error=why)
        except TowersError as exc:  # the events could not be merged: the analysis stands
            return replace(e, chrome_trace=None, chrome_trace_error=exc.message)
        return replace(e, chrome_trace=path.relative_to(run_dir.root).as_posix(), chrome_trace_error=None)

    return summary.map_entries(one)


def timelines(summary: Summary, analyses: Mapping[str, VariantTrace]) -> list[dict[str, Any]]:
    from tfprof_towers.render.timeline import step_timeline

    topology = topology_of(summary)
    out = []
    for e in summary.variants:
        t = analyses.get(e.name)
        if t is None or t.pod is None:
            continue
        try:
            tl = step_timeline(t.trace, e.name, topology)
        except TowersError:  # the events could not be merged (the Chrome trace's entry says why)
            continue
        if tl is not None:
            out.append(tl)
    return out


def memory_timelines(analyses: Mapping[str, VariantTrace]) -> dict[str, Any]:
    """Per variant whose trace has allocator events: each device's bytes in use over time."""
    return {name: t.pod.timelines for name, t in analyses.items() if t.pod is not None and t.pod.memory}


def analyze_run(run_dir: RunDir) -> tuple[Summary, dict[str, VariantTrace]]:
    """The whole summary of ``run_dir`` and its trace analyses (nothing written)."""
    run, problems = load_run_or_skip(run_dir)
    records = load_records(run_dir, run)
    summary = build_summary(run_dir, run, records, problems)
    summary = with_projection(summary, load_projection(run_dir))
    analyses = analyze_traces(run_dir, summary, records)
    summary = with_breakdowns(summary, analyses)
    summary = with_memory(summary, analyses, records)
    summary = with_calibration(summary)
    summary = with_audits(summary, records)
    summary = with_cluster(summary, records)
    summary = with_advice(summary)
    summary = with_trace_findings(summary, analyses)
    summary = with_scaling(summary, run_dir)  # profile --scaling: summary.json -> scaling
    return summary, analyses


class ReportNotWritten(TowersError):
    """summary.json or report.html could not be written (a full disk); ``doc`` is the summary anyway."""

    def __init__(self, problems: list[str], doc: dict[str, Any], errors: tuple[OSError, ...] = ()) -> None:
        super().__init__("; ".join(problems))
        self.doc = doc
        self.errors = errors  # each file's OSError (its filename is the file not written)


def finish_run(run_dir: RunDir) -> dict[str, Any]:
    """Write summary.json, the Chrome-trace exports and report.html; return summary.json's document.

    Each file is attempted even when another could not be written; a full disk
    raises :class:`ReportNotWritten` (with the summary) once both were tried.
    """
    from tfprof_towers.render.html import render_report

    summary, analyses = analyze_run(run_dir)
    summary = export_chrome_traces(run_dir, summary, analyses)
    doc = summary.to_json()
    problems: list[str] = []
    errors: list[OSError] = []
    writes = ((run_dir.summary_json, lambda: write_json(run_dir.summary_json, doc)),
              (run_dir.report_html, lambda: render_report(summary, run_dir, timelines(summary, analyses),
                                                          memory_timelines(analyses))))
    for path, write in writes:
        try:
            write()
        except OSError as exc:
            if not is_disk_error(exc):
                raise
            problems.append(f"{path}: cannot write ({exc.strerror or exc})")
            errors.append(OSError(exc.errno, exc.strerror, str(path)))
    if problems:
        raise ReportNotWritten(problems, doc, tuple(errors))
    return doc
