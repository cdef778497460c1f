"""Agreement with XProf over a corpus of real traces: ``make bench-corpus``
(``python -m benchmarks.bench_corpus``).

Every ``*.xplane.pb`` under the corpus folders (default: ``../shared/fixtures`` beside the checkout; give
others as arguments) is analysed as ``tfprof-towers analyze --json`` does and converted by XProf (each in a
folder of its own: XProf caches per folder).  One table, one row per trace:

* **our step**: ``analyze``'s average step time (``window`` says where the steps came from);
* **XProf's step**: the overview page's ``steptime_ms_average`` -- "none" where XProf finds no step;
* **our busy**: the busiest accelerator's time not idle (its windows less its idle time): per step beside
  XProf's per-step compute, over all steps beside its whole-trace op time;
* **XProf's compute**: the overview page's device compute per step where it gives steps (GPU), else XProf's
  op time over the whole trace (``op_profile``: every program's ops, idle left out) -- which counts only
  events of an XLA program, so a runtime copy outside any program (``hipMemcpy``'s ``copyBuffer`` kernels)
  is ours and not XProf's;
* the producer (framework, vendor) and the findings (most severe first).

Not part of the test suite (it reads traces outside the repository); ``tests/unit/test_bench_corpus.py``
checks :func:`corpus_rows` and :func:`format_table` on traces built in code.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "fixtures"


@dataclass(frozen=True)
class Row:
    """One trace of the corpus: our figures and XProf's (milliseconds; None: not given)."""

    trace: str
    window: str
    our_step_ms: float | None
    xprof_step_ms: float | None
    our_busy_ms: float | None
    xprof_compute_ms: float | None
    xprof_compute_from: str  # "overview (per step)" | "op_profile (whole trace)" | "none"
    producer: str
    findings: tuple[str, ...]


def traces_in(folders: Iterable[Path]) -> list[Path]:
    """Every ``*.xplane.pb`` under ``folders`` (a file is itself), sorted."""
    out: list[Path] = []
    for f in folders:
        out += [f] if f.is_file() else sorted(f.rglob("*.xplane.pb"))
    return out


def ours(path: Path) -> dict:
    """``analyze --json``'s document of ``path`` with its findings (as the command builds it)."""
    from tfprof_towers.advice.trace_rules import evaluate_trace
    from tfprof_towers.trace.analysis import analyze_xplane

    a = analyze_xplane(path)
    return {**a.to_doc(), **evaluate_trace(a).to_json()}


def busiest_ms(doc: dict) -> float | None:
    """Over all steps: the busiest accelerator's time not idle (ms); None without an accelerator."""
    busy = [d["window_s"] - d["wall"].get("idle", 0.0) for d in doc["devices"].values() if "idle_split" in d]
    return max(busy) * 1e3 if busy else None


def xprof_figures(path: Path, work: Path) -> tuple[float | None, float | None, str]:
    """``(step_ms, compute_ms, where compute came from)`` from XProf, on a copy of ``path`` in a folder of
    its own under ``work``."""
    from xprof.convert import raw_to_tool_data as xprof

    folder = Path(tempfile.mkdtemp(dir=work))
    copy = folder / path.name
    shutil.copyfile(path, copy)
    page = json.loads(xprof.xspace_to_tool_data([str(copy)], "overview_page", {})[0])
    props = page[1]["p"]
    if page[1]["rows"]:
        step = float(props["steptime_ms_average"])
        compute = props.get("device_compute_time_ms_avg") or props.get("tc_compute_ms_average")
        return step, float(compute) if compute is not None else None, "overview (per step)"
    profile = json.loads(xprof.xspace_to_tool_data([str(copy)], "op_profile", {})[0])
    program = profile.get("byProgramExcludeIdle") or {}
    raw = (program.get("metrics") or {}).get("rawTime")
    return None, (raw / 1e9 if raw else None), "op_profile (whole trace)" if raw else "none"


def corpus_rows(paths: Sequence[Path], work: Path) -> list[Row]:
    """One :class:`Row` per trace."""
    rows = []
    for path in paths:
        doc = ours(path)
        step, compute, where = xprof_figures(path, work)
        busy = busiest_ms(doc)
        if busy is not None and where == "overview (per step)":
            busy /= max(doc["steps"], 1)
        p = doc["producer"]
        rows.append(Row(
            trace=path.name, window=doc["window"],
            our_step_ms=doc["step_time_avg_s"] * 1e3 if doc["steps"] else None,
            xprof_step_ms=step, our_busy_ms=busy, xprof_compute_ms=compute,
            xprof_compute_from=where, producer=f"{p['framework']}/{p['vendor']}",
            findings=tuple(f"{f['rule']} ({f['severity']})" for f in doc["findings"]),
        ))
    return rows


def _ms(x: float | None) -> str:
    return "none" if x is None else f"{x:.3f}"


COLUMNS = ("trace", "producer", "window", "our step ms", "XProf step ms", "our busy ms", "XProf compute ms",
           "XProf compute from", "findings")


def format_table(rows: Sequence[Row]) -> str:
    """The rows as one aligned text table (:data:`COLUMNS`)."""
    cells = [list(COLUMNS)] + [[r.trace, r.producer, r.window, _ms(r.our_step_ms), _ms(r.xprof_step_ms),
                                _ms(r.our_busy_ms), _ms(r.xprof_compute_ms), r.xprof_compute_from,
                                ", ".join(r.findings) or "none"] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="*", type=Path, default=[DEFAULT_CORPUS],
                        help="folders (or files) of *.xplane.pb traces (default: ../shared/fixtures)")
    args = parser.parse_args(argv)
    paths = traces_in(args.corpus)
    if not paths:
        print(f"no *.xplane.pb under {', '.join(map(str, args.corpus))}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as work:
        print(format_table(corpus_rows(paths, Path(work))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
