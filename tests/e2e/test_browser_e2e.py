"""The report in a real headless browser (Debian's chromium), offline.

Skipped, with the reason, where ``/usr/bin/chromium`` or playwright is missing;
``make test`` installs chromium through the Makefile's ``browser`` target.
Screenshots go to ``tests/output/`` (git-ignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
OUTPUT = Path(__file__).resolve().parents[1] / "output"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: `make browser` (part of `make test`) installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


class Page:
    """A page that records console errors, page errors, dialogs and every network request."""

    def __init__(self, browser) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path) -> None:
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("html[data-charts=ready]", timeout=15_000)

    def count(self, selector: str) -> int:
        return int(self.page.evaluate(f"document.querySelectorAll({selector!r}).length"))

    def screenshot(self, name: str, selector: str | None = None) -> Path:
        """The whole page, or only the element ``selector`` matches."""
        OUTPUT.mkdir(exist_ok=True)
        path = OUTPUT / name
        if selector:
            self.page.locator(selector).screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


def check_offline(page: Page, report: Path) -> None:
    assert page.errors == []
    assert page.dialogs == []
    assert [u for u in page.requests if u != report.resolve().as_uri()] == []


@contextmanager
def opened(browser, report: Path) -> Iterator[Page]:
    """``report`` open in a fresh offline page, checked quiet and request-free after load."""
    page = Page(browser)
    try:
        page.open(report)
        check_offline(page, report)
        yield page
    finally:
        page.close()


@pytest.mark.slow
def test_real_run_report(browser, tiny_run: Path) -> None:
    with opened(browser, tiny_run / "report.html") as page:
        assert page.count(".timeline svg.timeline-chart") == 5
        assert page.count(".finding[data-rule=host_compute][data-variant=towers_bug]") == 1
        page.screenshot("report-tiny-run.png")
