"""The categories a device's time is attributed to: one table, read by every module.

Each :class:`Category` says what it is called in the report, its colour, where
it stands in the exclusive ``wall`` sweep (the highest-precedence active
category owns each instant; see :mod:`tfprof_towers.trace.attribute`), whether
it is a copy (its wall time is *exposed* transfer time) and on which side of the
machine it occurs: ``device`` (accelerator planes), ``host`` (host threads, and
CPU devices whose ops run on them) or ``any``.

:data:`TABLE` is in event order: the trace loader stores an event's category as
its index in :data:`EVENT_CATEGORIES`.  The report stacks bars in
:data:`DISPLAY_ORDER`.  Pure data: no pandas.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    key: str
    label: str
    colour: str
    wall_rank: int | None  # precedence in the wall sweep, 0 highest; None: not counted as time
    side: str  # "device" | "host" | "any" | "none"
    copy: bool = False
    display: int = 99  # position in the report's stacked bars and legends


TABLE: tuple[Category, ...] = (
    Category("compute", "compute", "#2e6fdb", 0, "device", display=0),
    Category("collective", "collective", "#0e9384", 1, "any", display=2),
    Category("p2p", "peer copy (P2P)", "#e04f16", 3, "device", copy=True, display=3),
    Category("d2d", "device↔device copy", "#f79009", 4, "device", copy=True, display=4),
    Category("h2d", "host→device copy", "#d92d20", 5, "device", copy=True, display=5),
    Category("d2h", "device→host copy", "#ee46bc", 6, "device", copy=True, display=6),
    Category("memset", "memset", "#98a2b3", 7, "device", display=7),
    Category("host_compute", "host compute", "#7a5af8", 2, "host", display=1),
    Category("send_recv", "send/recv", "#dd2590", 8, "host", display=8),
    Category("input", "input pipeline", "#66c61c", 9, "host", display=9),
    Category("framework", "framework overhead", "#c4a000", 10, "host", display=10),
    # Not time: step and session annotations, and events on planes that are neither host nor device.
    Category("marker", "step marker", "#475467", None, "none"),
    Category("other", "other", "#667085", None, "none", display=11),
)
#: What the wall breakdown calls an instant with no active category.
IDLE = Category("idle", "idle", "#e4e7ec", None, "any", display=12)

BY_KEY: dict[str, Category] = {c.key: c for c in (*TABLE, IDLE)}

#: Every category an event can have, in the loader's code order.
EVENT_CATEGORIES: tuple[str, ...] = tuple(c.key for c in TABLE)
#: Categories that count as time (markers and other planes do not).
TIME_CATEGORIES: tuple[str, ...] = tuple(c.key for c in TABLE if c.wall_rank is not None)
#: Wall-sweep precedence, highest first.
WALL_ORDER: tuple[str, ...] = tuple(sorted(TIME_CATEGORIES, key=lambda k: BY_KEY[k].wall_rank))
#: The wall breakdown's categories: the time categories by precedence, then idle.
WALL_CATEGORIES: tuple[str, ...] = (*WALL_ORDER, IDLE.key)
#: Device copies: their wall time is exposed transfer time.
COPY_CATEGORIES: tuple[str, ...] = tuple(c.key for c in TABLE if c.copy)
#: Computation, on accelerator planes and on the host (ops joined to their device).
COMPUTE_CATEGORIES: tuple[str, ...] = ("compute", "host_compute")
#: Categories every accelerator row lists (even at zero), and every host or CPU-device row.
DEVICE_CATEGORIES: tuple[str, ...] = tuple(c.key for c in TABLE
                                           if c.side == "device" or c.key == "collective")
HOST_CATEGORIES: tuple[str, ...] = tuple(c.key for c in TABLE if c.side == "host")
#: The parts of an accelerator's idle time (the trace analysis's ``idle_split``, see
#: :mod:`tfprof_towers.trace.idle`), with what the report and the terminal call them.
IDLE_SPLIT: dict[str, str] = {"host_wait": "host wait", "kernel_wait": "kernel wait", "other": "other"}
#: Keys in the report's stacking order (with ``other`` and ``idle``).
DISPLAY_ORDER: tuple[str, ...] = tuple(c.key for c in sorted((*TABLE, IDLE), key=lambda c: c.display)
                                       if c.display < 99)


def label(key: str) -> str:
    c = BY_KEY.get(key)
    return c.label if c else key


def legend() -> list[dict[str, str]]:
    """``[{"key", "label", "color"}]`` in display order, for the report's charts."""
    return [{"key": k, "label": BY_KEY[k].label, "color": BY_KEY[k].colour} for k in DISPLAY_ORDER]
