"""The tf2-strategy family (capture/families/tf2_strategy.py, capture/tf2/) without TensorFlow: file
checks, skip reasons, collective bytes by hand, the runner's checks of what a step returns, and how
skipped variants and all-reduce traffic are shown."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from records_kit import LOGICAL, TINY, record, run_doc, write_run

from tfprof_towers.analysis.audit import link_table
from tfprof_towers.capture.families.tf2_strategy import check_step, loss_and_norm
from tfprof_towers.capture.tf2.files import load_keras_file, load_step_file
from tfprof_towers.capture.tf2.placement import (
    all_transfers,
    collective_transfers,
    group_keys,
    ring_bytes,
    user_frames,
)
from tfprof_towers.cli import main
from tfprof_towers.render.html import transfer_matrix, view_model
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.rundir.records import SKIPPED, ChildSpec, RunConfig, VariantRecord
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import VariantSpec
from tfprof_towers.variants.variant_files import check_keras_file, check_variant_file
from tfprof_towers.vocab.errors import VariantError

ACC = ("/device:CPU:1", "/device:CPU:2")
GPUS = tuple(f"/device:GPU:{i}" for i in range(4))
GRADS = 6 * (16 * 16 + 16) * 4  # the tiny seed's gradients, packed into one all-reduce: 6528 B


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------------
# Variant files and Keras model files, checked in the parent


def test_a_variant_file_s_family_is_the_function_it_defines(tmp_path: Path) -> None:
    tf2 = tmp_path / "mine.py"
    tf2.write_text("def build_strategy(devices):\n    pass\n\ndef build_step(strategy, devices):\n    pass\n")
    assert check_variant_file(tf2) == VariantSpec("mine", str(tf2.resolve()), registry.TF2_STRATEGY)
    tf1 = tmp_path / "old.py"
    tf1.write_text("def build_variant(devices):\n    pass\n")
    assert check_variant_file(tf1).family == registry.TF1_GRAPH


def test_a_variant_file_defining_neither_or_both_is_refused(tmp_path: Path) -> None:
    neither = tmp_path / "neither.py"
    neither.write_text("def build_strategy(devices):\n    pass\n")
    with pytest.raises(VariantError) as exc:
        check_variant_file(neither)
    assert exc.value.message == (f"variant file {neither}: defines no build_variant(devices) or "
                                 "build_step(strategy, devices) function")
    both = tmp_path / "both.py"
    both.write_text("def build_variant(devices):\n    pass\n\ndef build_step(strategy, devices):\n    pass\n")
    with pytest.raises(VariantError) as exc:
        check_variant_file(both)
    assert exc.value.message == (f"variant file {both}: defines both build_variant and build_step; "
                                 "keep one (tf1-graph or tf2-strategy)")


def test_keras_model_file_checks(tmp_path: Path) -> None:
    good = tmp_path / "model.py"
    good.write_text("def build_model():\n    pass\n\ndef make_dataset(global_batch_size):\n    pass\n")
    assert check_keras_file(good) == str(good.resolve())
    half = tmp_path / "half.py"
    half.write_text("def build_model():\n    pass\n")
    with pytest.raises(VariantError, match=r"half.py: defines no make_dataset\(global_batch_size\) function"):
        check_keras_file(half)
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(VariantError, match=r"no build_model\(\) and no make_dataset\(global_batch_size\)"):
        check_keras_file(empty)
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model(:\n")
    with pytest.raises(VariantError, match=r"keras model file .*broken.py: syntax error at line 1"):
        check_keras_file(broken)
    with pytest.raises(VariantError, match=r"keras model file .*nope.py: not found"):
        check_keras_file(tmp_path / "nope.py")


def test_keras_model_option_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.py"
    model.write_text("def build_model():\n    pass\n\ndef make_dataset(global_batch_size):\n    pass\n")
    out = str(tmp_path / "r")
    assert main(["profile", "--keras-model", str(model), "--variants", "mirrored,single", "--out", out]) == 2
    assert "single is a tf1-graph variant; with this option choose among the tf2-strategy variants" \
        in one_line_error(capsys)
    step_file = tmp_path / "mine.py"
    step_file.write_text("def build_step(strategy, devices):\n    pass\n")
    assert main(["profile", "--keras-model", str(model), "--variant-file", str(step_file), "--out", out]) == 2
    assert "cannot be combined with --variant-file" in one_line_error(capsys)
    assert main(["profile", "--keras-model", str(tmp_path / "missing.py"), "--out", out]) == 2
    assert "keras model file" in one_line_error(capsys)
    assert not Path(out).exists()


# ------------------------------------------------------------------------------------------
# Files imported in the child, and what a step must return


def test_child_side_loaders_say_what_is_missing(tmp_path: Path) -> None:
    f = tmp_path / "step.py"
    f.write_text("build_step = 3\n")
    with pytest.raises(VariantError, match=r"defines no build_step\(strategy, devices\) function"):
        load_step_file(f)
    f.write_text("def build_step(strategy, devices):\n    pass\n")
    loaded = load_step_file(f)
    assert loaded.build_strategy is None and callable(loaded.build_step)
    k = tmp_path / "k.py"
    k.write_text("GLOBAL_BATCH_SIZE = 0\ndef build_model():\n    pass\ndef make_dataset(n):\n    pass\n")
    with pytest.raises(VariantError, match="GLOBAL_BATCH_SIZE must be a positive int, got 0"):
        load_keras_file(k)
    k.write_text("def build_model():\n    pass\ndef make_dataset(n):\n    pass\n"
                 "def compile_kwargs():\n    return 1\n")
    keras_file = load_keras_file(k)
    assert keras_file.global_batch_size == 32
    with pytest.raises(VariantError, match="compile_kwargs\\(\\) must return a dict, got int"):
        keras_file.compile_arguments()
    k.write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(VariantError, match=r"k.py: raised RuntimeError on import: no GPU here"):
        load_keras_file(k)


def test_what_a_step_returns() -> None:
    assert loss_and_norm(np.float32(0.5), "f") == (0.5, None)
    assert loss_and_norm({"loss": np.array(0.25), "grad_norm": 2.0}, "f") == (0.25, 2.0)
    with pytest.raises(VariantError, match="f: the step must return the loss as a scalar number, got float64 "
                                           r"of shape \(2,\)"):
        loss_and_norm(np.zeros(2), "f")
    with pytest.raises(VariantError, match="the step returned a mapping without 'loss'"):
        loss_and_norm({"x": 1.0}, "f")
    with pytest.raises(VariantError, match=r"build_step must return a tf.function .* got function"):
        check_step(lambda: 1.0, "variant file x.py")


# ------------------------------------------------------------------------------------------
# Skipped variants


def test_skip_reasons_name_what_is_missing_and_why() -> None:
    nccl = ("nccl",)
    assert registry.skip_reason(nccl, {"gpu", "nccl"}, "gpu", GPUS[:2]) is None
    assert registry.skip_reason((), set(), "logical-cpu", ACC) is None
    assert registry.skip_reason(nccl, set(), "logical-cpu", ACC) == (
        "needs NCCL, which has kernels only on GPUs; the accelerators here are logical CPU devices "
        "(/device:CPU:1, /device:CPU:2)")
    assert registry.skip_reason(nccl, {"gpu"}, "gpu", GPUS[:1]) == (
        "needs NCCL, which has kernels only on GPUs; NCCL needs at least two GPUs; this run has 1 "
        "(/device:GPU:0)")
    assert registry.skip_reason(nccl, {"gpu"}, "gpu", GPUS[:2]).endswith(
        "this TensorFlow build registers no GPU kernel for NcclAllReduce")


def test_skipped_records_round_trip_and_are_neither_ranked_nor_failed(tmp_path: Path) -> None:
    skipped = VariantRecord(name="mirrored_nccl", status=SKIPPED, family=registry.TF2_STRATEGY,
                            error="needs NCCL", stage="skipped", topology=LOGICAL)
    assert VariantRecord.from_json(json.loads(json.dumps(skipped.to_json()))) == skipped
    from tfprof_towers.session.report import finish_run

    rd = write_run(tmp_path / "run", run_doc(["one_device", "mirrored_nccl"]),
                   [record("one_device"), skipped])
    summary = finish_run(rd)
    entry = {v["name"]: v for v in summary["variants"]}["mirrored_nccl"]
    assert (entry["status"], entry["error"], entry["rank"]) == ("skipped", "needs NCCL", None)
    assert summary["ranking"] == ["one_device", "mirrored_nccl"]
    assert summary["recommendation"]["variant"] == "one_device"
    vm = view_model(summary, tmp_path / "run")
    assert vm["failed"] == []
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<span class="status-skipped">skipped</span>: needs NCCL' in html


def test_keras_model_travels_in_run_config_and_child_spec() -> None:
    config = RunConfig(preset=TINY, keras_model="/x/model.py")
    assert RunConfig.from_fields(_fields(config.to_json())).keras_model == "/x/model.py"
    assert "keras_model" not in RunConfig(preset=TINY).to_json()
    spec = ChildSpec("mirrored", registry.TF2_STRATEGY, None, TINY, 2, 1, 3, 2, "/l", "/r.json",
                     "/x/model.py")
    assert ChildSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def _fields(doc):
    from tfprof_towers.rundir.fields import Fields

    return Fields.of(json.loads(json.dumps(doc)), "run.json")


# ------------------------------------------------------------------------------------------
# Collective bytes, by hand


def _row(name: str, device: str, nbytes: int, group: int | None = 1, instance: int | None = None,
         shared: str = "") -> dict:
    return {"name": name, "device": device, "bytes": nbytes, "group_key": group, "instance_key": instance,
            "shared_name": shared}


def test_two_replicas_send_their_whole_gradient_each_way() -> None:
    # a ring of 2: reduce-scatter sends half, all-gather the other half: 2*(2-1)/2 * 6528 = 6528
    assert ring_bytes(GRADS, 2) == GRADS == 6528
    rows = [_row("CollectiveReduceV2_1", ACC[1], GRADS), _row("CollectiveReduceV2", ACC[0], GRADS)]
    assert collective_transfers(rows) == [
        {"src": ACC[0], "dst": ACC[1], "bytes_per_step": 6528, "tensors": 1, "kind": "collective"},
        {"src": ACC[1], "dst": ACC[0], "bytes_per_step": 6528, "tensors": 1, "kind": "collective"},
    ]


def test_a_ring_of_four_sends_one_and_a_half_times_the_payload_to_the_next() -> None:
    # 2*(4-1)/4 * 6528 = 9792, each GPU to the next in device order, the last back to the first
    rows = [_row(f"NcclAllReduce_{i}", GPUS[i], GRADS, group=None, shared="c0") for i in (3, 1, 0, 2)]
    links = collective_transfers(rows)
    assert [(x["src"][-1], x["dst"][-1], x["bytes_per_step"]) for x in links] == [
        ("0", "1", 9792), ("1", "2", 9792), ("2", "3", 9792), ("3", "0", 9792)]


def test_collectives_pair_by_instance_key_else_by_order_within_a_group() -> None:
    known = [_row("a", ACC[0], 100, instance=7), _row("b", ACC[0], 40, instance=8),
             _row("c", ACC[1], 40, instance=8), _row("d", ACC[1], 100, instance=7)]
    assert group_keys(known) == [("collective", 1, 7), ("collective", 1, 8), ("collective", 1, 8),
                                 ("collective", 1, 7)]
    # instance keys fed at call time (unknown): the k-th of a group on each device go together
    unknown = [_row("a", ACC[0], 100), _row("b", ACC[0], 40), _row("c", ACC[1], 100), _row("d", ACC[1], 40)]
    assert group_keys(unknown) == [("collective", 1, "#0"), ("collective", 1, "#1"),
                                   ("collective", 1, "#0"), ("collective", 1, "#1")]
    assert collective_transfers(unknown)[0]["bytes_per_step"] == 140  # 100 + 40 on each link
    assert collective_transfers([_row("alone", ACC[0], 100, group=None)]) == []


def test_send_recv_and_collective_links_carry_their_kind() -> None:
    edges = [{"src": "/device:CPU:0", "dst": ACC[0], "bytes": 2048},
             {"src": ACC[0], "dst": ACC[1], "bytes": 0}]
    rows = [_row("x", ACC[0], GRADS), _row("y", ACC[1], GRADS)]
    kinds = [(t["src"], t["dst"], t["bytes_per_step"], t["kind"]) for t in all_transfers(edges, rows)]
    assert kinds == [("/device:CPU:0", ACC[0], 2048, "send_recv"), (ACC[0], ACC[1], 0, "send_recv"),
                     (ACC[0], ACC[1], 6528, "collective"), (ACC[1], ACC[0], 6528, "collective")]


def test_collective_links_in_the_audit_and_the_matrix() -> None:
    placement = {
        "edges": [{"src": ACC[0], "dst": ACC[1], "bytes": 0, "tensor": "ctrl:0", "producer_type": "Const"}],
        "collectives": [{"name": "CollectiveReduceV2", "device": ACC[0], "bytes": GRADS, "tensor": "concat:0",
                         "kernel": "CollectiveReduceV2"}],
        "transfers": [{"src": ACC[0], "dst": ACC[1], "bytes_per_step": 0, "tensors": 1, "kind": "send_recv"},
                      {"src": ACC[0], "dst": ACC[1], "bytes_per_step": GRADS, "tensors": 1,
                       "kind": "collective"}],
    }
    rows = link_table(Placement.from_json(placement), LOGICAL.roles)
    assert [(r.via, r.bytes_per_step, [t.tensor for t in r.largest_tensors]) for r in rows] == [
        ("send_recv", 0, ["ctrl:0"]), ("collective", 6528, ["concat:0"])]
    matrix = transfer_matrix(Placement.from_json(placement).transfers, LOGICAL)
    cell = matrix["rows"][0][1]
    assert (cell["bytes"], cell["tensors"], cell["collective"]) == (6528, 2, 6528)


# ------------------------------------------------------------------------------------------
# Source lines: the op's traceback, restricted to the user's files


def test_user_frames_keep_the_user_s_files_innermost_first(tmp_path: Path) -> None:
    mine = tmp_path / "train.py"
    mine.write_text("")
    link = tmp_path / "link.py"
    link.symlink_to(mine)

    def frame(file: str, line: int, fn: str) -> SimpleNamespace:
        return SimpleNamespace(filename=file, lineno=line, name=fn)

    tb = [frame(str(mine), 10, "main"), frame("/site-packages/tensorflow/ops.py", 4434, "device"),
          frame(str(link), 42, "replica_step"), frame("/site-packages/keras/layer.py", 9, "__call__")]
    assert user_frames(tb, [str(mine)]) == [
        {"file": str(link), "line": 42, "function": "replica_step"},
        {"file": str(mine), "line": 10, "function": "main"},
    ]
    assert user_frames(tb, []) == []


def test_the_advice_reads_the_projection_s_hardware_profile(tmp_path: Path) -> None:
    """finish_run attaches projection.json before the rules run: staged_allreduce can see the links."""
    from tfprof_towers.rundir.paths import write_json
    from tfprof_towers.session.report import finish_run

    place = {
        "nodes": [{"name": f"mm{i}", "type": "MatMul", "kernel": "MatMul", "device": a, "flops": 100}
                  for i, a in enumerate(ACC)],
        "devices": {a: {"ops": 1, "flops_per_step": 100} for a in ACC}, "edges": [],
        "transfers": collective_transfers([_row("c0", ACC[0], GRADS), _row("c1", ACC[1], GRADS)]),
        "collectives": [{**_row(f"c{i}", a, GRADS), "kernel": "CollectiveReduceV2"}
                        for i, a in enumerate(ACC)],
        "strategy": {"strategy": "MirroredStrategy", "replicas": 2,
                     "cross_device_ops": "CollectiveAllReduce"},
    }
    from dataclasses import replace

    rd = write_run(tmp_path / "run", run_doc(["mirrored"]), [replace(record("mirrored", place=place),
                                                                      family=registry.TF2_STRATEGY)])
    link = {"name": "PCIe 3.0 x8", "bandwidth_gbs": 7.88, "efficiency": 0.8, "latency_us": 10.0}
    write_json(rd.root / "projection.json", {
        "label": "projected", "hardware": "2x-gtx1060-pcie3", "assumptions": [], "recommendation": {},
        "variants": [{"name": "mirrored", "projected_step_s": {"overlapped": 1e-3, "serial": 1e-3}}],
        "profile": {"name": "2x-gtx1060-pcie3", "host_link": link,
                    "peer": {**link, "kind": "staged", "topology": "mesh", "efficiency": 0.36}}})
    summary = finish_run(rd)
    assert [(f["rule"], f["variant"]) for f in summary["findings"]] == [("staged_allreduce", "mirrored")]
