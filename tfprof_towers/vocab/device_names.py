"""Device names: the one place that parses, canonicalises, sorts and classifies them.

TensorFlow spells one device many ways: ``/cpu:1``, ``/device:CPU:1``,
``/job:localhost/replica:0/task:0/device:CPU:1``, ``CPU:1``.  Everything the
tool stores or shows uses the canonical form of :func:`canonical_device`:

* a device of TensorFlow's in-process runtime (job ``localhost``, or no job at
  all) is ``/device:<TYPE>:<index>`` -- ``/device:CPU:1``;
* a device of a cluster task keeps its job and task (replica is always 0 and is
  dropped): ``/job:worker/task:1/device:CPU:0``; a task without a device part is
  ``/job:worker/task:1``;
* the profiler's host plane ``/host:CPU`` (:data:`HOST_THREADS`), a cluster task's host
  threads ``/job:worker/task:1/host:CPU`` (a multi-host
  analysis names each host's threads so) and anything that is not a device name are
  returned unchanged.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The profiler's plane of host threads: host-side events that no device owns.
HOST_THREADS = "/host:CPU"
#: The job of TensorFlow's single-process runtime: its job and task carry no information.
LOCAL_JOB = "localhost"

_PART = re.compile(r"(?:^|/)(job|replica|task|device):([^/]*)", re.IGNORECASE)
_TYPED = re.compile(r"^(?:device:)?([A-Za-z_][A-Za-z0-9_]*):(\d+)$", re.IGNORECASE)
_SHORT = re.compile(r"(?:^|/)([A-Za-z_][A-Za-z0-9_]*):(\d+)$")


@dataclass(frozen=True)
class DeviceName:
    """The parts of a device name; ``None`` where the name has no such part."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    type: str | None = None
    index: int | None = None

    @property
    def is_device(self) -> bool:
        return self.type is not None and self.index is not None

    @property
    def in_cluster(self) -> bool:
        """True for a cluster task's device (a job other than ``localhost``)."""
        return self.job is not None and self.job != LOCAL_JOB

    @property
    def task_prefix(self) -> str:
        """``/job:worker/task:1`` for a cluster task's device, else ``""``."""
        if not self.in_cluster:
            return ""
        return f"/job:{self.job}" + (f"/task:{self.task}" if self.task is not None else "")

    def canonical(self) -> str:
        local = f"/device:{self.type}:{self.index}" if self.is_device else ""
        return self.task_prefix + local


def short_device(name: str) -> str:
    """``/device:GPU:0`` -> ``GPU:0`` (a task's device keeps its task: ``/job:w/task:1/GPU:0``); other
    names unchanged."""
    d = parse_device(name)
    if d is None or not d.is_device:
        return name
    return (d.task_prefix + "/" if d.task_prefix else "") + f"{d.type}:{d.index}"


def parse_device(name: str) -> DeviceName | None:
    """The parts of ``name``; ``None`` when it is not a device or task name (``/host:CPU``,
    ``/job:worker/task:1/host:CPU``, ``""``)."""
    text = (name or "").strip()
    if not text or is_host_threads(text):
        return None
    parts = {k.lower(): v for k, v in _PART.findall(text)}
    if not parts:
        m = _SHORT.search(text)  # "/cpu:1", "GPU:0"
        if not m or text.count("/") > 1:
            return None
        return DeviceName(type=m.group(1).upper(), index=int(m.group(2)))
    dtype = index = None
    if "device" in parts:
        m = _TYPED.match(parts["device"])
        if m:
            dtype, index = m.group(1).upper(), int(m.group(2))
    if dtype is None:
        m = _SHORT.search(text)  # "/job:x/replica:0/task:0/cpu:1"
        if m and m.group(1).lower() not in ("job", "replica", "task", "device"):
            dtype, index = m.group(1).upper(), int(m.group(2))
    return DeviceName(
        job=parts.get("job") or None, replica=_int(parts.get("replica")), task=_int(parts.get("task")),
        type=dtype, index=index,
    )


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


@functools.lru_cache(maxsize=1 << 16)
def canonical_device(name: str) -> str:
    """The canonical spelling of a device name (see the module docstring); others unchanged (cached: a
    trace's or a placement's thousands of ops name a few devices)."""
    parsed = parse_device(name)
    if parsed is None or not (parsed.is_device or parsed.in_cluster):
        return name
    return parsed.canonical()


def is_host_threads(name: str) -> bool:
    """True for the profiler's host plane, ``/host:CPU``, of a single process or of a task."""
    return name.startswith("/host:") or (name.startswith("/job:") and "/host:" in name)


@functools.lru_cache(maxsize=1 << 16)
def task_of(name: str) -> str:
    """``/job:worker/task:1`` for a cluster task's device or host threads, else ``""`` (cached: a cluster
    trace's every node asks it of the few devices they name)."""
    if is_host_threads(name):
        return name[: name.index("/host:")] if name.startswith("/job:") else ""
    p = parse_device(name)
    return p.task_prefix if p is not None else ""


def crosses_tasks(src: str, dst: str) -> bool:
    """True when ``src`` and ``dst`` belong to different cluster tasks (a network link)."""
    a, b = task_of(src), task_of(dst)
    return bool(a or b) and a != b


def device_sort_key(name: str) -> tuple:
    """Host threads first, then by job and task (each task's host threads first), then device
    type and index, then the name."""
    if name.startswith("/host:"):
        return (0, "", -1, "", -1, name)
    if is_host_threads(name):
        p = parse_device(name[: name.index("/host:")])
        task = -1 if p is None or p.task is None else p.task
        return (1, (p.job if p else "") or "", task, "", -2, name)
    p = parse_device(name)
    if p is None:
        return (2, "", -1, name, -1, name)
    task = -1 if p.task is None else p.task
    return (1, p.job or "", task, p.type or "", -1 if p.index is None else p.index, name)


def device_role(device: str, topology: Mapping[str, Any] | None) -> str:
    """``"host"``, ``"accelerator"`` or ``"other"`` for a canonical device name in a run's topology."""
    topo = topology or {}
    if device == topo.get("host") or is_host_threads(device) or device in (topo.get("hosts") or ()):
        return "host"
    if device in (topo.get("accelerators") or ()):
        return "accelerator"
    p = parse_device(device)
    if p is not None and p.in_cluster and p.type == "CPU" and p.index == 0:
        return "host"  # a task's /device:CPU:0 is its host
    return "other"


def link_kind(src: str, dst: str, topology: Mapping[str, Any] | None) -> str:
    """``network`` between two cluster tasks; else ``host_to_device``, ``device_to_host``,
    ``device_to_device`` or ``other``."""
    if crosses_tasks(src, dst):
        return "network"
    a, b = device_role(src, topology), device_role(dst, topology)
    if a == "host" and b == "accelerator":
        return "host_to_device"
    if a == "accelerator" and b == "host":
        return "device_to_host"
    if a == "accelerator" and b == "accelerator":
        return "device_to_device"
    return "other"


def is_accelerator_plane(device: str) -> bool:
    """True for a device that has a trace plane of its own (a GPU, TPU...), not a CPU device."""
    p = parse_device(device)
    return p is not None and p.is_device and p.type not in ("CPU", "XLA_CPU")
