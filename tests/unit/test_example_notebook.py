"""examples/notebook.py, the "In a notebook" walkthrough's script, on a run directory built in code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from report_kit import ACC0, HOST, make_run_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notebook.py"


@pytest.fixture(scope="module")
def notebook():
    spec = importlib.util.spec_from_file_location("notebook_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_loads_groups_and_plots_when_it_can(notebook, tmp_path: Path, capsys) -> None:
    run = make_run_dir(tmp_path / "run")
    png = tmp_path / "wall.png"
    assert notebook.main([str(run), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"<Profile run '{run}': single, towers_bug, broken>")
    assert "[high] towers_bug: host_compute" in out
    assert "moved/Unique" in out and "1 node(s) placed elsewhere" in out  # asked for ACC0, ran on the host
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed: no plot" in out and not png.exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wall_per_step_is_milliseconds_per_step(notebook, tmp_path: Path) -> None:
    import tfprof_towers as tt

    p = tt.load(make_run_dir(tmp_path / "run"))
    table = notebook.wall_per_step(p)
    # report_kit: each node runs 200 ns per step on its device's thread; the single's MatMul on ACC0
    assert table.loc[("single", ACC0), "host_compute"] == pytest.approx(200e-6)
    same = tt.frames.per_step(p.wall, ["device", "category"]).set_index(["variant", "device", "category"])
    assert table.loc[("towers_bug", HOST), "idle"] == pytest.approx(
        same.loc[("towers_bug", HOST, "idle"), "seconds"] * 1e3)
    assert "compute" not in table.columns  # no category without time
