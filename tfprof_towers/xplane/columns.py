"""Per-event columns of one batch of lines: each event's name, and the stats asked for.

:class:`Tables` is what a decode needs from the planes' metadata, built once per space:
event names as codes (each plane's metadata table), which stat-metadata ids are wanted
(a :class:`~.events.StatFilter` table per plane) and the values a writer put on the
event metadata instead of each event (newer TensorFlow does; an event's own value wins).

:func:`batch_stats` turns the stats a batch's decode kept into sparse columns: strings
become codes once per distinct string in the batch (:func:`~.strings.distinct_strings`),
refs once per distinct ref, integers keep their value (their text is made only on demand);
a stat read *as bytes* keeps its raw bytes instead.  Only the stats asked for are decoded
past their metadata_id, and the stats of derived lines' events never are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tfprof_towers.xplane.events import (
    KIND_BYTES,
    KIND_DOUBLE,
    KIND_INT64,
    KIND_REF,
    KIND_STR,
    KIND_UINT64,
    Events,
    StatFilter,
    stat_metadata_ids,
)
from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.strings import PendingStrings, Strings, distinct_rows, distinct_strings
from tfprof_towers.xplane.tables import NUMBER, RowNames
from tfprof_towers.xplane.wire import PAD, Buffer

#: At most this many stats can be asked for (their labels are int8 in the decoder).
MAX_STATS = 126
_ID_BITS = 40


@dataclass(frozen=True)
class MetaValues:
    """A wanted stat on one plane's event metadata: per metadata (in sorted id order)."""

    has: np.ndarray  # bool
    codes: np.ndarray  # int32 (NUMBER for integers)
    nums: np.ndarray  # int64
    text: list[bytes]  # the value's text, for stats read as bytes


@dataclass(frozen=True)
class Tables:
    """The planes' metadata as lookup tables (see the module docstring)."""

    n_planes: int
    stat_md: list[dict[int, str]]  # per plane: stat metadata id -> name
    md_ids: list[np.ndarray]  # per plane: its event metadata ids, sorted
    name_codes: list[np.ndarray]  # per plane: the code of each one's name (aligned with md_ids)
    names: tuple[str, ...]  # the stats asked for
    as_bytes: tuple[bool, ...]  # per stat asked for: read as raw bytes
    parsers: tuple[Parser | None, ...]  # per stat asked for: what turns a batch's bytes into columns
    name_lut: np.ndarray | None  # int64 [planes, width]: name code per (plane, metadata id), small ids
    local_lut: np.ndarray | None  # int64 [planes, width]: index in md_ids per (plane, metadata id), or -1
    which: np.ndarray | None  # int8 [planes + 1, width]: stat label per (plane, id); last row: derived
    sparse_keys: tuple[np.ndarray, np.ndarray] | None  # ids too sparse for ``which``: sorted keys, labels
    fallback: dict[int, list[MetaValues | None]]  # stat label -> per plane


#: Turns the raw bytes of a stat's values (one row per value) into columns (one entry per row);
#: given the names of the rows' events where the reader has them (else None).
Parser = Callable[[Ragged, "RowNames | None"], Mapping[str, np.ndarray]]


