"""Find a trace, decode it and build the ``events`` and ``steps`` DataFrames.

``load_trace(path)`` accepts an ``*.xplane.pb`` file, or any directory holding
``plugins/profile/<run>/<host>.xplane.pb`` (a TensorBoard logdir, or a run
directory's ``tensorboard/<variant>/``); with several runs or hosts it uses the
newest run's first host and says so in ``Trace.notes`` (``run=`` chooses).

Decoding (see :mod:`.layout` and :mod:`.xspace`): the file is read once into a numpy
buffer and its wire format walked with numpy -- the planes' and lines' few fields in
Python, every line's events by a speculative chunked walk, every event's fields and
stats in lock-step rounds, a block of events at a time -- while protobuf (upb) parses
only the planes' metadata.  No event ever becomes a Python object.  Strings become
categorical codes once: event names through each plane's metadata table, string stats
through a hash of their bytes (or their ``ref_value``), so anything parsed from a
string -- ``memcpy_details``, rendezvous keys, ``node:OpType`` names -- is parsed once
per distinct string, never per event.  Only the stats the classification uses are
decoded past their metadata_id.

``events`` columns (one row per event; derived lines such as ``Steps`` or
``TensorFlow Ops`` are left out, they only repeat other events):

===============  ==========  ===============================================================
plane            category    plane name (``/host:CPU``, ``/device:GPU:0``, ...)
device           category    device the event's time belongs to: the GPU plane, or for host
                             events the device of their TF node (``node_devices``), else the
                             host plane
line             category    thread or stream name
name             category    event name
op_type          category    TF op type (``MatMul``; ``_Send``), "" when none
tf_op            category    TF node name (host ops; ``tf_op``/``annotation`` of kernels)
start_ps         int64       start, picoseconds after the earliest line timestamp
dur_ps           int64       duration, picoseconds
category         category    one of :data:`CATEGORIES`
bytes            int64       bytes moved (copies: ``memcpy_details``), else 0
src_device       category    copy / send source device, "" when none
dst_device       category    copy / send destination device, "" when none
edge             category    rendezvous edge name of ``_Send``/``_Recv``, "" when none
step             int64       step whose window holds the event's start, -1 when none
===============  ==========  ===============================================================

``steps`` columns: ``step`` (int64), ``start_ps``, ``end_ps`` (int64).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..categories import COPY_CATEGORIES, TIME_CATEGORIES
from ..categories import EVENT_CATEGORIES as CATEGORIES
from ..device_names import HOST_THREADS, canonical_device
from ..errors import TraceError
from . import layout
from . import xspace as xs

# ---------------------------------------------------------------------------------------------
# Categories

CATEGORY_DTYPE = pd.CategoricalDtype(list(CATEGORIES))
_CAT = {c: np.int8(i) for i, c in enumerate(CATEGORIES)}

HOST_PLANE = HOST_THREADS
#: Derived lines repeat events of other lines (TensorFlow's ids count down from -0xDEADBEEF).
DERIVED_LINE_NAMES = frozenset(
    {
        "Steps",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "XLA Ops",
        "XLA Modules",
        "Launch Stats",
        "Source code",
        "XLA TraceMe",
        "Framework Ops",
        "Framework Name Scope",
        "SparseCore Ops",
    }
)
_DERIVED_ID = -559038737
#: Host events that annotate steps or sessions rather than doing work.
MARKER_NAMES = frozenset({"train", "SessionRun", "TraceContext", "test", "eval", "predict"})
SEND_RECV_TYPES = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_COLLECTIVE = re.compile(
    r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|collective_?permute|collectivereduce",
    re.IGNORECASE,
)
_INPUT_NAME = re.compile(
    r"^(Iterator::|Prefetch|IteratorGetNext|MultiDeviceIterator|ParallelMap|MapAndBatch)"
)
_INPUT_TYPE = re.compile(r"Iterator|Dataset")
_TF_OP = re.compile(r"^([^:\s#]+):([A-Za-z_][A-Za-z0-9_]*)$")
_DEVICE_INDEX = re.compile(r"^(/device:[A-Za-z_]+:)(\d+)$")


# ---------------------------------------------------------------------------------------------
# Locating the trace file


@dataclass(frozen=True)
class Profile:
    """One ``*.xplane.pb`` found under a directory."""

    path: Path
    run: str  # "<logdir relative to the root>/<run>" or "<run>"
    host: str


def find_profiles(root: Path) -> list[Profile]:
    """Every ``plugins/profile/<run>/<host>.xplane.{pb,riegeli}`` under ``root``, oldest run first."""
    root = Path(root)
    found = []
    for pattern in ("*.xplane.pb", "*.xplane.riegeli"):
        for p in root.glob(f"**/plugins/profile/*/{pattern}"):
            logdir = p.parent.parent.parent.parent.relative_to(root).as_posix()
            run = p.parent.name if logdir == "." else f"{logdir}/{p.parent.name}"
            found.append(Profile(p, run, p.name.split(".xplane.")[0]))
    return sorted(found, key=lambda f: (f.path.parent.name, f.run, f.host))


def locate(path: Path | str, run: str | None = None) -> tuple[Path, tuple[str, ...]]:
    """The trace file ``path`` names, and notes on which one was picked."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_file():
        return path, ()
    profiles = find_profiles(path)
    if not profiles:
        raise TraceError(
            f"{path}: no profile found (expected plugins/profile/<run>/<host>.xplane.pb below it)"
        )
    chosen = profiles
    if run is not None:
        chosen = [
            p
            for p in profiles
            if run in (p.run, p.path.parent.name, f"{p.run}/{p.host}", p.host)
            or p.run.startswith(run.rstrip("/") + "/")
        ]
        if not chosen:
            raise TraceError(
                f"--run {run}: no such run under {path}; runs: {', '.join(sorted({p.run for p in profiles}))}"
            )
    newest = chosen[-1].path.parent.name
    candidates = [p for p in chosen if p.path.parent.name == newest]
    pick = candidates[0]
    notes = []
    runs = sorted({p.run for p in profiles})
    if len(runs) > 1 and run is None:
        notes.append(f"{len(runs)} runs under {path}; using the newest, {pick.run} (choose with --run)")
    if len(candidates) > 1:
        hosts = ", ".join(p.host for p in candidates)
        notes.append(
            f"run {pick.run} has {len(candidates)} hosts ({hosts}); using {pick.host} "
            f"(choose with --run {pick.run}/HOST)"
        )
    return pick.path, tuple(notes)


