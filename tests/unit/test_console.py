"""The terminal summary of `profile`: where the recommendation comes from, said in the table and the line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from report_kit import PROJECTION_PROFILE, make_run_dir, write_projection
from rich.console import Console

from tfprof_towers.commands import console
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run


def printed(summary: dict, run: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    out = io.StringIO()
    monkeypatch.setattr(console, "_out", Console(file=out, width=200, highlight=False))
    console.print_summary(summary, RunDir(run))
    return out.getvalue()


def test_a_cpu_run_prints_the_projection_it_recommends_from(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run_dir(tmp_path / "run")
    write_projection(run)
    text = printed(finish_run(RunDir(run)), run, monkeypatch)
    assert f"PROJECTED on {PROJECTION_PROFILE} at the tiny preset (batch 4, dim 16)" in text
    assert "CPU stand-in timings here, fastest first (logical CPU devices: placement, bytes and FLOPs are " \
           "real; speed is not GPU speed)" in text
    line = f"Recommendation (projected on {PROJECTION_PROFILE}): single — At the tiny preset (not measured)"
    assert line in text
    bug = next(line for line in text.splitlines() if "towers_bug" in line and "host compute" in line)
    assert "not recommended: heavy compute on the host" in bug


def test_a_run_without_a_projection_prints_the_measured_ranking(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run_dir(tmp_path / "run")
    text = printed(finish_run(RunDir(run)), run, monkeypatch)
    assert "PROJECTED" not in text and "Recommendation: single — single has the fastest" in text


def test_both_tables_have_a_peak_memory_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The projection's estimates on 2x 6 GiB (report_kit.MEMORY): single does not fit, the towers do."""
    run = make_run_dir(tmp_path / "run")
    write_projection(run, memory=True)
    text = printed(finish_run(RunDir(run)), run, monkeypatch)
    assert text.count("peak memory") == 2  # the projected table and the ranked one
    single = [line for line in text.splitlines() if "│ single" in line or " single " in line]
    projected = next(line for line in single if "7.20 GiB GPU:0 (does not fit)" in line)
    assert "not recommended: does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable)" in projected
    assert any("7.20 GiB GPU:0 (est.) does not fit" in line for line in single)  # the ranked table
    bug = next(line for line in text.splitlines() if "towers_bug" in line and "(est.)" in line)
    assert "0.60 GiB GPU:1 (est.)" in bug  # its largest accelerator peak (GPU 0 and 1 tie: the last named)