def build_tables(
    planes: list,
    with_lines: np.ndarray,
    names: tuple[str, ...],
    as_bytes: Mapping[str, Parser | None],
    strings: Strings,
) -> Tables:
    """The lookup tables of a space's planes (``with_lines``: which planes have lines); ``as_bytes``:
    the stats read as bytes, with their parsers (None: keep the bytes)."""
    stat_md = [{k: v.name for k, v in p.stat_metadata.items()} for p in planes]
    md_ids, name_codes, messages = [], [], []
    for pi, p in enumerate(planes):
        md = p.event_metadata
        ids = np.array(sorted(md.keys()), dtype=np.int64)
        md_ids.append(ids)
        name_codes.append(strings.codes([md[i].name for i in ids.tolist()]) if with_lines[pi] else ids * 0)
        messages.append([md[i] for i in ids.tolist()] if with_lines[pi] else [])
    index = {name: i for i, name in enumerate(names)}
    wanted = [
        {sid: index[name] for sid, name in table.items() if name in index and 0 <= sid < (1 << _ID_BITS)}
        for table in stat_md
    ]
    width = max((max(w) for w in wanted if w), default=-1) + 1
    which, sparse = None, None
    if width <= (1 << 16):
        which = np.full((len(planes) + 1, max(width, 1)), -1, dtype=np.int8)
        for pi, ids in enumerate(wanted):
            which[pi, list(ids)] = list(ids.values())
    else:
        keys = sorted(
            ((pi << _ID_BITS) | sid, label) for pi, ids in enumerate(wanted) for sid, label in ids.items()
        )
        sparse = (
            np.array([k for k, _ in keys], dtype=np.int64),
            np.array([w for _, w in keys], dtype=np.int8),
        )
    raw = tuple(name in as_bytes for name in names)
    parsers = tuple(as_bytes.get(name) for name in names)
    fallback = _metadata_values(stat_md, messages, index, raw, strings)
    name_lut, local_lut = _name_luts(md_ids, name_codes)
    return Tables(
        len(planes), stat_md, md_ids, name_codes, names, raw, parsers, name_lut, local_lut, which, sparse,
        fallback,
    )


def _name_luts(md_ids: list[np.ndarray], name_codes: list[np.ndarray]) -> tuple[np.ndarray | None, ...]:
    """Dense (plane, metadata id) tables of name codes and sorted-id indices, where the ids are small."""
    width = max((int(ids.max()) + 1 for ids in md_ids if ids.size), default=1)
    if any(ids.size and ids.min() < 0 for ids in md_ids) or width * len(md_ids) > (1 << 22):
        return None, None
    name_lut = np.zeros((len(md_ids), width), dtype=np.int64)
    local_lut = np.full((len(md_ids), width), -1, dtype=np.int64)
    for pi, (ids, codes) in enumerate(zip(md_ids, name_codes)):
        if ids.size and codes.size:
            name_lut[pi, ids] = codes
            local_lut[pi, ids] = np.arange(ids.size)
    return name_lut, local_lut


def _metadata_values(
    stat_md: list[dict[int, str]], messages: list[list], index: dict[str, int], raw: tuple[bool, ...],
    strings: Strings,
) -> dict[int, list[MetaValues | None]]:
    out: dict[int, list[MetaValues | None]] = {}
    for pi, mds in enumerate(messages):
        for i, md in enumerate(mds):
            for st in md.stats:
                label = index.get(stat_md[pi].get(st.metadata_id, ""))
                kind = st.WhichOneof("value")
                if label is None or kind is None:
                    continue
                per_plane = out.setdefault(label, [None] * len(messages))
                if per_plane[pi] is None:
                    n = len(mds)
                    per_plane[pi] = MetaValues(
                        np.zeros(n, bool), np.full(n, -1, np.int32), np.zeros(n, np.int64), [b""] * n
                    )
                v = per_plane[pi]
                if kind == "ref_value":
                    text, code, num = stat_md[pi].get(st.ref_value, ""), None, st.ref_value
                elif kind in ("str_value", "bytes_value"):
                    value = getattr(st, kind)
                    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                    code, num = None, 0
                elif kind == "double_value":
                    text, code, num = str(st.double_value), -1, int(st.double_value)
                else:
                    num = int(getattr(st, kind))
                    text, code = str(num), NUMBER
                v.has[i] = True
                v.nums[i] = num
                v.codes[i] = -1 if raw[label] else (strings.code(text) if code is None else code)
                v.text[i] = text.encode()
    return out