# ---------------------------------------------------------------------------------------------
# The Trace record


@dataclass(frozen=True)
class Trace:
    """One decoded trace: its events and steps, and how the step windows were found."""

    source: str
    events: pd.DataFrame
    steps: pd.DataFrame
    window: str  # "markers" | "steps-line" | "whole-trace"
    hostnames: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


_RIEGELI_MAGIC = b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f"


def load_trace(
    path: Path | str, run: str | None = None, node_devices: Mapping[str, str] | None = None
) -> Trace:
    """Locate, read and decode a trace (see the module docstring)."""
    file, notes = locate(path, run)
    if file.name.endswith(".xplane.riegeli"):
        raise TraceError(
            f"{file}: the newer .xplane.riegeli form is not supported; "
            "export the profile as .xplane.pb (the TensorFlow profiler's default)"
        )
    try:
        buf, data = xs.Buffer.read(file)  # read into a padded buffer: no copy of the file's bytes
    except OSError as exc:
        raise TraceError(f"{file}: cannot read ({exc.strerror or exc})") from None
    trace = _trace_from_buffer(buf, data, str(file), node_devices)
    return Trace(trace.source, trace.events, trace.steps, trace.window, trace.hostnames, notes + trace.notes)


def trace_from_bytes(
    data: bytes, source: str = "<bytes>", node_devices: Mapping[str, str] | None = None
) -> Trace:
    """Decode a serialized XSpace; every way it can be broken raises :class:`TraceError`."""
    return _trace_from_buffer(xs.Buffer.of(data), data, source, node_devices)


def _trace_from_buffer(
    buf: xs.Buffer, data: bytes | memoryview, source: str, node_devices: Mapping[str, str] | None
) -> Trace:
    if not buf.size:
        raise TraceError(f"{source}: empty file")
    if bytes(data[: len(_RIEGELI_MAGIC)]) == _RIEGELI_MAGIC:
        raise TraceError(f"{source}: this is the newer .xplane.riegeli form, which is not supported")
    try:
        space = layout.read_space(buf, data)
    except xs.Malformed:
        raise TraceError(
            f"{source}: not a readable XSpace trace (the protobuf data is corrupt or truncated)"
        ) from None
    if not space.planes:
        raise TraceError(f"{source}: no profiler planes in it: not an XSpace trace")
    try:
        return _decode(buf, space, source, node_devices or {})
    except xs.Malformed as exc:
        raise TraceError(f"{source}: corrupted trace ({exc})") from None


# ---------------------------------------------------------------------------------------------
# Decoding


@dataclass(frozen=True)
class _Planes:
    """Per-plane tables and the event -> line map.

    Events are numbered with the events of derived lines last (each group in file
    order), so the events the frame keeps are the first ``n_kept``: a slice, not a mask.
    """

    names: list[str]
    kinds: np.ndarray  # int8 per plane: 0 host, 1 device, 2 other
    line_names: list[str]
    line_plane: np.ndarray  # int64 per line
    line_derived: np.ndarray  # bool per line
    line_ts_ps: np.ndarray  # int64 per line
    line_event_count: np.ndarray  # int64 per line
    event_line: np.ndarray  # int64 per event
    n_kept: int  # events on lines that are not derived
    event_start: np.ndarray | None  # int64 per event: byte range of the serialized XEvent
    event_end: np.ndarray | None
    event_md: list[tuple[np.ndarray, list[str], list]]  # per plane: sorted ids, names, metadata
    stat_md: list[dict[int, str]]  # per plane: stat metadata id -> name


def _collect(space: layout.Space) -> _Planes:
    names = [plane.name for plane in space.planes]
    kinds = [0 if n.startswith("/host:") else 1 if n.startswith("/device:") else 2 for n in names]
    lines = space.lines
    ids = lines.id.tolist()
    line_names = [nm or dn or str(i) for nm, dn, i in zip(lines.name, lines.display_name, ids)]
    line_derived = np.array(
        [nm in DERIVED_LINE_NAMES or abs(i - _DERIVED_ID) < 64 for nm, i in zip(lines.name, ids)], dtype=bool
    )
    order = np.argsort(line_derived, kind="stable")  # kept lines first
    counts = lines.event_count[order]
    event_start, event_end = lines.event_start, lines.event_end
    if (np.diff(line_derived[lines.event_count > 0].astype(np.int8)) < 0).any():  # a derived line mid-file
        first = np.cumsum(lines.event_count) - lines.event_count
        perm = np.arange(int(counts.sum())) + np.repeat(first[order] - (np.cumsum(counts) - counts), counts)
        event_start, event_end = event_start[perm], event_end[perm]
    event_md, stat_md = [], []
    for plane in space.planes:
        md = plane.event_metadata
        ids = np.array(sorted(md.keys()), dtype=np.int64)
        event_md.append((ids, [md[i].name for i in ids.tolist()], [md[i] for i in ids.tolist()]))
        stat_md.append({k: v.name for k, v in plane.stat_metadata.items()})
    ts = lines.timestamp_ns
    return _Planes(
        names=names,
        kinds=np.array(kinds, dtype=np.int8),
        line_names=line_names,
        line_plane=lines.plane,
        line_derived=line_derived,
        # relative to the earliest line: epoch nanoseconds times 1000 would overflow int64
        line_ts_ps=(ts - (ts.min() if ts.size else 0)) * 1000,
        line_event_count=lines.event_count,
        event_line=np.repeat(order, counts),
        n_kept=int(lines.event_count[~line_derived].sum()),
        event_start=event_start,
        event_end=event_end,
        event_md=event_md,
        stat_md=stat_md,
    )


