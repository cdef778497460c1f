"""A user's Keras model without TensorFlow: the random-op note, the same-math table, the projection's
Keras parts and ``project --keras-model``'s checks.  The runs themselves (equal first losses of an
unseeded model, a real projection) need TensorFlow children: tests/e2e/test_keras_models.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typed_kit as typed
from child_kit import one_line_error

from tfprof_towers.advice import recommend
from tfprof_towers.advice.rules import advise, excluded
from tfprof_towers.analysis import samemath
from tfprof_towers.capture.random_ops import is_random_op, random_ops, short_scope
from tfprof_towers.cli import main
from tfprof_towers.commands.console import random_math_lines
from tfprof_towers.projection import scaling
from tfprof_towers.projection.api import KerasModel, keras_doc
from tfprof_towers.projection.keras_graphs import keras_cause
from tfprof_towers.rundir.fields import Fields
from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.records import MathCheck
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.variants.config import get_preset
from tfprof_towers.vocab.fmt import fmt_workload

DROPOUT_OPS = ("sequential/dropout/...",)
NOTE = "the step draws random numbers (`sequential/dropout/...`)"


def node(name: str, op: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, op=op)


def graph_def(nodes: list[SimpleNamespace], functions: list[list[SimpleNamespace]] = ()) -> SimpleNamespace:
    return SimpleNamespace(node=nodes, library=SimpleNamespace(function=[SimpleNamespace(node_def=f)
                                                                         for f in functions]))


def test_random_op_types() -> None:
    for op in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "StatelessRandomUniformV2",
               "StatelessRandomGetKeyCounter", "StatefulUniform", "RngReadAndSkip", "Multinomial",
               "StatelessTruncatedNormalV2", "SampleDistortedBoundingBoxV2"):
        assert is_random_op(op), op
    for op in ("StatefulPartitionedCall", "MatMul", "Conv2D", "ReadVariableOp", "Relu", "Shape"):
        assert not is_random_op(op), op


def test_random_ops_of_a_step_and_its_nested_functions_by_scope() -> None:
    scope = "sequential/dropout/stateless_dropout"
    inner = [node(f"{scope}/StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounter"),
             node(f"{scope}/StatelessRandomUniformV2", "StatelessRandomUniformV2"),
             node("replica_1/sequential/dropout/stateless_dropout/StatelessRandomUniformV2",
                  "StatelessRandomUniformV2"),
             node("sequential/dense/MatMul", "MatMul")]
    top = [node("StatefulPartitionedCall", "StatefulPartitionedCall"),
           node("init/RandomUniform", "RandomUniform"), node("noise", "RandomStandardNormal")]
    # the replicas' copies and the two ops of one Dropout are one entry; the call op is not random
    assert random_ops(graph_def(top, [inner])) == ("init/RandomUniform", "noise", "sequential/dropout/...")
    # a TF1 step: only the ops it executes (its variables' initialisers draw, the step does not)
    assert random_ops(graph_def(top), only={"StatefulPartitionedCall", "noise"}) == ("noise",)
    assert random_ops(graph_def([node("a/MatMul", "MatMul")])) == ()
    assert short_scope("replica_3/model/augment/flip/RandomUniform") == "model/augment/..."


def test_the_math_record_keeps_the_random_ops_only_when_there_are_some() -> None:
    assert MathCheck((1.0, 0.5), None).to_json() == {"losses": [1.0, 0.5], "grad_norm": None}
    doc = MathCheck((1.0, 0.5), None, DROPOUT_OPS).to_json()
    assert doc == {"losses": [1.0, 0.5], "grad_norm": None, "random_ops": list(DROPOUT_OPS)}
    assert MathCheck.from_fields(Fields.of(doc, "record.json")) == MathCheck((1.0, 0.5), None, DROPOUT_OPS)


def entry(name: str, losses: list[float], random: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"name": name, "status": "ok", "source": "builtin", "family": "tf2-strategy", "losses": losses,
            "grad_norm": None, "random_ops": list(random)}


def test_a_step_that_draws_random_numbers_is_not_compared_and_is_no_reference() -> None:
    entries = [entry("one_device", [2.30, 2.10], DROPOUT_OPS), entry("mirrored", [2.41, 2.20], DROPOUT_OPS)]
    table = samemath.table([typed.entry(e) for e in entries], 1e-4, 1e-3)
    assert table.reference is None
    assert [(r.variant, r.status, r.why, r.random_ops) for r in table.variants] == [
        ("one_device", "not compared", NOTE, DROPOUT_OPS),
        ("mirrored", "not compared", NOTE, DROPOUT_OPS)]
    assert random_math_lines(Summary("", (), math=table)) == [
        f"Same math not compared for one_device, mirrored: {NOTE}"]
    many = entry("x", [1.0], tuple(f"m/dropout_{i}/..." for i in range(4)))
    assert samemath.draws_random(typed.entry(many)) == (
        "the step draws random numbers (`m/dropout_0/...`, `m/dropout_1/...` and 2 more)")


def test_the_others_are_still_compared_with_a_baseline_that_draws_nothing() -> None:
    entries = [entry("one_device", [2.30, 2.10]), entry("mirrored", [2.30, 2.10]),
               entry("central_storage", [2.9, 2.10], DROPOUT_OPS)]
    table = samemath.table([typed.entry(e) for e in entries], 1e-4, 1e-3)
    rows = {r.variant: r.status for r in table.variants}
    assert rows == {"one_device": "reference", "mirrored": "same", "central_storage": "not compared"}


def summary_of(entries: list[dict[str, Any]]) -> Summary:
    variants = [{**e, "step_time_s": {"median": 0.01, "n": 3}, "rank": i + 1, "devices": {}, "transfers": []}
                for i, e in enumerate(entries)]
    return typed.summary({"variants": variants, "ranking": [e["name"] for e in entries],
                          "topology": {"kind": "gpu"}, "config": {}})


def test_losses_that_differ_with_dropout_raise_no_changed_math_and_exclude_nothing() -> None:
    entries = [entry("one_device", [2.30, 2.10], DROPOUT_OPS), entry("mirrored", [2.41, 2.20], DROPOUT_OPS)]
    summary = summary_of(entries)
    advice = advise(summary)
    assert not [f for f in advice.findings if f.rule == "changed_math"]
    assert excluded(summary, advice.findings) == {}
    # without the random ops the same numbers are a real difference
    plain = summary_of([entry("one_device", [2.30, 2.10]), entry("mirrored", [2.41, 2.20])])
    [finding] = [f for f in advise(plain).findings if f.rule == "changed_math"]
    assert finding.variant == "mirrored"


def test_the_projection_says_which_keras_model_and_batch() -> None:
    preset = {"name": "cnn.py", "batch": 64, "keras_model": "/m/cnn.py"}
    assert fmt_workload(preset) == "for the Keras model cnn.py (global batch 64)"
    seed = {"name": "seed", "batch": 64, "dim": 1000}
    assert fmt_workload(seed) == "at the seed preset (batch 64, dim 1000)"
    graphs = {"variants": {"mirrored": {"keras_model": {"file": "/m/cnn.py", "global_batch": 64}},
                           "central_storage": {"error": "Keras cannot build ..."}}}
    assert keras_doc(KerasModel("/m/cnn.py"), graphs) == {"file": "/m/cnn.py", "global_batch": 64,
                                                          "batch_given": False}
    entries = [{"name": "mirrored", "projected_step_s": {"overlapped": 0.1, "serial": 0.12},
                "bottleneck": "accelerator compute (/device:GPU:0)"}]
    rec = recommend.from_projection(ProjectionSummary.from_json(
        {"hardware": "2x-gtx1060-pcie3", "preset": preset, "variants": entries, "ranking": ["mirrored"]}))
    assert rec.variant == "mirrored"
    assert rec.reason.startswith("For the Keras model cnn.py (not measured): projected fastest on "
                                 "2x-gtx1060-pcie3")


def test_a_keras_models_tracing_error_in_one_line() -> None:
    text = ("in user code:\n\n    File \"/x/keras_graphs.py\", line 124, in train_step  *\n"
            "        outputs = strategy.run(model.train_step, args=(per_replica,))\n\n"
            "    ValueError: Exception encountered when calling BatchNormalization.call().\n    \n"
            "    \x1b[1mYou must specify an aggregation method to update a AggregatingVariable in Replica "
            "Context. You can do so by passing an explicit value.\x1b[0m\n    \n"
            "    Arguments received by BatchNormalization.call():\n      • training=True\n")
    assert keras_cause(ValueError(text)) == ("BatchNormalization: You must specify an aggregation method to "
                                             "update a AggregatingVariable in Replica Context")
    assert keras_cause(TypeError("in user code:\n  File x\n    TypeError: bad input shape. More.")) == (
        "TypeError: bad input shape")


@pytest.mark.parametrize(("mode", "note"), [
    ("weak", "the Keras model file's GLOBAL_BATCH_SIZE is the per-replica batch: the global batch grows "
                "with N"),
    ("strong", "the Keras model file's GLOBAL_BATCH_SIZE is the global batch, split over N"),
])
def test_the_scaling_projection_of_a_keras_model(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                 note: str) -> None:
    seen: dict[int, Any] = {}

    def fake_build(variants, preset, layout, check_layout, timeout_s, keras=None, progress=None):
        seen[len(layout["accelerators"])] = keras
        return {"variants": {v.name: {"error": "not built here"} for v in variants}}

    monkeypatch.setattr(scaling, "build_graphs", fake_build)
    from tfprof_towers.variants.config import VariantSpec

    variants = [VariantSpec.builtin("one_device"), VariantSpec.builtin("mirrored")]
    doc = scaling.project_scaling("4x-v100-nvlink", get_preset("seed"), variants, mode,
                                  keras=KerasModel("/m/cnn.py"))
    model = KerasModel("/m/cnn.py")
    assert seen == {n: replace(model, scale=n if mode == "weak" else 1) for n in (1, 2, 4)}
    assert doc.notes == (note,)  # and no multi_worker curve for a Keras model


@pytest.mark.parametrize(("extra", "error"), [
    (["--variant-file", "x.py"], "--keras-model projects your model under the built-in tf2-strategy "
                                 "variants; it cannot be combined with --variant-file"),
    (["--preset", "tiny"], "--preset sizes the seed workload; a Keras model's sizes are its file's "
                           "(--batch N sets its global batch)"),
    (["--variants", "single"], "single is a tf1-graph variant; with this option choose among the "
                               "tf2-strategy"),
    (["--workers", "2"], "it takes no RUN_DIR, --variants, --variant-file or --keras-model"),
])
def test_project_keras_model_refuses_what_it_cannot_project(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], error: str) -> None:
    model = tmp_path / "m.py"
    model.write_text("def build_model():\n    pass\n\ndef make_dataset(n):\n    pass\n")
    assert main(["project", "--keras-model", str(model), "--hardware", "2x-gtx1060-pcie3", *extra]) == 2
    assert error in one_line_error(capsys)


def test_project_keras_model_names_a_file_that_is_not_a_model(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.py"
    model.write_text("def build_model():\n    pass\n")
    assert main(["project", "--keras-model", str(model), "--hardware", "2x-gtx1060-pcie3"]) == 2
    assert one_line_error(capsys) == (f"tfprof-towers: error: keras model file {model}: defines no "
                                      "make_dataset(global_batch_size) function")


def test_a_progress_line_per_graph_built() -> None:
    from tfprof_towers.projection.api import _built_line

    layout = {"host": "/cpu:0", "accelerators": [f"/gpu:{i}" for i in range(8)], "kind": "gpu"}
    work = {"ops": [{}] * 3, "build_cpu_s": 64.4}
    assert _built_line("mirrored", work, layout, 227.6) == (
        "mirrored: graph built for 8 accelerator(s) (3 ops) in 228 s, 64 s of CPU")
    assert _built_line("central_storage", {"error": "Keras cannot build ..."}, layout, 9.0) == (
        "central_storage: no graph: Keras cannot build ...")
