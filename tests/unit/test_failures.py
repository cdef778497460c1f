"""Failures that say what happened (no TensorFlow child, no subprocess of the tool).

Each test is one case a user ran: a model whose loss is NaN, inputs that must be refused up
front, a disk that fills during the run.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from child_kit import one_line_error
from records_kit import record, run_doc, write_run

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import MathCheck, load_record

NAN_FINDING = "loss is NaN at step 1 (the model diverges or its inputs hold NaN); timings are still valid"
LOSSES = (0.47490591, 0.47462937)
NORM = 0.14417072


def strict_loads(text: str) -> object:
    """``json.loads`` that fails on ``NaN``/``Infinity`` (not strict JSON)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def by_name(summary: dict) -> dict[str, dict]:
    return {v["name"]: v for v in summary["variants"]}


# --------------------------------------------------------------------------- a NaN loss


def nan_run(tmp_path: Path, diverged: tuple[str, ...] = ("replicated",)) -> RunDir:
    names = ["single", "replicated", "towers_host_vars"]
    recs = []
    for i, n in enumerate(names):
        math_check = (MathCheck((math.nan, math.nan), math.nan) if n in diverged
                      else MathCheck(LOSSES, NORM))
        # the diverged variant is the fastest: the recommendation must still pass it over
        recs.append(replace(record(n, median=0.01 if n in diverged else 0.02 + 0.01 * i), math=math_check))
    return write_run(tmp_path / "run", run_doc(names), recs)


