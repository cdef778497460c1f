"""Shared fixtures, and the two tiers.

``tests/unit/``: no TensorFlow child and no subprocess of the tool (``make test-fast``).
``tests/e2e/``: real TensorFlow runs, clusters and the installed command; every test
there is marked ``slow`` here, so ``-m "not slow"`` still selects the fast tier.

``tiny_run``: one real `profile` run of the five tf1-graph built-in variants on
the ``tiny`` preset (about 15 s), made once per test session and shared by every
test that reads a run directory.  ``tiny_tf2_run``: the same for the six
tf2-strategy built-ins (NCCL skipped without GPUs).  ``fixture_8gpu``: the real
8-GPU trace in ../shared/fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
FIXTURE_8GPU = SHARED_FIXTURES / "gpu_multi_worker_8xV100.xplane.pb"


def run_cli(*argv: str) -> int:
    from tfprof_towers.cli import main

    return main(list(argv))


def _tiny_run_of(tmp_path_factory: pytest.TempPathFactory, family: str, folder: str) -> Path:
    """A finished tiny-preset run directory with every built-in variant of ``family``."""
    from tfprof_towers.variants import registry

    out = tmp_path_factory.mktemp(folder) / "run"
    code = run_cli("profile", "--preset", "tiny", "--variants", ",".join(registry.names(family)),
                   "--out", str(out))
    assert code == 0, f"tiny {family} profile run failed with exit code {code}"
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny-preset run directory with all five tf1-graph built-in variants."""
    from tfprof_towers.variants import registry

    return _tiny_run_of(tmp_path_factory, registry.TF1_GRAPH, "tiny")


@pytest.fixture(scope="session")
def tiny_tf2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny-preset run directory with the six tf2-strategy built-ins (issue 11's command)."""
    from tfprof_towers.variants import registry

    return _tiny_run_of(tmp_path_factory, registry.TF2_STRATEGY, "tiny_tf2")


@pytest.fixture(scope="session")
def fixture_8gpu() -> Path:
    if not FIXTURE_8GPU.is_file():
        pytest.skip(f"the shared 8-GPU fixture is absent ({FIXTURE_8GPU}); it ships beside the repo in CI")
    return FIXTURE_8GPU


E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slow)


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