def event_names(tables: Tables, plane: np.ndarray, md: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event (of plane ``plane`` and metadata id ``md``): its name's code (0, ``""``, without
    metadata), and its metadata's index in the plane's sorted ids (-1: none)."""
    if tables.name_lut is not None:  # small ids: one lookup
        width = tables.name_lut.shape[1]
        inside = (md >= 0) & (md < width)
        key = plane.astype(np.int64) * width + np.where(inside, md, 0)
        local = tables.local_lut.ravel()[key]
        code = tables.name_lut.ravel()[key]
        if not inside.all():
            local[~inside], code[~inside] = -1, 0
        return code, local
    code = np.zeros(md.size, dtype=np.int64)
    local = np.full(md.size, -1, dtype=np.int64)
    for pi in np.flatnonzero(np.bincount(plane, minlength=tables.n_planes)).tolist():
        ids = tables.md_ids[pi]
        if not ids.size:
            continue
        sel = np.flatnonzero(plane == pi) if tables.n_planes > 1 else np.arange(md.size)
        at = np.minimum(np.searchsorted(ids, md[sel]), ids.size - 1)
        ok = ids[at] == md[sel]
        local[sel] = np.where(ok, at, -1)
        code[sel] = np.where(ok, tables.name_codes[pi][at], 0)
    return code, local


def stat_filter(tables: Tables, group: np.ndarray) -> StatFilter | None:
    return None if tables.which is None else StatFilter(group, tables.which)


@dataclass(frozen=True)
class StatPart:
    """One stat's values in one batch, for the events that have it (``owner``, ascending)."""

    owner: np.ndarray  # int64
    codes: np.ndarray  # int32
    nums: np.ndarray  # int64
    text: Ragged | None  # stats read as bytes
    parsed: Mapping[str, np.ndarray] | None = None  # stats read with a parser (``text`` then None)
    reals: np.ndarray | None = None  # float64 per owner, only where some value is a double (exact)


def batch_stats(
    buf: Buffer,
    ev: Events,
    plane: np.ndarray,
    kept: np.ndarray,
    md_local: np.ndarray,
    tables: Tables,
    strings: PendingStrings,
    names: np.ndarray | None = None,
) -> dict[int, StatPart]:
    """The stats a batch's decode kept, per label (see the module docstring); ``kept``: per event of
    the batch, False on derived lines (their stats are dropped); ``names``: per event, its name's
    code (handed to parsers)."""
    owner = ev.stat_owner
    if tables.which is not None:
        label = ev.stat_label if ev.stat_label is not None else np.zeros(0, np.int8)
    else:  # every stat was read: keep the wanted ones
        keys, labels = tables.sparse_keys
        md = stat_metadata_ids(ev)
        k = (plane[owner] << _ID_BITS) | np.clip(md, 0, (1 << _ID_BITS) - 1)
        at = np.minimum(np.searchsorted(keys, k), max(keys.size - 1, 0))
        label = np.where(keys[at] == k, labels[at], -1) if keys.size else np.full(k.size, -1, np.int8)
    label = np.where(kept[owner], label, -1) if not kept.all() else label
    out = {}
    vals = ev.stat_values
    n_labels = len(tables.names)
    used = np.bincount(label.astype(np.int64) + 1, minlength=n_labels + 1)[1:]
    for wi in range(n_labels):
        meta = _meta_part(tables, wi, plane, kept, md_local) if wi in tables.fallback else None
        if not used[wi] and meta is None:
            continue
        sel = np.flatnonzero(label == wi)
        o = owner[sel]
        kind, num, s, ln = vals.kind[sel], vals.num[sel], vals.str_start[sel], vals.str_len[sel]
        nums = num.view(np.int64).copy()
        dbl = np.flatnonzero(kind == KIND_DOUBLE)
        reals = None
        if dbl.size:
            reals = nums.astype(np.float64)
            reals[dbl] = num[dbl].view(np.float64)
            nums[dbl] = as_int64(reals[dbl])
        parser = tables.parsers[wi]
        inline = (kind == KIND_STR) | (kind == KIND_BYTES)
        if parser is not None and meta is None and inline.all() and _ascending(o):
            # the usual case: texts in the file, one per event, in order: parse them from there
            codes = np.broadcast_to(np.int32(-1), o.shape)
            row_names = RowNames(names[o], strings.table) if names is not None else None
            out[wi] = StatPart(o, codes, nums, None, parse_distinct(parser, buf, s, ln, row_names))
            continue
        if tables.as_bytes[wi]:
            codes = np.full(sel.size, -1, dtype=np.int32)
            text = _value_bytes(buf, tables, plane[o], kind, num, s, ln)
        else:
            codes, text = _value_codes(buf, tables, plane[o], kind, num, s, ln, strings), None
        part = _merge(meta, StatPart(o, codes, nums, text, None, reals))
        if parser is not None:
            text = part.text.packed()
            padded = Buffer.wrap(np.concatenate([text.data, np.zeros(PAD, np.uint8)]), text.data.size)
            part = StatPart(part.owner, part.codes, part.nums, None, parse_distinct(
                parser, padded, text.starts, text.lengths
            ))
        out[wi] = part
    return out


