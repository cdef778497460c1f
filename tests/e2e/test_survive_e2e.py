"""Runs that survive, with real TensorFlow children on the tiny preset: a signal after the first
variant, corrupt or missing records at `report`, a hanging variant file, the parent SIGKILLed, a
json.py where the user stands, sys.exit and KeyboardInterrupt in a variant, and `project` building
each variant alone under the run's timeout.

The same cases with stand-in children (shell scripts, no TensorFlow) are in tests/unit/test_survive.py
and tests/unit/test_robust.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_kit import (
    alive,
    processes_using,
    read_pids,
    wait_until,
)

from tfprof_towers.cli import main
from tfprof_towers.procs.proctree import descendants
from tfprof_towers.rundir.paths import RunDir

#: How the slow tests start the real command (a separate process, so signals are real).
CLI = (sys.executable, "-m", "tfprof_towers")


# --------------------------------------------------------------------------- real runs (slow)


def _spawn_profile(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "profile", "--preset", "tiny", "--variants", "single,towers_host_vars,replicated",
         "--out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _first_done_second_started(out: Path) -> bool:
    rec = out / "variants" / "single" / "record.json"
    try:
        done = "wall_s" in json.loads(rec.read_text())  # the parent has finished with it
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return done and (out / "variants" / "towers_host_vars" / "spec.json").is_file()


def _child_running(out: Path, name: str) -> bool:
    """The variant's capture child runs: a process names its spec.json (started fresh) or its guard
    holds its stderr.txt open (forked from the fork server, or fresh): a state, not a time."""
    return bool(processes_using(out / "variants" / name / "spec.json")
                or processes_using(out / "variants" / name / "stderr.txt"))


def _processes_mentioning(text: str) -> list[int]:
    """Processes that name ``text`` or hold a file under it open (forked children included)."""
    return sorted(processes_using(text))


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_after_the_first_variant_writes_a_partial_report(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    out = tmp_path / "run"
    proc = _spawn_profile(out)
    try:
        # states, not times (a loaded machine may take any time between them): the first variant is
        # done and the second one's child runs (importing TensorFlow, far from finishing)
        wait_until(lambda: _first_done_second_started(out) or proc.poll() is not None, 600,
                   "the first variant to finish")
        wait_until(lambda: _child_running(out, "towers_host_vars") or proc.poll() is not None, 600,
                   "the second variant's child to start")
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert "interrupted: wrote a partial report from 1 finished variant(s)" in stderr
    assert "partial run" in stdout
    assert not _processes_mentioning(str(out))  # the running child was stopped
    run_doc = json.loads((out / "run.json").read_text())
    assert run_doc["interrupted"] is True and run_doc["interrupted_by"] == sig.name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True
    by_name = {v["name"]: v for v in summary["variants"]}
    assert by_name["single"]["status"] == "ok"
    assert by_name["towers_host_vars"]["error"] == f"interrupted by {sig.name} before it finished"
    assert by_name["replicated"]["error"] == "not run: the profile was interrupted first"
    assert summary["ranking"][0] == "single"
    assert RunDir(out).xplane_files("single")  # the finished variant keeps its trace
    report = out / "report.html"
    if report.is_file():  # the HTML renderer is another module; when present it says "partial"
        assert "partial" in report.read_text().lower()


@pytest.mark.slow
def test_corrupt_and_missing_records_are_named_and_the_rest_render(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    rec = run / "variants" / "towers_bug" / "record.json"
    rec.write_text(rec.read_text()[:200])  # a half-written record, as a crash without atomic writes leaves
    (run / "variants" / "replicated" / "record.json").unlink()
    (run / "summary.json").unlink()
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    by_name = {v["name"]: v for v in summary["variants"]}
    assert by_name["towers_bug"]["status"] == "failed"
    assert "record.json is unreadable" in by_name["towers_bug"]["error"]
    assert "corrupt JSON" in by_name["towers_bug"]["error"]
    assert by_name["replicated"]["error"] == "record.json is missing"
    assert [n for n, v in by_name.items() if v["status"] == "ok"] == [
        "single", "towers_host_vars", "towers_accel0_vars"
    ]
    assert "towers_bug" in out and "corrupt JSON" in out
    assert summary["recommendation"]["variant"] in ("single", "towers_host_vars", "towers_accel0_vars")


HANGS = """
import signal, subprocess, time

