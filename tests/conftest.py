"""Shared fixtures, and the two tiers.

``tests/unit/``: no TensorFlow child and no subprocess of the tool (``make test-fast``).
``tests/e2e/``: real TensorFlow runs, clusters and the installed command; every test
there is marked ``slow`` here, so ``-m "not slow"`` still selects the fast tier.

Both tiers run on pytest-xdist (``make test``: ``-n auto``, the e2e tier ``--dist loadfile``).
The real runs that several test files only read are built ONCE per test session, even across
xdist workers (:func:`built_once`: a file lock in a folder every worker of the session sees);
a test that changes a run directory works on a copy (``shutil.copytree``):

``tiny_run``: one real `profile` run of the five tf1-graph built-in variants on the ``tiny``
preset.  ``tiny_tf2_run``: the same for the six tf2-strategy built-ins (NCCL skipped without
GPUs).  ``tiny_files_run``: the test and example variant files (a forgotten tower gradient, the
fixed towers, the same with 50 ms of sleep per step) next to ``single`` and
``towers_host_vars``, 8 timed steps (the math check's and `diff`'s tests).  ``fixture_8gpu``:
the real 8-GPU trace in ../shared/fixtures.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_kit import auto_workers, built_once, session_dir

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
FIXTURE_8GPU = SHARED_FIXTURES / "gpu_multi_worker_8xV100.xplane.pb"
FORGOT = REPO / "tests" / "variants" / "forgot_tower_gradient.py"
FIXED = REPO / "examples" / "towers_fixed.py"
SLEEPY = REPO / "tests" / "variants" / "sleepy_towers.py"


def run_cli(*argv: str) -> int:
    from tfprof_towers.cli import main

    return main(list(argv))


def _profile(out: Path, *argv: str) -> None:
    code = run_cli("profile", "--preset", "tiny", *argv, "--out", str(out))
    assert code == 0, f"profile {' '.join(argv)} failed with exit code {code}"


def _tiny_run_of(tmp_path_factory: pytest.TempPathFactory, family: str, folder: str) -> Path:
    """A finished tiny-preset run directory with every built-in variant of ``family``."""
    from tfprof_towers.variants import registry

    return built_once(session_dir(tmp_path_factory), folder,
                      lambda out: _profile(out, "--variants", ",".join(registry.names(family))))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny-preset run directory with all five tf1-graph built-in variants."""
    from tfprof_towers.variants import registry

    return _tiny_run_of(tmp_path_factory, registry.TF1_GRAPH, "tiny")


@pytest.fixture(scope="session")
def tiny_tf2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny-preset run directory with the six tf2-strategy built-ins."""
    from tfprof_towers.variants import registry

    return _tiny_run_of(tmp_path_factory, registry.TF2_STRATEGY, "tiny_tf2")


@pytest.fixture(scope="session")
def tiny_files_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny-preset run, 8 timed steps, of ``single``, ``towers_host_vars`` and the variant
    files ``forgot_tower_gradient``, ``towers_fixed`` and ``sleepy_towers`` (read by the math check's
    tests and by `diff`'s gate and ``load()`` tests)."""
    return built_once(session_dir(tmp_path_factory), "tiny_files", lambda out: _profile(
        out, "--steps", "8", "--variants", "single,towers_host_vars", "--variant-file", str(FORGOT),
        "--variant-file", str(FIXED), "--variant-file", str(SLEEPY)))


#: How long ``trace.hosts.busy_cores`` samples ``/proc/stat`` in the fast tier (see
#: :func:`short_busy_sample`).
BUSY_SAMPLE_S = 0.05


@pytest.fixture(autouse=True)
def short_busy_sample(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast tier, ``busy_cores`` samples 0.05 s, not 0.1 s.

    ``trace.hosts.idle_cores`` (how many processes decode a multi-host logdir when no test says how
    many) samples ``/proc/stat`` over ``busy_cores``' 0.1 s; the unit tests load such logdirs some sixty
    times, so they slept about 6 s for a number that changes no result (every worker count gives the
    same answer, which tests/unit/test_trace_hosts.py and test_pod.py check with the counts given).
    0.05 s runs the same code and makes the same choice on a machine whose load holds still that long
    (a shorter sample, a few ``/proc/stat`` ticks, chose extra decoding processes by chance and cost
    CPU).  The e2e tier keeps the product's sample.
    """
    if E2E in Path(str(request.node.path)).resolve().parents:
        return
    from tfprof_towers.trace import hosts

    monkeypatch.setattr(hosts, "busy_cores", functools.partial(hosts.busy_cores, interval_s=BUSY_SAMPLE_S))


@pytest.fixture(scope="session")
def xprof():
    """XProf's converters (``raw_to_tool_data``), the oracle of the trace tests; skipped, with the
    reason, where xprof is not installed (the dev extra installs it)."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:
        pytest.skip(f"xprof is not installed ({exc}): the oracle cannot run")
    return raw_to_tool_data


@pytest.fixture(scope="session")
def fixture_8gpu() -> Path:
    if not FIXTURE_8GPU.is_file():
        pytest.skip(f"the shared 8-GPU fixture is absent ({FIXTURE_8GPU}); it ships beside the repo in CI")
    return FIXTURE_8GPU


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return auto_workers()


E2E = Path(__file__).resolve().parent / "e2e"


#: Seconds each e2e file took, setup included, on two xdist workers (a shared 2-core machine, each
#: TensorFlow child started fresh, without the fork server).  The e2e tier runs the longest files first
#: (``make test`` passes ``--no-loadscope-reorder``, so xdist keeps this order), so that no long file
#: starts last while the other worker idles.  A file not named here counts as :data:`E2E_COST_DEFAULT_S`.
E2E_COST_S = {
    "test_project_graphs.py": 585, "test_tf2_e2e.py": 424, "test_scaling_e2e.py": 389,
    "test_survive_e2e.py": 352, "test_cluster_e2e.py": 273, "test_bench_e2e.py": 235,
    "test_failures_e2e.py": 185, "test_diff_e2e.py": 170, "test_profile_e2e.py": 161,
    "test_profile_cli_e2e.py": 120, "test_xplane_wire_e2e.py": 107, "test_mcp_e2e.py": 100,
    "test_guides_e2e.py": 180,
}
E2E_COST_DEFAULT_S = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    in_e2e: dict[Path, bool] = {}  # per file, not per test: resolve() is a few syscalls per call

    def is_e2e(item: pytest.Item) -> bool:
        if item.path not in in_e2e:
            in_e2e[item.path] = E2E in Path(str(item.path)).resolve().parents
        return in_e2e[item.path]

    for item in items:
        if is_e2e(item):
            item.add_marker(pytest.mark.slow)
    # the fast tier first, then the e2e files longest first; a file's own tests keep their order
    # (sorted() is stable)
    items[:] = sorted(items, key=lambda item: (1, -E2E_COST_S.get(item.path.name, E2E_COST_DEFAULT_S))
                      if is_e2e(item) else (0, 0))


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's chromium under playwright, once per module; skipped, with the reason, without them."""
    from browser_kit import ARGS, CHROMIUM

    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: `make browser` (part of `make test`) installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()
