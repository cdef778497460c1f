"""`tfprof-towers variants`: list the built-in placement variants, by family."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tfprof_towers.cli import add_command
from tfprof_towers.variants import registry


def register(sub: argparse._SubParsersAction) -> None:
    add_command(sub, "variants", run)


def run(args: argparse.Namespace) -> int:
    """List the built-in placement variants with one-line descriptions, grouped by family.

    Each family is a dialect in which a training step is written (a TF1 graph, a TF2
    strategy, a cluster of task processes); a variant file of that family defines the
    function named in its heading.  The cluster variants run only with
    `profile --workers N [--ps M]` or `profile --cluster FILE`.
    """
    out = Console(highlight=False, width=160)
    for key, variants in registry.by_family(registry.ALL_BUILTINS).items():
        fam = registry.FAMILIES[key]
        table = Table(show_header=True, box=None, title_justify="left",
                      title=f"[bold]{escape(key)}[/]: {escape(fam.title)}; "
                            f"variant files define {escape(fam.file_signature)}")
        table.add_column("variant", style="bold")
        table.add_column("what it is")
        table.add_column("known elsewhere as", style="dim")
        table.add_column("needs")
        for v in variants:
            role = " (baseline)" if v.baseline else ""
            table.add_row(escape(v.name) + role, escape(v.description), escape(v.known_as),
                          escape(", ".join(v.needs) or "-"))
        out.print(table)
    return 0
