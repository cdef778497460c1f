"""`tfprof-towers hardware`: the hardware profiles `project` can use."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tfprof_towers.cli import add_command
from tfprof_towers.projection.hardware import Hardware, builtin_names, load_hardware
from tfprof_towers.rundir.paths import json_text


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "hardware", run)
    p.add_argument("name", nargs="?", default=None, metavar="NAME|FILE.toml",
                   help="show one profile with the source of every number")
    p.add_argument("--json", action="store_true", help="print as JSON")


def run(args: argparse.Namespace) -> int:
    """List the built-in hardware profiles, or show one with its sources.

    A profile names the host CPU (and the TensorFlow build assumed on it), the
    accelerators' compute rate and memory bandwidth, the host<->accelerator link
    and how accelerators reach each other (direct NVLink, or staged through the
    host without peer access); a multi-host profile adds each host's network card
    ([network]), for `project --workers N`.  With NAME, the profile's TOML file is printed
    as it is, every number beside its source (a summary line goes to stderr): write your own
    with `tfprof-towers hardware NAME > my.toml`, edit it, and pass its path to
    `project --hardware my.toml`.
    """
    if args.json:
        sys.stdout.write(json_text(document(args)) + "\n")
        return 0
    if args.name:
        show(load_hardware(args.name))
        return 0
    profiles = [load_hardware(n) for n in builtin_names()]
    table = Table(show_header=True, box=None)
    for col in ("profile", "host", "accelerators", "host link", "accelerator<->accelerator", "network"):
        table.add_column(col)
    for h in profiles:
        peer = h.peer.link.name if h.peer.kind == "direct" else f"staged via host ({h.host_link.name})"
        table.add_row(
            f"[bold]{escape(h.name)}[/]",
            escape(f"{h.host.model}, {h.host.peak_flops() / 1e9:.0f} GFLOP/s peak"),
            escape(f"{h.accelerator.count}x {h.accelerator.model}"
                   + (f", {h.accelerator.memory_gb:g} GB each" if h.accelerator.memory_gb else "")),
            escape(h.host_link.name), escape(peer),
            escape(h.network.name) if h.network is not None else "-",
        )
    Console(highlight=False, width=160).print(table)
    return 0


def document(args: argparse.Namespace) -> Any:
    """What ``hardware --json`` prints: the profile NAME's summary, or every built-in's (a list)."""
    if args.name:
        return load_hardware(args.name).summary()
    return [load_hardware(n).summary() for n in builtin_names()]


def show(hw: Hardware) -> None:
    """The profile's file itself on stdout, byte for byte (``hardware NAME > my.toml`` is a profile that
    loads), and a one-line summary on stderr."""
    print(f"{hw.name}: {hw.description}  ({hw.origin})", file=sys.stderr)
    origin = hw.origin.split(":", 1)[1]
    path = origin if hw.origin.startswith("file:") else None
    if path is None:
        from tfprof_towers.projection.hardware import builtin_dir

        path = str(builtin_dir() / f"{origin}.toml")
    with open(path, encoding="utf-8") as fh:
        sys.stdout.write(fh.read())
