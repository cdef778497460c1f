"""What clumsy or hostile users do to `profile`, `report`, `project`, `hardware` and `analyze`.

Runs use stand-in children (child_kit.py: shell scripts the runner starts in place of the
interpreter), so no test here imports TensorFlow; the real-variant versions (parent SIGKILL, a
json.py in the working directory, sys.exit in a variant, a graph that hangs while building) are in
tests/e2e/test_survive_e2e.py, marked slow.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from child_kit import fake_python, ok_child, one_line_error, options, tmpfs, use_python
from records_kit import record, run_doc, write_run

from tfprof_towers.capture import child, runner
from tfprof_towers.capture.runner import crash_reason, run_all, run_one
from tfprof_towers.cli import main
from tfprof_towers.projection.hardware import HardwareError, builtin_dir, load_file
from tfprof_towers.rundir.paths import RunDir, json_text
from tfprof_towers.rundir.records import RunConfig, RunDoc
from tfprof_towers.rundir.summary import build_summary
from tfprof_towers.session.report import analyze_run
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.errors import EXIT_NOTHING_SUCCEEDED

ONEDNN = ("I0000 00:00:1796083282.082907   28554 port.cc:153] oneDNN custom operations are on. You may "
          "see slightly different numerical results due to floating-point round-off errors.")
ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def by_name(summary: dict) -> dict[str, dict]:
    return {v["name"]: v for v in summary["variants"]}


# --------------------------------------------------------------------------- nothing succeeded


def test_no_variant_succeeded_still_gets_summary_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every variant dies before importing TensorFlow, and no child reports its devices.

    The run's config has ``accelerators: null`` (the default), which `build_summary` reads without
    computing ``max(None, 1)``.
    """
    exe = fake_python(tmp_path, f"echo '{ONEDNN}' >&2; echo 'ImportError: no TensorFlow here' >&2; exit 1\n")
    use_python(monkeypatch, exe)
    out = tmp_path / "run"
    code = main(["profile", "--preset", "tiny", "--variants", "towers_bug,replicated", "--out", str(out)])
    assert code == EXIT_NOTHING_SUCCEEDED == 4
    assert run_json(out)["config"]["accelerators"] is None and run_json(out)["topology"] is None
    summary = summary_of(out)
    for v in summary["variants"]:
        assert v["status"] == "failed"
        assert v["error"] == "crashed: exit code 1: ImportError: no TensorFlow here"
    assert summary["ranking"] == ["towers_bug", "replicated"] and summary["partial"] is False
    html = (out / "report.html").read_text()
    assert html.count("crashed: exit code 1: ImportError: no TensorFlow here") >= 2
    err = capsys.readouterr().err
    assert "no variant succeeded: summary.json and report.html say why each one failed" in err
    assert "Traceback" not in err
    # and `report RUN_DIR` re-renders it, with the same exit code
    (out / "summary.json").unlink()
    assert main(["report", str(out)]) == 4
    assert by_name(summary_of(out))["replicated"]["status"] == "failed"


def test_summary_without_any_accelerator_count(tmp_path: Path) -> None:
    run = run_doc(["towers_bug"], topology=None, accelerators=None)
    rd = write_run(tmp_path / "run", run, [record("towers_bug", status="failed", error="boom")])
    summary = build_summary(rd, run, {"towers_bug": record("towers_bug", status="failed", error="boom")})
    assert [(e.name, e.speedup_vs_baseline, e.scaling_efficiency) for e in summary.variants] == [
        ("towers_bug", None, None)]


def test_ctrl_c_before_any_variant_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_one", interrupted)
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "single,replicated", "--out", str(out)]) == 130
    summary = summary_of(out)
    assert summary["partial"] is True and summary["interrupted_by"] == "SIGINT"
    assert [(v["name"], v["error"]) for v in summary["variants"]] == [
        ("single", "interrupted by SIGINT before it finished"),
        ("replicated", "not run: the profile was interrupted first"),
    ]
    assert (out / "report.html").is_file()
    assert "interrupted: wrote a partial report from 0 finished variant(s)" in capsys.readouterr().err


# --------------------------------------------------------------------------- bounded output

#: One 100 MB line on stderr, then a last word, then a crash.
FLOOD = ("head -c 100000000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'ValueError: the last word' >&2; "
         "exit 1\n")


