"""TensorFlow meaning of raw XSpace events: category, device, TF node and op type, copies, send/recv.

Input: the reader's :class:`~tfprof_towers.xplane.RawSpace`, read with :data:`STATS`
(``memcpy_details`` as bytes, :data:`AS_BYTES`).  Everything is decided once per distinct
string (an event name, a ``tf_op`` text, a rendezvous key) into a lookup table over string
codes, then read per event; ``memcpy_details`` texts, nearly all distinct, are parsed with
numpy over their bytes (:mod:`.copies`).  Only the events of lines that are not derived
(the first ``n_kept``) are classified.

* host plane (``/host:CPU``): ``node:OpType`` names are TF ops -- ``_Send``/``_Recv``
  & co. are ``send_recv``, collective op types (:data:`COLLECTIVE_OP_TYPES`)
  ``collective``, ``Iterator``/``Dataset`` op types ``input``, the rest ``host_compute``;
  step and session annotations (and any event with ``step_num``) are markers; tf.data
  iterator events are ``input``; everything else ``framework``, or ``input`` on a
  ``tf_data*`` thread and ``collective`` on a ``collective_ops*`` thread.
  ``ExecutorState::ProcessAsync`` events name their node in the ``name``/``kernel_type``
  stats.  Rendezvous keys (``key``: ``src;incarnation;dst;edge;0:0``) give send/recv
  endpoints and edges.
* the node -> device join (``node_devices``, from the partition graphs): a host op of a node
  placed on a device *without a plane of its own* (a CPU device, logical or not) is that
  device's time.  A node placed on a device that has its own plane (a GPU) has its time
  on that plane's streams; its host-side event (the executor dispatching the op and
  launching its kernels) stays on the host threads as ``framework`` time.
* device planes: ``Memcpy*``/``Memset*`` names are copies and memsets (bytes,
  endpoints and peer copies from ``memcpy_details``, see :mod:`.copies`),
  NCCL-/collective-looking kernels ``collective``, other kernels ``compute``;
  ``tf_op`` (older: ``annotation``) names the TF op that launched a kernel.
* TPU chips' planes (``/device:TPU:<n>``): their ``XLA Ops`` line is read as the chip's ops (the line
  XProf's op statistics read for TPUs; the reader keeps it, :data:`~tfprof_towers.xplane.tables.TPU_PLANE`),
  named like kernels (collective-looking names ``collective``, the rest ``compute``).  Ops on that line
  nest (a ``while`` holds its body's ops): every op keeps its category, and the breakdown counts each by
  its self time, the innermost op owning each instant (:mod:`.nesting`) -- what XProf's self times add up
  to, a collective inside a loop staying a collective.
  ``XLA Modules``, ``Async XLA Ops`` (XProf leaves that line out of op time too), ``XLA TraceMe`` and
  ``Steps`` stay derived: never time.
* other planes: ``other``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.copies import classify_copies, details_columns
from tfprof_towers.trace.names import (
    COLLECTIVE_THREAD,
    INPUT_THREAD,
    SEND_RECV_TYPES,
    device_name_category,
    host_name_category,
    parse_rendezvous_key,
    split_tf_op,
)
from tfprof_towers.vocab.device_names import canonical_device, task_of
from tfprof_towers.xplane import DEVICE, HOST, RawSpace, StatColumn, Strings, used_codes

#: The stats classification, step windows and the launch join read (every other stat is skipped unread).
STATS = ("step_num", "memcpy_details", "tf_op", "annotation", "key", "name", "kernel_type", "correlation_id")
#: Stats read as raw bytes and parsed, a batch at a time, with numpy: never made into Python strings,
#: and only their numbers kept.
AS_BYTES = {"memcpy_details": details_columns}
STEP_NUM = "step_num"
#: TF node name -> the device it was placed on (a node of the same name on several tasks: all of them).
NodeDevices = Mapping[str, "str | Sequence[str]"]
CORRELATION_ID = "correlation_id"

#: A device copy whose direction only its ``memcpy_details`` tells (``MemcpyOther``).
OTHER_COPY = np.int8(-1)


@dataclass(frozen=True)
class Classes:
    """Per event (the first ``n_kept``): its TensorFlow meaning, as codes into the space's strings."""

    category: np.ndarray  # int8: index in EVENT_CATEGORIES
    device: np.ndarray  # int32 string code: the device the event's time belongs to
    tf_op: np.ndarray  # int32 string code: TF node name, 0 ("") when none
    op_type: np.ndarray  # int32 string code: TF op type
    bytes: np.ndarray  # int64: bytes copied
    src: np.ndarray  # int32 string code: copy / send source device
    dst: np.ndarray  # int32 string code: copy / send destination device
    edge: np.ndarray  # int32 string code: rendezvous edge name


