"""Which devices a variant runs on: real GPUs, or logical CPU stand-ins.

With GPUs visible to TensorFlow the host is ``/cpu:0`` and the accelerators
``/gpu:0..N-1``.  Without, ``/cpu:0`` stays the host and ``N`` logical CPU
devices ``/cpu:1..N`` stand in for accelerators (``kind = "logical-cpu"``):
placement, partitioning and send/recv bytes are real, timings are CPU timings
on shared cores, and link times cannot be measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tfprof_towers.capture.seed_values import SeedValues, shared_seed_values
from tfprof_towers.rundir.records import Topology
from tfprof_towers.variants.config import Preset
from tfprof_towers.vocab.device_names import canonical_device


@dataclass(frozen=True)
class Devices:
    """What a variant builder gets: ``host``, ``accelerators``, the workload ``preset`` and
    :attr:`seed_values`, the initial values and batch every variant starts from."""

    host: str
    accelerators: tuple[str, ...]
    kind: str  # "gpu" | "logical-cpu"
    preset: Preset
    values: SeedValues | None = field(default=None, repr=False, compare=False)

    @property
    def seed_values(self) -> SeedValues:
        """The shared initial values and input batch at the preset's sizes (numpy, read-only):
        ``x`` (the batch to feed), ``weights`` and ``biases`` (one per block; ``params`` in
        (W, b) block order).  Drawn once per process with a fixed seed
        (:mod:`.seed_values`), unless the devices were made with stand-ins (the projection)."""
        if self.values is not None:
            return self.values
        p = self.preset
        return shared_seed_values(p.batch, p.dim, p.blocks)

    def topology(self) -> Topology:
        """The record's topology: canonical device names."""
        return Topology(self.kind, canonical_device(self.host),
                        tuple(canonical_device(a) for a in self.accelerators))

    def to_json(self) -> dict:
        return self.topology().to_json()


def plan_devices(gpus: int, accelerators: int | None, preset: Preset) -> Devices:
    if gpus > 0:
        n = gpus if accelerators is None else min(accelerators, gpus)
        return Devices("/cpu:0", tuple(f"/gpu:{i}" for i in range(n)), "gpu", preset)
    n = 2 if accelerators is None else accelerators
    return Devices("/cpu:0", tuple(f"/cpu:{i + 1}" for i in range(n)), "logical-cpu", preset)
