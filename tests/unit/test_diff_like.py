"""The gate compares like with like (frames/diff.py), and a record whose summary is not of its own steps
is refused (rundir/records.py): NEW's profiled trace windows never stand in for its timed steps against
BASE's timed steps.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from records_kit import edit_record
from report_kit import make_run_dir

from tfprof_towers.capture.stats import step_stats
from tfprof_towers.cli import main
from tfprof_towers.frames import load
from tfprof_towers.frames.diff import INCONCLUSIVE, PASSED, REGRESSED, diff
from tfprof_towers.rundir.fields import RecordError
from tfprof_towers.rundir.records import Timings
from tfprof_towers.vocab.errors import EXIT_SLOWER

TIMES = [0.010, 0.011, 0.009, 0.0105, 0.012, 0.0095]



def timed(xs):
    def fn(doc):
        doc["timings"]["step_times_s"] = list(xs)
        doc["timings"]["step_time_s"] = step_stats(xs).to_json()
    return fn


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    base = make_run_dir(tmp_path / "base")
    edit_record(base, "single", timed(TIMES))
    new = tmp_path / "new"
    shutil.copytree(base, new)
    return base, new


def test_a_summary_of_no_steps_is_refused_and_regresses_the_gate(pair, capsys) -> None:
    base, new = pair

    def no_steps(doc):  # the median says 10x slower; there is no step behind it
        doc["timings"]["step_times_s"] = []
        doc["timings"]["step_time_s"]["median"] = 0.1025
    edit_record(new, "single", no_steps)
    assert main(["diff", str(base), str(new), "--fail-if-slower", "5", "--variant", "single"]) == EXIT_SLOWER
    out = capsys.readouterr().out
    assert "single: regressed: ok -> failed: record.json is invalid: timings.step_time_s.median" in out
    assert "step_times_s is empty" in out


@pytest.mark.parametrize("field, value", [("median", 0.5), ("min", 0.001), ("max", 9.0), ("n", 2)])
def test_a_summary_that_is_not_of_its_steps_is_refused(field: str, value: float) -> None:
    doc = {"step_times_s": TIMES, "step_time_s": step_stats(TIMES).to_json()}
    assert Timings.from_json(doc).step_time_s.median == pytest.approx(0.01025)
    doc["step_time_s"][field] = value
    with pytest.raises(RecordError, match=rf"step_time_s\.{field} is "):
        Timings.from_json(doc)
    prof = {"profiled_step_times_s": [], "profiled_step_time_s": {"median": 0.2, "n": 3}}
    with pytest.raises(RecordError, match=r"profiled_step_time_s\.median .*profiled_step_times_s is empty"):
        Timings.from_json(prof)
    assert Timings.from_json({"step_time_s": {"median": 0.2}}).step_time_s.median == 0.2  # no list: unchecked


def test_timed_steps_against_windows_are_compared_window_to_window(pair) -> None:
    base, new = pair
    # a consistent record
    edit_record(new, "single", lambda d: d["timings"].update(step_times_s=[], step_time_s={}))
    doc = diff(load(base), load(new), only=["single"], fail_if_slower=5)
    st = doc["pairs"][0]["step_time"]
    assert st["samples"].startswith("the trace's step windows")
    assert st["base_steps_s"] == st["new_steps_s"]  # the same trace on both sides
    assert st["base_steps_s"] != TIMES
    [verdict] = doc["gate"]["verdicts"]
    assert verdict["outcome"] in (PASSED, INCONCLUSIVE) and verdict["outcome"] != REGRESSED


def test_unlike_samples_without_a_trace_fail_with_the_reason(pair) -> None:
    base, new = pair
    edit_record(new, "single", lambda d: d["timings"].update(step_times_s=[], step_time_s={}))
    shutil.rmtree(base / "tensorboard" / "single")
    edit_record(base, "single", lambda d: d.update(xplane_files=[]))
    doc = diff(load(base), load(new), only=["single"], fail_if_slower=5)
    [verdict] = doc["gate"]["verdicts"]
    assert verdict["outcome"] == INCONCLUSIVE
    assert verdict["why"].startswith("BASE has timed steps (record.json) and NEW only the trace's step "
                                     "windows")


def test_minus_zero_percent_is_zero(pair, capsys) -> None:
    base, new = pair
    main(["diff", str(base), str(new), "--fail-if-slower", "-0", "--variant", "single"])
    out = capsys.readouterr().out
    assert "-0%" not in out and "-0.0" not in out
