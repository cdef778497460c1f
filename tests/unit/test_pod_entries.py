"""A pod's folder as a careless copy leaves it: host files whose names give one host name, and stray
entries named like a trace (trace/locate.py, trace/hosts.py, trace/executors.py).

* two files that map to one host (``10.0.0.1:2222`` and ``10.0.0.1_2222``; ``h0.xplane.pb`` and
  ``h0.xplane.pb.xplane.pb``) are two hosts with distinct names and devices, said in a note; never one
  host's devices added together, never a crash;
* a dangling link, a folder, a FIFO or a device named ``*.xplane.pb`` among good hosts is one host
  that could not be read -- named, the rest analysed, exit 7 -- like an empty file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_pod import host

from tfprof_towers.cli import main
from tfprof_towers.trace.executors import analyze_pod
from tfprof_towers.trace.hosts import host_prefixes, load_hosts
from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS


def write_hosts(root: Path, names: list[str]) -> Path:
    """Host ``i`` of :func:`test_pod.host` written as ``root/names[i]``."""
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        host(i, compute_us=300 + 10 * i).write(root / name)
    return root


@pytest.mark.parametrize("names", [
    ["10.0.0.1:2222.xplane.pb", "10.0.0.1_2222.xplane.pb"],
    ["h0.xplane.pb", "h0.xplane.pb.xplane.pb"],
    ["h0.xplane.pb", "h0.xplane.pb.xplane.pb", "h0~2.xplane.pb", "h0_2.xplane.pb"],
])
def test_files_of_one_host_name_are_distinct_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    names: list[str]) -> None:
    root = write_hosts(tmp_path / "pod", names)
    pod = analyze_pod(root, executor="serial")
    doc = pod.to_doc()
    hosts = [r.name for r in pod.results]
    assert len(set(hosts)) == len(names)
    gpus = [d for d in doc["devices"] if d.endswith("/device:GPU:0")]
    assert len(gpus) == len(names)  # one GPU per host, none added to another's
    # each GPU computes for its own host's 300 + 10 i us per step, 3 steps
    computes = sorted(round(doc["devices"][g]["wall"]["compute"] * 1e6) for g in gpus)
    assert computes == [3 * (300 + 10 * i) for i in range(len(names))]
    assert any("told apart" in n for n in doc["notes"])

    capsys.readouterr()
    assert main(["analyze", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "told apart" in out

    # the merged events (load().events): as many tasks as hosts
    trace = load_hosts(root)
    assert len({h.task for h in trace.hosts}) == len(names)


def test_host_names_and_prefixes_are_distinct() -> None:
    from tfprof_towers.trace.locate import host_names

    files = [Path(n) for n in ("h0.xplane.pb.xplane.pb", "h0.xplane.pb", "h0.xplane.riegeli", "h1.xplane.pb")]
    names, notes = host_names(files)
    assert names == ["h0.xplane.pb", "h0", "h0.xplane.riegeli", "h1"]
    assert len(notes) == 1 and "h0.xplane.pb.xplane.pb is host h0.xplane.pb" in notes[0]
    assert host_names([Path(".xplane.pb"), Path("h0.xplane.pb")])[0] == [".xplane.pb", "h0"]  # no empty name
    files = [Path("a:1.xplane.pb"), Path("a_1.xplane.pb"), Path("a_1_2.xplane.pb")]
    prefixes, notes = host_prefixes(files, None)
    assert prefixes == ["/job:a_1/task:0", "/job:a_1_3/task:0", "/job:a_1_2/task:0"]
    assert any("told apart" in n for n in notes)
    # two files a run maps to one task
    prefixes, _ = host_prefixes([Path("x.xplane.pb"), Path("y.xplane.pb")],
                                {"x": "/job:worker/task:0", "y": "/job:worker/task:0"})
    assert prefixes == ["/job:worker/task:0", "/job:worker_2/task:0"]


def stray_pod(root: Path, kind: str) -> Path:
    write_hosts(root, ["h0.xplane.pb", "h1.xplane.pb", "h3.xplane.pb"])
    bad = root / "h2.xplane.pb"
    if kind == "dangling":
        bad.symlink_to(root / "gone")
    elif kind == "folder":
        bad.mkdir()
    elif kind == "fifo":
        os.mkfifo(bad)
    elif kind == "device":
        bad.symlink_to("/dev/null")
    elif kind == "loop":
        bad.symlink_to(bad)
    else:
        bad.write_bytes(b"")
    return root


@pytest.mark.parametrize("kind, why", [
    ("dangling", "a symbolic link to nothing"), ("folder", "a directory"), ("fifo", "a FIFO"),
    ("device", "a character device"), ("loop", "a symbolic link loop"), ("empty", "empty"),
])
def test_a_stray_entry_is_one_host_that_could_not_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           kind: str, why: str) -> None:
    root = stray_pod(tmp_path / "pod", kind)
    pod = analyze_pod(root, executor="serial")
    assert [r.name for r in pod.results] == ["h0", "h1", "h3"]
    [failed] = pod.failures
    assert failed.name == "h2" and why in failed.reason

    capsys.readouterr()
    assert main(["analyze", str(root), "--json"]) == EXIT_SOME_HOSTS
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["hosts"] == 4 and [f["host"] for f in doc["failed_hosts"]] == ["h2"]
    assert len([d for d in doc["devices"] if d.endswith("GPU:0")]) == 3
    assert "Traceback" not in err and f"host h2: could not be read: {failed.reason}" in err


def test_a_stray_entry_alone_is_still_refused(tmp_path: Path) -> None:
    root = tmp_path / "pod"
    root.mkdir()
    os.mkfifo(root / "h0.xplane.pb")
    assert main(["analyze", str(root)]) == 2


def test_one_trace_of_a_folder_is_never_a_stray_entry(tmp_path: Path) -> None:
    from tfprof_towers.trace.locate import locate

    root = write_hosts(tmp_path / "pod", ["h1.xplane.pb"])
    (root / "h0.xplane.pb").mkdir()  # sorts first
    file, notes = locate(root)
    assert file == root / "h1.xplane.pb" and "using h1" in notes[-1]