def dense_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for small non-negative ints, without sorting."""
    if not values.size:
        return values[:0], np.zeros(0, dtype=np.int64)
    if values.min() < 0 or values.max() > 4 * values.size + (1 << 20):
        uniq, inv = np.unique(values, return_inverse=True)
        return uniq, inv.ravel()
    used = np.flatnonzero(np.bincount(values))
    remap = np.zeros(int(values.max()) + 1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    return used, remap[values]


def used_codes(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (small non-negative ints), ascending."""
    if not values.size:
        return values[:0]
    if values.max() > 4 * values.size + (1 << 20):
        return np.unique(values)
    return np.flatnonzero(np.bincount(values))


class _Strings:
    """A growing list of distinct strings; codes index it."""

    def __init__(self) -> None:
        self.items: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def code(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.items)
            self.items.append(s)
        return i

    def codes(self, strings: list[str]) -> np.ndarray:
        return np.array([self.code(s) for s in strings], dtype=np.int64)

    def lut(self, used: np.ndarray, fn) -> np.ndarray:
        """Code -> code of ``fn(string)`` for the ``used`` codes (in ascending order), 0 elsewhere."""
        out = np.zeros(len(self.items), dtype=np.int64)
        out[used] = self.codes([fn(self.items[u]) for u in used.tolist()])
        return out


#: Stats read from events (all others are skipped unread).
_WANTED = ("step_num", "memcpy_details", "tf_op", "annotation", "key", "name", "kernel_type")


@dataclass(frozen=True)
class _Wanted:
    """Which stats to read: per (plane, stat metadata id), the index in :data:`_WANTED` or -1."""

    which: np.ndarray  # int8 [planes + 1, width]; the last row (derived lines) reads nothing
    filter: xs.StatFilter | None  # None: ids too sparse for a table, read every stat


def _wanted_table(planes: _Planes) -> _Wanted:
    wanted = [
        {sid: _WANTED.index(name) for sid, name in table.items() if name in _WANTED and 0 <= sid < (1 << 40)}
        for table in planes.stat_md
    ]
    width = max((max(w) for w in wanted if w), default=-1) + 1
    if width > (1 << 16):
        return _Wanted(np.zeros((0, 0), dtype=np.int8), None)
    which = np.full((len(wanted) + 1, max(width, 1)), -1, dtype=np.int8)
    for pi, ids in enumerate(wanted):
        which[pi, list(ids)] = list(ids.values())
    group = planes.line_plane[planes.event_line]
    group[planes.n_kept :] = len(wanted)  # derived lines: their stats are never used
    return _Wanted(which, xs.StatFilter(group, which))


def _decode(buf: xs.Buffer, space: layout.Space, source: str, node_devices: Mapping[str, str]) -> Trace:
    """Decode and classify; each intermediate array is dropped as soon as it is used up, so the
    peak memory stays near the events frame's own size plus the file's."""
    planes = _collect(space)
    hostnames = tuple(space.hostnames)
    del space
    event_plane = planes.line_plane[planes.event_line]
    wanted = _wanted_table(planes)
    ev = xs.decode_event_ranges(buf, planes.event_start, planes.event_end, wanted.filter, values=True)
    planes = replace(planes, event_start=None, event_end=None)
    start_ps = planes.line_ts_ps[planes.event_line]
    start_ps += ev.offset_ps
    dur_ps = ev.duration_ps

    strings = _Strings()
    name_code, md_index = _event_names(planes, event_plane, ev, strings)
    stats = _wanted_stats(planes, ev, event_plane, wanted, strings)
    del ev, wanted
    _metadata_stat_fallback(planes, event_plane, md_index, stats, strings)
    del md_index

    cols = _classify(planes, event_plane, name_code, stats, strings, node_devices)
    step_num = stats["step_num"]
    del stats
    steps, window = _step_windows(planes, event_plane, start_ps, dur_ps, name_code, step_num, strings, cols)
    del step_num
    step = _assign_steps(start_ps[: planes.n_kept], steps)
    events = _frame(planes, strings, event_plane, name_code, start_ps, dur_ps, cols, step)
    notes = (
        ()
        if window != "whole-trace"
        else ("no step markers and no Steps line: the whole trace is analysed as one window",)
    )
    return Trace(source, events, steps, window, hostnames, notes)


