"""Event-name rules of TensorFlow traces: what a host or device event's name says it is.

The part another framework's traces would replace: :mod:`.classify` applies these rules once
per distinct string, and :mod:`.copies` uses the device-name rule for copies.  Pure Python.
"""

from __future__ import annotations

import re

from tfprof_towers.vocab.device_names import canonical_device

#: Host events that annotate steps or sessions rather than doing work.
MARKER_NAMES = frozenset({"train", "SessionRun", "TraceContext", "test", "eval", "predict"})
SEND_RECV_TYPES = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
_COLLECTIVE = re.compile(
    r"nccl|rccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|"
    r"collectivereduce",
    re.IGNORECASE,
)
_INPUT_NAME = re.compile(
    r"^(Iterator::|Prefetch|IteratorGetNext|MultiDeviceIterator|ParallelMap|MapAndBatch)"
)
_INPUT_TYPE = re.compile(r"Iterator|Dataset")
INPUT_THREAD = "tf_data"
COLLECTIVE_THREAD = "collective_ops"
#: TF op types that are collective communication (their host time is ``collective``).
COLLECTIVE_OP_TYPES = frozenset({
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3",
    "CollectiveGather", "CollectiveGatherV2",
    "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2", "CollectiveBcastRecvV2",
    "CollectiveAllToAllV2", "CollectiveAllToAllV3", "CollectiveReduceScatterV2",
    "CollectivePermute", "CollectiveAssignGroupV2", "CollectiveInitializeCommunicator",
    "NcclAllReduce", "NcclReduce", "NcclBroadcast", "_NcclReduceSend", "_NcclReduceRecv",
    "_NcclBroadcastSend", "_NcclBroadcastRecv", "XlaAllReduce", "XlaReduceScatter",
})
_TF_OP = re.compile(r"^([^:\s#]+):([A-Za-z_][A-Za-z0-9_]*)$")
_COPY_SUFFIX = {
    "h2d": "h2d", "htod": "h2d", "d2h": "d2h", "dtoh": "d2h", "d2d": "d2d", "dtod": "d2d", "p2p": "p2p",
    "ptop": "p2p", "peer": "p2p",
}


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
        if op_type in COLLECTIVE_OP_TYPES:
            return "collective", node, op_type
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
