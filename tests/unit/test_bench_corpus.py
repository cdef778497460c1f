"""``make bench-corpus``'s table (benchmarks/bench_corpus.py) on traces built in code: a TPU-shaped one
(XProf gives its step: 1.000 ms, and no per-step compute, see test_trace_tpu.py) and one without steps
(XProf finds none; its op time is none either: no XLA program ran)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tfprof_towers.testing.synth import tpu_trace

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `benchmarks/` sits beside the package, not inside it
    sys.path.insert(0, str(REPO))
corpus = importlib.import_module("benchmarks.bench_corpus")


def test_corpus_table_of_two_traces(tmp_path: Path) -> None:
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    (tmp_path / "c").mkdir()
    tpu_trace(chips=2, steps=3).write(tmp_path / "c" / "a_tpu.xplane.pb")
    tpu_trace(chips=1, steps=2, steps_line=False, idle_chips=(0,)).write(tmp_path / "c" / "b_idle.xplane.pb")
    work = tmp_path / "work"
    work.mkdir()
    paths = corpus.traces_in([tmp_path / "c"])
    assert [p.name for p in paths] == ["a_tpu.xplane.pb", "b_idle.xplane.pb"]
    rows = corpus.corpus_rows(paths, work)
    a, b = rows
    assert (a.trace, a.producer, a.window) == ("a_tpu.xplane.pb", "jax/google-tpu", "steps-line")
    assert a.our_step_ms == pytest.approx(1.0) and a.xprof_step_ms == pytest.approx(1.0)
    assert a.our_busy_ms == pytest.approx(0.7)  # per step: fusion.1 200 + while.2 400 + all-reduce.5 100 us
    assert a.xprof_compute_from == "overview (per step)" and a.findings == ()
    # no Steps line and no program run: one window over the host's events, [0, 1005) us; no busy chip
    assert (b.window, b.xprof_step_ms, b.xprof_compute_from) == ("whole-trace", None, "none")
    assert b.our_busy_ms is None
    assert b.our_step_ms == pytest.approx(1.005)
    assert b.findings == ("idle_accelerators (high)",)
    table = corpus.format_table(rows).splitlines()
    assert table[0].split("  ")[0] == "trace" and "XProf compute ms" in table[0]
    assert set(table[1]) <= {"-", " "}
    assert table[2].startswith("a_tpu.xplane.pb") and "1.000" in table[2] and "0.700" in table[2]
    assert "idle_accelerators (high)" in table[3] and table[3].count("none") >= 2


def test_corpus_main_says_when_there_is_nothing(tmp_path: Path, capsys) -> None:
    assert corpus.main([str(tmp_path)]) == 1
    assert "no *.xplane.pb under" in capsys.readouterr().err
