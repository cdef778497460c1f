"""Inputs a new user may hand `analyze`, `export`, `diff` and `load()`: FIFOs inside a logdir,
symbolic link loops, huge sparse files, folders below the logdir, options that do not apply."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from trace_kit import two_gpu_trace

import tfprof_towers
from tfprof_towers.cli import main
from tfprof_towers.frames import load
from tfprof_towers.vocab.errors import TowersError, TraceError
from tfprof_towers.xplane import read_xspace, reader

REPO = Path(__file__).resolve().parents[2]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfprof-towers: error: "), err
    return err[0]


def _logdir(root: Path, run: str = "2024_01_01") -> Path:
    two_gpu_trace().write(root / "plugins" / "profile" / run / "host.xplane.pb")
    return root


@contextmanager
def readers_let_go(fifo: Path) -> Iterator[list[str]]:
    """Watches ``fifo`` while the block runs: whoever opens it to read (and would wait for a writer
    forever) is let go at once by a write end that writes nothing, and named in the list the block gets;
    so a regression fails the test instead of hanging it."""
    opened: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader now; ENOENT: gone
                stop.wait(0.005)
                continue
            if stat.S_ISFIFO(os.fstat(fd).st_mode):  # a file written over it is not our FIFO
                opened.append(str(fifo))
            os.close(fd)
            stop.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield opened
    finally:
        stop.set()
        watcher.join()


@pytest.mark.parametrize("how", ["analyze", "export", "load"])
def test_a_fifo_inside_a_logdir_is_refused_not_waited_on(tmp_path: Path, capsys, how: str) -> None:
    logdir = tmp_path / "logs"
    run = logdir / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    fifo = run / "host.xplane.pb"
    os.mkfifo(fifo)
    why = f"{fifo}: a FIFO (named pipe), not a trace file or a directory"
    with readers_let_go(fifo) as opened:  # before: every one of the three waited for a writer until killed
        if how == "load":
            with pytest.raises(TraceError) as raised:
                tfprof_towers.load(str(logdir))
            assert type(raised.value) is TraceError and str(raised.value) == why
        else:
            argv = {"analyze": ["analyze", str(logdir)],
                    "export": ["export", str(logdir), "--csv", str(tmp_path / "csv")]}[how]
            code = main(argv)
            assert code == 2 and capsys.readouterr().err.strip() == f"tfprof-towers: error: {why}"
    assert opened == []


def test_the_reader_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "f.xplane.pb"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="a FIFO"):  # before: open() waited for a writer
        read_xspace(fifo)
    with pytest.raises(TraceError, match="a directory, not a trace file"):
        read_xspace(tmp_path)


@pytest.mark.parametrize("command", ["export", "diff", "load"])
def test_a_symlink_loop_is_one_line_everywhere(tmp_path: Path, capsys, command: str) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    if command == "load":
        with pytest.raises(TraceError, match="a symbolic link loop"):  # before: a bare RuntimeError
            load(loop)
        return
    trace = two_gpu_trace().write(tmp_path / "t" / "h.xplane.pb")
    argv = ["export", str(loop), "--csv", str(tmp_path / "csv")] if command == "export" else [
        "diff", str(trace), str(loop)]
    assert main(argv) == 2
    why = "a symbolic link loop (it leads back to itself)"
    assert _one_line(capsys) == f"tfprof-towers: error: {loop}: {why}"


def test_a_huge_sparse_file_is_refused_from_its_first_bytes(tmp_path: Path, capsys) -> None:
    huge = tmp_path / "huge.xplane.pb"
    with open(huge, "wb") as f:
        f.truncate(20 * 1024**3)  # 20 GiB of holes: no disk used
    with pytest.raises(TraceError) as info:
        read_xspace(huge)
    assert str(info.value) == (f"{huge}: not a readable XSpace trace (its first bytes, 00 00 00 00, are not "
                               "an "
                               "XSpace field); 21.5 GB, not read")
    assert main(["analyze", str(huge)]) == 2
    assert "not read" in _one_line(capsys)


def test_a_file_with_a_plausible_head_is_read_only_if_it_fits(tmp_path: Path, monkeypatch) -> None:
    data = two_gpu_trace().to_bytes()
    page = os.sysconf("SC_PAGE_SIZE")
    rest = (-len(data)) % page
    odd = b"\x22\x01x" if rest % 2 else b""  # a hostname "x" (3 bytes), then empty hostnames (2 bytes each)
    body = data + odd + b"\x22\x00" * (((rest - len(odd)) % page) // 2)  # a whole number of pages
    assert len(body) % page == 0
    path = tmp_path / "p.xplane.pb"
    path.write_bytes(body)
    assert read_xspace(path).source == str(path)  # a page-multiple file is read (no room to map the padding)
    monkeypatch.setattr(reader, "_available_memory", lambda: 1000)
    with pytest.raises(TraceError, match=r"too large to read \(0.0 GB; 0.0 GB of memory available\)"):
        read_xspace(path)
    monkeypatch.setattr(reader, "_available_memory", lambda: None)

    def no_memory(file):
        raise MemoryError

    monkeypatch.setattr(reader.Buffer, "read", staticmethod(no_memory))
    with pytest.raises(TraceError, match="out of memory reading it"):
        read_xspace(path)
    trailing = tmp_path / "t.xplane.pb"
    trailing.write_bytes(b"\x0a\xff\xff\x7f" + b"\0" * 10)  # a first field longer than the file
    with pytest.raises(TraceError, match="its first field is longer than the file"):
        read_xspace(trailing)


def test_a_memory_error_anywhere_is_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    from tfprof_towers.analysis import run_traces

    def boom(path, run=None, executor=None, progress=None):
        raise MemoryError

    monkeypatch.setattr(run_traces, "pod_of_path", boom)
    assert main(["analyze", str(tmp_path)]) == 2
    assert "out of memory" in _one_line(capsys)


@pytest.mark.parametrize("where", ["run-folder", "profile-folder", "plain-folder"])
def test_analyze_and_load_take_any_folder_down_to_the_traces(tmp_path: Path, capsys, where: str) -> None:
    logdir = _logdir(tmp_path / "logs")
    if where == "plain-folder":
        target = tmp_path / "plain"
        two_gpu_trace().write(target / "host.xplane.pb")
    else:
        target = logdir / "plugins" / "profile" / ("2024_01_01" if where == "run-folder" else "")
    assert main(["analyze", str(target)]) == 0  # before: "no profile found"
    assert "/device:GPU:0" in capsys.readouterr().out
    profile = load(target)
    assert profile.parts[0].pod.n_steps == 2


def test_run_on_a_single_trace_says_it_does_not_apply(tmp_path: Path, capsys) -> None:
    trace = two_gpu_trace().write(tmp_path / "t" / "h.xplane.pb")
    assert main(["analyze", str(trace), "--run", "r1"]) == 2
    assert _one_line(capsys) == (f"tfprof-towers: error: --run r1: does not apply to a single trace file "
                                 f"({trace}); "
                                 "it chooses a run of a logdir (or a variant of a run directory)")
    with pytest.raises(TraceError, match="does not apply"):
        load(trace, run="r1")


def test_load_raises_the_exported_error_types() -> None:
    assert tfprof_towers.TowersError is TowersError and tfprof_towers.TraceError is TraceError
    assert issubclass(TraceError, TowersError)
    text = (REPO / "docs" / "notebook.md").read_text()
    assert "TraceError" in text and "TowersError" in text


def test_the_top_level_help_shows_each_commands_whole_line(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    line = ("diff Compare two profiles: step time (a noise test), wall time, ops, placement, links, "
            "findings, math.")
    assert line in out


def test_a_sweep_at_one_count_claims_nothing_above_it() -> None:
    from tfprof_towers.analysis.scaling_run import recommendation_for
    from tfprof_towers.rundir.scaling import BestPick, ScalingSection

    rec = SimpleNamespace(variant="single", is_projected=False, basis="measured", hardware=None)
    summary = SimpleNamespace(recommendation=rec, topology=SimpleNamespace(accelerators=["a", "b"]))
    one = ScalingSection(best_by_count=(BestPick(1, "single"),), recommendation="at 1 accelerator single")
    text = recommendation_for(summary, one).text  # `--scaling 1,1` with one variant
    assert text == ("the recommendation (single) is for 2 accelerators; the sweep measured no count above 1 "
                    "(at 1 accelerator single)")
    two = ScalingSection(best_by_count=(BestPick(1, "single"), BestPick(2, "single")),
                         recommendation="single")
    text = recommendation_for(summary, two).text
    assert text.endswith("fastest at every count of the sweep from 2 up (single)")


def test_terminal_output_shows_bidi_controls(tmp_path: Path, capsys) -> None:
    from tfprof_towers.render.html import environment

    page = environment().from_string("<p>{{ name }} ok</p>").render(name="\u202eevil")
    assert page == "<p><bdi>&lt;U+202E&gt;evil</bdi> ok</p>"
    assert environment().from_string("<p>{{ name }}</p>").render(name="<b>") == "<p>&lt;b&gt;</p>"
    from tfprof_towers.commands import analyze

    doc = {"source": "\u202eevil.xplane.pb", "steps": 1, "window": "markers", "devices": {}, "links": []}
    analyze.print_tables(doc, buf := __import__("io").StringIO())
    assert "\u202e" in buf.getvalue()  # print_tables writes names as they are; run() makes them visible
    trace = two_gpu_trace().write(tmp_path / "\u202eevil" / "h.xplane.pb")
    assert main(["analyze", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "<U+202E>evil" in out


def test_export_takes_run_and_says_which_run_it_took(tmp_path: Path, capsys) -> None:
    logdir = _logdir(tmp_path / "logs", "2024_01_01")
    _logdir(logdir, "2024_02_01")
    assert main(["export", str(logdir), "--csv", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"note: 2 runs under {logdir}; using the newest, 2024_02_01 (choose with --run)\n"
    assert str(tmp_path / "a" / "events.csv") in captured.out
    assert main(["export", str(logdir), "--run", "2024_01_01", "--csv", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().err == ""


def test_a_plausible_first_field_then_20_gb_of_holes_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "h.xplane.pb"
    with open(huge, "wb") as f:
        f.write(b"\x22\x03abc")  # a hostname "abc": a valid first field
        f.truncate(20 * 1024**3)
    with pytest.raises(TraceError) as info:
        read_xspace(huge)
    assert str(info.value) == (f"{huge}: not a readable XSpace trace (no protobuf field at byte 5: the data "
                               "is corrupt or truncated); 21.5 GB, not read")


@pytest.mark.parametrize("name", ["projection.json", "summary.json", "variants/single/record.json"])
def test_a_fifo_among_a_runs_documents_is_not_waited_on(tmp_path: Path, capsys, name: str) -> None:
    from report_kit import make_run_dir

    run = make_run_dir(tmp_path / "run")
    doc = run / name
    doc.unlink(missing_ok=True)
    os.mkfifo(doc)
    with readers_let_go(doc) as opened:  # before: projection.json hung
        code = main(["report", str(run)])
    # the run still reports; the document is a problem or a failure
    assert code in (0, 4), capsys.readouterr().err
    assert opened == []
    summary = (run / "summary.json").read_text() if name != "summary.json" else ""
    if name == "projection.json":
        assert f"{doc}: cannot read (not a regular file)" in summary


def test_ctrl_c_while_the_subcommand_is_still_imported_is_130_not_a_traceback(capsys, monkeypatch) -> None:
    """SIGINT in the first second lands while the subcommand's modules are imported: still one line."""
    import tfprof_towers.cli as cli

    def interrupted(only=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["analyze", "x.xplane.pb"]) == 130
    assert capsys.readouterr().err == "tfprof-towers: interrupted\n"
