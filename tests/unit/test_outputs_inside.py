"""Files the tool names inside a folder the user named (``export --parquet DIR``: rundir/outputs.py,
frames/export.py): a link there is replaced, never written through; every refusal comes before the
trace is read; an empty folder name is refused; a path with a line break is echoed on one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pod_entries import write_hosts

import tfprof_towers.frames as frames_pkg
from tfprof_towers.cli import main
from tfprof_towers.frames.export import read_parquet, write_frames


def small_pod(tmp_path: Path) -> Path:
    return write_hosts(tmp_path / "pod", ["h0.xplane.pb", "h1.xplane.pb"])


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_link_inside_the_folder_is_replaced_not_followed(tmp_path: Path, fmt: str) -> None:
    pod = small_pod(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (out / f"steps.{fmt}").symlink_to(precious)
    (out / f"wall.{fmt}").symlink_to(tmp_path / "nowhere")  # dangling: replaced too
    assert main(["export", str(pod), f"--{fmt}", str(out), "--frames", "steps,wall"]) == 0
    assert precious.read_text() == "keep me\n"
    for name in ("steps", "wall"):
        f = out / f"{name}.{fmt}"
        assert f.is_file() and not f.is_symlink()
    assert not (tmp_path / "nowhere").exists()
    if fmt == "parquet":
        assert len(read_parquet(out / "steps.parquet")) == 6  # 2 hosts x 3 steps


def test_write_frames_replaces_a_link_to_an_input(tmp_path: Path) -> None:
    import pandas as pd

    trace = tmp_path / "t.xplane.pb"
    trace.write_bytes(b"trace")
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").symlink_to(trace)
    write_frames({"steps": pd.DataFrame({"a": [1]})}, out, "csv", inputs=(trace,))
    assert trace.read_bytes() == b"trace" and not (out / "steps.csv").is_symlink()


def test_the_users_own_link_is_still_written_through(tmp_path: Path) -> None:
    """``--html OUT`` where OUT is a link the user named: its target is written (the link stays)."""
    from tfprof_towers.rundir.outputs import write_output

    target = tmp_path / "page.html"
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    write_output(link, "<p>")
    assert link.is_symlink() and target.read_text() == "<p>"


def test_export_refuses_before_reading_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pod = small_pod(tmp_path)
    read = []
    monkeypatch.setattr(frames_pkg, "load", lambda *a, **k: read.append(a))
    out = tmp_path / "out"
    (out / "wall.parquet").mkdir(parents=True)  # a folder where a frame's file goes
    assert main(["export", str(pod), "--parquet", str(out)]) == 2
    (out / "steps.csv").mkdir()
    assert main(["export", str(pod), "--csv", str(out), "--frames", "steps"]) == 2
    assert read == []
    err = capsys.readouterr().err
    assert "wall.parquet: is a directory" in err


@pytest.mark.parametrize("flag", ["--parquet", "--csv"])
def test_an_empty_folder_name_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str], flag: str) -> None:
    pod = small_pod(tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exc:
        main(["export", str(pod), flag, ""])
    assert exc.value.code == 2
    assert list(work.iterdir()) == []
    assert "empty folder name" in capsys.readouterr().err
    from tfprof_towers.frames import load
    from tfprof_towers.vocab.errors import TowersError

    with pytest.raises(TowersError, match="empty name"):
        load(pod).to_csv("", frames=["steps"])
    assert list(work.iterdir()) == []


def test_a_path_with_a_line_break_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = small_pod(tmp_path)
    bad = tmp_path / "a\nb.xplane.pb"  # a trace name: refused, and the refusal echoes the name
    assert main(["analyze", str(pod), "--html", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "b.xplane.pb: is a trace file name" in err
    page = tmp_path / "x\ny.html"
    assert main(["analyze", str(pod), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "wrote " + str(tmp_path) + "/x<U+000A>y.html" in out


@pytest.mark.parametrize("command", ["analyze", "diff"])
def test_an_empty_html_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       command: str) -> None:
    pod = small_pod(tmp_path)
    argv = [command, str(pod), *([str(pod)] if command == "diff" else []), "--html", ""]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "an empty file name" in capsys.readouterr().err


def test_load_accepts_any_path_like(tmp_path: Path) -> None:
    import os

    from tfprof_towers.frames import load

    class Where(os.PathLike):
        def __fspath__(self) -> str:
            return str(small_pod(tmp_path))

    assert load(Where()).failed_hosts == ()
