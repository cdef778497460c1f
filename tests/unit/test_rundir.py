"""Run directory helpers: atomic writes, never overwriting a run, one-line errors."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from tfprof_towers.rundir.paths import (
    CLAIM_FILE,
    atomic_write_text,
    claim_out_dir,
    new_run_dir,
    point_latest,
    read_json,
    release_out_dir,
    write_json,
)
from tfprof_towers.vocab.errors import TowersError


def test_atomic_write_leaves_no_temporary(tmp_path: Path) -> None:
    write_json(tmp_path / "a" / "x.json", {"k": [1, 2]})
    assert json.loads((tmp_path / "a" / "x.json").read_text()) == {"k": [1, 2]}
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["x.json"]
    # readable by others, like any file the user writes (not mkstemp's 0600)
    assert (tmp_path / "a" / "x.json").stat().st_mode & 0o044 == 0o044


def test_atomic_write_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic_write_text(target, "old")
    with pytest.raises(TypeError):
        write_json(target, {"bad": object()})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_new_run_dir_never_reuses(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 30, 12, 0, 0)
    a = new_run_dir(tmp_path, now)
    b = new_run_dir(tmp_path, now)
    assert a.name == "20261130-120000" and b.name == "20261130-120000-1"
    point_latest(tmp_path, b)
    assert (tmp_path / "latest").resolve() == b.resolve()


def test_claim_out_dir(tmp_path: Path) -> None:
    assert claim_out_dir(tmp_path / "new").is_dir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(TowersError, match="not empty"):
        claim_out_dir(tmp_path / "full")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TowersError, match="not a directory"):
        claim_out_dir(tmp_path / "file")


def test_claim_out_dir_is_held_until_released(tmp_path: Path) -> None:
    """A second claim of a folder a run holds is refused, even while that folder is still empty."""
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        assert claim_out_dir(out) == out
        with pytest.raises(TowersError, match="another run is writing into this directory") as exc:
            claim_out_dir(out)
        assert "\n" not in str(exc.value)
        release_out_dir(out)
        assert list(out.iterdir()) == []
        assert claim_out_dir(out) == out  # released while still empty: free again
        release_out_dir(out)


def test_a_refused_claim_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "full"
    out.mkdir()
    (out / "f").write_text("x")
    with pytest.raises(TowersError, match="not empty"):
        claim_out_dir(out)
    assert [p.name for p in out.iterdir()] == ["f"]
    assert not (out / CLAIM_FILE).exists()


def test_point_latest_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    a = new_run_dir(tmp_path, dt.datetime(2026, 11, 30, 12, 0, 0))
    b = new_run_dir(tmp_path, dt.datetime(2026, 11, 30, 12, 0, 0))
    point_latest(tmp_path, a)
    point_latest(tmp_path, b)
    assert os.readlink(tmp_path / "latest") == b.name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.name, b.name, "latest"])


def test_read_json_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(TowersError, match="file not found"):
        read_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(TowersError, match="corrupt JSON") as exc:
        read_json(tmp_path / "bad.json")
    assert "\n" not in str(exc.value)
