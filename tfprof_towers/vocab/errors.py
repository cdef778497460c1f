"""The errors the tool lets escape to the user: :class:`TowersError` and its kinds.

Every expected failure (bad input, a broken trace, an unwritable directory)
is raised as :class:`TowersError`; the CLI prints its message on one line and
exits with its ``exit_code``.  Anything else is a bug.
"""

from __future__ import annotations

#: Exit codes of ``tfprof-towers`` (docs/failures.md).
EXIT_OK = 0
EXIT_BUG = 1  # an unexpected error: a bug (Python prints the traceback)
EXIT_INPUT = 2  # bad input, or a place that cannot be used (unwritable, full): one line on stderr
EXIT_NOTHING_PROJECTED = 3  # `project`: no variant could be projected
EXIT_NOTHING_SUCCEEDED = 4  # `profile`/`report`: no variant succeeded (summary.json and report.html say why)
EXIT_SLOWER = 5  # `diff --fail-if-slower PCT`: a variant got slower by more than PCT % (or ran on BASE only)
EXIT_INCONCLUSIVE = 6  # `diff --fail-if-slower PCT`: too few steps to decide (--allow-inconclusive: 0)
EXIT_SOME_HOSTS = 7  # `analyze`/`export` of several hosts: some could not be read (the rest is printed)
EXIT_SIGINT = 130  # Ctrl-C (128 + SIGINT); a partial report is written
EXIT_SIGTERM = 143  # SIGTERM (128 + SIGTERM); a partial report is written
EXIT_BROKEN_PIPE = 141  # standard output closed by its reader (128 + SIGPIPE), as `cmd | head` does


class TowersError(Exception):
    """An expected, user-facing failure with a one-line message and an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_INPUT) -> None:
        one_line = " ".join(str(message).split())
        super().__init__(one_line)
        self.message = one_line
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class TraceError(TowersError):
    """A trace file or directory that cannot be read as an XSpace profile."""


class VariantError(TowersError):
    """A variant name or variant file that cannot be used."""


class QueryError(TowersError):
    """A SQL query that DuckDB refused (bad SQL, an unknown view, a write or a file it may not touch)."""
