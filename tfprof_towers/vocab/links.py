"""A link between two devices as a bandwidth and a latency, and the time to move bytes over it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Link:
    """One direction of one link: ``bandwidth_gbs`` (nominal) times ``efficiency``."""

    name: str
    bandwidth_gbs: float
    efficiency: float
    latency_us: float
    source: str

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 * self.efficiency


def link_from_json(doc: Mapping[str, Any]) -> Link:
    """A link of a profile's summary (``Hardware.summary``) back as a :class:`Link`."""
    return Link(str(doc["name"]), float(doc["bandwidth_gbs"]), float(doc["efficiency"]),
                float(doc["latency_us"]), str(doc.get("source") or ""))


def ring_seconds(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` devices on ``link``."""
    if n < 2:
        return 0.0
    return 2 * (n - 1) * link.latency_us * 1e-6 + 2 * (n - 1) / n * nbytes / link.bytes_per_s


#: The fastest any link carries, GB/s one way: a host<->device copy (``h2d``/``d2h``) at most NVLink-C2C's
#: 450 GB/s a direction (Grace Hopper; PCIe 7.0 x16 is 128), anything else at most NVLink 5's 900 GB/s a
#: direction per GPU.  A measured rate above it means the byte counts are not per copy.
PEAK_GBPS: Mapping[str, float] = {"h2d": 450.0, "d2h": 450.0}
ANY_LINK_PEAK_GBPS = 900.0


def impossible_rate(kind: str, gbps: float | None) -> bool:
    """Whether ``gbps`` over a link of ``kind`` is above any such link's peak (:data:`PEAK_GBPS`)."""
    return gbps is not None and gbps > PEAK_GBPS.get(kind, ANY_LINK_PEAK_GBPS)