def _at(column: StatColumn, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which of ``events`` have the stat, their positions in the column's arrays)."""
    if not column.any or not events.size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    at = np.minimum(np.searchsorted(column.index, events), column.index.size - 1)
    has = column.index[at] == events
    return np.flatnonzero(has), at[has]


def classify(
    raw: RawSpace, stats: Mapping[str, StatColumn], node_devices: NodeDevices | None = None, prefix: str = "",
) -> Classes:
    """The TensorFlow meaning of the first ``n_kept`` events of ``raw`` (``stats``: its :data:`STATS`).

    ``prefix``: a task's name (``/job:worker/task:1``) put before the name of every plane and
    of the devices named in ``memcpy_details`` (a multi-host analysis); ``node_devices``
    names devices as TensorFlow does (canonicalised; a name without a task gets ``prefix``;
    a node of the same name on several tasks may name them all: this host's task's is used).
    Adds the strings it derives (node names, op types, devices) to ``raw.strings``.
    """
    strings = raw.strings
    k = raw.n_kept
    plane_names = [prefix + p for p in raw.planes.names]
    kind = raw.planes.kinds.take(raw.event_plane[:k])  # take: no index copy
    category, tf_op, op_type = _by_name(raw.name[:k], kind, strings)
    nbytes = np.zeros(k, dtype=np.int64)
    src = np.zeros(k, dtype=np.int32)
    dst = np.zeros(k, dtype=np.int32)
    edge = np.zeros(k, dtype=np.int32)
    device = strings.codes(plane_names).astype(np.int32).take(raw.event_plane[:k])

    host = kind == HOST
    _host_stats(host, stats, strings, category, tf_op, op_type)
    _rendezvous(host, stats["key"], strings, src, dst, edge)
    _thread_categories(raw, category)
    if node_devices:  # host ops joined to devices through the partition graphs
        _join_devices(host, tf_op, node_devices, plane_names, prefix, strings, device, category)
    device_plane = kind == DEVICE
    _kernel_ops(device_plane, stats["tf_op"], stats["annotation"], strings, tf_op, op_type)
    classify_copies(raw, device_plane, category, stats["memcpy_details"], nbytes, src, dst, prefix)
    return Classes(category, device, tf_op, op_type, nbytes, src, dst, edge)


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
    by_name = kind.astype(np.int32 if 3 * n_names < (1 << 31) else np.int64)
    by_name *= n_names
    by_name += name_code
    return cat_lut.ravel().take(by_name), node_lut.ravel().take(by_name), type_lut.ravel().take(by_name)


def _host_stats(
    host: np.ndarray, stats: Mapping[str, StatColumn], strings: Strings, category: np.ndarray,
    tf_op: np.ndarray, op_type: np.ndarray,
) -> None:
    """Step markers (``step_num``), and ``ExecutorState::ProcessAsync`` events that name their node
    in stats: recvs are send/recv time."""
    step = stats[STEP_NUM]
    if step.any:
        marked = step.index[step.index < host.size]
        category[marked[host[marked]]] = CAT["marker"]
    name, kernel_type = stats["name"], stats["kernel_type"]
    if not (name.any and kernel_type.any):
        return
    both = np.intersect1d(name.index, kernel_type.index, assume_unique=True)
    both = both[both < host.size]
    both = both[host[both]]
    _, n_at = _at(name, both)
    _, k_at = _at(kernel_type, both)
    ok = (name.codes[n_at] >= 0) & (kernel_type.codes[k_at] >= 0)
    is_async, n_at, k_at = both[ok], n_at[ok], k_at[ok]
    if is_async.size:
        is_send_recv = np.array([t in SEND_RECV_TYPES for t in strings.items], dtype=bool)
        ktc = kernel_type.codes[k_at]
        category[is_async[is_send_recv[ktc]]] = CAT["send_recv"]
        tf_op[is_async] = name.codes[n_at]
        op_type[is_async] = ktc


def _rendezvous(
    host: np.ndarray, key: StatColumn, strings: Strings, src: np.ndarray, dst: np.ndarray, edge: np.ndarray
) -> None:
    """Send/recv endpoints and edge names from rendezvous keys, once per distinct key."""
    events = key.index[key.index < host.size] if key.any else np.zeros(0, dtype=np.int64)
    events = events[host[events]]
    _, at = _at(key, events)
    k = key.codes[at]
    ok = k >= 0
    events, k = events[ok], k[ok]
    if not events.size:
        return
    uniq = used_codes(k)
    parsed = [parse_rendezvous_key(strings.items[u]) for u in uniq.tolist()]
    for out, part in ((src, 0), (dst, 1), (edge, 2)):
        lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
        lut[uniq] = strings.codes([p[part] for p in parsed])
        out[events] = lut[k]


def _node_device(name: str | Sequence[str] | None, prefix: str) -> str | None:
    """The device a node's entry names for this host: of several (a node of the same name on every
    task of a cluster), the one of this host's task, else one named without a task."""
    if not name:
        return None
    names = [name] if isinstance(name, str) else list(name)
    devices = [canonical_device(n) for n in names]
    if prefix:
        own = [d for d in devices if task_of(d) == prefix]
        local = [prefix + d for d in devices if not task_of(d)]
        devices = own or local or devices
    return devices[0]


def _join_devices(
    host: np.ndarray, tf_op: np.ndarray, node_devices: NodeDevices, plane_names: list[str], prefix: str,
    strings: Strings, device: np.ndarray, category: np.ndarray,
) -> None:
    """Host ops of mapped nodes move to their node's device where it has no plane of its own; those
    of nodes on a device with a plane stay on the host threads, as ``framework`` time (module doc)."""
    mapped = np.flatnonzero(host & (tf_op > 0))
    uniq = used_codes(tf_op[mapped])
    with_plane = {canonical_device(p) for p in plane_names}
    target = np.full(int(uniq[-1]) + 1 if uniq.size else 1, -1, dtype=np.int64)
    launch = np.zeros(target.size, dtype=bool)
    for u in uniq.tolist():
        dev = _node_device(node_devices.get(strings.items[u]), prefix)
        if dev is None:
            continue
        if dev in with_plane:
            launch[u] = True
        else:
            target[u] = strings.code(dev)
    t = target[tf_op[mapped]]
    ok = t >= 0
    device[mapped[ok]] = t[ok]
    dispatch = mapped[launch[tf_op[mapped]]]
    dispatch = dispatch[category[dispatch] == CAT["host_compute"]]
    category[dispatch] = CAT["framework"]


def _kernel_ops(
    device_plane: np.ndarray, tf_op_stat: StatColumn, annotation: StatColumn, strings: Strings,
    tf_op: np.ndarray, op_type: np.ndarray,
) -> None:
    """Kernels' TF node and op type from ``tf_op``, else the older ``annotation``."""
    parts = []
    for column in (annotation, tf_op_stat):  # tf_op last: it wins
        if not column.any:
            continue
        keep = column.index < device_plane.size
        keep[keep] = device_plane[column.index[keep]]
        keep &= column.codes >= 0
        parts.append((column.index[keep], column.codes[keep]))
    if not parts:
        return
    if len(parts) == 1:
        events, text = parts[0]
    else:
        events = np.concatenate([e for e, _ in parts])
        text = np.concatenate([c for _, c in parts])
        order = np.argsort(events, kind="stable")
        events, text = events[order], text[order]
        last = np.r_[events[1:] != events[:-1], True] if events.size else np.zeros(0, bool)
        events, text = events[last], text[last]
    if not events.size:
        return
    uniq = used_codes(text)
    split = [split_tf_op(strings.items[u]) for u in uniq.tolist()]
    for out, part in ((tf_op, 0), (op_type, 1)):
        lut = np.zeros(int(uniq[-1]) + 1, dtype=np.int32)
        lut[uniq] = strings.codes([sp[part] for sp in split])
        out[events] = lut[text]


def _thread_categories(raw: RawSpace, category: np.ndarray) -> None:
    """Work on tf.data threads is input, on collective executor threads collective, unless it is a
    TF op or marker of its own."""
    k = raw.n_kept
    for prefix, cat in ((INPUT_THREAD, "input"), (COLLECTIVE_THREAD, "collective")):
        on = np.array([ln.startswith(prefix) for ln in raw.lines.names], dtype=bool)
        if not on.any():
            continue
        kept = category[:k]
        kept[on.take(raw.event_line[:k]) & (kept == CAT["framework"])] = CAT[cat]
