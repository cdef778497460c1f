"""Traces captured with TensorFlow on CPU (logical devices): every logical device gets its
host_compute time, and the send/recv links match the run's partition graphs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfprof_towers.analysis.run_traces import analyze_run_dir
from tfprof_towers.trace.analysis import analyze_xplane

pytestmark = pytest.mark.slow

CAPTURE = r"""
import json, sys
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
logdir = sys.argv[1]
g = tf.Graph()
with g.as_default():
    with tf.device("/cpu:0"):
        x = tf.compat.v1.placeholder(tf.float32, [32, 64], name="x")
        w = tf.Variable(tf.ones([64, 64]), name="w")
    with tf.device("/cpu:1"):
        h = tf.sigmoid(tf.matmul(x, w, name="mm1"), name="h")
    with tf.device("/cpu:2"):
        y = tf.reduce_sum(tf.matmul(h, w, name="mm2"), name="y")
    init = tf.compat.v1.global_variables_initializer()
config = tf.compat.v1.ConfigProto(device_count={"CPU": 3})
with tf.compat.v1.Session(graph=g, config=config) as sess:
    sess.run(init)
    feed = {x: np.ones([32, 64], np.float32)}
    meta = tf.compat.v1.RunMetadata()
    sess.run(y, feed, options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=meta)
    nodes, edges = {}, []
    for p in meta.partition_graphs:
        for n in p.node:
            nodes[n.name] = n.device
            if n.op == "_Send":
                edges.append({"edge": n.attr["tensor_name"].s.decode(),
                              "src": n.attr["send_device"].s.decode(),
                              "dst": n.attr["recv_device"].s.decode()})
    tf.profiler.experimental.start(logdir)
    for i in range(3):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            sess.run(y, feed)
    tf.profiler.experimental.stop()
json.dump({"nodes": nodes, "edges": edges}, open(logdir + "/graph.json", "w"))
"""


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tensorflow")
    logdir = tmp_path_factory.mktemp("cpu_capture")
    subprocess.run([sys.executable, "-c", CAPTURE, str(logdir)], check=True, capture_output=True, timeout=600)
    return logdir


def canonical(name: str) -> str:
    return "/device:CPU:" + name.rsplit(":", 1)[1]


def test_every_logical_device_gets_host_compute(captured: Path) -> None:
    graph = json.loads((captured / "graph.json").read_text())
    a = analyze_xplane(captured, node_devices=graph["nodes"], kind="logical-cpu")
    doc = a.to_doc()
    assert doc["window"] == "markers" and doc["steps"] == 3
    for dev in ("/device:CPU:0", "/device:CPU:1", "/device:CPU:2"):
        assert doc["devices"][dev]["total"]["host_compute"]["seconds"] > 0, dev
        assert doc["devices"][dev]["wall"]["host_compute"] > 0, dev
    ev = a.trace.events
    mm = ev[ev["op_type"].astype(str).str.contains("MatMul")]
    assert dict(zip(mm["tf_op"].astype(str), mm["device"].astype(str))) == {
        "mm1": "/device:CPU:1",
        "mm2": "/device:CPU:2",
    }


def test_send_recv_links_match_partition_graphs(captured: Path) -> None:
    graph = json.loads((captured / "graph.json").read_text())
    edge_bytes = {e["edge"]: 1000 for e in graph["edges"]}
    a = analyze_xplane(captured, node_devices=graph["nodes"], kind="logical-cpu", edge_bytes=edge_bytes)
    links = a.to_doc(per_step=True)["links"]
    want: dict[tuple[str, str], int] = {}
    for e in graph["edges"]:
        key = (canonical(e["src"]), canonical(e["dst"]))
        want[key] = want.get(key, 0) + 1
    assert {(li["src"], li["dst"]): li["count"] for li in links} == want
    assert all(
        li["bytes"] == 1000 * li["count"] and li["measured"] is False and li["seconds"] is None
        for li in links
    )
    sends = a.trace.events[a.trace.events["op_type"] == "_Send"]
    assert set(sends["edge"].astype(str)) == set(edge_bytes)


@pytest.mark.parametrize(
    "variant", ["single", "towers_host_vars", "towers_accel0_vars", "towers_bug", "replicated"]
)
def test_project_capture_run_directory(tiny_run: Path, variant: str) -> None:
    """The project's own `profile` run: each variant's trace joined through its run record."""
    record = json.loads((tiny_run / "variants" / variant / "record.json").read_text())
    doc = analyze_run_dir(tiny_run, variant).to_doc(per_step=True)
    assert doc["kind"] == "logical-cpu" and doc["window"] == "markers"
    if variant in ("towers_host_vars", "towers_bug"):  # every device runs matmuls in these
        for dev in ("/device:CPU:0", "/device:CPU:1", "/device:CPU:2"):
            assert doc["devices"][dev]["total"]["host_compute"]["count"] > 0, dev
    links = {(li["src"], li["dst"]): (li["bytes"], li["count"]) for li in doc["links"]}
    transfers = {
        (t["src"], t["dst"]): (t["bytes_per_step"], t["tensors"]) for t in record["placement"]["transfers"]
    }
    assert links == transfers
    assert all(not li["measured"] and li["seconds"] is None for li in doc["links"])