def test_a_flood_on_stderr_is_kept_head_and_tail_and_records_stay_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_python(monkeypatch, fake_python(tmp_path, FLOOD))
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "towers_bug", "--out", str(out)]) == 4
    err_txt = out / "variants" / "towers_bug" / "stderr.txt"
    assert err_txt.stat().st_size <= runner.supervise.HEAD_BYTES + runner.supervise.TAIL_BYTES + 200
    assert err_txt.read_text().rstrip().endswith("ValueError: the last word")
    rec = json.loads((out / "variants" / "towers_bug" / "record.json").read_text())
    assert rec["error"] == "crashed: exit code 1: ValueError: the last word"
    assert len(rec["stderr_tail"].encode()) <= textcap.TAIL_MAX_BYTES
    assert rec["stderr_tail"].endswith("ValueError: the last word")
    for name in ("record.json",):
        assert (out / "variants" / "towers_bug" / name).stat().st_size < 16_000
    assert (out / "summary.json").stat().st_size < 64_000
    assert (out / "report.html").stat().st_size < 1_000_000


def test_a_flood_on_a_small_disk_keeps_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real 40 MiB tmpfs: the variant writes 100 MB to stderr; the run still gets its report."""
    use_python(monkeypatch, fake_python(tmp_path, FLOOD))
    with tmpfs(tmp_path / "mnt", "40m") as mnt:
        out = mnt / "run"
        assert main(["profile", "--preset", "tiny", "--variants", "towers_bug", "--out", str(out)]) == 4
        error = by_name(summary_of(out))["towers_bug"]["error"]
        assert error == "crashed: exit code 1: ValueError: the last word"
        assert (out / "report.html").is_file()
        assert shutil.disk_usage(mnt).used < 2 * 2**20


def test_full_disk_during_one_variant_fails_that_variant_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faked: completing the first variant's record.json meets ENOSPC once.  It fails, the second
    still runs, and the first one's failed record is written once the disk takes it again."""
    use_python(monkeypatch, ok_child(tmp_path))
    real = runner.write_json
    full = {"first"}

    def full_once(path: Path, doc) -> None:
        if Path(path).parent.name in full and Path(path).name == "record.json":
            full.clear()
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, doc)

    monkeypatch.setattr(runner, "write_json", full_once)
    out = tmp_path / "run"
    opts = options(tmp_path, names=("first", "second"))
    outcomes = run_all(opts, RunDir(out))
    why = "cannot write record.json (No space left on device); the variant's files are incomplete"
    assert [(o.name, o.status, o.error) for o in outcomes] == [
        ("first", "failed", why), ("second", "ok", None)]
    first = json.loads((out / "variants" / "first" / "record.json").read_text())
    assert (first["status"], first["error"]) == ("failed", why)


def test_disk_filled_by_one_variant_then_freed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real tmpfs that a variant fills up: it fails; space comes back (here: the test frees it);
    the next variant, the first one's record and the report are written."""
    fill = ('case "${@: -1}" in */single/*) head -c 200000000 /dev/zero > "$(dirname "${@: -1}")/filler";'
            " exit 0;; esac\n")
    ok_body = Path(ok_child(tmp_path)).read_text().split("\n", 1)[1]
    exe = fake_python(tmp_path, fill + ok_body, name="fill-then-ok")
    real = runner.run_one

    def free_before_the_second(o, v, r):
        if v.name == "replicated":
            assert not r.record_json("single").exists()  # the full disk took nothing
            (r.variant_dir("single") / "filler").unlink()
        return real(o, v, r, python=exe)

    monkeypatch.setattr(runner, "run_one", free_before_the_second)
    with tmpfs(tmp_path / "mnt", "80m") as mnt:
        out = mnt / "run"
        code = main(["profile", "--preset", "tiny", "--variants", "single,replicated", "--out", str(out)])
        summary = summary_of(out)
        assert (out / "report.html").is_file()
    assert code == 0
    assert by_name(summary)["replicated"]["status"] == "ok"
    assert by_name(summary)["single"]["error"] == (
        "cannot write record.json (No space left on device); the variant's files are incomplete")


# --------------------------------------------------------------------------- timeouts


@pytest.mark.parametrize(("text", "seconds"), [("1e7", 1e7), ("inf", None), ("none", None), ("0.5", 0.5)])
def test_large_and_no_timeouts_are_accepted(text: str, seconds: float | None, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    use_python(monkeypatch, ok_child(tmp_path))
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--variant-timeout", text,
                 "--out", str(out)]) == 0
    assert run_json(out)["config"]["variant_timeout_s"] == seconds


