"""The import contract (tests/import_contract.py, drawn in ARCHITECTURE.md): nothing imports up the
stack, TensorFlow only where graphs are built and run, and no import circle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from import_contract import HEAVY, LAYERS, ROOT, RUN_SIDE, cycles, imported_by, module_graph, violations


def test_the_package_keeps_the_contract() -> None:
    assert violations() == []


def test_the_package_has_no_import_circle() -> None:
    assert cycles(module_graph()) == []


def test_every_folder_of_the_package_is_a_layer() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - set(LAYERS) == {"testing"}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tfprof_towers"
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns("__pycache__", "*.toml", "templates", "static"))
    return dst


def test_a_planted_upward_import_is_caught(copy: Path) -> None:
    target = copy / "trace" / "steps.py"
    target.write_text(target.read_text() + "\nfrom tfprof_towers.advice import findings  # planted\n")
    found = violations(copy)
    assert len(found) == 1
    assert found[0].startswith("tfprof_towers/trace/steps.py:") and "trace imports advice" in found[0]


def test_a_planted_relative_upward_import_is_caught(copy: Path) -> None:
    target = copy / "xplane" / "wire.py"
    target.write_text(target.read_text() + "\nfrom ..trace import load  # planted\n")
    assert [v for v in violations(copy) if "xplane imports trace" in v]


def test_tensorflow_outside_capture_is_caught(copy: Path) -> None:
    target = copy / "render" / "html.py"
    target.write_text(target.read_text() + "\n\ndef f():\n    import tensorflow  # planted, even lazily\n")
    assert [v for v in violations(copy) if v.startswith("tfprof_towers/render/html.py:")
            and "imports TensorFlow" in v]


def test_the_tool_importing_testing_is_caught(copy: Path) -> None:
    target = copy / "trace" / "load.py"
    target.write_text(target.read_text() + "\nfrom tfprof_towers.testing import synth  # planted\n")
    assert [v for v in violations(copy) if "the tool imports testing" in v]


def test_a_planted_circle_is_found(copy: Path) -> None:
    target = copy / "trace" / "codes.py"
    target.write_text(target.read_text() + "\nfrom tfprof_towers.trace import steps  # planted\n")
    assert ["trace.codes", "trace.steps"] in cycles(module_graph(copy))


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tfprof_towers.testing.synth import copy_heavy_trace

    path = tmp_path_factory.mktemp("trace") / "host.xplane.pb"
    path.write_bytes(copy_heavy_trace(3000).to_bytes())
    return path


def test_analyze_json_imports_nothing_heavy(small_trace: Path) -> None:
    """``analyze FILE --json`` needs numpy, protobuf and the package: no pandas, Arrow, Jinja, rich,
    Dask or TensorFlow (each would be imported only where an output needs it); and of the package, none
    of the run side's modules (``RUN_SIDE``: a run directory's records, the variants' options, the run
    rules' inputs), since it reads one trace and runs the trace rules."""
    code, modules = imported_by(["analyze", str(small_trace), "--json"])
    assert code == 0
    assert "numpy" in modules  # the check sees what the command imported
    assert sorted(modules & set(HEAVY)) == []
    assert "tfprof_towers.advice.engine" in modules  # ... and the package's own modules
    assert sorted(modules & set(RUN_SIDE)) == []


def test_analyze_help_imports_neither_numpy_nor_anything_heavy() -> None:
    code, modules = imported_by(["analyze", "--help"])
    assert code == 0
    assert sorted(modules & {"numpy", *HEAVY}) == []


def test_a_heavy_import_on_the_analyze_path_is_caught(small_trace: Path) -> None:
    """The same checks, with rich and the variants' options planted in front of the command: both seen."""
    _, modules = imported_by(["analyze", str(small_trace), "--json"],
                             prelude="import rich.console, tfprof_towers.variants.config")
    assert sorted(modules & set(RUN_SIDE)) == ["tfprof_towers.variants.config",  # and what it imports
                                               "tfprof_towers.variants.registry"]
    assert sorted(modules & set(HEAVY)) == ["rich"]


def test_the_report_of_a_single_process_run_imports_no_pandas(tmp_path: Path) -> None:
    """``report RUN_DIR`` (what ``profile`` runs after its variants) reads, analyses and renders a run of
    single-process variants with numpy alone: no pandas or Arrow (the straggler table of a cluster
    variant's tasks is the one part of a report that needs them)."""
    from report_kit import make_run_dir

    run = make_run_dir(tmp_path / "run")
    code, modules = imported_by(["report", str(run)])
    assert code == 0
    assert (run / "report.html").is_file() and "numpy" in modules and "jinja2" in modules
    assert sorted(modules & {"pandas", "pyarrow"}) == []


def test_the_report_of_a_cluster_run_imports_no_pandas(tmp_path: Path) -> None:
    """The same for a cluster variant's run, two tasks' traces: its straggler table and step rows are
    numpy's, and a straggler is still found (the view was made, not skipped)."""
    import json

    from cluster_kit import make_cluster_run

    run = make_cluster_run(tmp_path / "run")
    code, modules = imported_by(["report", str(run)])
    assert code == 0
    view = json.loads((run / "summary.json").read_text())["variants"][0]["cluster"]
    assert [s["task"] for s in view["stragglers"]] == ["/job:worker/task:1"] and len(view["steps"]) == 8
    assert "numpy" in modules and "jinja2" in modules
    assert sorted(modules & {"pandas", "pyarrow"}) == []
