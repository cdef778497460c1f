"""The one error type the tool lets escape to the user.

Every expected failure (bad input, a broken trace, an unwritable directory)
is raised as :class:`TowersError`; the CLI prints its message on one line and
exits with its ``exit_code``.  Anything else is a bug.
"""

from __future__ import annotations


class TowersError(Exception):
    """An expected, user-facing failure with a one-line message and an exit code."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
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
