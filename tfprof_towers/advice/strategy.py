"""Advice rules that know the ``tf.distribute`` strategies and their cross-device ops.

* ``staged_allreduce`` -- a ring all-reduce (NCCL, or TensorFlow's collective ring) where
  the hardware profile says the accelerators have no peer path: every ring step is
  staged through host memory.  TensorFlow's ``tf.distribute`` documentation says NCCL
  only helps over GPU-to-GPU links; ``ReductionToOneDevice`` sends each gradient once
  over each accelerator's own host link, and ``HierarchicalCopyAllReduce`` was made for
  DGX-1's NVLink.
* ``reduction_through_host`` -- the opposite mismatch: gradients summed on the host
  although the profile links the accelerators directly (NVLink), where NCCL's ring
  over those links is what ``MirroredStrategy`` does by default.

"How the accelerators reach each other" comes from a hardware profile (``profile
--project-on NAME`` or ``project RUN_DIR --hardware NAME``): ``summary.projection.profile``.
Every number quoted is measured (bytes from the partition graphs) or modeled from
the profile's links, and says which.  No TensorFlow; plain mappings in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfprof_towers.advice.findings import Facts, Finding, Rule
from tfprof_towers.analysis.audit import link_model
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_seconds
from tfprof_towers.vocab.links import link_from_json
from tfprof_towers.vocab.links import ring_seconds as model_ring_seconds

CENTRAL_STORAGE = "CentralStorageStrategy"
REDUCE_TO_ONE = "ReductionToOneDevice"


def reduces_across_devices(f: Facts) -> bool:
    """The variant sums gradients across replicas through cross-device ops (TF2 strategies)."""
    return f.audit is not None and bool(f.audit.cross_device_ops) and f.audit.replicas > 1


def profile(f: Facts) -> Mapping[str, Any] | None:
    proj = f.projection
    prof = proj.profile if proj is not None and not proj.error else None
    return prof if isinstance(prof, Mapping) and isinstance(prof.get("peer"), Mapping) else None


def _hardware(f: Facts) -> str | None:
    """The projection's hardware profile's name (None without a projection)."""
    return f.projection.hardware if f.projection is not None else None


def rate(link: Mapping[str, Any]) -> float:
    """Effective bytes per second of a profile link (nominal GB/s x efficiency)."""
    return link_from_json(link).bytes_per_s


def ring_seconds(payload: float, n: int, link: Mapping[str, Any]) -> float:
    """Ring all-reduce over a profile link, as the projection models it (``project.model.ring_seconds``)."""
    return model_ring_seconds(payload, n, link_from_json(link))


def host_round_trip_seconds(payload: float, link: Mapping[str, Any]) -> float:
    """Each accelerator sends ``payload`` to the host and receives the sum back over its own link."""
    return 2 * (float(link["latency_us"]) * 1e-6 + payload / rate(link))


def to_host(f: Facts, host: str | None) -> dict[str, int]:
    """Bytes per step each device sends to the host ``host`` (the audit's device-to-host links)."""
    links = () if f.audit is None else f.audit.links
    return {ln.src: ln.bytes_per_step for ln in links if ln.dst == host and ln.kind == "device_to_host"}


def allreduce(f: Facts) -> tuple[int, int, list[str]]:
    """(bytes each replica contributes per step, replicas, kernels) of the variant's collectives."""
    per_device: dict[str, int] = {}
    kernels: list[str] = []
    for c in () if f.audit is None else f.audit.collectives:
        per_device[c.device] = per_device.get(c.device, 0) + int(c.bytes or 0)
        if c.label not in kernels:
            kernels.append(c.label)
    return (max(per_device.values()) if per_device else 0), len(per_device), kernels


def projected(f: Facts, names: tuple[str, ...]) -> list[tuple[str, float]]:
    """Projected (overlapped) step times of ``names`` that the run's projection holds, in that order."""
    rows = () if f.projection is None else f.projection.variants
    found = {v.name: v.projected_step_s for v in rows if v.projected_step_s is not None}
    return [(n, float(found[n].overlapped)) for n in names if n in found]


def _projected_text(f: Facts, names: tuple[str, ...]) -> str:
    """The projected step times of this variant and its alternatives; says so when none is faster."""
    times = projected(f, names)
    if not times:
        return ""
    hw = _hardware(f) or "the profile"
    text = f" Projected on {hw}: " + ", ".join(f"{n} {fmt_seconds(s)}" for n, s in times) + " per step"
    own = dict(times).get(f.name)
    if own is not None and len(times) > 1 and all(s >= own for n, s in times if n != f.name):
        text += f": at this preset {f.name} stays ahead, so the change pays only where more bytes cross"
    return text + "."


def _severity(rule: Rule, f: Facts, seconds: float) -> tuple[str, float | None]:
    """The rule's tier, raised to medium when ``seconds`` is a large share of the variant's projected step."""
    own = projected(f, (f.name,))
    share = seconds / own[0][1] if own and own[0][1] > 0 else None
    return rule.medium_at(share, "medium_at_share"), share


def check_staged_allreduce(rule: Rule, f: Facts) -> Finding | None:
    prof = profile(f)
    payload, n, kernels = allreduce(f)
    if prof is None or prof["peer"].get("kind") != "staged" or n < rule.param("min_replicas") or payload <= 0:
        return None
    peer, host = prof["peer"], prof["host_link"]
    ring = ring_seconds(payload, n, peer)
    via_host = host_round_trip_seconds(payload, host)
    hw = _hardware(f) or prof.get("name")
    msg = (
        f"{f.name} all-reduces {fmt_bytes(payload)} of gradients per replica per step with "
        f"{', '.join(kernels)} over {n} accelerators; on {hw} they have no peer access ({peer['name']}, "
        f"{rate(peer) / 1e9:.2f} GB/s effective), so every step of the ring is staged through host memory: "
        f"modeled {fmt_seconds(ring)} per step for the ring, against {fmt_seconds(via_host)} to send each "
        f"replica's gradients to the host and the sum back over its own {host['name']} link "
        f"({rate(host) / 1e9:.2f} GB/s)"
    )
    suggestion = (
        "Suggestion: NCCL only helps over GPU-to-GPU links; here try "
        "`tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())` "
        "(the `mirrored_reduce_host` variant), or `HierarchicalCopyAllReduce()` (`mirrored_hierarchical`; "
        "made for DGX-1's NVLink, usually slower elsewhere), and compare them here."
        + _projected_text(f, (f.name, "mirrored_reduce_host", "mirrored_hierarchical"))
    )
    severity, share = _severity(rule, f, ring)
    evidence = {"payload_bytes_per_replica": payload, "replicas": n, "kernels": kernels, "hardware": hw,
                "peer_kind": "staged", "peer_bytes_per_s": rate(peer), "host_link_bytes_per_s": rate(host),
                "modeled_ring_s": ring, "modeled_via_host_s": via_host, "share_of_projected_step": share,
                "projected_s": dict(projected(f, (f.name, "mirrored_reduce_host", "mirrored_hierarchical")))}
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, ())


