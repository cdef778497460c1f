"""`tfprof-towers analyze`: tables, --json, run directories, --html, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_kit import logical_cpu_trace, two_gpu_trace

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import write_json


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return two_gpu_trace().write(tmp_path / "host.xplane.pb")


def test_tables(trace_file: Path, capsys) -> None:
    assert main(["analyze", str(trace_file)]) == 0
    out = capsys.readouterr().out
    assert "steps: 2 (windows from step markers)" in out
    gpu0 = next(line for line in out.splitlines() if line.startswith("/device:GPU:0"))
    assert gpu0.split()[1:5] == ["500.0", "us", "150.0", "us"]  # step, then compute: 300 us over 2 steps
    assert "150.0 us 30.0%" in gpu0 and "215.0 us 43.0%" in gpu0
    assert any(line.split()[:3] == ["/device:GPU:0", "/device:GPU:1", "p2p"] for line in out.splitlines())


def test_json_document(trace_file: Path, capsys) -> None:
    assert main(["analyze", str(trace_file), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["source"], doc["steps"], doc["window"]) == (str(trace_file), 2, "markers")
    gpu0 = doc["devices"]["/device:GPU:0"]
    assert gpu0["window_s"] == pytest.approx(1000e-6)
    assert gpu0["total"]["h2d"] == {"count": 2, "seconds": pytest.approx(180e-6), "bytes": 3000}
    assert gpu0["wall"]["h2d"] == pytest.approx(70e-6) and gpu0["wall"]["idle"] == pytest.approx(430e-6)
    assert sum(gpu0["wall"].values()) == pytest.approx(gpu0["window_s"])
    link = next(li for li in doc["links"] if li["kind"] == "p2p")
    assert link == {
        "src": "/device:GPU:0",
        "dst": "/device:GPU:1",
        "kind": "p2p",
        "bytes": 4000,
        "count": 1,
        "seconds": pytest.approx(80e-6),
        "gbps": pytest.approx(0.05),
        "measured": True,
    }


def make_run_dir(root: Path) -> Path:
    """A run directory as the capture writes it: two variants, records with placement."""
    for name in ("single", "towers"):
        logical_cpu_trace().write_logdir(root / "tensorboard" / name, run="2024_05_01_10_00_00", host="vm")
        write_json(
            root / "variants" / name / "record.json",
            {
                "name": name,
                "status": "ok",
                "placement": {
                    "nodes": [
                        {"name": "x/_0", "type": "_Send", "device": "/device:CPU:0"},
                        {"name": "h/_2", "type": "_Send", "device": "/device:CPU:1"},
                        {"name": "mm", "type": "MatMul", "device": "/device:CPU:1"},
                    ],
                    "edges": [
                        {"src": "/device:CPU:0", "dst": "/device:CPU:1", "edge": "edge_1_x", "bytes": 4096},
                        {"src": "/device:CPU:1", "dst": "/device:CPU:0", "edge": "edge_2_h", "bytes": 128},
                    ],
                }
            },
        )
    write_json(
        root / "run.json",
        {
            "topology": {
                "kind": "logical-cpu",
                "host": "/device:CPU:0",
                "accelerators": ["/device:CPU:1", "/device:CPU:2"],
            }
        },
    )
    return root


def test_run_directory(tmp_path: Path, capsys) -> None:
    run = make_run_dir(tmp_path / "run")
    assert main(["analyze", str(run), "--json", "--run", "towers"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "/tensorboard/towers/" in doc["source"] and doc["kind"] == "logical-cpu"
    assert doc["devices"]["/device:CPU:1"]["total"]["host_compute"]["count"] == 2
    assert [(li["src"], li["bytes"], li["measured"]) for li in doc["links"]] == [
        ("/device:CPU:0", 8192, False),
        ("/device:CPU:1", 256, False),
    ]
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert "analysing single (choose with --run)" in out and "not measured" in out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope.xplane.pb", "no such file or directory"),
        (lambda p: _touch(p / "empty.xplane.pb", b""), "empty file"),
        (lambda p: _touch(p / "bad.xplane.pb", b"\xff" * 64), "not a readable XSpace trace"),
        (lambda p: _touch(p / "logdir" / "events.out", b"x").parent, "no profile found"),
        (lambda p: _touch(p / "x.xplane.riegeli", b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f"), "riegeli"),
    ],
)
def test_bad_input_one_line_nonzero(tmp_path: Path, capsys, make, message: str) -> None:
    code = main(["analyze", str(make(tmp_path))])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_unknown_variant(tmp_path: Path, capsys) -> None:
    run = make_run_dir(tmp_path / "run")
    assert main(["analyze", str(run), "--run", "missing"]) == 2
    assert "choose one of: single, towers" in capsys.readouterr().err


def test_html_needs_the_renderer_or_writes(trace_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "a.html"
    code = main(["analyze", str(trace_file), "--html", str(out)])
    err = capsys.readouterr().err
    try:
        import tfprof_towers.render.analysis_html  # noqa: F401
    except ImportError:
        assert code == 2 and "HTML renderer is not available" in err
    else:
        assert code == 0 and out.is_file()


def _touch(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