def _event_names(
    planes: _Planes, event_plane: np.ndarray, ev: xs.Events, strings: _Strings
) -> tuple[np.ndarray, np.ndarray]:
    """Per event: the code of its name in ``strings``, and the index of its metadata in its
    plane's sorted ids (-1: no such metadata)."""
    n = event_plane.size
    has_events = np.bincount(event_plane, minlength=len(planes.names)) > 0
    tables, names = [], [np.zeros(1, dtype=np.int64)]
    for pi, (ids, plane_names, _) in enumerate(planes.event_md):
        codes = strings.codes(plane_names) if has_events[pi] and ids.size else np.zeros(0, np.int64)
        tables.append(ids if codes.size else ids[:0])
        names.append(codes)
    # one sorted key table over all planes: (plane, id) -> position in the concatenated names
    base = np.cumsum([0] + [t.size for t in tables])
    md = ev.metadata_id
    width = max((int(t.max()) + 1 for t in tables if t.size and t.min() >= 0), default=0)
    if width and all(t.min() >= 0 for t in tables if t.size) and width * len(tables) <= 4 * n + (1 << 20):
        lut = np.full((len(tables), width), -1, dtype=np.int64)
        for pi, t in enumerate(tables):
            lut[pi, t] = np.arange(t.size)
        inside = (md >= 0) & (md < width)
        local = lut.ravel()[event_plane * width + np.where(inside, md, 0)]
        local[~inside] = -1
    else:
        local = np.full(n, -1, dtype=np.int64)
        for pi, t in enumerate(tables):
            sel = np.flatnonzero(event_plane == pi)
            if not t.size or not sel.size:
                continue
            at = np.minimum(np.searchsorted(t, md[sel]), t.size - 1)
            local[sel] = np.where(t[at] == md[sel], at, -1)
    flat = np.concatenate(names)  # position 0: "" for events without metadata
    name_code = flat[np.where(local >= 0, base[event_plane] + local + 1, 0)]
    return name_code, local


@dataclass
class _Stat:
    """One wanted stat, per event: string code (-1 absent), integer value, and whether present."""

    code: np.ndarray  # int32
    num: np.ndarray  # int64
    present: np.ndarray  # bool
    any: bool = True  # False: no event has it (the arrays are shared and read-only)

    def writable(self) -> _Stat:
        """Own arrays (an absent stat shares read-only ones)."""
        if not self.code.flags.writeable:
            self.code = self.code.copy()
        if not self.num.flags.writeable:
            self.num = self.num.copy()
        if not self.present.flags.writeable:
            self.present = self.present.copy()
        self.any = True
        return self


