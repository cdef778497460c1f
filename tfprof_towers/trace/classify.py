"""TensorFlow meaning of raw XSpace events: category, device, TF node and op type, copies, send/recv.

Input: the reader's :class:`~tfprof_towers.xplane.RawSpace`, read with :data:`STATS`.
Everything is decided once per distinct string (an event name, a ``tf_op`` text, a
rendezvous key, a ``memcpy_details`` text) into a lookup table over string codes,
then read per event:

* host plane (``/host:CPU``): ``node:OpType`` names are TF ops -- ``_Send``/``_Recv``
  & co. are ``send_recv``, ``Iterator``/``Dataset`` op types ``input``, the rest
  ``host_compute``; step and session annotations (and any event with ``step_num``)
  are markers; tf.data iterator events are ``input``; everything else
  ``framework``, or ``input`` on a ``tf_data*`` thread.  ``ExecutorState::ProcessAsync``
  events name their node in the ``name``/``kernel_type`` stats.  Rendezvous keys
  (``key``: ``src;incarnation;dst;edge;0:0``) give send/recv endpoints and edges;
  ``node_devices`` (the partition graphs' node -> device) moves host ops to their
  device.
* device planes: ``Memcpy*``/``Memset*`` names are copies and memsets (bytes,
  endpoints and peer copies from ``memcpy_details``, see :mod:`.copies`),
  NCCL-/collective-looking kernels ``collective``, other kernels ``compute``;
  ``tf_op`` (older: ``annotation``) names the TF op that launched a kernel.
* other planes: ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..device_names import canonical_device
from ..xplane import DEVICE, HOST, RawSpace, StatColumn, Strings, used_codes
from .codes import CAT
from .copies import classify_copies

#: The stats classification and step windows read (every other stat is skipped unread).
STATS = ("step_num", "memcpy_details", "tf_op", "annotation", "key", "name", "kernel_type")
STEP_NUM = "step_num"

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
_INPUT_THREAD = "tf_data"
_TF_OP = re.compile(r"^([^:\s#]+):([A-Za-z_][A-Za-z0-9_]*)$")
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
#: A device copy whose direction only its ``memcpy_details`` tells (``MemcpyOther``).
OTHER_COPY = np.int8(-1)


@dataclass(frozen=True)
class Classes:
    """Per event (all events, derived lines' last): its TensorFlow meaning, as codes."""

    category: np.ndarray  # int8: index in EVENT_CATEGORIES
    device: np.ndarray  # int32 string code: the device the event's time belongs to
    tf_op: np.ndarray  # int32 string code: TF node name, 0 ("") when none
    op_type: np.ndarray  # int32 string code: TF op type
    bytes: np.ndarray  # int64: bytes copied
    src: np.ndarray  # int32 string code: copy / send source device
    dst: np.ndarray  # int32 string code: copy / send destination device
    edge: np.ndarray  # int32 string code: rendezvous edge name
    device_is_plane: bool  # True: ``device`` is every event's plane (no node_devices join)


def split_tf_op(text: str) -> tuple[str, str]:
    """``tf_op``/``annotation`` text -> (node name, op type); ``#...#`` decorations dropped."""
    clean = re.sub(r"#[^#]*#", "", text)
    parts = [p for p in clean.split("::") if p]
    if not parts:
        return "", ""
    last = parts[-1].strip()
    m = _TF_OP.match(last)
    return (m.group(1), m.group(2)) if m else (last, "")


def device_name_category(name: str) -> str:
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


def host_name_category(name: str) -> tuple[str, str, str]:
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


def parse_rendezvous_key(key: str) -> tuple[str, str, str]:
    """Rendezvous key ``src;incarnation;dst;edge;0:0`` -> (src, dst, edge)."""
    parts = key.split(";")
    if len(parts) < 4:
        return "", "", ""
    return canonical_device(parts[0]), canonical_device(parts[2]), parts[3]


def classify(
    raw: RawSpace, stats: Mapping[str, StatColumn], node_devices: Mapping[str, str] | None = None
) -> Classes:
    """The TensorFlow meaning of every event of ``raw`` (``stats``: its columns of :data:`STATS`).

    Adds the strings it derives (node names, op types, devices) to ``raw.strings``.
    """
    node_devices = node_devices or {}
    strings = raw.strings
    kind = raw.planes.kinds[raw.event_plane]
    category, tf_op, op_type = _by_name(raw.name, kind, strings)
    n = raw.name.size
    nbytes = np.zeros(n, dtype=np.int64)
    src = np.zeros(n, dtype=np.int32)
    dst = np.zeros(n, dtype=np.int32)
    edge = np.zeros(n, dtype=np.int32)
    device = strings.codes(list(raw.planes.names)).astype(np.int32)[raw.event_plane]

    host = kind == HOST
    _host_stats(host, stats, strings, category, tf_op, op_type)
    _rendezvous(host, stats["key"], strings, src, dst, edge)
    if node_devices:  # host ops joined to devices through the partition graphs
        _join_devices(host, tf_op, node_devices, strings, device)
    device_plane = kind == DEVICE
    _kernel_ops(device_plane, stats["tf_op"], stats["annotation"], strings, tf_op, op_type)
    classify_copies(raw, device_plane, category, stats["memcpy_details"].code, nbytes, src, dst)
    _input_threads(raw, category)
    return Classes(category, device, tf_op, op_type, nbytes, src, dst, edge, not node_devices)


def _by_name(name_code: np.ndarray, kind: np.ndarray, strings: Strings) -> tuple[np.ndarray, ...]:
    """Per event, from its name and plane kind: category, node and op type codes."""
    items = strings.items
    n_names = len(items)
    # per (plane kind, name): category, node and op type; kinds 0 host, 1 device, 2 other
    cat_lut = np.full((3, n_names), CAT["other"], dtype=np.int8)
    node_lut = np.zeros((3, n_names), dtype=np.int32)
    type_lut = np.zeros((3, n_names), dtype=np.int32)
    for c in used_codes(name_code).tolist():
        name = items[c]
        cat, node, op_type = host_name_category(name)
        cat_lut[0, c], node_lut[0, c], type_lut[0, c] = CAT[cat], strings.code(node), strings.code(op_type)
        dcat = device_name_category(name)
        cat_lut[1, c] = OTHER_COPY if dcat == "other_copy" else CAT[dcat]
    by_name = kind.astype(np.int64)
    by_name *= n_names
    by_name += name_code
    return cat_lut.ravel()[by_name], node_lut.ravel()[by_name], type_lut.ravel()[by_name]


def _host_stats(
    host: np.ndarray,
    stats: Mapping[str, StatColumn],
    strings: Strings,
    category: np.ndarray,
    tf_op: np.ndarray,
    op_type: np.ndarray,
) -> None:
    """Step markers (``step_num``), and ``ExecutorState::ProcessAsync`` events that name their node
    in stats: recvs are send/recv time."""
    if stats[STEP_NUM].any:
        category[np.flatnonzero(host & stats[STEP_NUM].present)] = CAT["marker"]
    is_async = np.zeros(0, dtype=np.int64)
    if stats["name"].any and stats["kernel_type"].any:
        is_async = np.flatnonzero(host & (stats["name"].code >= 0) & (stats["kernel_type"].code >= 0))
    if is_async.size:
        is_send_recv = np.array([t in SEND_RECV_TYPES for t in strings.items], dtype=bool)
        ktc = stats["kernel_type"].code[is_async]
        category[is_async[is_send_recv[np.maximum(ktc, 0)]]] = CAT["send_recv"]
        tf_op[is_async] = stats["name"].code[is_async]
        op_type[is_async] = ktc


def _rendezvous(
    host: np.ndarray, key: StatColumn, strings: Strings, src: np.ndarray, dst: np.ndarray, edge: np.ndarray
) -> None:
    """Send/recv endpoints and edge names from rendezvous keys, once per distinct key."""
    has_key = np.flatnonzero(host & (key.code >= 0)) if key.any else None
    if has_key is None or not has_key.size:
        return
    k = key.code[has_key]
    uniq = used_codes(k)
    parsed = [parse_rendezvous_key(strings.items[u]) for u in uniq.tolist()]
    for out, part in ((src, 0), (dst, 1), (edge, 2)):
        lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
        lut[uniq] = strings.codes([p[part] for p in parsed])
        out[has_key] = lut[k]


def _join_devices(
    host: np.ndarray, tf_op: np.ndarray, node_devices: Mapping[str, str], strings: Strings, device: np.ndarray
) -> None:
    """Host ops of mapped nodes move to their node's device (else an event's device is its plane)."""
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


def _kernel_ops(
    device_plane: np.ndarray,
    tf_op_stat: StatColumn,
    annotation: StatColumn,
    strings: Strings,
    tf_op: np.ndarray,
    op_type: np.ndarray,
) -> None:
    """Kernels' TF node and op type from ``tf_op``, else the older ``annotation``."""
    tf_code, ann_code = tf_op_stat.code, annotation.code
    op_text = np.where(tf_code >= 0, tf_code, ann_code) if annotation.any else tf_code
    any_op = tf_op_stat.any or annotation.any
    has_op = np.flatnonzero(device_plane & (op_text >= 0)) if any_op else np.zeros(0, dtype=np.int64)
    if not has_op.size:
        return
    text = op_text[has_op]
    uniq = used_codes(text)
    split = [split_tf_op(strings.items[u]) for u in uniq.tolist()]
    for out, part in ((tf_op, 0), (op_type, 1)):
        lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
        lut[uniq] = strings.codes([sp[part] for sp in split])
        out[has_op] = lut[text]


def _input_threads(raw: RawSpace, category: np.ndarray) -> None:
    """Work on tf.data threads is input, unless it is a TF op or marker of its own."""
    line_is_input = np.array([ln.startswith(_INPUT_THREAD) for ln in raw.lines.names], dtype=bool)
    if not line_is_input.any():
        return
    k = raw.n_kept
    kept = category[:k]
    kept[line_is_input[raw.event_line[:k]] & (kept == CAT["framework"])] = CAT["input"]
