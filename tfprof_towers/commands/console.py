"""Terminal output of the commands: rich progress while variants run, ranked tables after."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape as _escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from tfprof_towers.commands.progress import rich_console, stderr_console
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import ProfileOptions
from tfprof_towers.vocab.device_names import is_accelerator_plane, short_device
from tfprof_towers.vocab.errors import EXIT_NOTHING_SUCCEEDED
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_gib

if TYPE_CHECKING:  # the summary's modules are imported where a summary is printed, not at start-up
    from tfprof_towers.rundir.summary import EstimateGap, MemoryPeak, Summary, SummaryEntry

_err = stderr_console()
_out = rich_console()


def err(message: str) -> None:
    """One message on stderr, never wrapped (a notice or an error stays one line)."""
    _err.print(message, markup=False, soft_wrap=True)


def nothing_succeeded() -> int:
    err("no variant succeeded: summary.json and report.html say why each one failed")
    return EXIT_NOTHING_SUCCEEDED


class ProgressView:
    """One bar over the variants plus a line per finished variant."""

    def __init__(self, options: ProfileOptions, run_dir: RunDir) -> None:
        self.options = options
        self.run_dir = run_dir
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
            console=_err, transient=False,
        )
        self._task = None
        self._started: dict[str, float] = {}

    def __enter__(self) -> ProgressView:
        p = self.options.preset
        _err.print(
            f"[bold]tfprof-towers[/] profiling {len(self.options.variants)} variant(s), preset "
            f"[bold]{p.name}[/] (batch {p.batch}, dim {p.dim}), {self.options.warmup} warm-up / "
            f"{self.options.steps} timed / {self.options.profile_steps} profiled steps"
        )
        _err.print(f"run directory: {self.run_dir.root}", markup=False)
        self._progress.__enter__()
        self._task = self._progress.add_task("starting", total=len(self.options.variants))
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def update(self, name: str, event: str) -> None:
        if event == "start":
            self._started[name] = time.perf_counter()
            self._progress.update(self._task, description=f"running [bold]{_escape(name)}[/]")
            return
        took = time.perf_counter() - self._started.get(name, time.perf_counter())
        mark = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]"}.get(event, "[red]failed[/]")
        self._progress.console.print(f"  {_escape(name):<24} {mark}  ({took:.1f} s)")
        self._progress.advance(self._task)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f} ms"


def _speedup_title(summary: Summary) -> str:
    """``speedup vs <baseline>`` for one family; with several, each over its own family's baseline."""
    families = {v.family for v in summary.variants}
    if len(families) == 1:
        return f"speedup vs {registry.baseline_name(families.pop())}"
    return "speedup vs " + " / ".join(registry.baseline_name(f) for f in registry.FAMILIES if f in families)


def _status(v: SummaryEntry) -> str:
    if v.ok:
        return "ok"
    text = _escape(f"{v.status}: {v.error or ''}")
    return f"[yellow]{text}[/]" if v.status == "skipped" else f"[red]{text}[/]"


MATH_MARK = {"same": "same", "reference": "reference", "differs": "[red]DIFFERS[/]", "not compared": "-"}


def ranked_table(summary: Summary) -> Table:
    from tfprof_towers.advice.recommend import stand_in_why

    kind = None if summary.topology is None else summary.topology.kind
    what = "logical CPU devices" if kind == "logical-cpu" else "no GPUs"
    title = (f"CPU stand-in timings here, fastest first ({what}: placement, bytes and FLOPs are "
             "real; speed is not GPU speed)" if stand_in_why(kind) else
             "Placements, fastest first (median un-profiled step time)")
    t = Table(title=title)
    for col, just in (("#", "right"), ("variant", "left"), ("median step", "right"),
                      ("p10-p90", "right"), (_speedup_title(summary), "right"), ("peak memory", "right"),
                      ("same math", "left"), ("status", "left")):
        t.add_column(col, justify=just)
    math = {r.variant: r.status for r in (summary.math.variants if summary.math is not None else ())}
    for name in summary.ranking:
        v = summary.entry(name)
        st = v.step_time_s
        spread = f"{_ms(st.p10)} - {_ms(st.p90)}" if st.p10 is not None else "-"
        sp = v.speedup_vs_baseline
        t.add_row(str(v.rank or "-"), _escape(name), _ms(st.median), spread,
                  "-" if sp is None else f"{sp:.2f}x", peak_cell(v.memory),
                  MATH_MARK.get(math.get(name, ""), "-"), _status(v))
    return t


def random_math_lines(summary: Summary) -> list[str]:
    """"Same math not compared for a, b: the step draws random numbers (`dropout/...`)", one line per
    reason, for the variants whose step draws random numbers (their losses cannot agree)."""
    by_why: dict[str, list[str]] = {}
    for r in summary.math.variants if summary.math is not None else ():
        if r.random_ops and r.why:
            by_why.setdefault(r.why, []).append(r.variant)
    return [f"Same math not compared for {', '.join(names)}: {why}" for why, names in by_why.items()]