def build_variant(devices):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL will do
    grandchild = subprocess.Popen(["sleep", "600"])  # inherits the ignored SIGTERM
    with open({pids!r}, "w") as fh:
        fh.write(f"{{__import__('os').getpid()}} {{grandchild.pid}}")
    time.sleep(600)
"""


#: The hanging variant's timeout, counted from its guard's start: the child is forked from the fork
#: server, which imported TensorFlow before (``single`` ran first), so only importing the file and
#: reaching ``build_variant`` count; 25 s leaves a loaded machine room even for a child started fresh
#: (12 s did not, when every child imported TensorFlow itself: 8-15 s on a busy 2-core machine).
HANG_TIMEOUT_S = 25


@pytest.mark.slow
def test_hanging_variant_file_is_killed_with_its_process_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = tmp_path / "pids"
    variant = tmp_path / "hangs.py"
    variant.write_text(HANGS.format(pids=str(pids)))
    out = tmp_path / "run"
    t0 = time.monotonic()
    code = main(["profile", "--preset", "tiny", "--variants", "single", "--variant-file", str(variant),
                 "--variant-timeout", str(HANG_TIMEOUT_S), "--out", str(out)])
    took = time.monotonic() - t0
    assert code == 0
    assert pids.is_file(), "stopped before build_variant ran: the timeout did not cover TensorFlow's import"
    child, grandchild = read_pids(pids)
    assert not alive(child) and not alive(grandchild)
    summary = json.loads((out / "summary.json").read_text())
    by_name = {v["name"]: v for v in summary["variants"]}
    assert by_name["hangs"]["error"] == f"timed out after {HANG_TIMEOUT_S} s (killed with its process group)"
    assert by_name["single"]["status"] == "ok"
    assert took < 540  # bounded: not the variant's 600 s (a bound that does not time the machine)


# --------------------------------------------------------------------------- clumsy use, real variants (slow)

#: A variant that hangs: it sleeps for ten minutes once TensorFlow is imported.
SLEEPS = """
import os, time

def build_variant(devices):
    with open({pids!r}, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)
"""

#: A variant whose grandchild leaves the process group and session (setsid); both ignore SIGTERM.
SETSID = """
import os, signal, subprocess, sys, time

ESCAPE = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.setsid(); "
          "time.sleep(600)")

def build_variant(devices):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c", ESCAPE])
    while os.getsid(grandchild.pid) != grandchild.pid:  # until it has its own session
        time.sleep(0.01)
    with open({pids!r}, "w") as fh:
        fh.write(f"{{os.getpid()}} {{grandchild.pid}}")
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("source", [SLEEPS, SETSID], ids=["sleeps", "setsid-grandchild"])
def test_parent_sigkill_leaves_no_process_of_the_run(tmp_path: Path, source: str) -> None:
    """kill -9 of `profile` while a variant hangs (no timeout): 15 s later nothing of the run is alive,
    and `report` calls the run partial (run.json has no end time)."""
    pids = tmp_path / "pids"
    variant = tmp_path / "hangs.py"
    variant.write_text(source.format(pids=str(pids)))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*CLI, "profile", "--preset", "tiny", "--variant-file", str(variant), "--variant-timeout", "none",
         "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_until(lambda: (pids.is_file() and pids.read_text().strip() != "") or proc.poll() is not None,
                   600, "the variant to start hanging")
        assert proc.poll() is None
        of_the_run = set(descendants(proc.pid)) | set(read_pids(pids))
        assert len(of_the_run) >= 2  # the guard and the child at least
        proc.kill()  # SIGKILL: no handler of ours runs
        proc.wait()
        wait_until(lambda: not any(alive(p) for p in of_the_run), 15, "every process of the run to die")
        assert not _processes_mentioning(str(out))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert json.loads((out / "run.json").read_text())["finished"] is None
    assert main(["report", str(out)]) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True
    [entry] = summary["variants"]
    assert entry["error"] == (
        "did not finish: the profile stopped while it ran (run.json has no end time; killed?)")
    assert "its parent process went away" in entry["stderr_tail"]