def as_int64(reals: np.ndarray) -> np.ndarray:
    """Double stat values as the int64 column holds them: truncated; 0 where the value has no int64
    (NaN, an infinity, beyond +-2**63: numpy's cast of those is undefined and warns).  The exact
    value stays in the float column."""
    out = np.zeros(reals.shape, dtype=np.int64)
    ok = np.isfinite(reals) & (np.abs(reals) < 2.0**63)
    out[ok] = reals[ok].astype(np.int64)
    return out


def _ascending(a: np.ndarray) -> bool:
    return a.size < 2 or bool((a[1:] > a[:-1]).all())


#: Rows sampled to decide whether texts repeat enough to parse each distinct one only once.
SAMPLE = 1024


def parse_distinct(
    parser: Parser, buf: Buffer, start: np.ndarray, length: np.ndarray, names: RowNames | None = None
) -> dict[str, np.ndarray]:
    """``parser`` of the texts ``buf[start:start + length]`` (of events named ``names``), parsing each
    distinct text once where they repeat (a sample of them says whether grouping them is worth its
    hashing; each is then parsed fully, names unseen); only the texts parsed are copied out of ``buf``."""
    rows = start.size
    if rows > 2 * SAMPLE:
        sample = np.linspace(0, rows - 1, SAMPLE).astype(np.int64)
        _, first = distinct_rows(buf, start[sample], length[sample])
        if first.size <= SAMPLE // 2:  # they repeat: parse each once
            group, first = distinct_rows(buf, start, length)
            parsed = parser(Ragged.gather(buf.u8, start[first], length[first]), None)
            return {k: v[group] for k, v in parsed.items()}
    return dict(parser(_in_place(buf, start, length), names))


def _in_place(buf: Buffer, start: np.ndarray, length: np.ndarray) -> Ragged:
    """The texts as a Ragged over the file's own bytes (a view: nothing copied) where they lie in
    order in a stretch not much longer than themselves -- the events between them are then read
    over too by a parser that scans bytes -- else copied out (:meth:`Ragged.gather`)."""
    if not start.size:
        return Ragged.gather(buf.u8, start, length)
    lo, hi = int(start[0]), int(start[-1] + length[-1])
    spread = hi - lo
    if lo < 8 or hi + 24 > buf.u8.size or spread > 4 * int(length.sum()) + 4096 or not _ascending(start):
        return Ragged.gather(buf.u8, start, length)
    window = buf.u8[lo - 8 : hi + 24]  # a word before the first text, three after the last (as gather)
    return Ragged(window, length, start - (lo - 8))


def _value_codes(
    buf: Buffer, tables: Tables, plane: np.ndarray, kind: np.ndarray, num: np.ndarray,
    s: np.ndarray, ln: np.ndarray, strings: PendingStrings,
) -> np.ndarray:
    codes = np.full(kind.size, -1, dtype=np.int32)
    is_str = np.flatnonzero((kind == KIND_STR) | (kind == KIND_BYTES))
    if is_str.size:
        local, texts = distinct_strings(buf, s[is_str], ln[is_str])
        codes[is_str] = strings.codes(texts)[local]
    is_ref = np.flatnonzero(kind == KIND_REF)
    if is_ref.size:
        codes[is_ref] = _ref_codes(tables, plane[is_ref], num[is_ref].astype(np.int64), strings)
    codes[(kind == KIND_INT64) | (kind == KIND_UINT64)] = NUMBER
    return codes


