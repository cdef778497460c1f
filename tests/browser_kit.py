"""The headless-browser helpers both tiers' report tests use (the ``browser`` fixture is in
tests/conftest.py): a page that records errors, dialogs and requests, opened offline."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
OUTPUT = Path(__file__).resolve().parent / "output"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


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

    def screenshot(self, name: str, selector: str | None = None, full_page: bool = True) -> Path:
        """The whole page (or what the viewport shows), or only the element ``selector`` matches."""
        OUTPUT.mkdir(exist_ok=True)
        path = OUTPUT / name
        if selector:
            self.page.locator(selector).screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path), full_page=full_page)
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
