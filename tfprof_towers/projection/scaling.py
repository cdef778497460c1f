"""Projected scaling curves: every variant of a sweep projected at each accelerator count.

A profile of G accelerators is projected at 1, 2, 4, ... up to G (the same machine with fewer
of its accelerators in use: :func:`at_count`), each variant's graph built for that many
devices (:func:`tfprof_towers.projection.api.build_graphs`) and projected on it
(:func:`tfprof_towers.projection.model.project_work`), with its bottleneck.  A multi-host
profile (one with ``[network]``) adds ``multi_worker`` on 1, 2 and 4 hosts (G, 2G, 4G
accelerators; :func:`tfprof_towers.projection.cluster.multi_worker`).  The family's baseline is
projected at 1 only, every other variant from 2 (as the measured sweep runs them).
Importing this module never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tfprof_towers.analysis.scaling import FAILED, SKIPPED, WEAK, Point, global_batch, projected_section
from tfprof_towers.projection.api import BUILD_TIMEOUT_S, KerasModel, build_graphs, builder_layout
from tfprof_towers.projection.cluster import multi_worker
from tfprof_towers.projection.hardware import Hardware, load_hardware
from tfprof_towers.projection.model import GraphWork, Rates, project_work
from tfprof_towers.rundir.scaling import ProjectedScaling
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import Preset, VariantSpec

#: Hosts a multi-host profile's multi_worker curve is projected on.
CLUSTER_HOSTS = (1, 2, 4)


def powers_of_two_to(top: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``top``, and ``top`` itself: ``6`` -> (1, 2, 4, 6)."""
    out, n = [], 1
    while n < top:
        out.append(n)
        n *= 2
    return (*out, max(top, 1))


def at_count(hw: Hardware, count: int) -> Hardware:
    """The same machine with ``count`` of its accelerators in use."""
    return replace(hw, accelerator=replace(hw.accelerator, count=count))


def is_baseline(v: VariantSpec) -> bool:
    return registry.is_baseline(v.name, v.source)


def _skip(v: VariantSpec, count: int, why: str, status: str = SKIPPED) -> Point:
    return Point(v.name, count, status=status, family=v.family, baseline=is_baseline(v), reason=why)


def project_count(hw: Hardware, preset: Preset, variants: Sequence[VariantSpec], mode: str, count: int,
                  timeout_s: float | None = BUILD_TIMEOUT_S, keras: KerasModel | None = None) -> list[Point]:
    """Each of ``variants`` projected with ``count`` accelerators of ``hw`` (with ``keras``: the Keras
    model's step, its file's global batch per replica in weak mode, in all in strong mode)."""
    batch = global_batch(mode, preset.batch, count)
    if keras is not None:
        keras = replace(keras, scale=count if mode == WEAK else 1)
    elif batch % count:
        return [_skip(v, count, f"the global batch {batch} does not split over {count} accelerators")
                for v in variants]
    hw_n = at_count(hw, count)
    preset_n = replace(preset, batch=batch)
    graphs = build_graphs(variants, preset_n, builder_layout(hw_n), None, timeout_s, keras=keras)
    rates = Rates.of(hw_n)
    out = []
    for v in variants:
        doc = graphs["variants"].get(v.name) or {"error": "not built"}
        if "error" in doc:
            out.append(_skip(v, count, str(doc["error"]), FAILED))
            continue
        e = project_work(GraphWork.from_json(doc), hw_n, rates)
        bn = e.get("bottleneck") or {}
        traced = (doc.get("keras_model") or {}).get("global_batch", batch)
        out.append(Point(v.name, count, family=v.family, baseline=is_baseline(v),
                         step_median_s=float(e["projected_step_s"]["overlapped"]), global_batch=traced,
                         bottleneck=bn.get("text"), bottleneck_kind=bn.get("kind")))
    return out


def project_hosts(hw: Hardware, preset: Preset, mode: str,
                  hosts: Sequence[int] = CLUSTER_HOSTS) -> list[Point]:
    """``multi_worker`` (MultiWorkerMirroredStrategy) on each number of ``hosts`` of a multi-host profile."""
    rates = Rates.of(hw)
    out = []
    for h in hosts:
        count = h * hw.accelerator.count
        batch = global_batch(mode, preset.batch, count)
        e = multi_worker(replace(preset, batch=batch), hw, h, rates)
        bn = e["bottleneck"]
        out.append(Point("multi_worker", count, family=registry.CLUSTER, baseline=False,
                         step_median_s=float(e["projected_step_s"]["overlapped"]), global_batch=batch,
                         bottleneck=bn.get("text"), bottleneck_kind=bn.get("kind")))
    return out


def project_scaling(hardware: str | Hardware, preset: Preset, variants: Sequence[VariantSpec],
                    mode: str = WEAK, timeout_s: float | None = BUILD_TIMEOUT_S,
                    keras: KerasModel | None = None) -> ProjectedScaling:
    """``summary.json`` -> ``scaling.projected``: each variant at 1, 2, 4, ... up to the profile's
    accelerators (the baseline at 1 only; the others from 2), and multi_worker across hosts (not for
    a Keras model: ``keras`` projects its step instead of the seed's)."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    points: list[Point] = []
    for n in powers_of_two_to(hw.accelerator.count):
        chosen = [v for v in variants if is_baseline(v) == (n == 1)]
        if chosen:
            points += project_count(hw, preset, chosen, mode, n, timeout_s, keras)
    what = f"the {preset.name} preset's batch ({preset.batch})"
    if keras is not None:
        what = (f"the Keras model's batch ({keras.batch})" if keras.batch
                else "the Keras model file's GLOBAL_BATCH_SIZE")
    notes = [f"{what} is the " + ("per-replica batch: the global batch grows with N" if mode == WEAK
                                  else "global batch, split over N")]
    if hw.network is not None and keras is None:
        points += project_hosts(hw, preset, mode)
        hosts = ", ".join(str(h) for h in CLUSTER_HOSTS)
        notes.append(f"multi_worker: {hosts} host(s) of {hw.accelerator.count} accelerators"
                     f" each, on {hw.network.name} (the cluster projection's model)")
    return projected_section(mode, hw.name, preset.name, points, notes)
