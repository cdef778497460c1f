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
