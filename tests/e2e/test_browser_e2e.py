"""The report of the e2e tier's shared real tiny run in a real headless browser (Debian's chromium), offline.

The report's charts and sections on run directories built in code are in tests/unit/test_browser.py.
Skipped, with the reason, where ``/usr/bin/chromium`` or playwright is missing;
``make test`` installs chromium through the Makefile's ``browser`` target.
Screenshots go to ``tests/output/`` (git-ignored).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_kit import opened

pytestmark = pytest.mark.browser


def test_real_run_report(browser, tiny_run: Path) -> None:
    with opened(browser, tiny_run / "report.html") as page:
        assert page.count(".timeline svg.timeline-chart") == 5
        assert page.count(".finding[data-rule=host_compute][data-variant=towers_bug]") == 1
        page.screenshot("report-tiny-run.png")