def test_a_nan_loss_is_written_as_null_plus_a_flag_and_read_back(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    text = rd.record_json("replicated").read_text()
    doc = strict_loads(text)
    assert doc["math"] == {"losses": [None, None], "grad_norm": None,
                           "not_finite": {"losses[0]": "NaN", "losses[1]": "NaN", "grad_norm": "NaN"}}
    rec = load_record(rd, "replicated")
    assert rec.status == "ok", rec.error
    assert all(math.isnan(x) for x in (*rec.math.losses, rec.math.grad_norm))
    assert rec.timings.step_time_s.median == 0.01


def test_a_null_loss_without_its_flag_is_still_a_wrongly_typed_record(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    path = rd.record_json("replicated")
    doc = json.loads(path.read_text())
    del doc["math"]["not_finite"]
    path.write_text(json.dumps(doc))
    rec = load_record(rd, "replicated")
    assert rec.status == "failed"
    assert rec.error == "record.json is invalid: math.losses[0] must be a number, not null"


def test_report_keeps_a_nan_variant_with_its_timings_and_finds_the_nan(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    assert main(["report", str(rd.root)]) == 0
    summary = strict_loads((rd.root / "summary.json").read_text())
    nan = by_name(summary)["replicated"]
    assert nan["status"] == "ok" and nan["step_time_s"]["median"] == 0.01
    assert nan["losses"] == [None, None]
    assert nan["not_finite"] == {"losses[0]": "NaN", "losses[1]": "NaN", "grad_norm": "NaN"}
    found = [f for f in summary["findings"] if f["variant"] == "replicated"]
    assert [(f["rule"], f["severity"], f["message"]) for f in found] == [
        ("changed_math", "high", NAN_FINDING)]
    # the math check shows it, the others are compared with the baseline as before
    rows = {r["variant"]: r for r in summary["math"]["variants"]}
    assert rows["replicated"]["status"] == "differs" and rows["replicated"]["why"] == "loss is NaN at step 1"
    assert rows["towers_host_vars"]["status"] == "same" and rows["single"]["status"] == "reference"
    # the fastest, but its math differs: passed over, as any variant whose math differs
    assert summary["recommendation"]["variant"] != "replicated"
    assert "replicated" in summary["recommendation"]["excluded"]
    html = (rd.root / "report.html").read_text()
    assert ">NaN</td>" in html


def test_when_every_variant_diverges_each_has_the_finding_and_there_is_no_reference(tmp_path: Path) -> None:
    rd = nan_run(tmp_path, diverged=("single", "replicated", "towers_host_vars"))
    assert main(["report", str(rd.root)]) == 0
    summary = strict_loads((rd.root / "summary.json").read_text())
    assert {v["status"] for v in summary["variants"]} == {"ok"}
    assert sorted(f["variant"] for f in summary["findings"] if f["message"] == NAN_FINDING) == [
        "replicated", "single", "towers_host_vars"]
    assert summary["math"]["reference"] is None
    assert {r["status"] for r in summary["math"]["variants"]} == {"differs"}


def test_a_cluster_task_record_with_a_nan_loss_is_strict_and_read_back(tmp_path: Path) -> None:
    from tfprof_towers.capture.cluster.coord import write_marker
    from tfprof_towers.capture.cluster.docs import TaskRecord

    path = tmp_path / "record.json"
    write_marker(path, {"task": "worker:0", "status": "ok", "step_times_s": [0.1],
                        "math": MathCheck((math.nan, 1.0), math.inf).to_json(), "stray": math.nan})
    doc = strict_loads(path.read_text())
    rec = TaskRecord.from_json(doc)
    assert math.isnan(rec.math.losses[0]) and rec.math.losses[1] == 1.0 and rec.math.grad_norm == math.inf
    assert doc["stray"] is None


def test_a_task_record_that_cannot_be_read_is_named_with_why(tmp_path: Path) -> None:
    from tfprof_towers.capture.cluster.attempt import record_problem
    from tfprof_towers.capture.cluster.docs import task_dir
    from tfprof_towers.capture.cluster.spec import TaskId

    class A:  # the attempt's folder is all record_problem reads
        folder = tmp_path

    bad = task_dir(tmp_path, TaskId.parse("worker:1"))
    bad.mkdir(parents=True)
    (bad / "record.json").write_text('{"task": "worker:1", "status": "ok", "math": {"losses": [NaN]}}')
    assert record_problem(A(), "worker:0") == "worker:0 wrote no record"
    assert record_problem(A(), "worker:1") == (
        "worker:1's record.json is invalid: record.json: math.losses[0] must be a finite number, "
        "not the number nan")


# --------------------------------------------------------------------------- refused up front


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("jobs", "message"), [
    ({"chief": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"]},
     "no 'worker' job (it has chief, ps); a cluster run needs at least one worker task"),
    ({"worker": ["127.0.0.1:2222", "no-such-host.invalid:2223"]},
     "the host name 'no-such-host.invalid' of worker:1 does not resolve"),
])
def test_a_cluster_file_that_cannot_run_is_refused_before_the_run_directory(
    jobs: dict, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(tmp_path / "cluster.json", json.dumps(jobs))
    out = tmp_path / "runs" / "run"
    assert main(["profile", "--preset", "tiny", "--cluster", str(spec), "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"tfprof-towers: error: {spec}: {message}"), err
    assert not (tmp_path / "runs").exists()


def test_worker_refuses_a_run_dir_that_is_a_file_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfprof_towers.capture.cluster import worker

    monkeypatch.setattr(worker, "FIRST_ATTEMPT_WAIT_S", 0.3)  # before the fix: it waited for attach.json
    spec = write(tmp_path / "cluster.json", json.dumps({"worker": ["127.0.0.1:2222"]}))
    not_dir = write(tmp_path / "run", "not a directory")
    assert main(["worker", "--cluster", str(spec), "--task", "worker:0", "--run-dir", str(not_dir)]) == 2
    assert one_line_error(capsys) == (
        f"tfprof-towers: error: --run-dir {not_dir}: not a directory (give the run directory of "
        "`tfprof-towers profile --cluster FILE --out DIR`)")


def test_worker_says_what_it_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfprof_towers.capture.cluster import worker

    monkeypatch.setattr(worker, "FIRST_ATTEMPT_WAIT_S", 0.3)
    spec = write(tmp_path / "cluster.json", json.dumps({"worker": ["127.0.0.1:2222"]}))
    run = tmp_path / "not-yet"
    assert main(["worker", "--cluster", str(spec), "--task", "worker:0", "--run-dir", str(run)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"tfprof-towers worker worker:0: waiting for {run / 'attach.json'} (up to 0.3 s)"
    assert len(lines) == 2 and lines[1].startswith(f"tfprof-towers: error: {run}: no spec.json")


@pytest.mark.parametrize(("line", "shown"), [
    ("GLOBAL_BATCH_SIZE = 0", "0"), ("GLOBAL_BATCH_SIZE = -4", "-4"), ('GLOBAL_BATCH_SIZE = "32"', "'32'"),
    ("GLOBAL_BATCH_SIZE = 2.0", "2.0"), ("BATCH, DIM = 4, 16\nGLOBAL_BATCH_SIZE = BATCH - 4", "0"),
])
def test_a_keras_global_batch_size_that_is_not_a_positive_int_is_refused_before_any_child(
    line: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write(tmp_path / "model.py", f"{line}\n\ndef build_model():\n    pass\n\n\n"
                                         "def make_dataset(global_batch_size):\n    pass\n")
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--keras-model", str(model), "--variants", "one_device",
                 "--out", str(out)]) == 2
    assert one_line_error(capsys) == (f"tfprof-towers: error: keras model file {model}: GLOBAL_BATCH_SIZE "
                                      f"must be a positive int, got {shown}")
    assert not out.exists()


def test_a_keras_global_batch_size_known_only_at_run_time_is_left_to_the_child(tmp_path: Path) -> None:
    from tfprof_towers.variants.variant_files import check_keras_file

    model = write(tmp_path / "model.py", "import os\nGLOBAL_BATCH_SIZE = int(os.environ.get('B', 8))\n"
                                         "def build_model(): pass\ndef make_dataset(n): pass\n")
    assert check_keras_file(model) == str(model.resolve())


@pytest.mark.parametrize("bad", [-0.001, 0.0, 1e308])
def test_a_step_time_that_is_not_a_positive_duration_is_a_wrongly_typed_record(
    bad: float, tmp_path: Path
) -> None:
    names = ["single", "replicated"]
    rd = write_run(tmp_path / "run", run_doc(names), [record("single", 0.02), record("replicated", 0.01)])
    path = rd.record_json("replicated")
    doc = json.loads(path.read_text())
    doc["timings"]["step_time_s"]["median"] = bad
    path.write_text(json.dumps(doc))
    assert main(["report", str(rd.root)]) == 0
    summary = strict_loads((rd.root / "summary.json").read_text())
    entry = by_name(summary)["replicated"]
    assert entry["status"] == "failed" and entry["error"] == (
        "record.json is invalid: timings.step_time_s.median must be a positive number of seconds "
        f"(at most 1e+07), not the number {bad!r}")
    assert summary["recommendation"]["variant"] == "single"
    assert by_name(summary)["single"]["speedup_vs_single"] == 1.0


def test_a_negative_step_in_the_raw_list_is_named_too(tmp_path: Path) -> None:
    rd = write_run(tmp_path / "run", run_doc(["single"]), [record("single", 0.02)])
    path = rd.record_json("single")
    doc = json.loads(path.read_text())
    doc["timings"]["step_times_s"] = [0.02, -1.0]
    path.write_text(json.dumps(doc))
    assert load_record(rd, "single").error == (
        "record.json is invalid: timings.step_times_s[1] must be a positive number of seconds (at most "
        "1e+07), not the number -1.0")


@pytest.mark.parametrize("bidi", ["\u202a", "\u202e", "\u2066", "\u2069"])
def test_a_hardware_name_with_bidi_controls_is_refused(
    bidi: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfprof_towers.projection.hardware import HardwareError, builtin_dir, load_file

    text = (builtin_dir() / "2x-gtx1060-pcie3.toml").read_text()
    text = text.replace('name = "2x-gtx1060-pcie3"', f'name = "evil{bidi}3e"', 1)
    path = write(tmp_path / "box.toml", text)
    message = (f"{path}: 'name' must not hold bidirectional control characters (it holds "
               f"U+{ord(bidi):04X}, which reorders the text printed after it)")
    with pytest.raises(HardwareError) as err:
        load_file(path)
    assert str(err.value) == message
    assert main(["hardware", str(path), "--json"]) == 2
    assert one_line_error(capsys) == f"tfprof-towers: error: {message}"


def test_report_says_on_the_terminal_that_it_skipped_run_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rd = write_run(tmp_path / "run", run_doc(["single"]), [record("single", 0.02)])
    doc = json.loads(rd.run_json.read_text())
    doc["started"] = 12
    rd.run_json.write_text(json.dumps(doc))
    assert main(["report", str(rd.root)]) == 0
    err = capsys.readouterr().err
    assert f"note: {rd.run_json}: started must be a string, not the number 12; run.json was skipped\n" in err


# --------------------------------------------------------------------------- a disk that fills during the run

STOPPED = "no space left on device while writing variants/single/spec.json"


def test_a_disk_that_fills_during_the_run_says_so_in_run_json_and_report_names_it_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real tmpfs that fills up once the run has started (run.json written, no variant yet)."""
    from child_kit import ok_child, tmpfs, use_python

    from tfprof_towers.session import profile

    use_python(monkeypatch, ok_child(tmp_path))
    real_run_all = profile.run_all

    def fill_then_run(opts, run_dir, hook=None):
        with open(run_dir.root / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 2**20)
        return real_run_all(opts, run_dir, hook)

    monkeypatch.setattr(profile, "run_all", fill_then_run)
    with tmpfs(tmp_path / "mnt", "80m") as mnt:
        out = mnt / "run"
        argv = ["profile", "--preset", "tiny", "--variants", "single,towers_host_vars", "--out", str(out)]
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "No space left on device" in captured.err.strip().splitlines()[-1]
        assert "summary:" not in captured.out and not (out / "summary.json").exists()
        assert "killed?" not in captured.out and "not run" not in captured.out
        run = strict_loads((out / "run.json").read_text())
        assert run.get("stopped") == STOPPED and run["finished"], (run, captured.out, captured.err)
        (out / "filler").unlink()  # space comes back: report names the cause
        assert main(["report", str(out)]) == 4
        summary = strict_loads((out / "summary.json").read_text())
    assert {v["name"]: v["error"] for v in summary["variants"]} == {
        "single": f"stopped: {STOPPED}", "towers_host_vars": f"stopped: {STOPPED}"}


def test_save_json_falls_back_to_the_old_file_s_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from tfprof_towers.rundir import paths

    path = tmp_path / "run.json"
    paths.write_json(path, {"started": "x", "config": {"variants": ["a" * 50]}})
    size = path.stat().st_size

    def full(p, doc):
        raise OSError(errno.ENOSPC, "No space left on device", str(p))

    monkeypatch.setattr(paths, "write_json", full)
    doc = {"started": "x", "config": {"variants": ["a" * 50]}, "stopped": "full"}
    assert paths.save_json(path, doc)
    assert json.loads(path.read_text()) == doc
    assert path.stat().st_size == size
    too_big = {"started": "x" * 1000, "stopped": "full"}
    assert paths.save_json(path, too_big, smallest={"stopped": "full"})
    assert json.loads(path.read_text()) == {"stopped": "full"}
    assert not paths.save_json(path, too_big)


def test_out_on_a_nearly_full_disk_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=5 * 2**20))
    out = tmp_path / "a" / "b" / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--out", str(out)]) == 2
    assert "only 5.0 MiB free on its filesystem" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []
    reports = tmp_path / "reports"  # the default place: reports/<stamp>/ goes too
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--reports", str(reports)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_before_run_json_leaves_no_empty_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfprof_towers.session import profile

    def ctrl_c(options):
        raise KeyboardInterrupt

    monkeypatch.setattr(profile, "start_run_doc", ctrl_c)
    out = tmp_path / "runs" / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--out", str(out)]) == 130
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "mine"  # an empty --out the user made stays
    existing.mkdir()
    assert main(["profile", "--preset", "tiny", "--variants", "single", "--out", str(existing)]) == 130
    assert existing.is_dir() and list(existing.iterdir()) == []
