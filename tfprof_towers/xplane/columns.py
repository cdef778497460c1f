"""Per-event columns: each event's name, and the values of the stats asked for by name.

Strings become codes once (:class:`~.strings.Strings`): event names through each plane's
metadata table, string stats through a hash of their bytes (or their ``ref_value``,
a stat-metadata entry whose name is the string), numbers printed once per distinct
value.  Only the stats asked for are decoded past their metadata_id (a
:class:`~.events.StatFilter` built from the planes' stat-metadata names), and the
stats of derived lines' events never are.  A stat a writer put on the event metadata
instead of each event (newer TensorFlow does) is read from there for events without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .events import (
    KIND_BYTES,
    KIND_INT64,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
    Events,
    StatFilter,
    StatValues,
    decode_stat_values,
    stat_metadata_ids,
)
from .strings import Strings, distinct_strings, used_codes
from .tables import Layout, StatColumn
from .wire import Buffer

#: At most this many stats can be asked for (their labels are int8 in the decoder).
MAX_STATS = 126


@dataclass(frozen=True)
class Wanted:
    """Which stats to read: per (plane, stat metadata id), the index of its name in ``names`` or -1."""

    names: tuple[str, ...]
    which: np.ndarray  # int8 [planes + 1, width]; the last row (derived lines) reads nothing
    filter: StatFilter | None  # None: ids too sparse for a table, read every stat


def wanted_table(layout: Layout, names: tuple[str, ...]) -> Wanted:
    index = {name: i for i, name in enumerate(names)}
    wanted = [
        {sid: index[name] for sid, name in table.items() if name in index and 0 <= sid < (1 << 40)}
        for table in layout.stat_md
    ]
    width = max((max(w) for w in wanted if w), default=-1) + 1
    if width > (1 << 16):
        return Wanted(names, np.zeros((0, 0), dtype=np.int8), None)
    which = np.full((len(wanted) + 1, max(width, 1)), -1, dtype=np.int8)
    for pi, ids in enumerate(wanted):
        which[pi, list(ids)] = list(ids.values())
    group = layout.lines.plane[layout.event_line]
    group[layout.n_kept :] = len(wanted)  # derived lines: their stats are never used
    return Wanted(names, which, StatFilter(group, which))


def event_names(
    layout: Layout, event_plane: np.ndarray, ev: Events, strings: Strings
) -> tuple[np.ndarray, np.ndarray]:
    """Per event: the code of its name in ``strings``, and the index of its metadata in its
    plane's sorted ids (-1: no such metadata)."""
    n = event_plane.size
    has_events = np.bincount(event_plane, minlength=len(layout.planes.names)) > 0
    tables, names = [], [np.zeros(1, dtype=np.int64)]
    for pi, (ids, plane_names, _) in enumerate(layout.event_md):
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