def check_reduction_through_host(rule: Rule, f: Facts) -> Finding | None:
    a, prof = f.audit, profile(f)
    if a is None or prof is None:
        return None
    n = a.replicas
    if (prof["peer"].get("kind") != "direct" or a.cross_device_ops != REDUCE_TO_ONE
            or a.strategy_name == CENTRAL_STORAGE or n < rule.param("min_replicas")):
        return None
    host_dev = a.host
    up = to_host(f, host_dev)
    if not up:
        return None
    payload = max(up.values())
    peer, host = prof["peer"], prof["host_link"]
    via_host, ring = host_round_trip_seconds(payload, host), ring_seconds(payload, n, peer)
    hw = _hardware(f) or prof.get("name")
    msg = (
        f"{f.name} sums the gradients on the host: each of {n} replicas sends up to {fmt_bytes(payload)} per "
        f"step to {host_dev} and receives the sum back, modeled {fmt_seconds(via_host)} over {host['name']} "
        f"({rate(host) / 1e9:.2f} GB/s); on {hw} the accelerators are linked directly ({peer['name']}, "
        f"{rate(peer) / 1e9:.2f} GB/s), where a ring all-reduce of the same bytes is modeled at "
        f"{fmt_seconds(ring)}"
    )
    suggestion = (
        "Suggestion: use `tf.distribute.MirroredStrategy()` with its default cross-device ops (an NCCL "
        "all-reduce over the direct links: the `mirrored` variant)."
        + _projected_text(f, (f.name, "mirrored", "mirrored_nccl"))
    )
    severity, share = _severity(rule, f, via_host)
    evidence = {"bytes_to_host_per_replica": payload, "replicas": n, "hardware": hw, "peer_kind": "direct",
                "modeled_via_host_s": via_host, "modeled_ring_s": ring, "share_of_projected_step": share,
                "projected_s": dict(projected(f, (f.name, "mirrored", "mirrored_nccl")))}
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, ())


def check_central_storage_pulls(rule: Rule, f: Facts) -> Finding | None:
    if f.audit is None or f.audit.strategy_name != CENTRAL_STORAGE:
        return None
    pulls, used = f.audit.variable_pulls, f.accelerators_used
    pulling = {d: b for d, b in pulls.by_accelerator.items() if d in used and b > 0}
    if len(used) < rule.param("min_accelerators") or len(pulling) < len(used):
        return None
    host = f.audit.host
    back = to_host(f, host)
    model = link_model(rule.param("link_model"))
    worst = max(pulling, key=lambda d: pulling[d] + back.get(d, 0))
    modeled = (pulling[worst] + back.get(worst, 0)) / model.bytes_per_s
    per_acc = ", ".join(f"{d} {fmt_bytes(b)}" for d, b in sorted(pulling.items()))
    host_row = f.audit.device(host)
    host_ops = 0 if host_row is None else host_row.ops
    msg = (
        f"CentralStorageStrategy keeps the variables on the host {host}: every step each of {len(used)} "
        f"accelerators pulls them ({per_acc}; {pulls.tensors} tensors in all) and sends gradients back "
        f"({fmt_bytes(back.get(worst, 0))} from {worst}), and the host runs the update "
        f"({host_ops} op{'' if host_ops == 1 else 's'}); "
        f"modeled at {model.name}: {fmt_seconds(modeled)} per step on {worst}'s link"
    )
    share = f.share_of_step(modeled)
    suggestion = (
        "Suggestion: `tf.distribute.MirroredStrategy` keeps a copy of the variables on every accelerator, "
        "so only the gradients cross, once per step (the `mirrored` variant; `mirrored_reduce_host` where "
        "the accelerators have no peer access)."
        + _projected_text(f, (f.name, "mirrored", "mirrored_reduce_host"))
    )
    evidence = {"pulls_per_accelerator": pulling, "gradients_back": back, "tensors": pulls.tensors,
                "host_ops": host_ops, "modeled_s": {model.key: modeled}, "modeled_share_of_step": share}
    severity = rule.medium_at(share, "medium_at_modeled_share")
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, ())
