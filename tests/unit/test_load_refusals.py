"""``load()``'s refusals (frames/profile.py): what names no profile -- an empty path, the filesystem's
root, a value that is not a path -- raises ``TowersError`` in one line, never walks a folder or raises
``TypeError``; a pod with an unreadable host names it in ``Profile.failed_hosts``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_pod_entries import write_hosts

import tfprof_towers as tt


@pytest.mark.parametrize("path", ["", " ", "/", "//", Path("/")])
def test_an_empty_path_or_the_root_is_refused(path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_hosts(tmp_path, ["h0.xplane.pb"])  # the current directory holds a trace: still refused
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tt.TowersError, match=r"^load: (an empty path|.* is the filesystem's root)"):
        tt.load(path)


def test_a_relative_path_up_to_the_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    up = "/".join([".."] * (len(tmp_path.resolve().parts) + 2))
    with pytest.raises(tt.TowersError, match="the filesystem's root"):
        tt.load(up)


@pytest.mark.parametrize("path", [12345, None, b"/tmp/x.xplane.pb", 3.5, ["a"]])
def test_a_value_that_is_not_a_path_is_a_towers_error(path) -> None:
    with pytest.raises(tt.TowersError, match=r"^load: the path must be a str or pathlib.Path, not "):
        tt.load(path)


def test_failed_hosts_names_the_hosts_left_out(tmp_path: Path) -> None:
    root = write_hosts(tmp_path / "pod", ["h0.xplane.pb", "h1.xplane.pb"])
    (root / "h2.xplane.pb").write_bytes(b"\x00garbage")
    os.mkfifo(root / "h3.xplane.pb")
    p = tt.load(root)
    assert [f.name for f in p.failed_hosts] == ["h2", "h3"]
    assert all(f.reason and "\n" not in f.reason for f in p.failed_hosts)
    assert sorted(p.steps["host"].astype(str).unique()) == ["h0", "h1"]
    assert tt.load(root / "h0.xplane.pb").failed_hosts == ()


def test_a_link_loop_is_still_named_as_one(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(tt.TraceError, match="symbolic link loop"):
        tt.load(loop)
