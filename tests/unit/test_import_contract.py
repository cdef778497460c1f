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



def run_python(code: str) -> str:
    """The stdout of ``code`` run by a fresh interpreter, this checkout's package and the tests' kits
    first on its path."""
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(ROOT.parent), str(tests), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path}, check=False)
    if proc.returncode:
        raise RuntimeError(f"the interpreter failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def modules_of(code: str) -> set[str]:
    """Every module (dotted, submodules too) a fresh interpreter holds after running ``code``."""
    return set(run_python(code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n").split())


def _ours(modules: set[str] | list[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if m.startswith(prefixes))


def test_profile_starts_without_the_report_s_or_the_projection_s_modules() -> None:
    """``profile``'s start (its module and parser) imports neither numpy nor the report's modules nor the
    projection's: the report's are imported ahead while the variants run, the projection's by the
    projection."""
    modules = modules_of("from tfprof_towers.cli import build_parser\nbuild_parser('profile')")
    assert "tfprof_towers.session.profile" in modules and "tfprof_towers.commands.console" in modules
    assert _ours(modules, "numpy", "pandas", "jinja2", "tfprof_towers.projection", "tfprof_towers.trace",
                 "tfprof_towers.session.report", "tfprof_towers.advice", "tfprof_towers.rundir.summary") == []


def test_a_cluster_task_and_its_capture_coordinator_start_without_numpy() -> None:
    """What a cluster task imports before its ``main`` (the command line, the task's modules) and what
    the capture coordinator imports: no numpy, no TensorFlow (the task's import of TensorFlow brings
    numpy with it, in its own phase)."""
    modules = modules_of("from tfprof_towers.cli import build_parser\nbuild_parser('worker')\n"
                         "import tfprof_towers.capture.child, tfprof_towers.capture.cluster.task\n"
                         "import tfprof_towers.capture.cluster.client")
    assert "tfprof_towers.capture.cluster.task" in modules
    assert _ours(modules, "numpy", "tensorflow", "pandas") == []


_LATE = """
import contextlib, io, sys
from pathlib import Path
from {kit} import {make} as make
run = make(Path({run!r}))
from tfprof_towers.cli import build_parser
build_parser('profile')
from tfprof_towers.session.profile import REPORT_MODULES, import_ahead
{ahead}
before = set(sys.modules)
from tfprof_towers.commands import console
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run
summary = finish_run(RunDir(run))
with contextlib.redirect_stdout(io.StringIO()):
    console.print_summary(summary, RunDir(run))
print(*sorted(set(sys.modules) - before))
"""


def late_imports(kit: str, make: str, run: Path, ahead: bool = True) -> list[str]:
    """The package's, numpy's and Jinja's modules that writing and printing the report of ``make(run)``
    imports after ``profile``'s start and (``ahead``) its ``import_ahead(REPORT_MODULES)``."""
    code = _LATE.format(kit=kit, make=make, run=str(run),
                        ahead="import_ahead(REPORT_MODULES).join()" if ahead else "")
    return _ours(run_python(code).split(), "tfprof_towers", "numpy", "jinja2")


@pytest.mark.parametrize(("kit", "make"), [("cluster_kit", "make_cluster_run"),
                                          ("report_kit", "make_run_dir")])
def test_the_report_imports_nothing_profile_did_not_import_ahead(kit: str, make: str, tmp_path: Path) -> None:
    """After ``import_ahead(REPORT_MODULES)`` (what ``profile`` does while its variants run), writing and
    printing the report of a cluster run or of single-process variants imports none of the package's
    modules, numpy's or Jinja's: nothing is left for after the variants."""
    assert late_imports(kit, make, tmp_path / "run") == []


def test_a_report_module_not_imported_ahead_is_seen(tmp_path: Path) -> None:
    """The same check without the import ahead: the report's modules are imported late, and seen."""
    late = late_imports("cluster_kit", "make_cluster_run", tmp_path / "run", ahead=False)
    assert {"tfprof_towers.session.report", "tfprof_towers.render.html", "jinja2"} <= set(late)


def test_a_module_that_fails_to_import_ahead_is_left_to_its_importer() -> None:
    """The import ahead never raises (its thread ends); the module's own importer meets the error later."""
    from tfprof_towers.session.profile import import_ahead

    thread = import_ahead(("tfprof_towers.no_such_module",))
    thread.join(30.0)
    assert not thread.is_alive()
    with pytest.raises(ModuleNotFoundError):
        import tfprof_towers.no_such_module  # type: ignore[import-not-found]  # noqa: F401
