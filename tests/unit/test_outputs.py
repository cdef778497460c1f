"""Files the user names (`--html OUT`, `export --parquet DIR`): never over a device, a FIFO, a link's
target unchecked, an input or a run's own file; errors name the user's path and the cause."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from report_kit import make_run_dir
from trace_kit import two_gpu_trace

from tfprof_towers.cli import main
from tfprof_towers.rundir import outputs
from tfprof_towers.rundir.outputs import output_path, write_output
from tfprof_towers.vocab.errors import TowersError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def traces(tmp_path: Path) -> tuple[Path, Path]:
    return (two_gpu_trace().write(tmp_path / "a" / "a.xplane.pb"),
            two_gpu_trace().write(tmp_path / "b" / "b.xplane.pb"))


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfprof-towers: error: "), err
    return err[0]


@pytest.mark.parametrize("command", ["diff", "analyze"])
def test_a_fifo_or_device_out_is_refused_and_left_alone(traces, tmp_path: Path, capsys, command: str) -> None:
    a, b = traces
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    argv = ["diff", str(a), str(b)] if command == "diff" else ["analyze", str(a)]
    assert main([*argv, "--html", str(fifo)]) == 2
    assert "is a FIFO (named pipe), not a regular file; refusing to replace it" in _one_line(capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # before: replaced by a regular file, "wrote ..."
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full's numbers, in our own folder
    except (PermissionError, OSError):
        return  # no mknod here: the FIFO above is the same check
    assert main([*argv, "--html", str(dev)]) == 2
    assert "is a character device" in _one_line(capsys)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_a_symlink_out_is_written_through_and_stays_a_link(traces, tmp_path: Path, capsys) -> None:
    a, b = traces
    target = tmp_path / "pages" / "x.html"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.html"
    link.symlink_to(target)
    assert main(["diff", str(a), str(b), "--html", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("<!doctype html>")  # before: the link became a file, x.html "old"
    capsys.readouterr()
    loop = tmp_path / "loop.html"
    loop.symlink_to(loop)
    assert main(["diff", str(a), str(b), "--html", str(loop)]) == 2
    assert "a symbolic link loop" in _one_line(capsys)
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "to_fifo.html"
    to_fifo.symlink_to(fifo)
    assert main(["analyze", str(a), "--html", str(to_fifo)]) == 2
    assert f"is a FIFO (named pipe) (the target of the link, {fifo})" in _one_line(capsys)


def test_an_out_that_is_an_input_or_a_runs_own_file_is_refused(traces, tmp_path: Path, capsys) -> None:
    a, b = traces
    before = a.read_bytes()
    assert main(["diff", str(a), str(b), "--html", str(a)]) == 2
    assert f"is one of the inputs ({a})" in _one_line(capsys)
    assert main(["analyze", str(a), "--html", str(a)]) == 2
    _one_line(capsys)
    alias = tmp_path / "alias.html"  # another name for the input
    alias.symlink_to(a)
    assert main(["analyze", str(a.parent), "--html", str(alias)]) == 2
    assert f"is a trace file name (the target of the link, {a})" in _one_line(capsys)
    assert a.read_bytes() == before
    run = make_run_dir(tmp_path / "run")
    (run / "summary.json").write_text("{}")
    summary = (run / "summary.json").read_bytes()
    for owned in (run / "summary.json", run / "report.html", run / "variants" / "single" / "page.html"):
        assert main(["analyze", str(run), "--run", "single", "--html", str(owned)]) == 2
        assert f"belongs to the run directory {run}" in _one_line(capsys)
    assert (run / "summary.json").read_bytes() == summary
    assert main(["diff", str(run), str(run), "--html", str(run / "diff.html")]) == 0  # a new file: fine


def test_write_errors_name_the_users_path_and_the_cause(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TowersError) as info:
        write_output(blocker / "out.html", "page")
    assert str(info.value) == f"--html {blocker / 'out.html'}: cannot use it (Not a directory)"
    assert ".tmp" not in str(info.value)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path.parent / ".out.html.0i_odv9d.tmp"))

    monkeypatch.setattr(outputs, "atomic_write_bytes", full)
    with pytest.raises(TowersError) as info:
        write_output(tmp_path / "out.html", "page")
    assert str(info.value) == (f"--html {tmp_path / 'out.html'}: no space left on the device (the disk or "
                               "quota is full); nothing was written")

    def denied(path, data):  # mkstemp in a folder we may not write: the error names the temporary file
        raise PermissionError(errno.EACCES, "Permission denied", str(path.parent / ".x.html.0i_odv9d.tmp"))

    monkeypatch.setattr(outputs, "atomic_write_bytes", denied)
    with pytest.raises(TowersError) as info:
        write_output(tmp_path / "x.html", "page", what="--parquet")
    assert str(info.value) == f"--parquet {tmp_path / 'x.html'}: cannot write (Permission denied)"


def test_output_path_decisions(tmp_path: Path) -> None:
    plain = tmp_path / "new" / "x.html"
    assert output_path(plain) == plain  # a new file in a new folder
    with pytest.raises(TowersError, match="is a directory"):
        output_path(tmp_path)
    with pytest.raises(TowersError, match="is a trace file name"):
        output_path(tmp_path / "h.xplane.pb")


def test_export_refuses_a_fifo_among_its_files_without_hanging(tmp_path: Path) -> None:
    trace = two_gpu_trace().write(tmp_path / "t" / "h.xplane.pb")
    out = tmp_path / "pq"
    out.mkdir()
    os.mkfifo(out / "events.parquet")
    code = ("import sys; from tfprof_towers.cli import main; "
            f"sys.exit(main(['export', {str(trace)!r}, '--parquet', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr
    assert f"--parquet {out / 'events.parquet'}: is a FIFO" in r.stderr
    assert not (out / "steps.parquet").exists()  # refused before any file was written


def test_export_into_a_runs_own_folder_is_refused(tmp_path: Path, capsys) -> None:
    run = make_run_dir(tmp_path / "run")
    assert main(["export", str(run), "--csv", str(run / "variants" / "single")]) == 2
    assert "inside a run directory's own files" in _one_line(capsys)
    assert main(["export", str(run), "--csv", str(tmp_path / "csv")]) == 0
    assert (tmp_path / "csv" / "events.csv").is_file()


def test_read_parquet_says_the_cause(tmp_path: Path) -> None:
    from tfprof_towers.frames import read_parquet

    folder = tmp_path / "x.parquet"
    folder.mkdir()
    with pytest.raises(TowersError, match="not a regular file"):
        read_parquet(folder)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(TowersError, match=r"bad.parquet: not a readable Parquet file"):
        read_parquet(bad)