def peak_cell(memory: Mapping[str, MemoryPeak]) -> str:
    """A variant's largest accelerator peak (``variants[].memory``), whether measured or estimated, red
    when it does not fit (rich markup, escaped); "-" without one."""
    here = {d: r for d, r in memory.items() if r.label}  # measured on this run's logical devices
    acc = here or {d: r for d, r in memory.items() if is_accelerator_plane(d)} or dict(memory)
    if not acc:
        return "-"
    dev, r = max(acc.items(), key=lambda x: (x[1].peak_bytes, x[0]))
    size = fmt_bytes(r.peak_bytes) if r.label else fmt_gib(r.peak_bytes)  # a run's size: often MB, not GiB
    text = f"{size} {short_device(dev)} ({'est.' if r.basis == 'estimated' else 'meas.'})"
    if r.estimate_vs_measured is not None:
        text += f" est. x{r.estimate_vs_measured:.2f}"
    if r.inside_range is not None and r.estimate_low_bytes and r.estimate_high_bytes:  # the orders' range
        text += (f" (x{r.estimate_low_bytes / r.peak_bytes:.2f}-x{r.estimate_high_bytes / r.peak_bytes:.2f}"
                 f"{'' if r.inside_range else ', outside'})")
    if r.fits is False:
        return f"[red]{_escape(text)} does not fit[/]"
    return f"[yellow]{_escape(text)} may not fit[/]" if r.may_not_fit else _escape(text)


def memory_cell(fit: Mapping[str, Any] | None, checked: EstimateGap | None = None) -> str:
    """A variant's peak memory on the target, for a table: its tightest device's estimated peak, red when
    it does not fit (rich markup, escaped); ``checked``: (estimated / measured, where) of the same
    estimate at the run's size, the device farthest apart.  A calibrated verdict's peak says so, with the
    uncalibrated estimate beside it."""
    if not fit or fit.get("peak_bytes") is None:
        return "-"
    text = f"{fmt_gib(fit['peak_bytes'])} {short_device(str(fit.get('device') or ''))}"
    before = fit.get("uncalibrated") if fit.get("calibrated") else None
    if isinstance(before, dict) and before.get("peak_bytes") is not None:
        text += f" ({fit['calibrated']}; estimate {fmt_gib(before['peak_bytes'])})"
    check = ("" if checked is None
             else f" [dim](est. x{checked.ratio:.2f} of measured at {_escape(checked.where)})[/]")
    if fit.get("fits") is False:
        return f"[red]{_escape(text)} (does not fit)[/]" + check
    return (f"[yellow]{_escape(text)} (may not fit)[/]" if fit.get("may_not_fit") else _escape(text)) + check


def estimate_checks(summary: Summary) -> dict[str, EstimateGap]:
    """Per variant: how far its memory estimate was from what the run measured at its own size."""
    from tfprof_towers.rundir.summary import estimate_gap

    return {v.name: gap for v in summary.variants if (gap := estimate_gap(v.memory)) is not None}


def projected_table(summary: Summary) -> Table | None:
    """The projection the recommendation came from (None when there is none to show)."""
    proj = summary.projection
    if proj is None or proj.error or not proj.variants:
        return None
    size = proj.preset.workload if proj.preset is not None else ""
    size = f" {size}" if size else ""
    t = Table(title=f"PROJECTED on {proj.hardware}{size}, fastest first: not measured")
    for col, just in (("#", "right"), ("variant", "left"), ("overlapped - serial", "right"),
                      ("peak memory", "right"), ("bottleneck", "left"), ("note", "left")):
        t.add_column(col, justify=just)
    excluded = summary.recommendation.excluded
    by_name = {v.name: v for v in proj.variants}
    checks = estimate_checks(summary)
    ranking = list(proj.ranking)
    for name in [*ranking, *(n for n in by_name if n not in ranking)]:
        v = by_name[name]
        step = v.projected_step_s
        span = f"{_ms(step.overlapped)} - {_ms(step.serial)}" if step is not None else "-"
        note = v.error or (f"not recommended: {excluded[name]}" if name in excluded else "")
        t.add_row(str(v.rank or "-"), _escape(name), span,
                  memory_cell(v.memory_fit, checks.get(name)),
                  _escape(str(v.bottleneck or "-")),
                  f"[yellow]{_escape(note)}[/]" if note else "")
    return t


def print_summary(summary: Summary | Mapping[str, Any], run_dir: RunDir,
                  not_written: tuple[Path, ...] = ()) -> None:
    """The ranked table, the recommendation and the paths of the files written (``not_written``: a
    full disk kept them out, so their paths are not printed); ``summary`` as ``summary.json`` holds it
    (the document :func:`~tfprof_towers.session.report.finish_run` returns is read)."""
    from tfprof_towers.rundir.summary import Summary

    if not isinstance(summary, Summary):
        summary = Summary.from_json(summary)
    rec = summary.recommendation
    table = projected_table(summary) if rec.is_projected else None
    if table is not None:
        _out.print(table)
    _out.print(ranked_table(summary))
    for line in random_math_lines(summary):
        _out.print(_escape(line))
    label = f" ({rec.label})" if rec.is_projected else ""
    if rec.variant:
        _out.print(f"Recommendation{_escape(label)}: [bold]{_escape(rec.variant)}[/] — {_escape(rec.reason)}")
    elif rec.is_projected:
        _out.print(f"[yellow]No recommendation{_escape(label)}[/]: {_escape(rec.reason)}")
    if summary.partial:
        how = (f"interrupted by {summary.interrupted_by}" if summary.interrupted_by
               else "the profile stopped (killed?)")
        _out.print(f"[yellow]partial run[/]: {_escape(how)} before every variant finished")
    for problem in summary.problems:  # e.g. a run.json that had to be skipped
        err(f"note: {problem}")
    _out.print(f"run directory: {run_dir.root}", markup=False)
    if run_dir.report_html.is_file() and run_dir.report_html not in not_written:
        _out.print(f"report: {run_dir.report_html}  ({run_dir.report_html.resolve().as_uri()})", markup=False)
    if run_dir.summary_json.is_file() and run_dir.summary_json not in not_written:
        _out.print(f"summary: {run_dir.summary_json}", markup=False)
