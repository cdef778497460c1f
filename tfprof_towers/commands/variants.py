"""`tfprof-towers variants`: list the built-in placement variants."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ..cli import add_command
from ..config import BUILTIN_VARIANTS


def register(sub: argparse._SubParsersAction) -> None:
    add_command(sub, "variants", run)


def run(args: argparse.Namespace) -> int:
    """List the built-in placement variants with one-line descriptions."""
    table = Table(show_header=True, box=None)
    table.add_column("variant", style="bold")
    table.add_column("what it is")
    table.add_column("known elsewhere as", style="dim")
    for v in BUILTIN_VARIANTS:
        table.add_row(v.name, v.description, v.known_as)
    Console(highlight=False, width=160).print(table)
    return 0