def _ref_codes(tables: Tables, plane: np.ndarray, ref: np.ndarray, strings: PendingStrings) -> np.ndarray:
    """The codes of the stat-metadata names refs point at (each distinct (plane, ref) looked up once)."""
    ref = ref & ((1 << _ID_BITS) - 1)
    width = int(ref.max()) + 1
    if width * tables.n_planes <= 4 * ref.size + (1 << 16):  # small ids: a dense key, no sort
        key = plane.astype(np.int64) * width + ref
        uniq = np.flatnonzero(np.bincount(key))
        lut = np.zeros(tables.n_planes * width, dtype=np.int32)
        lut[uniq] = strings.codes([tables.stat_md[int(u) // width].get(int(u) % width, "") for u in uniq])
        return lut[key]
    uniq, inv = np.unique((plane.astype(np.int64) << _ID_BITS) | ref, return_inverse=True)
    texts = [tables.stat_md[int(u) >> _ID_BITS].get(int(u) & ((1 << _ID_BITS) - 1), "") for u in uniq]
    return strings.codes(texts)[inv.ravel()]


def _value_bytes(
    buf: Buffer, tables: Tables, plane: np.ndarray, kind: np.ndarray, num: np.ndarray,
    s: np.ndarray, ln: np.ndarray,
) -> Ragged:
    """Each value's bytes: strings as they are, refs' names, numbers in decimal (rare: one by one)."""
    is_str = (kind == KIND_STR) | (kind == KIND_BYTES)
    strs = np.flatnonzero(is_str)
    got = Ragged.gather(buf.u8, s[strs], ln[strs])
    other = np.flatnonzero(~is_str & (kind > 0))
    if strs.size == kind.size:
        return got
    rows = []
    for k, v, p in zip(kind[other].tolist(), num[other].tolist(), plane[other].tolist()):
        if k == KIND_REF:
            rows.append(tables.stat_md[p].get(v & ((1 << _ID_BITS) - 1), "").encode())
        elif k == KIND_DOUBLE:
            rows.append(str(np.uint64(v).view(np.float64)).encode())
        else:
            rows.append(str(np.uint64(v).view(np.int64)).encode())
    lengths = np.zeros(kind.size, dtype=np.int64)
    lengths[strs] = got.lengths
    lengths[other] = [len(r) for r in rows]
    out = Ragged(np.empty(int(lengths.sum()), dtype=np.uint8), lengths)
    starts = out.starts
    got = got.packed()
    if got.data.size:
        out.data[np.repeat(starts[strs] - got.starts, got.lengths) + np.arange(got.data.size)] = got.data
    for i, r in zip(other.tolist(), rows):
        out.data[starts[i] : starts[i] + len(r)] = np.frombuffer(r, dtype=np.uint8)
    return out


def _meta_part(
    tables: Tables, wi: int, plane: np.ndarray, kept: np.ndarray, md_local: np.ndarray
) -> StatPart | None:
    """The values events inherit from their metadata (for every kept event whose metadata has one)."""
    per_plane = tables.fallback.get(wi)
    if per_plane is None:
        return None
    owners, parts = [], []
    for pi, v in enumerate(per_plane):
        if v is None:
            continue
        ev = np.flatnonzero((plane == pi) & kept & (md_local >= 0))
        ev = ev[v.has[md_local[ev]]]
        if ev.size:
            owners.append(ev)
            parts.append((v, md_local[ev]))
    if not owners:
        return None
    owner = np.concatenate(owners)
    codes = np.concatenate([v.codes[i] for v, i in parts])
    nums = np.concatenate([v.nums[i] for v, i in parts])
    text = None
    if tables.as_bytes[wi]:
        text = Ragged.of([v.text[j] for v, i in parts for j in i.tolist()])
    return StatPart(owner, codes, nums, text)


def _merge(meta: StatPart | None, own: StatPart) -> StatPart:
    """Own values over inherited ones; sorted by event; a stat repeated in one event: the last wins."""
    if meta is None and _ascending(own.owner):
        return own  # the usual case: at most one per event, in order
    parts = [own] if meta is None else [meta, own]
    owner = np.concatenate([p.owner for p in parts])
    order = np.argsort(owner, kind="stable")
    o = owner[order]
    last = np.flatnonzero(np.r_[o[1:] != o[:-1], True]) if o.size else o
    pick = order[last]
    text = None
    if own.text is not None:
        text = Ragged.concatenate([p.text for p in parts]).take(pick)
    reals = None
    if own.reals is not None:
        reals = np.concatenate([p.nums.astype(np.float64) if p.reals is None else p.reals for p in parts])
        reals = reals[pick]
    return StatPart(
        o[last],
        np.concatenate([p.codes for p in parts])[pick],
        np.concatenate([p.nums for p in parts])[pick],
        text,
        None,
        reals,
    )