@pytest.mark.parametrize("text", ["nan", "0", "-1", "soon", "-inf"])
def test_bad_timeouts_fail_before_anything_is_created(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--variant-timeout", text, "--out", str(out)])
    assert exc.value.code == 2
    assert "--variant-timeout" in one_line_error(capsys)
    assert not out.exists()


# --------------------------------------------------------------------------- reports/latest


def test_latest_moves_only_to_a_run_that_finished_with_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    latest = reports / "latest"
    use_python(monkeypatch, ok_child(tmp_path))
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--reports", str(reports)]) == 0
    good = latest.resolve()
    assert (good / "report.html").is_file()

    use_python(monkeypatch, fake_python(tmp_path, "exit 1\n"))  # nothing succeeds
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--reports", str(reports)]) == 4
    assert latest.resolve() == good

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_one", interrupted)
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--reports", str(reports)]) == 130
    assert latest.resolve() == good
    assert len([p for p in reports.iterdir() if p.name != "latest"]) == 3


# --------------------------------------------------------------------------- strict JSON


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_in_a_record_are_named_and_skipped(bad: float, tmp_path: Path) -> None:
    run = run_doc(["single", "towers_bug"])
    rd = write_run(tmp_path / "run", run, [record("single"), record("towers_bug")])
    path = rd.record_json("towers_bug")
    doc = json.loads(path.read_text())
    doc["timings"]["step_time_s"]["median"] = bad
    path.write_text(json.dumps(doc))  # json.dumps writes NaN/Infinity, which json.loads accepts
    assert main(["report", str(rd.root)]) == 0
    text = (rd.root / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    entry = by_name(json.loads(text))["towers_bug"]
    assert entry["error"] == (f"record.json is invalid: timings.step_time_s.median must be a finite "
                              f"number, not the number {bad!r}")


def test_json_text_is_strict() -> None:
    doc = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": "NaN", "e": 2}
    assert json.loads(json_text(doc, indent=None)) == {"a": None, "b": [1.0, None, {"c": None}], "d": "NaN",
                                                       "e": 2}
    json.loads(json_text(doc), parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))


# --------------------------------------------------------------------------- safe sys.path


def test_children_start_with_a_safe_path(tmp_path: Path) -> None:
    argv_file = tmp_path / "argv"
    exe = fake_python(tmp_path, f'echo "$@" > {argv_file}; exit 1\n')
    opts = options(tmp_path)
    run_one(opts, opts.variants[0], RunDir(opts.out_dir), python=exe)
    args = argv_file.read_text().split()
    if sys.version_info >= (3, 11):
        assert args[:3] == ["-P", "-m", "tfprof_towers.capture.child"]
    assert args[-1].endswith("variants/a/spec.json")


# --------------------------------------------------------------------------- hardware profiles


def _hw(tmp_path: Path, old: str, new: str) -> Path:
    text = (builtin_dir() / "2x-gtx1060-pcie3.toml").read_text()
    assert old in text
    path = tmp_path / "box.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("count = 2", "count = 99999999999999999",
         "[accelerator] count must be at most 128 (accelerators in one machine), got 99999999999999999"),
        ("fp32_tflops = 4.375", "fp32_tflops = inf",
         "[accelerator] fp32_tflops must be a finite number, got inf"),
        ("fp32_tflops = 4.375", "fp32_tflops = nan",
         "[accelerator] fp32_tflops must be a finite number, got nan"),
        ("fp32_tflops = 4.375", "fp32_tflops = 1e308",
         "[accelerator] fp32_tflops must be at most 100000 (TFLOPS per accelerator), got 1e+308"),
        ("cores = 4 ", "cores = 100000 ",
         "[host] cores must be at most 4096 (cores in one host), got 100000"),
        ('name = "2x-gtx1060-pcie3"', 'name = "two\\nlines"',
         "'name' must be one line of text without control characters"),
    ],
)
def test_numbers_outside_a_physical_range_are_one_line_errors(
    tmp_path: Path, old: str, new: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _hw(tmp_path, old, new)
    with pytest.raises(HardwareError) as err:
        load_file(path)
    assert str(err.value) == f"{path}: {message}"
    assert main(["hardware", str(path), "--json"]) == 2
    assert one_line_error(capsys) == f"tfprof-towers: error: {path}: {message}"


def test_markup_in_a_profile_name_is_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from report_kit import projection_graphs

    from tfprof_towers.commands.project import print_projection
    from tfprof_towers.projection import project
    from tfprof_towers.variants.config import Preset, VariantSpec

    path = _hw(tmp_path, 'name = "2x-gtx1060-pcie3"', 'name = "bad[/]name [bold]x"')
    variants = tuple(VariantSpec.builtin(n) for n in ("single", "towers_bug"))
    doc = project(str(path), Preset("tiny", batch=4, dim=16), variants, graphs=projection_graphs())
    print_projection(doc, None)  # rich raises MarkupError on an unescaped "[/]"
    out = capsys.readouterr().out
    assert "bad[/]name [bold]x" in out
    assert main(["hardware", str(path)]) == 0
    assert "bad[/]name [bold]x" in capsys.readouterr().out


# --------------------------------------------------------------------------- messages


def test_exit_code_0_is_not_a_crash_and_tf_info_lines_are_no_cause() -> None:
    tail = f"{ABSL}\n{ONEDNN}\n{ONEDNN}"
    assert crash_reason(0, tail, False, 30.0) == "exited with code 0 before finishing"
    assert crash_reason(1, tail, False, 30.0) == "crashed: exit code 1"
    assert crash_reason(1, "E0000 00:00:17.1  28 x.cc:1] real error\n" + ONEDNN, False, 30.0) == (
        "crashed: exit code 1: E0000 00:00:17.1  28 x.cc:1] real error")


def test_sys_exit_and_keyboard_interrupt_inside_a_variant() -> None:
    sigint = child._Sigint()
    try:
        assert child.failure(SystemExit(0), "build", sigint) == (
            "exited with code 0 before finishing (sys.exit during build)")
        assert child.failure(SystemExit("bye"), "warmup", sigint) == (
            "exited with code 1 before finishing (sys.exit during warmup: bye)")
        assert child.failure(KeyboardInterrupt(), "build", sigint) == (
            "KeyboardInterrupt raised by the variant's own code during build (no signal was sent)")
        sigint.received = True
        assert child.failure(KeyboardInterrupt(), "timed", sigint) == "interrupted by SIGINT during timed"
        assert child.failure(RuntimeError("x" * 5000), "build", sigint).endswith("…")
    finally:
        import signal

        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--warmup", "-1"], "argument --warmup: must be 0 or more: -1"),
     (["--warmup", "x"], "argument --warmup: not a whole number: 'x'"),
     (["--accelerators", "100000000"],
      "argument --accelerators: must be at most 128 (accelerators in one machine): 100000000"),
     (["--steps", "10000000000"], "argument --steps: must be at most 100000 (steps): 10000000000"),
     (["--profile-steps", "5000"],
      "argument --profile-steps: must be at most 1000 (each adds to the trace): 5000")],
)
def test_counts_are_checked_with_the_right_words(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["profile", *argv])
    assert needle in one_line_error(capsys)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def build_variant(devices):\n    return 1\x00\n",
         "contains a NUL byte (line 2); not a Python source file"),
        ("build_variant = 42\n", "build_variant is 42 (line 1), not a function"),
        ("def build_variant(devices):\n    pass\nbuild_variant = None\n",
         "build_variant is None (line 3), not a function"),
        ("def build_variant():\n    pass\n",
         "build_variant() takes 0 argument(s) (line 1); it is called as build_variant(devices)"),
        ("def build_variant(devices)\n", "syntax error at line 1: expected ':'"),
    ],
)
def test_variant_files_that_cannot_work_fail_the_pre_run_check(
    source: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.py"
    path.write_text(source)
    out = tmp_path / "run"
    assert main(["profile", "--variant-file", str(path), "--out", str(out)]) == 2
    assert one_line_error(capsys) == f"tfprof-towers: error: variant file {path}: {message}"
    assert not out.exists()


@pytest.mark.parametrize("ok_source", [
    "from mylib import build_variant\n",
    "import functools\ndef _b(devices, k):\n    pass\nbuild_variant = functools.partial(_b, k=1)\n",
    "def build_variant(*args):\n    pass\n",
])
def test_callable_bindings_pass_the_pre_run_check(ok_source: str, tmp_path: Path) -> None:
    from tfprof_towers.variants.variant_files import check_variant_file

    path = tmp_path / "mine.py"
    path.write_text(ok_source)
    assert check_variant_file(path).name == "mine"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: (d / "loop").symlink_to("loop") or d / "loop",
         "a symbolic link loop (it leads back to itself)"),
        (lambda d: (d / "gone").symlink_to("nowhere") or d / "gone", "a symbolic link to nothing (nowhere)"),
        (lambda d: os.mkfifo(d / "fifo") or d / "fifo",
         "a FIFO (named pipe), not a trace file or a directory"),
        (lambda d: Path("/dev/null"), "a character device, not a trace file or a directory"),
    ],
)
def test_analyze_says_what_a_path_is(tmp_path: Path, make, message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path)
    assert main(["analyze", str(path)]) == 2
    assert one_line_error(capsys) == f"tfprof-towers: error: {path}: {message}"