@pytest.mark.slow
def test_a_json_py_where_the_user_stands_shadows_nothing(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("tfprof-towers")
    (tmp_path / "json.py").write_text("raise SystemExit('the json.py of the working directory')\n")
    out = tmp_path / "run"
    done = subprocess.run([str(exe), "profile", "--preset", "tiny", "--variants", "single",
                           "--out", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["variants"][0]["status"] == "ok"


EXITS = """
import sys

def build_variant(devices):
    sys.exit(0)
"""

RAISES_KEYBOARD_INTERRUPT = """
def build_variant(devices):
    raise KeyboardInterrupt
"""


@pytest.mark.slow
def test_sys_exit_and_keyboard_interrupt_in_a_variant_say_so(tmp_path: Path) -> None:
    files = []
    for name, text in (("exits", EXITS), ("ctrl_c", RAISES_KEYBOARD_INTERRUPT)):
        files += ["--variant-file", str(tmp_path / f"{name}.py")]
        (tmp_path / f"{name}.py").write_text(text)
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", *files, "--out", str(out)]) == 4
    errors = {v["name"]: v["error"] for v in json.loads((out / "summary.json").read_text())["variants"]}
    assert errors == {
        "exits": "exited with code 0 before finishing (sys.exit during build)",
        "ctrl_c": "KeyboardInterrupt raised by the variant's own code during build (no signal was sent)",
    }


BLOCKS_WHILE_BUILDING = """
import threading

def build_variant(devices):
    threading.Event().wait()  # blocks: only the timeout ends it, however fast the machine
"""

FAILS_WHILE_BUILDING = """
import os

def build_variant(devices):
    os.abort()
"""


#: The run's variant timeout in the test below: room to build ``single`` on a loaded machine (each
#: builder is forked from the fork server, which imported TensorFlow before any deadline started;
#: 45 s also leaves room for the import where a builder starts fresh).
TIMEOUT_S = 45.0


@pytest.mark.slow
def test_project_builds_each_variant_alone_with_the_runs_timeout(tmp_path: Path) -> None:
    """`project RUN_DIR`: a variant that blocks while building times out after the run's own timeout,
    one that crashes says so (not TensorFlow's oneDNN line), and the others are projected.

    The run's timeout leaves a loaded 2-core machine room to build ``single`` (and to import
    TensorFlow where a builder starts fresh; 8 s did not); only ``blocks``, which never
    returns, may reach it."""
    from records_kit import TINY, record, write_run

    from tfprof_towers.rundir.records import RunConfig, RunDoc
    from tfprof_towers.variants.config import VariantSpec

    specs = [VariantSpec.builtin("single")]
    for name, text in (("blocks", BLOCKS_WHILE_BUILDING), ("aborts", FAILS_WHILE_BUILDING)):
        (tmp_path / f"{name}.py").write_text(text)
        specs.append(VariantSpec(name, str(tmp_path / f"{name}.py")))
    run = RunDoc(started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:01:00+00:00",
                 config=RunConfig(preset=TINY, variants=tuple(specs), variant_timeout_s=TIMEOUT_S))
    rd = write_run(tmp_path / "run", run, [record("single")])
    t0 = time.monotonic()
    assert main(["project", str(rd.root), "--hardware", "2x-gtx1060-pcie3", "--json"]) == 0
    took = time.monotonic() - t0
    doc = json.loads((rd.root / "projection.json").read_text())
    errors = {v["name"]: v.get("error") for v in doc["variants"]}
    assert errors["single"] is None and doc["ranking"] == ["single"]
    assert errors["blocks"] == f"building the graph timed out after {TIMEOUT_S:g} s"
    assert errors["aborts"].startswith("building the graph failed: ")
    assert "oneDNN" not in errors["aborts"] and "I0000" not in errors["aborts"]
    assert took < 600  # the run's timeout, each variant alone: not the 900 s of one shared child
