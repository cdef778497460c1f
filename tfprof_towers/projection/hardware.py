"""Hardware profiles for what-if projection: frozen dataclasses loaded from TOML.

A profile names a host CPU (and the TensorFlow build assumed on it), one kind of
accelerator (``count`` of them), the host<->accelerator link (one per accelerator,
each direction its own channel) and how accelerators reach each other: a
``direct`` peer link (NVLink point-to-point ``mesh`` or an NVSwitch ``switch``) or
``staged`` through host memory (no peer access).  An optional ``[network]`` section
describes each host's network card (per direction: bandwidth, efficiency, latency),
which makes the profile one host of a cluster: ``project --workers N`` projects the
cluster variants on N such hosts (:mod:`.cluster`).  ``memory_gb`` of ``[host]`` and
``[accelerator]`` (optional: a profile without them is accepted, and the projection says that
memory fit was not checked) is each one's memory in GB as datasheets write it, binary
(2^30 bytes: a "6 GB" GTX 1060 holds 6144 MiB).  Built-in profiles live in
``tfprof_towers/projection/profiles/*.toml`` with a public source next to every number.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import typing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib

from tfprof_towers.vocab.errors import TowersError
from tfprof_towers.vocab.links import Link

#: How many fp32 FLOPs one core retires per cycle is a property of the CPU and of
#: the instructions TensorFlow was compiled to use: ``vectorised`` means a build
#: that uses the CPU's widest FMA units (e.g. AVX2+FMA), ``unvectorised`` the old
#: generic pip build (SSE only: "Your CPU supports instructions that this
#: TensorFlow binary was not compiled to use: AVX2 FMA").
BUILDS = ("vectorised", "unvectorised")
PEER_KINDS = ("direct", "staged")
PEER_TOPOLOGIES = ("mesh", "switch")
GIB = 1 << 30
#: Keys a profile may leave out (the dataclass default is used; None: derived from another key).
_OPTIONAL = frozenset({"memory_gb", "conv_efficiency", "reduction_efficiency", "small_op_overhead_us",
                       "winograd_speedup"})


class HardwareError(TowersError):
    """A hardware profile that cannot be used (unknown name, malformed TOML, bad value)."""


@dataclass(frozen=True)
class Host:
    model: str
    cores: int
    clock_ghz: float
    flops_per_cycle_vectorised: float
    flops_per_cycle_unvectorised: float
    tensorflow_build: str
    efficiency: float
    memory_bandwidth_gbs: float
    memory_efficiency: float
    op_overhead_us: float
    source: str
    memory_gb: float | None = None  # the host's RAM; None: not given

    def peak_flops(self, build: str | None = None) -> float:
        """Nominal fp32 FLOP/s of all cores for ``build`` (default: the profile's)."""
        vectorised = (build or self.tensorflow_build) == "vectorised"
        per_cycle = self.flops_per_cycle_vectorised if vectorised else self.flops_per_cycle_unvectorised
        return self.cores * self.clock_ghz * 1e9 * per_cycle


@dataclass(frozen=True)
class Accelerator:
    model: str
    count: int
    fp32_tflops: float
    matmul_tflops: float
    memory_bandwidth_gbs: float
    efficiency: float
    memory_efficiency: float
    op_overhead_us: float
    source: str
    memory_gb: float | None = None  # each accelerator's memory; None: not given
    #: Fraction of ``matmul_tflops`` a convolution (Conv2D and its backprops) reaches; None: ``efficiency``,
    #: the matmuls' fraction.
    conv_efficiency: float | None = None
    #: Fraction of memory bandwidth a reduction reaches (sums, means, batch-norm statistics, softmax
    #: rows, their gradients); None: ``memory_efficiency``, the elementwise ops' fraction.
    reduction_efficiency: float | None = None
    #: Time of an op that moves at most :data:`.opcost.SMALL_OP_BYTES` (a scalar, a shape, a
    #: learning-rate product): its launch overhead; None: ``op_overhead_us``.
    small_op_overhead_us: float | None = None
    #: How much faster than its FLOPs at ``efficiency`` a 3x3 stride-1 convolution runs (cuDNN's
    #: Winograd algorithms need fewer multiplies); None: 1, no faster.
    winograd_speedup: float | None = None

    @property
    def winograd(self) -> float:
        """The speed-up of a 3x3 stride-1 convolution (1 where the profile gives none)."""
        return 1.0 if self.winograd_speedup is None else self.winograd_speedup

    @property
    def conv_fraction(self) -> float:
        """Fraction of the matmul peak convolutions reach (the matmuls' where not given)."""
        return self.efficiency if self.conv_efficiency is None else self.conv_efficiency

    @property
    def reduction_fraction(self) -> float:
        """Fraction of memory bandwidth reductions reach (the elementwise one where not given)."""
        return self.memory_efficiency if self.reduction_efficiency is None else self.reduction_efficiency

    @property
    def small_op_us(self) -> float:
        """Seconds, in µs, of an op too small for anything but its launch."""
        return self.op_overhead_us if self.small_op_overhead_us is None else self.small_op_overhead_us

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_gb is None else int(self.memory_gb * GIB)


@dataclass(frozen=True)
class Peer:
    """Accelerator<->accelerator: ``direct`` over ``link``, or ``staged`` through the host."""

    kind: str
    topology: str
    link: Link


@dataclass(frozen=True)
class Hardware:
    name: str
    description: str
    host: Host
    accelerator: Accelerator
    host_link: Link
    peer: Peer
    origin: str
    network: Link | None = None  # each host's network card, one direction (a cluster of such hosts)

    def with_host_build(self, build: str) -> Hardware:
        """The same profile assuming another TensorFlow build on the host."""
        if build not in BUILDS:
            raise HardwareError(f"unknown TensorFlow build {build!r}; choose one of: {', '.join(BUILDS)}")
        return dataclasses.replace(self, host=dataclasses.replace(self.host, tensorflow_build=build))

    def summary(self) -> dict[str, Any]:
        """The assumptions a projection states next to every projected number."""
        h, a = self.host, self.accelerator
        return {
            "name": self.name,
            "description": self.description,
            "host": {**_fields(h, "model", "tensorflow_build"), "peak_gflops": h.peak_flops() / 1e9,
                     **_fields(h, "efficiency", "memory_bandwidth_gbs", "op_overhead_us", "source",
                               "memory_gb")},
            "accelerator": {**_fields(a, "model", "count", "fp32_tflops", "matmul_tflops", "efficiency"),
                            "conv_efficiency": a.conv_fraction,
                            **_fields(a, "memory_bandwidth_gbs", "memory_efficiency"),
                            "reduction_efficiency": a.reduction_fraction,
                            "winograd_speedup": a.winograd,
                            **_fields(a, "op_overhead_us"), "small_op_overhead_us": a.small_op_us,
                            **_fields(a, "source", "memory_gb")},
            "host_link": dataclasses.asdict(self.host_link),
            "peer": {**_fields(self.peer, "kind", "topology"), **dataclasses.asdict(self.peer.link)},
            "origin": self.origin,
            **({"network": dataclasses.asdict(self.network)} if self.network is not None else {}),
        }


def _fields(record: Any, *names: str) -> dict[str, Any]:
    return {n: getattr(record, n) for n in names}


# --------------------------------------------------------------------------- loading

_HOST_KEYS, _ACCEL_KEYS, _LINK_KEYS = (typing.get_type_hints(c) for c in (Host, Accelerator, Link))
_PEER_KEYS = {**_LINK_KEYS, "kind": str, "topology": str}
_FRACTIONS = ("efficiency", "memory_efficiency", "reduction_efficiency", "conv_efficiency")
_MAY_BE_ZERO = ("op_overhead_us", "latency_us", "small_op_overhead_us")
#: Upper ends of the physical range of each number (well above any machine built so far), so that a
#: typo or a hostile file (``count = 99999999999999999``, ``1e308``) is refused, not modelled.
_AT_MOST: dict[str, tuple[float, str]] = {
    "cores": (4096, "cores in one host"),
    "clock_ghz": (10.0, "GHz"),
    "flops_per_cycle_vectorised": (1024.0, "FLOPs per cycle per core"),
    "flops_per_cycle_unvectorised": (1024.0, "FLOPs per cycle per core"),
    "memory_bandwidth_gbs": (100_000.0, "GB/s"),
    "op_overhead_us": (1_000_000.0, "µs, one second"),
    "small_op_overhead_us": (1_000_000.0, "µs, one second"),
    "winograd_speedup": (4.0, "the multiplies Winograd's F(4x4,3x3) saves"),
    "count": (128, "accelerators in one machine"),
    "fp32_tflops": (100_000.0, "TFLOPS per accelerator"),
    "matmul_tflops": (100_000.0, "TFLOPS per accelerator"),
    "bandwidth_gbs": (100_000.0, "GB/s"),
    "latency_us": (1_000_000.0, "µs, one second"),
    "memory_gb": (1_000_000.0, "GB"),
}
#: Longest text a profile may hold; names are one line.
_NAME_MAX = 100
_TEXT_MAX = 2000


def builtin_dir() -> Path:
    return Path(str(resources.files("tfprof_towers.projection") / "profiles"))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def load_hardware(name_or_path: str) -> Hardware:
    """A built-in profile by name, or a TOML file by path; one-line errors."""
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise HardwareError(f"hardware file {path}: {_not_a_file(path)}")
        return load_file(path)
    path = builtin_dir() / f"{text}.toml"
    if not path.is_file():
        raise HardwareError(
            f"unknown hardware {text!r}; built-in profiles are: {', '.join(builtin_names())} "
            "(or pass a .toml file)"
        )
    return load_file(path, origin=f"builtin:{text}")


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _not_a_file(path: Path) -> str:
    """What ``path`` is, where it is no regular file: missing, a link to nothing, a folder, a device..."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"a symbolic link to nothing ({os.readlink(path)})" if path.is_symlink() else "not found"
    except OSError as exc:
        return f"cannot read ({exc.strerror or exc})"
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}, not a TOML file"


def load_file(path: Path, origin: str | None = None) -> Hardware:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HardwareError(f"hardware file {path}: cannot read ({exc.strerror or exc})") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise HardwareError(f"hardware file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise HardwareError(f"hardware file {path}: malformed TOML ({exc})") from None
    return parse_hardware(doc, where=str(path), origin=origin or f"file:{path}", default_name=path.stem)


def parse_hardware(doc: dict[str, Any], where: str, origin: str, default_name: str) -> Hardware:
    """Validate a parsed TOML document into a :class:`Hardware` (every error names file and key).

    Every number must be finite and within its physical range (:data:`_AT_MOST`);
    texts are bounded in length and names are one line.
    """
    sections = {"name", "description", "host", "accelerator", "host_link", "peer", "network"}
    _no_unknown(doc, sections, where, "")
    name = doc.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise HardwareError(f"{where}: 'name' must be a non-empty string")
    name = _text(name, f"{where}: 'name'", _NAME_MAX)
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise HardwareError(f"{where}: 'description' must be a string")
    description = _text(description, f"{where}: 'description'", _TEXT_MAX)
    host = Host(**_table(doc, "host", _HOST_KEYS, where))
    if host.tensorflow_build not in BUILDS:
        raise HardwareError(
            f"{where}: [host] tensorflow_build must be one of {', '.join(BUILDS)}, "
            f"got {host.tensorflow_build!r}"
        )
    accel = Accelerator(**_table(doc, "accelerator", _ACCEL_KEYS, where))
    host_link = Link(**_table(doc, "host_link", _LINK_KEYS, where))
    peer_fields = _table(doc, "peer", _PEER_KEYS, where)
    kind, topology = peer_fields.pop("kind"), peer_fields.pop("topology")
    if kind not in PEER_KINDS:
        raise HardwareError(f"{where}: [peer] kind must be one of {', '.join(PEER_KINDS)}, got {kind!r}")
    if topology not in PEER_TOPOLOGIES:
        raise HardwareError(
            f"{where}: [peer] topology must be one of {', '.join(PEER_TOPOLOGIES)}, got {topology!r}"
        )
    peer = Peer(kind, topology, Link(**peer_fields))
    network = Link(**_table(doc, "network", _LINK_KEYS, where)) if "network" in doc else None
    return Hardware(name, description, host, accel, host_link, peer, origin, network)


def _no_unknown(table: dict[str, Any], allowed: set[str], where: str, section: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        label = f"[{section}] " if section else ""
        raise HardwareError(
            f"{where}: {label}unknown key {extra[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )


def _table(doc: dict[str, Any], section: str, keys: dict[str, type], where: str) -> dict[str, Any]:
    table = doc.get(section)
    if not isinstance(table, dict):
        raise HardwareError(f"{where}: missing table [{section}]")
    _no_unknown(table, set(keys), where, section)
    out: dict[str, Any] = {}
    for key, kind in keys.items():
        if key not in table:
            if key in _OPTIONAL:
                continue
            raise HardwareError(f"{where}: [{section}] missing key {key!r}")
        out[key] = _value(table[key], kind, where, section, key)
    return out


def _value(value: Any, kind: Any, where: str, section: str, key: str) -> Any:
    label = f"{where}: [{section}] {key}"
    if key in _OPTIONAL:  # ``float | None``: a number when given
        kind = float
    if kind is str:
        if not isinstance(value, str):
            raise HardwareError(f"{label} must be a string, got {_short(value)}")
        return _text(value, label, _NAME_MAX if key == "name" else _TEXT_MAX)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HardwareError(f"{label} must be a number, got {_short(value)}")
    if kind is int and not isinstance(value, int):
        raise HardwareError(f"{label} must be a whole number, got {_short(value)}")
    if not math.isfinite(value):
        raise HardwareError(f"{label} must be a finite number, got {value!r}")
    top, unit = _AT_MOST.get(key, (math.inf, ""))
    if value > top:
        raise HardwareError(f"{label} must be at most {top:g} ({unit}), got {_short(value)}")
    if key in _MAY_BE_ZERO:
        if value < 0:
            raise HardwareError(f"{label} must not be negative, got {value!r}")
    elif not value > 0:
        raise HardwareError(f"{label} must be positive, got {value!r}")
    if key in _FRACTIONS and value > 1:
        raise HardwareError(f"{label} is a fraction of peak and must be at most 1, got {value!r}")
    return kind(value)


def _text(value: str, label: str, most: int) -> str:
    if len(value) > most:
        raise HardwareError(f"{label} is {len(value)} characters long; at most {most} are allowed")
    if most == _NAME_MAX and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise HardwareError(f"{label} must be one line of text without control characters")
    if most == _NAME_MAX and (bidi := next((c for c in value if c in _BIDI), None)):
        raise HardwareError(f"{label} must not hold bidirectional control characters (it holds "
                            f"U+{ord(bidi):04X}, which reorders the text printed after it)")
    return value


#: Bidirectional controls: printed, they reorder what follows (a name that reads as another one).
_BIDI = frozenset(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