def test_partial_after_the_parent_was_killed(tmp_path: Path) -> None:
    """run.json without an end time (the parent was SIGKILLed): the report says partial, and why."""
    run = replace(run_doc(["single", "towers_bug", "replicated"]), finished=None)
    rd = write_run(tmp_path / "run", run, [record("single")])
    (rd.variant_dir("towers_bug")).mkdir(parents=True)
    (rd.variant_dir("towers_bug") / "spec.json").write_text("{}")
    rd.stderr_txt("towers_bug").write_text(f"{ONEDNN}\nbuilding tower 1\n")
    summary, _ = analyze_run(rd)
    assert summary.partial is True
    entries = {e.name: e for e in summary.variants}
    assert entries["towers_bug"].error == (
        "did not finish: the profile stopped while it ran (run.json has no end time; killed?)")
    assert entries["towers_bug"].stderr_tail == "building tower 1"
    assert entries["replicated"].error == (
        "not run: the profile stopped first (run.json has no end time; killed?)")


# --------------------------------------------------------------------------- single.py


def test_a_file_named_like_a_builtin_says_it_is_not_the_builtin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "single.py"
    mine.write_text("def build_variant(devices):\n    pass\n")
    out = tmp_path / "run"
    assert main(["profile", "--variant-file", str(mine), "--project-on", "nope", "--out", str(out)]) == 2
    notice, error = capsys.readouterr().err.strip().splitlines()
    assert notice == (f"note: variant file {mine} is named like the built-in variant 'single' but is "
                      "your own: it runs as a user variant and not the baseline that speedups are "
                      "measured against")
    assert error.startswith("tfprof-towers: error: unknown hardware 'nope'")
    assert not out.exists()


