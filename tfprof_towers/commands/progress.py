"""The hosts' progress on stderr while ``analyze``, ``export`` and ``sql`` read a profile.

rich is imported only when something is shown: a bar on a terminal, or a line naming a host that
could not be read.  ``analyze FILE --json`` into a pipe never imports it.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

_stderr: Console | None = None


def rich_console(stderr: bool = False) -> Console:
    """Rich console; when output is a pipe or file, wide enough for the ranked table."""
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False)
    return c if c.is_terminal else Console(stderr=stderr, highlight=False, width=120)


def stderr_console() -> Console:
    """The one rich console on stderr of this process, made on first use."""
    global _stderr
    if _stderr is None:
        _stderr = rich_console(stderr=True)
    return _stderr


def err(message: str) -> None:
    """One message on stderr, never wrapped (a notice or an error stays one line)."""
    stderr_console().print(message, markup=False, soft_wrap=True)


def may_be_terminal() -> bool:
    """False where rich would surely find no terminal on stderr (no tty, and neither ``TTY_COMPATIBLE``
    nor ``FORCE_COLOR`` set): then no console is made; else rich decides."""
    if os.environ.get("TTY_COMPATIBLE") or os.environ.get("FORCE_COLOR") is not None:
        return True
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except (ValueError, AttributeError):
        return False


class HostProgress:
    """While the hosts of a multi-host profile are analysed: a bar over the hosts on a terminal
    (transient), and on any stderr one line naming each host that could not be read, as it happens."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> HostProgress:
        if may_be_terminal() and stderr_console().is_terminal:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                TextColumn("{task.completed}/{task.total} hosts"), TimeElapsedColumn(),
                console=stderr_console(), transient=True,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, done: int, total: int, name: str, failure: Any) -> None:
        if failure is not None and total > 1:
            err(f"host {name}: could not be read: {failure.reason}; the other hosts are still analysed")
        if self._progress is None or total < 2:
            return
        from rich.markup import escape

        if self._task is None:
            self._task = self._progress.add_task("analysing hosts", total=total)
        what = "[red]could not read[/]" if failure is not None else "analysed"
        self._progress.update(self._task, completed=done, description=f"{what} [bold]{escape(name)}[/]")