def _shared(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _absent_stats(n: int) -> dict[str, _Stat]:
    code, num = _shared(np.full(n, -1, np.int32)), _shared(np.zeros(n, np.int64))
    present = _shared(np.zeros(n, bool))
    return {w: _Stat(code, num, present, any=False) for w in _WANTED}


def _wanted_stats(
    planes: _Planes, ev: xs.Events, event_plane: np.ndarray, wanted: _Wanted, strings: _Strings
) -> dict[str, _Stat]:
    n = ev.metadata_id.size
    out = _absent_stats(n)
    if not ev.stat_owner.size:
        return out
    if wanted.filter is not None:  # every stat read is wanted: which one, from the decoder's label
        hit = None
        w = ev.stat_label
    else:  # every stat was read: keep the wanted ones
        md = xs.stat_metadata_ids(ev)
        plane = event_plane[ev.stat_owner]
        keys, which = [], []
        for pi, table in enumerate(planes.stat_md):
            for sid, sname in table.items():
                if sname in _WANTED and 0 <= sid < (1 << 40):
                    keys.append((pi << 40) | sid)
                    which.append(_WANTED.index(sname))
        if not keys:
            return out
        order = np.argsort(keys)
        keys_a, which_a = np.array(keys, dtype=np.int64)[order], np.array(which, dtype=np.int64)[order]
        k = (plane << 40) | np.clip(md, 0, (1 << 40) - 1)
        loc = np.minimum(np.searchsorted(keys_a, k), keys_a.size - 1)
        hit = np.flatnonzero(keys_a[loc] == k)
        if not hit.size:
            return out
        w = which_a[loc[hit]]
    sel_ = (lambda a: a) if hit is None else (lambda a: a[hit])
    if ev.stat_values is not None:
        v = ev.stat_values
        vals = xs.StatValues(sel_(v.kind), sel_(v.num), sel_(v.str_start), sel_(v.str_len))
    else:
        head = sel_(ev.stat_head) if ev.stat_head is not None else None
        vals = xs.decode_stat_values(ev.buf, sel_(ev.stat_start), sel_(ev.stat_end), head)
    owner = sel_(ev.stat_owner)
    codes = _stat_string_codes(planes, ev.buf, vals, event_plane, owner, strings)
    nums = vals.as_int64
    no_num = out[_WANTED[0]].num
    for wi in used_codes(w).tolist():
        sel = np.flatnonzero(w == wi)
        o = owner[sel]
        code = np.full(n, -1, dtype=np.int32)
        code[o] = codes[sel]
        present = np.zeros(n, dtype=bool)
        present[o] = True
        num = nums[sel]
        if num.any():
            full = np.zeros(n, dtype=np.int64)
            full[o] = num
        out[_WANTED[wi]] = _Stat(code, full if num.any() else no_num, present)
    return out


def _stat_string_codes(
    planes: _Planes,
    buf: xs.Buffer,
    vals: xs.StatValues,
    event_plane: np.ndarray,
    owner: np.ndarray,
    strings: _Strings,
) -> np.ndarray:
    """Per stat (of event ``owner``): the code of its value as a string (refs resolved, numbers
    printed)."""
    codes = np.full(vals.kind.size, -1, dtype=np.int32)
    is_str = (vals.kind == xs.KIND_STR) | (vals.kind == xs.KIND_BYTES)
    if is_str.any():
        idx = np.flatnonzero(is_str)
        local, texts = xs.distinct_strings(buf, vals.str_start[idx], vals.str_len[idx])
        codes[idx] = strings.codes(texts)[local]
    is_ref = np.flatnonzero(vals.kind == xs.KIND_REF)
    if is_ref.size:
        ref = vals.num[is_ref].astype(np.int64) & ((1 << 40) - 1)
        width = int(ref.max()) + 1
        plane = event_plane[owner[is_ref]]
        if width * len(planes.names) <= 4 * ref.size + (1 << 20):  # small ids: a dense key
            key = plane * width + ref
            uniq = used_codes(key)
            lut = np.zeros(len(planes.names) * width, dtype=np.int64)
            lut[uniq] = strings.codes([planes.stat_md[int(u) // width].get(int(u) % width, "") for u in uniq])
            codes[is_ref] = lut[key]
        else:
            uniq, inv = np.unique((plane << 40) | ref, return_inverse=True)
            pairs = [(int(u) >> 40, int(u) & ((1 << 40) - 1)) for u in uniq]
            texts = [planes.stat_md[p].get(i, "") for p, i in pairs]
            codes[is_ref] = strings.codes(texts)[inv]
    is_num = np.flatnonzero((vals.kind == xs.KIND_INT64) | (vals.kind == xs.KIND_UINT64))
    if is_num.size:
        inv, uniq = pd.factorize(vals.num[is_num].view(np.int64))
        codes[is_num] = strings.codes([str(u) for u in uniq.tolist()])[inv]
    return codes


def _metadata_stat_fallback(
    planes: _Planes, event_plane: np.ndarray, md_index: np.ndarray, stats: dict[str, _Stat], strings: _Strings
) -> None:
    """Stats a writer put on the event metadata instead of each event (newer TensorFlow)."""
    n_planes = len(planes.names)
    has_events = np.bincount(event_plane, minlength=n_planes) > 0
    for pi, (ids, _, mds) in enumerate(planes.event_md):
        table: dict[str, dict[int, tuple[int, int]]] = {}
        for i, md in enumerate(mds):
            for st in md.stats:
                sname = planes.stat_md[pi].get(st.metadata_id)
                if sname not in _WANTED:
                    continue
                kind = st.WhichOneof("value")
                if kind == "ref_value":
                    text, num = planes.stat_md[pi].get(st.ref_value, ""), 0
                elif kind in ("str_value", "bytes_value"):
                    raw = getattr(st, kind)
                    text, num = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw), 0
                elif kind is None:
                    continue
                else:
                    num = int(getattr(st, kind))
                    text = str(num)
                table.setdefault(sname, {})[i] = (strings.code(text), num)
        if not table or not has_events[pi]:
            continue
        events = np.flatnonzero((event_plane == pi) & (md_index >= 0))
        local = md_index[events]
        for sname, entries in table.items():
            code_of = np.full(ids.size, -1, dtype=np.int64)
            num_of = np.zeros(ids.size, dtype=np.int64)
            for i, (c, v) in entries.items():
                code_of[i], num_of[i] = c, v
            st = stats[sname].writable()
            missing = ~st.present[events] & (code_of[local] >= 0)
            idx = events[missing]
            st.code[idx] = code_of[local[missing]]
            st.num[idx] = num_of[local[missing]]
            st.present[idx] = True


# ---------------------------------------------------------------------------------------------
# Classification: per distinct string, then broadcast through codes


@dataclass(frozen=True)
class CopyDetails:
    """A parsed ``memcpy_details`` string (either form)."""

    size: int
    dest: int
    kind_src: str
    kind_dst: str


def parse_memcpy_details(text: str) -> CopyDetails:
    """``kind_src:<k> kind_dst:<k> size:<n> dest:<d> async:<a>``, or the older ``size:.. dest:..``."""
    fields = dict(re.findall(r"(\w+):(\S+)", text))

    def as_int(key: str, default: int, limit: int) -> int:
        try:
            value = int(fields.get(key, default))
        except ValueError:
            return default
        return value if 0 <= value < limit else default

    return CopyDetails(
        as_int("size", 0, 1 << 62),
        as_int("dest", -1, 1 << 20),
        fields.get("kind_src", ""),
        fields.get("kind_dst", ""),
    )


def split_tf_op(text: str) -> tuple[str, str]:
    """``tf_op``/``annotation`` text -> (node name, op type); ``#...#`` decorations dropped."""
    clean = re.sub(r"#[^#]*#", "", text)
    parts = [p for p in clean.split("::") if p]
    if not parts:
        return "", ""
    last = parts[-1].strip()
    m = _TF_OP.match(last)
    return (m.group(1), m.group(2)) if m else (last, "")


_COPY_SUFFIX = {
    "h2d": "h2d",
    "htod": "h2d",
    "d2h": "d2h",
    "dtoh": "d2h",
    "d2d": "d2d",
    "dtod": "d2d",
    "p2p": "p2p",
    "ptop": "p2p",
    "peer": "p2p",
}


def _device_name_category(name: str) -> str:
    """Category of a device-plane event from its name; ``other_copy`` for MemcpyOther & co."""
    low = name.lower()
    if low.startswith("memcpy"):
        tail = low[6:].lstrip("_ ")
        for suffix, cat in _COPY_SUFFIX.items():
            if tail.startswith(suffix):
                return cat
        return "other_copy"
    if low.startswith("memset"):
        return "memset"
    if _COLLECTIVE.search(name):
        return "collective"
    return "compute"


def _host_name_category(name: str) -> tuple[str, str, str]:
    """(category, node, op type) of a host event name."""
    if name in MARKER_NAMES:
        return "marker", "", ""
    m = _TF_OP.match(name)
    if m:
        node, op_type = m.group(1), m.group(2)
        if op_type in SEND_RECV_TYPES:
            return "send_recv", node, op_type
        if _INPUT_TYPE.search(op_type):
            return "input", node, op_type
        return "host_compute", node, op_type
    if _INPUT_NAME.match(name):
        return "input", "", ""
    return "framework", "", ""


def _kind_of(memory_kind: str) -> str:
    k = memory_kind.lower()
    if k in ("device", "array"):
        return "d"
    if k in ("pageable", "pinned", "host", "managed"):
        return "h"
    return "?"


def _classify(
    planes: _Planes,
    event_plane: np.ndarray,
    name_code: np.ndarray,
    stats: dict[str, _Stat],
    strings: _Strings,
    node_devices: Mapping[str, str],
) -> dict[str, np.ndarray]:
    """Per event: category, device, tf_op, op_type, bytes, src/dst device and edge codes.

    Everything is decided once per distinct string (an event name, a ``tf_op`` text, a
    rendezvous key) into a lookup table over string codes, then read per event.
    """
    n = name_code.size
    kind = planes.kinds[event_plane]
    items = strings.items
    n_names = len(items)
    # per (plane kind, name): category, node and op type; kinds 0 host, 1 device, 2 other
    cat_lut = np.full((3, n_names), _CAT["other"], dtype=np.int8)
    node_lut = np.zeros((3, n_names), dtype=np.int32)
    type_lut = np.zeros((3, n_names), dtype=np.int32)
    other_copy = np.int8(-1)
    for c in used_codes(name_code).tolist():
        name = items[c]
        cat, node, op_type = _host_name_category(name)
        cat_lut[0, c], node_lut[0, c], type_lut[0, c] = _CAT[cat], strings.code(node), strings.code(op_type)
        dcat = _device_name_category(name)
        cat_lut[1, c] = other_copy if dcat == "other_copy" else _CAT[dcat]
    by_name = kind.astype(np.int64)
    by_name *= n_names
    by_name += name_code
    category = cat_lut.ravel()[by_name]
    tf_op = node_lut.ravel()[by_name]
    op_type = type_lut.ravel()[by_name]
    del by_name
    nbytes = np.zeros(n, dtype=np.int64)
    src = np.zeros(n, dtype=np.int32)
    dst = np.zeros(n, dtype=np.int32)
    edge = np.zeros(n, dtype=np.int32)
    device = strings.codes(planes.names).astype(np.int32)[event_plane]

    # --- host plane
    host = kind == 0
    if stats["step_num"].any:
        category[np.flatnonzero(host & stats["step_num"].present)] = _CAT["marker"]
    # ExecutorState::ProcessAsync events name their node in stats: recvs are send/recv time
    is_async = np.zeros(0, dtype=np.int64)
    if stats["name"].any and stats["kernel_type"].any:
        is_async = np.flatnonzero(host & (stats["name"].code >= 0) & (stats["kernel_type"].code >= 0))
    if is_async.size:
        is_send_recv = np.array([t in SEND_RECV_TYPES for t in strings.items], dtype=bool)
        ktc = stats["kernel_type"].code[is_async]
        category[is_async[is_send_recv[np.maximum(ktc, 0)]]] = _CAT["send_recv"]
        tf_op[is_async] = stats["name"].code[is_async]
        op_type[is_async] = ktc

    # send/recv endpoints from rendezvous keys, once per distinct key
    key = stats["key"].code
    has_key = np.flatnonzero(host & (key >= 0)) if stats["key"].any else None
    if has_key is not None and has_key.size:
        k = key[has_key]
        uniq = used_codes(k)
        parsed = [_parse_key(strings.items[u]) for u in uniq.tolist()]
        for out, part in ((src, 0), (dst, 1), (edge, 2)):
            lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
            lut[uniq] = strings.codes([p[part] for p in parsed])
            out[has_key] = lut[k]

    # host ops joined to devices through the partition graphs (else every event's device is its plane)
    if node_devices:
        mapped = np.flatnonzero(host & (tf_op > 0))
        uniq = used_codes(tf_op[mapped])
        dev = [
            canonical_device(node_devices[strings.items[u]]) if strings.items[u] in node_devices else None
            for u in uniq.tolist()
        ]
        target = np.full(int(uniq[-1]) + 1 if uniq.size else 1, -1, dtype=np.int64)
        target[uniq] = [strings.code(d) if d else -1 for d in dev]
        t = target[tf_op[mapped]]
        ok = t >= 0
        device[mapped[ok]] = t[ok]

    # --- device planes
    dv = kind == 1
    tf_code, ann_code = stats["tf_op"].code, stats["annotation"].code
    op_text = np.where(tf_code >= 0, tf_code, ann_code) if stats["annotation"].any else tf_code
    any_op = stats["tf_op"].any or stats["annotation"].any
    has_op = np.flatnonzero(dv & (op_text >= 0)) if any_op else np.zeros(0, dtype=np.int64)
    if has_op.size:
        text = op_text[has_op]
        uniq = used_codes(text)
        split = [split_tf_op(strings.items[u]) for u in uniq.tolist()]
        for out, part in ((tf_op, 0), (op_type, 1)):
            lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
            lut[uniq] = strings.codes([sp[part] for sp in split])
            out[has_op] = lut[text]
    _copies(planes, event_plane, dv, category, stats["memcpy_details"].code, strings, nbytes, src, dst)
    return {
        "category": category,
        "device": device,
        "tf_op": tf_op,
        "op_type": op_type,
        "bytes": nbytes,
        "src": src,
        "dst": dst,
        "edge": edge,
        "device_is_plane": np.array(not node_devices),
    }


def _parse_key(key: str) -> tuple[str, str, str]:
    """Rendezvous key ``src;incarnation;dst;edge;0:0`` -> (src, dst, edge)."""
    parts = key.split(";")
    if len(parts) < 4:
        return "", "", ""
    return canonical_device(parts[0]), canonical_device(parts[2]), parts[3]


def _copies(
    planes: _Planes,
    event_plane: np.ndarray,
    dv: np.ndarray,
    category: np.ndarray,
    details: np.ndarray,
    strings: _Strings,
    nbytes: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
) -> None:
    """Bytes, kind and endpoints of device copies, from ``memcpy_details`` parsed once per string;
    device-plane ``MemcpyOther`` events (category -1) become copies of the kind their memory
    kinds say, else device-to-device."""
    is_copy_cat = np.zeros(len(CATEGORIES) + 1, dtype=bool)  # indexed by category + 1
    is_copy_cat[[_CAT[c] + 1 for c in COPY_CATEGORIES] + [0]] = True
    idx = np.flatnonzero(dv & is_copy_cat[category + 1])
    if not idx.size:
        return
    plane = event_plane[idx]
    cat = category[idx]
    d = details[idx]
    has = np.flatnonzero(d >= 0)
    dest = np.full(idx.size, -1, dtype=np.int64)
    if has.size:
        dh = d[has]
        uniq = used_codes(dh)
        parsed = [parse_memcpy_details(strings.items[u]) for u in uniq.tolist()]
        width = int(uniq[-1]) + 1
        size_of, dest_of = np.zeros(width, dtype=np.int64), np.full(width, -1, dtype=np.int64)
        kinds_of = np.full(width, -1, dtype=np.int8)
        size_of[uniq] = [p.size for p in parsed]
        dest_of[uniq] = [p.dest for p in parsed]
        kinds_of[uniq] = [_CAT.get(_kinds_category(p) or "", -1) for p in parsed]
        nbytes[idx[has]] = size_of[dh]
        dest[has] = dest_of[dh]
        by_kinds = kinds_of[dh]
        fix = (cat[has] == -1) & (by_kinds >= 0)  # MemcpyOther: the memory kinds say which way
        cat[has[fix]] = by_kinds[fix]
    cat[cat == -1] = _CAT["d2d"]
    # device index of each plane, and the same device type's name for a destination index
    plane_index = np.array([_index_of(p) for p in planes.names], dtype=np.int64)
    own = plane_index[plane]
    peer = (cat == _CAT["d2d"]) & (dest >= 0) & (dest != own)
    cat[peer] = _CAT["p2p"]
    category[idx] = cat
    plane_code = strings.codes(planes.names)[plane]
    host_code = strings.code(HOST_PLANE)
    src[idx] = np.where(cat == _CAT["h2d"], host_code, plane_code)
    dst[idx] = np.where(cat == _CAT["d2h"], host_code, plane_code)
    p2p = np.flatnonzero(cat == _CAT["p2p"])
    dst[idx[p2p[dest[p2p] < 0]]] = 0  # a peer copy without details: destination unknown
    p2p = p2p[dest[p2p] >= 0]
    if p2p.size:
        width = int(dest[p2p].max()) + 1
        uniq, inv = dense_unique(plane[p2p] * width + dest[p2p])
        names = [_peer_name(planes.names[int(u) // width], int(u) % width) for u in uniq.tolist()]
        dst[idx[p2p]] = strings.codes(names)[inv]


def _kinds_category(p: CopyDetails) -> str | None:
    pair = _kind_of(p.kind_src) + _kind_of(p.kind_dst)
    return {"hd": "h2d", "dh": "d2h", "dd": "d2d"}.get(pair)


def _index_of(plane_name: str) -> int:
    m = _DEVICE_INDEX.match(plane_name)
    return int(m.group(2)) if m else -1


def _peer_name(plane_name: str, dest: int) -> str:
    m = _DEVICE_INDEX.match(plane_name)
    return f"{m.group(1)}{dest}" if m else f"/device:GPU:{dest}"


# ---------------------------------------------------------------------------------------------
# Steps


def _step_windows(
    planes: _Planes,
    event_plane: np.ndarray,
    start_ps: np.ndarray,
    dur_ps: np.ndarray,
    name_code: np.ndarray,
    step_num: _Stat,
    strings: _Strings,
    cols: dict[str, np.ndarray],
) -> tuple[pd.DataFrame, str]:
    """Step windows: ``train``-style markers (step_num), else the Steps line, else the whole trace."""
    k = planes.n_kept  # derived lines' events come after
    if step_num.any:
        marker = np.flatnonzero(step_num.present[:k] & (planes.kinds[event_plane[:k]] == 0))
        if marker.size:
            end_ps = start_ps[marker] + dur_ps[marker]
            return _windows(step_num.num[marker], start_ps[marker], end_ps), "markers"
    steps_line = np.array([n == "Steps" for n in planes.line_names], dtype=bool)
    on_steps = np.flatnonzero(steps_line[planes.event_line]) if steps_line.any() else np.zeros(0, np.int64)
    if on_steps.size:
        names = [strings.items[c] for c in used_codes(name_code[on_steps]).tolist()]
        number = {strings.code(nm): int(nm) for nm in names if nm.strip().lstrip("-").isdigit()}
        codes = name_code[on_steps]
        if len(number) == len(names):
            lut = np.zeros(len(strings.items), dtype=np.int64)
            for c, v in number.items():
                lut[c] = v
            step = lut[codes]
        else:  # step names that are not numbers: number them in order of name
            step = dense_unique(codes)[1].astype(np.int64)
        return _windows(step, start_ps[on_steps], start_ps[on_steps] + dur_ps[on_steps]), "steps-line"
    is_time = np.zeros(len(CATEGORIES), dtype=bool)
    is_time[[_CAT[c] for c in TIME_CATEGORIES]] = True
    counted = np.flatnonzero(is_time[cols["category"][:k]])
    if not counted.size:
        return _windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), "whole-trace"
    lo, hi = start_ps[counted].min(), (start_ps[counted] + dur_ps[counted]).max()
    return _windows(np.array([0]), np.array([lo]), np.array([hi])), "whole-trace"


def _windows(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """One window per step number (earliest start, latest end), sorted, overlaps trimmed."""
    df = pd.DataFrame(
        {"step": step.astype(np.int64), "start_ps": start.astype(np.int64), "end_ps": end.astype(np.int64)}
    )
    df = df.groupby("step", as_index=False).agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"))
    df = df.sort_values(["start_ps", "step"], kind="stable").reset_index(drop=True)
    if len(df) > 1:
        starts, ends = df["start_ps"].to_numpy(), df["end_ps"].to_numpy().copy()
        ends[:-1] = np.minimum(ends[:-1], starts[1:])
        df["end_ps"] = ends
    return df.astype({"step": "int64", "start_ps": "int64", "end_ps": "int64"})


def _assign_steps(start_ps: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Per event: the step whose window holds its start, else -1."""
    if not len(steps):
        return np.full(start_ps.size, -1, dtype=np.int64)
    ws = steps["start_ps"].to_numpy()
    we = steps["end_ps"].to_numpy()
    i = np.searchsorted(ws, start_ps, side="right") - 1
    ok = (i >= 0) & (start_ps < we[np.maximum(i, 0)])
    return np.where(ok, steps["step"].to_numpy()[np.maximum(i, 0)], -1)


# ---------------------------------------------------------------------------------------------
# Frames

EVENT_COLUMNS: dict[str, object] = {
    "plane": "category",
    "device": "category",
    "line": "category",
    "name": "category",
    "op_type": "category",
    "tf_op": "category",
    "start_ps": "int64",
    "dur_ps": "int64",
    "category": CATEGORY_DTYPE,
    "bytes": "int64",
    "src_device": "category",
    "dst_device": "category",
    "edge": "category",
    "step": "int64",
}


def empty_events() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})


def _categorical(codes: np.ndarray, strings: _Strings) -> pd.Categorical:
    """Codes into ``strings`` -> a Categorical holding only the categories used (in code order)."""
    used = used_codes(codes)
    remap = np.zeros(int(used[-1]) + 1 if used.size else 1, dtype=np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    return _from_codes(remap[codes], [strings.items[u] for u in used.tolist()])


def _categorical_by(group_codes: np.ndarray, groups: np.ndarray, present: np.ndarray, strings: _Strings):
    """:func:`_categorical` of ``group_codes[groups]``, working on the few groups (``present``:
    those that occur), not on every row."""
    used = np.unique(group_codes[present])
    per_group = np.searchsorted(used, group_codes).astype(np.int32)
    return _from_codes(per_group[groups], [strings.items[u] for u in used.tolist()])


def _from_codes(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories), validate=False)


def _frame(
    planes: _Planes,
    strings: _Strings,
    event_plane: np.ndarray,
    name_code: np.ndarray,
    start_ps: np.ndarray,
    dur_ps: np.ndarray,
    cols: dict[str, np.ndarray],
    step: np.ndarray,
) -> pd.DataFrame:
    """The ``events`` frame: the first ``n_kept`` events (derived lines come after them)."""
    k = planes.n_kept
    if not k:
        return empty_events()
    plane_codes = strings.codes(planes.names)
    line_codes = strings.codes(planes.line_names)
    lines = planes.event_line[:k]
    kept_lines = np.flatnonzero(~planes.line_derived & (planes.line_event_count > 0))
    category = cols["category"][:k]
    # work on tf.data threads is input, unless it is a TF op or marker of its own
    line_is_input = np.array([ln.startswith("tf_data") for ln in planes.line_names], dtype=bool)
    if line_is_input.any():
        on_input = line_is_input[lines] & (category == _CAT["framework"])
        category = np.where(on_input, _CAT["input"], category).astype(np.int8)
    return pd.DataFrame(
        {
            "plane": _categorical_by(plane_codes[planes.line_plane], lines, kept_lines, strings),
            "device": (
                _categorical_by(plane_codes[planes.line_plane], lines, kept_lines, strings)
                if cols["device_is_plane"]
                else _categorical(cols["device"][:k], strings)
            ),
            "line": _categorical_by(line_codes, lines, kept_lines, strings),
            "name": _categorical(name_code[:k], strings),
            "op_type": _categorical(cols["op_type"][:k], strings),
            "tf_op": _categorical(cols["tf_op"][:k], strings),
            "start_ps": start_ps[:k],
            "dur_ps": dur_ps[:k],
            "category": pd.Categorical.from_codes(category, dtype=CATEGORY_DTYPE, validate=False),
            "bytes": cols["bytes"][:k],
            "src_device": _categorical(cols["src"][:k], strings),
            "dst_device": _categorical(cols["dst"][:k], strings),
            "edge": _categorical(cols["edge"][:k], strings),
            "step": step.astype(np.int64),
        },
        copy=False,  # the columns are fresh arrays: no copy into consolidated blocks
    )