def test_single_py_is_never_the_baseline(tmp_path: Path) -> None:
    """A variant file named ``single.py`` is never the baseline: a file's source is never "builtin"."""
    mine = record("single", median=0.01, source=f"file:{tmp_path}/single.py")
    run = RunDoc(config=RunConfig(accelerators=2))
    records = {"single": mine, "replicated": record("replicated", 0.005)}
    summary = build_summary(RunDir(tmp_path), run, records)
    assert [(e.name, e.baseline, e.speedup_vs_baseline) for e in summary.variants] == [
        ("single", False, None), ("replicated", False, None)]


# --------------------------------------------------------------------------- textcap


def test_clip_bytes_cuts_on_a_character_boundary() -> None:
    assert textcap.clip_bytes("é" * 10, 7) == "éé…"  # 2 x 2 bytes + 3 bytes of the ellipsis
    assert textcap.clip_bytes("abcdef", 5, keep="tail") == "…ef"
    assert textcap.one_line("a\n  b\tc", 100) == "a b c"


def test_tail_text_is_bounded_in_lines_and_bytes() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + "\n" + "y" * 10_000 + f"\n{ONEDNN}\n"
    tail = textcap.tail_text(text)
    lines = tail.splitlines()
    assert len(lines) == textcap.TAIL_MAX_LINES and lines[0] == "line 76"
    assert lines[-1] == "y" * (textcap.LINE_MAX_BYTES - 3) + "…"
    assert ONEDNN not in tail
    assert len(textcap.tail_text("z" * 300 + "\n" * 2, max_bytes=100, line_bytes=1000).encode()) == 0


def test_the_runner_writes_a_read_record_s_document_with_its_placement_as_read() -> None:
    """The parent rewrites each child's record with its wall time and files: the placement, plain JSON
    as read (most of a graph's record), goes through as it is, and the text is ``to_json()``'s."""
    from report_kit import variant_records

    from tfprof_towers.rundir.records import VariantRecord

    for name, doc in variant_records().items():
        rec = replace(VariantRecord.from_json(json.loads(json.dumps(doc))), wall_s=2.5, returncode=0)
        got = runner.read_record_doc(rec)
        assert json_text(got) == json_text(rec.to_json()), name
        assert got["placement"] is rec.placement and list(got) == list(rec.to_json())
    empty = VariantRecord.failed("x", "crashed", source="builtin", family="tf1-graph", stage="unknown")
    assert runner.read_record_doc(empty) == empty.to_json() and empty.to_json()["placement"] is None
