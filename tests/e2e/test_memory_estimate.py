"""The memory estimate in the projection's graph child, on the tiny preset: the estimate is there for
TF1 and TF2 variants, each device's variables and optimizer slots are counted exactly, and a profile
too small for ``single`` marks it as not fitting and recommends one that fits.

At the tiny preset (dim 16, 6 blocks) the variables are 6 x (W 16x16 + b 16) fp32; the BFC allocator
takes each in multiples of 256 B: W 1,024 B, b 64 -> 256 B, 6 x 1,280 = 7,680 B.  Adam keeps two slots
of each and two scalar powers (256 B each): 3 x 7,680 + 2 x 256 = 23,552 B, on the device they are
placed on.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tfprof_towers.projection import project
from tfprof_towers.projection.api import build_graphs, builder_layout
from tfprof_towers.projection.hardware import load_hardware
from tfprof_towers.projection.memory_fit import HEADROOM
from tfprof_towers.variants.config import PRESETS, VariantSpec

pytestmark = pytest.mark.slow
VARIABLES = 3 * 6 * (16 * 16 * 4 + 256) + 2 * 256
GPU0, GPU1, HOST = "/device:GPU:0", "/device:GPU:1", "/device:CPU:0"


def test_the_estimate_of_each_variants_memory_and_single_does_not_fit_a_small_gpu() -> None:
    hw = load_hardware("2x-gtx1060-pcie3")
    variants = tuple(VariantSpec.builtin(n) for n in ("single", "towers_host_vars", "mirrored"))
    graphs = build_graphs(variants, PRESETS["tiny"], builder_layout(hw))
    mem = {n: graphs["variants"][n]["memory"] for n in ("single", "towers_host_vars", "mirrored")}
    for name, m in mem.items():
        assert m.get("estimator") == "liveness", (name, m)
    single = mem["single"]["devices"]
    assert single[GPU0]["persistent_bytes"] == VARIABLES and single[GPU0]["variables"] == 38
    assert single[GPU0]["transient_bytes"] > 0 and single[GPU0]["peak_bytes"] > VARIABLES
    assert GPU1 not in single  # one device: nothing on the second GPU
    towers = mem["towers_host_vars"]["devices"]
    assert towers[HOST]["persistent_bytes"] == VARIABLES  # the variables live on the host
    assert towers[GPU0]["persistent_bytes"] == towers[GPU1]["persistent_bytes"] == 0
    assert towers[GPU0]["peak_bytes"] > 0 and towers[GPU1]["peak_bytes"] > 0
    mirrored = mem["mirrored"]["devices"]
    assert mirrored[GPU0]["persistent_bytes"] == mirrored[GPU1]["persistent_bytes"] == VARIABLES  # one each
    # a target whose GPUs (less the 10% headroom) hold the smaller two-GPU placement's peak, not single's
    smaller = min(max(d["peak_bytes"] for dev, d in mem[n]["devices"].items() if dev != HOST)
                  for n in ("towers_host_vars", "mirrored"))
    assert smaller < single[GPU0]["peak_bytes"]  # two GPUs share the batch: each holds less
    gib = (smaller / (1 - HEADROOM) + 16) / (1 << 30)  # 16 B over: the bytes are whole
    small = replace(hw, name="small", accelerator=replace(hw.accelerator, memory_gb=gib))
    doc = project(small, PRESETS["tiny"], variants, graphs=graphs)
    by = {e["name"]: e for e in doc["variants"]}
    assert by["single"]["memory_fit"]["fits"] is False
    assert by["single"]["memory_fit"]["device"] == GPU0
    assert by["single"]["memory_fit"]["verdict"].startswith("does not fit: ")
    assert doc["recommendation"]["variant"] in ("towers_host_vars", "mirrored"), doc["recommendation"]
    assert by[doc["recommendation"]["variant"]]["memory_fit"]["fits"] is True


def test_views_of_a_real_graph_allocate_nothing() -> None:
    """A TF1 graph built here: MatMul of two constants (10 x 100 fp32 = 4,000 B, 4,096 as the BFC allocator
    takes it) -> Reshape -> Identity -> Sum (4 B -> 256).  The views allocate nothing: the peak is 4,096 +
    256 at the Sum; grappler's estimator counts the views as buffers of their own."""
    import numpy as np
    import tensorflow as tf

    from tfprof_towers.projection.graphcost import estimate_memory, extract_work

    graph = tf.Graph()
    with graph.as_default(), tf.device("/cpu:1"):
        a = tf.matmul(tf.constant(np.ones((10, 25), np.float32)), tf.constant(np.ones((25, 100), np.float32)))
        total = tf.reduce_sum(tf.identity(tf.reshape(a, [1000])))
    work = extract_work(graph, total, "/cpu:0", ("/cpu:1",))
    mem = estimate_memory(graph, total, work, [], with_grappler=True)
    dev = mem["devices"]["/device:CPU:1"]
    assert (dev["transient_bytes"], dev["peak_bytes"], dev["persistent_bytes"]) == (4096 + 256, 4096 + 256, 0)
    assert sorted(map(tuple, dev["top_tensors"])) == [("MatMul", 4096), ("Sum", 256)]
    assert dev["grappler_transient_bytes"] > dev["transient_bytes"]
