"""Device copies: bytes, direction and endpoints, from TensorFlow's ``memcpy_details`` stat.

``memcpy_details`` reads ``kind_src:<k> kind_dst:<k> size:<bytes> dest:<dev> async:<0|1>``
(older: ``size:<bytes> dest:<dev> async:<0|1>``); each distinct text is parsed once.  A
``MemcpyOther`` takes the direction its memory kinds say, else device-to-device; a
device-to-device copy whose ``dest`` is another device of the plane's type is a peer
(P2P) copy to that device.  Host-to-device copies come from, and device-to-host copies
go to, the host threads' plane (:data:`~tfprof_towers.device_names.HOST_THREADS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..categories import COPY_CATEGORIES, EVENT_CATEGORIES
from ..device_names import HOST_THREADS
from ..xplane import RawSpace, dense_unique, used_codes
from .codes import CAT

_DEVICE_INDEX = re.compile(r"^(/device:[A-Za-z_]+:)(\d+)$")


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


def _kind_of(memory_kind: str) -> str:
    k = memory_kind.lower()
    if k in ("device", "array"):
        return "d"
    if k in ("pageable", "pinned", "host", "managed"):
        return "h"
    return "?"


def _kinds_category(p: CopyDetails) -> str | None:
    pair = _kind_of(p.kind_src) + _kind_of(p.kind_dst)
    return {"hd": "h2d", "dh": "d2h", "dd": "d2d"}.get(pair)


def _index_of(plane_name: str) -> int:
    m = _DEVICE_INDEX.match(plane_name)
    return int(m.group(2)) if m else -1


def _peer_name(plane_name: str, dest: int) -> str:
    m = _DEVICE_INDEX.match(plane_name)
    return f"{m.group(1)}{dest}" if m else f"/device:GPU:{dest}"


def classify_copies(
    raw: RawSpace,
    device_plane: np.ndarray,
    category: np.ndarray,
    details: np.ndarray,
    nbytes: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
) -> None:
    """Bytes, kind and endpoints of device copies (in place), from ``memcpy_details`` (``details``:
    its string code per event, -1 when absent) parsed once per string; device-plane
    ``MemcpyOther`` events (category -1) become copies of the kind their memory kinds say, else
    device-to-device."""
    strings = raw.strings
    plane_names = list(raw.planes.names)
    is_copy_cat = np.zeros(len(EVENT_CATEGORIES) + 1, dtype=bool)  # indexed by category + 1
    is_copy_cat[[CAT[c] + 1 for c in COPY_CATEGORIES] + [0]] = True
    idx = np.flatnonzero(device_plane & is_copy_cat[category + 1])
    if not idx.size:
        return
    plane = raw.event_plane[idx]
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
        kinds_of[uniq] = [CAT.get(_kinds_category(p) or "", -1) for p in parsed]
        nbytes[idx[has]] = size_of[dh]
        dest[has] = dest_of[dh]
        by_kinds = kinds_of[dh]
        fix = (cat[has] == -1) & (by_kinds >= 0)  # MemcpyOther: the memory kinds say which way
        cat[has[fix]] = by_kinds[fix]
    cat[cat == -1] = CAT["d2d"]
    # device index of each plane, and the same device type's name for a destination index
    plane_index = np.array([_index_of(p) for p in plane_names], dtype=np.int64)
    own = plane_index[plane]
    peer = (cat == CAT["d2d"]) & (dest >= 0) & (dest != own)
    cat[peer] = CAT["p2p"]
    category[idx] = cat
    plane_code = strings.codes(plane_names)[plane]
    host_code = strings.code(HOST_THREADS)
    src[idx] = np.where(cat == CAT["h2d"], host_code, plane_code)
    dst[idx] = np.where(cat == CAT["d2h"], host_code, plane_code)
    p2p = np.flatnonzero(cat == CAT["p2p"])
    dst[idx[p2p[dest[p2p] < 0]]] = 0  # a peer copy without details: destination unknown
    p2p = p2p[dest[p2p] >= 0]
    if p2p.size:
        width = int(dest[p2p].max()) + 1
        uniq, inv = dense_unique(plane[p2p] * width + dest[p2p])
        names = [_peer_name(plane_names[int(u) // width], int(u) % width) for u in uniq.tolist()]
        dst[idx[p2p]] = strings.codes(names)[inv]