def _shared(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def absent_stats(n: int, names: Sequence[str]) -> dict[str, StatColumn]:
    code, num = _shared(np.full(n, -1, np.int32)), _shared(np.zeros(n, np.int64))
    present = _shared(np.zeros(n, bool))
    return {w: StatColumn(code, num, present, any=False) for w in names}


def _writable(st: StatColumn) -> StatColumn:
    """The same column with arrays of its own (an absent stat shares read-only ones)."""

    def own(a: np.ndarray) -> np.ndarray:
        return a if a.flags.writeable else a.copy()

    return StatColumn(own(st.code), own(st.num), own(st.present), True)


def stat_columns(
    layout: Layout, ev: Events, event_plane: np.ndarray, wanted: Wanted, strings: Strings
) -> dict[str, StatColumn]:
    """A column per wanted stat, from the stats the decoder kept."""
    names = wanted.names
    n = ev.metadata_id.size
    out = absent_stats(n, names)
    if not ev.stat_owner.size or not names:
        return out
    if wanted.filter is not None:  # every stat read is wanted: which one, from the decoder's label
        hit = None
        w = ev.stat_label
    else:  # every stat was read: keep the wanted ones
        md = stat_metadata_ids(ev)
        plane = event_plane[ev.stat_owner]
        keys, which = [], []
        index = {name: i for i, name in enumerate(names)}
        for pi, table in enumerate(layout.stat_md):
            for sid, sname in table.items():
                if sname in index and 0 <= sid < (1 << 40):
                    keys.append((pi << 40) | sid)
                    which.append(index[sname])
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
        vals = StatValues(sel_(v.kind), sel_(v.num), sel_(v.str_start), sel_(v.str_len))
    else:
        head = sel_(ev.stat_head) if ev.stat_head is not None else None
        vals = decode_stat_values(ev.buf, sel_(ev.stat_start), sel_(ev.stat_end), head)
    owner = sel_(ev.stat_owner)
    codes = _stat_string_codes(layout, ev.buf, vals, event_plane, owner, strings)
    nums = vals.as_int64
    no_num = out[names[0]].num
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
        out[names[wi]] = StatColumn(code, full if num.any() else no_num, present)
    return out


def _stat_string_codes(
    layout: Layout,
    buf: Buffer,
    vals: StatValues,
    event_plane: np.ndarray,
    owner: np.ndarray,
    strings: Strings,
) -> np.ndarray:
    """Per stat (of event ``owner``): the code of its value as a string (refs resolved, numbers
    printed)."""
    codes = np.full(vals.kind.size, -1, dtype=np.int32)
    is_str = (vals.kind == KIND_STR) | (vals.kind == KIND_BYTES)
    if is_str.any():
        idx = np.flatnonzero(is_str)
        local, texts = distinct_strings(buf, vals.str_start[idx], vals.str_len[idx])
        codes[idx] = strings.codes(texts)[local]
    is_ref = np.flatnonzero(vals.kind == KIND_REF)
    if is_ref.size:
        ref = vals.num[is_ref].astype(np.int64) & ((1 << 40) - 1)
        width = int(ref.max()) + 1
        plane = event_plane[owner[is_ref]]
        n_planes = len(layout.planes.names)
        if width * n_planes <= 4 * ref.size + (1 << 20):  # small ids: a dense key
            key = plane * width + ref
            uniq = used_codes(key)
            lut = np.zeros(n_planes * width, dtype=np.int64)
            lut[uniq] = strings.codes([layout.stat_md[int(u) // width].get(int(u) % width, "") for u in uniq])
            codes[is_ref] = lut[key]
        else:
            uniq, inv = np.unique((plane << 40) | ref, return_inverse=True)
            pairs = [(int(u) >> 40, int(u) & ((1 << 40) - 1)) for u in uniq]
            texts = [layout.stat_md[p].get(i, "") for p, i in pairs]
            codes[is_ref] = strings.codes(texts)[inv]
    is_num = np.flatnonzero((vals.kind == KIND_INT64) | (vals.kind == KIND_UINT64))
    if is_num.size:
        inv, uniq = pd.factorize(vals.num[is_num].view(np.int64))
        codes[is_num] = strings.codes([str(u) for u in uniq.tolist()])[inv]
    return codes


def metadata_stat_fallback(
    layout: Layout,
    event_plane: np.ndarray,
    md_index: np.ndarray,
    stats: dict[str, StatColumn],
    strings: Strings,
) -> dict[str, StatColumn]:
    """``stats`` with the stats a writer put on the event metadata instead of each event filled
    in for the events that lack them (a new dict; columns it changes get arrays of their own)."""
    stats = dict(stats)
    n_planes = len(layout.planes.names)
    has_events = np.bincount(event_plane, minlength=n_planes) > 0
    for pi, (ids, _, mds) in enumerate(layout.event_md):
        table: dict[str, dict[int, tuple[int, int]]] = {}
        for i, md in enumerate(mds):
            for st in md.stats:
                sname = layout.stat_md[pi].get(st.metadata_id)
                if sname not in stats:
                    continue
                kind = st.WhichOneof("value")
                if kind == "ref_value":
                    text, num = layout.stat_md[pi].get(st.ref_value, ""), 0
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
            st = stats[sname] = _writable(stats[sname])
            missing = ~st.present[events] & (code_of[local] >= 0)
            idx = events[missing]
            st.code[idx] = code_of[local[missing]]
            st.num[idx] = num_of[local[missing]]
            st.present[idx] = True
    return stats
