"""End to end on the tiny preset: the six tf2-strategy built-ins in real TensorFlow, a TF2 variant
file next to a TF1 built-in, and a user's Keras model under three strategies.

Bytes are worked out by hand from the shapes (tiny: batch 4, dim 16, 6 blocks, 2 logical-CPU
accelerators, float32): every variable once is 6 W [16,16] + 6 b [16] = 6 x 272 x 4 = 6528 B;
an input shard [2,16,16] is 2048 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.capture.seed_values import reference_steps, relative_difference, seed_values
from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import PRESETS

pytestmark = pytest.mark.slow

HOST = "/device:CPU:0"
ACC = ("/device:CPU:1", "/device:CPU:2")
TF2 = registry.names(registry.TF2_STRATEGY)
VARS = 6 * (16 * 16 + 16) * 4
SHARD = 2 * 16 * 16 * 4
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEED_STEP = Path(__file__).resolve().parents[2] / "tfprof_towers" / "capture" / "seed_step.py"
REFERENCE = reference_steps(seed_values(4, 16, 6))


def record(run: Path, name: str) -> dict:
    return json.loads((run / "variants" / name / "record.json").read_text())


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def placement(run: Path, name: str) -> dict:
    return record(run, name)["placement"]


def links(run: Path, name: str, kind: str = "send_recv") -> dict[tuple[str, str], int]:
    return {(t["src"], t["dst"]): t["bytes_per_step"] for t in placement(run, name)["transfers"]
            if t["kind"] == kind}


def assert_seed_math(math: dict, with_norm: bool = True) -> None:
    """The first two losses (and the step-1 gradient norm) of the float64 oracle, to float32 precision."""
    assert len(math["losses"]) == 2
    for got, want in zip(math["losses"], REFERENCE.losses):
        assert relative_difference(got, want) < 1e-6, (math, REFERENCE)
    if with_norm:
        assert relative_difference(math["grad_norm"], REFERENCE.grad_norm) < 1e-6


def test_nccl_is_skipped_with_the_reason_and_the_rest_succeed(tiny_tf2_run: Path) -> None:
    doc = summary(tiny_tf2_run)
    assert [v["name"] for v in doc["variants"]] == list(TF2)
    status = {v["name"]: v for v in doc["variants"]}
    nccl = status.pop("mirrored_nccl")
    assert nccl["status"] == "skipped"
    assert nccl["error"] == ("needs NCCL, which has kernels only on GPUs; the accelerators here are logical "
                             "CPU devices (/device:CPU:1, /device:CPU:2)")
    assert not RunDir(tiny_tf2_run).xplane_files("mirrored_nccl")
    assert record(tiny_tf2_run, "mirrored_nccl")["stage"] == "skipped"
    for name, v in status.items():
        assert v["status"] == "ok", (name, v["error"])
        assert v["family"] == registry.TF2_STRATEGY
        assert v["step_time_s"]["n"] == PRESETS["tiny"].steps
        assert v["speedup_vs_single"] is not None  # over one_device, the family's baseline
    assert "mirrored_nccl" not in doc["ranking"][:5] and doc["ranking"][-1] == "mirrored_nccl"
    assert "status-skipped" in (tiny_tf2_run / "report.html").read_text()


def test_every_strategy_computes_the_seed_step(tiny_tf2_run: Path) -> None:
    for name in TF2:
        if name != "mirrored_nccl":
            assert_seed_math(record(tiny_tf2_run, name)["math"])


def test_mirrored_splits_the_flops_and_all_reduces_6528_bytes_per_replica(tiny_tf2_run: Path) -> None:
    pl = placement(tiny_tf2_run, "mirrored")
    half = PRESETS["tiny"].flops_per_step() / 2
    assert half == 278528
    assert [pl["devices"][a]["flops_per_step"] for a in ACC] == [half, half]
    assert pl["devices"][HOST]["flops_per_step"] == 0
    # one packed CollectiveReduceV2 per replica: every gradient, concatenated
    assert sorted((c["device"], c["kernel"], c["bytes"], c["group_size"]) for c in pl["collectives"]) == [
        (ACC[0], "CollectiveReduceV2", 6528, 2), (ACC[1], "CollectiveReduceV2", 6528, 2)]
    assert VARS == 6528
    # a ring of two: each replica sends its 6528 B to the other (half in reduce-scatter, half in all-gather)
    assert links(tiny_tf2_run, "mirrored", "collective") == {(ACC[0], ACC[1]): 6528, (ACC[1], ACC[0]): 6528}
    # and the batch shard still crosses host -> accelerator as a send/recv edge
    assert all(links(tiny_tf2_run, "mirrored")[(HOST, a)] >= SHARD for a in ACC)
    assert pl["strategy"] == {"strategy": "MirroredStrategy", "replicas": 2,
                              "cross_device_ops": "CollectiveAllReduce", "communication": "RING"}


def test_one_device_keeps_the_flops_on_accelerator_0(tiny_tf2_run: Path) -> None:
    pl = placement(tiny_tf2_run, "one_device")
    assert pl["devices"][ACC[0]]["flops_per_step"] == PRESETS["tiny"].flops_per_step()
    assert ACC[1] not in pl["devices"] and pl["collectives"] == []


def test_central_storage_pulls_the_variables_host_to_each_accelerator(tiny_tf2_run: Path) -> None:
    pl = placement(tiny_tf2_run, "central_storage")
    reads = {}
    for e in pl["edges"]:
        if e["producer_type"] == "ReadVariableOp" and e["src"] == HOST:
            reads[e["dst"]] = reads.get(e["dst"], 0) + e["bytes"]
    assert reads == {ACC[0]: VARS, ACC[1]: VARS}
    audit = {v["name"]: v for v in summary(tiny_tf2_run)["variants"]}["central_storage"]["audit"]
    assert audit["variable_pulls"]["by_accelerator"] == {ACC[0]: 6528, ACC[1]: 6528}
    variables = [n for n in pl["nodes"] if n["type"] == "VarHandleOp" or n["kernel"] == "VarHandleOp"]
    assert all(n["device"] == HOST for n in variables)
    assert pl["devices"][HOST]["flops_per_step"] == 0  # the update is elementwise; the matmuls are remote
    assert [pl["devices"][a]["flops_per_step"] for a in ACC] == [278528, 278528]


def test_hierarchical_copies_and_reduction_to_the_host_by_hand(tiny_tf2_run: Path) -> None:
    # two devices: HierarchicalCopyAllReduce packs the gradients, reduces them on the first
    # accelerator and broadcasts the sum back: 6528 B each way between the accelerators
    hier = links(tiny_tf2_run, "mirrored_hierarchical")
    assert (hier[(ACC[0], ACC[1])], hier[(ACC[1], ACC[0])]) == (6528, 6528)
    # ReductionToOneDevice(host): 12 gradients up from each replica, the 12 sums back down
    host = links(tiny_tf2_run, "mirrored_reduce_host")
    for a in ACC:
        assert host[(a, HOST)] - VARS in (4, 8)  # + the loss (and replica 0's gradient norm)
        assert host[(HOST, a)] - VARS - SHARD in (0, 4)  # + a scalar on replica 0
    assert placement(tiny_tf2_run, "mirrored_reduce_host")["collectives"] == []


def test_source_lines_point_into_the_step_s_file(tiny_tf2_run: Path) -> None:
    lines = SEED_STEP.read_text().splitlines()
    matmul = next(i for i, t in enumerate(lines, 1) if "tf.matmul(flat, w)" in t)
    pl = placement(tiny_tf2_run, "mirrored")
    forward = [n for n in pl["nodes"] if n["flops"] > 0 and "gradient" not in n["name"]]
    assert forward
    for n in forward:
        assert n["sources"][0] == {"file": str(SEED_STEP), "line": matmul, "function": "forward"}


def test_every_logical_accelerator_has_its_own_time_rows(tiny_tf2_run: Path) -> None:
    for v in summary(tiny_tf2_run)["variants"]:
        if v["status"] != "ok":
            continue
        devices = v["breakdown"]["devices"]
        used = [a for a in ACC if a in v["devices"]]
        assert used
        for a in used:
            assert devices[a]["role"] == "accelerator"
            assert sum(c["seconds"] for c in devices[a]["total"].values()) > 0, (v["name"], a)


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mixed") / "run"
    argv = ["profile", "--preset", "tiny", "--variants", "single,one_device",
            "--variant-file", str(EXAMPLES / "tf2_custom_loop.py"), "--out", str(out)]
    assert main(argv) == 0
    return out


def test_tf1_and_tf2_side_by_side_with_a_tf2_variant_file(mixed_run: Path) -> None:
    doc = summary(mixed_run)
    entries = {v["name"]: v for v in doc["variants"]}
    assert {n: (v["status"], v["family"]) for n, v in entries.items()} == {
        "single": ("ok", "tf1-graph"), "one_device": ("ok", "tf2-strategy"),
        "tf2_custom_loop": ("ok", "tf2-strategy")}
    assert entries["single"]["speedup_vs_single"] == entries["one_device"]["speedup_vs_single"] == 1.0
    custom = record(mixed_run, "tf2_custom_loop")
    assert custom["source"] == f"file:{EXAMPLES / 'tf2_custom_loop.py'}"
    assert custom["placement"]["strategy"]["cross_device_ops"] == "ReductionToOneDevice"
    assert len(custom["math"]["losses"]) == 2 and custom["math"]["grad_norm"] > 0
    # the seed workload written as a Keras custom loop: the math check finds it the built-ins' math
    rows = {r["variant"]: r["status"] for r in doc["math"]["variants"]}
    assert rows["tf2_custom_loop"] == "same", doc["math"]
    # its matmuls were created by the user's replica_step: the source lines say so
    lines = (EXAMPLES / "tf2_custom_loop.py").read_text().splitlines()
    call = next(i for i, t in enumerate(lines, 1) if "model(features, training=True)" in t)
    forward = [n for n in custom["placement"]["nodes"] if n["flops"] > 0 and "gradient" not in n["name"]]
    assert forward and all(n["sources"][0]["line"] == call for n in forward)
    assert_seed_math(record(mixed_run, "one_device")["math"])


@pytest.fixture(scope="module")
def keras_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keras") / "run"
    argv = ["profile", "--preset", "tiny", "--keras-model", str(EXAMPLES / "keras_seed_model.py"),
            "--variants", "one_device,mirrored,central_storage", "--out", str(out)]
    assert main(argv) == 0
    return out


def test_keras_model_under_three_strategies_writes_a_full_report(keras_run: Path) -> None:
    doc = summary(keras_run)
    assert [v["name"] for v in doc["variants"]] == ["one_device", "mirrored", "central_storage"]
    run = json.loads((keras_run / "run.json").read_text())
    assert run["config"]["keras_model"] == str(EXAMPLES / "keras_seed_model.py")
    html = (keras_run / "report.html").read_text()
    for v in doc["variants"]:
        assert v["status"] == "ok", v["error"]
        assert v["step_time_s"]["n"] == PRESETS["tiny"].steps
        assert v["breakdown"] and "error" not in v["breakdown"]
        assert v["audit"] and v["chrome_trace"]
        assert f'data-variant="{v["name"]}"' in html
        rec = record(keras_run, v["name"])
        assert len(rec["timings"]["profiled_step_times_s"]) == PRESETS["tiny"].profile_steps
        assert rec["placement"]["keras_model"] == str(EXAMPLES / "keras_seed_model.py")
        assert_seed_math(rec["math"], with_norm=False)  # the example is the seed at tiny sizes
    assert doc["recommendation"]["variant"] in {v["name"] for v in doc["variants"]}


def test_keras_mirrored_all_reduces_the_same_6528_bytes(keras_run: Path) -> None:
    pl = placement(keras_run, "mirrored")
    assert sorted((c["device"], c["bytes"]) for c in pl["collectives"]) == [(ACC[0], 6528), (ACC[1], 6528)]
    # inside fit's inner step function, inlined under its call op
    assert all(c["name"].startswith("StatefulPartitionedCall/") for c in pl["collectives"])
    assert links(keras_run, "mirrored", "collective") == {(ACC[0], ACC[1]): 6528, (ACC[1], ACC[0]): 6528}
    assert [pl["devices"][a]["flops_per_step"] for a in ACC] == [278528, 278528]
    cs = placement(keras_run, "central_storage")
    for acc in ACC:  # the model's weights (the loss tracker's scalars aside)
        reads = sum(e["bytes"] for e in cs["edges"] if e["producer_type"] == "ReadVariableOp"
                    and e["src"] == HOST and e["dst"] == acc and "/functional" in e["tensor"])
        assert reads == VARS
