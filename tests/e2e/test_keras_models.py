"""A user's own Keras model: compared fairly though unseeded, and projected onto GPUs from a CPU-only machine.

Real TensorFlow on tiny models (tests/variants/keras_unseeded_cnn.py: 4154 parameters, a global
batch of 8 images of 16x16x3; tests/variants/keras_dropout.py).  These need TensorFlow children, so
they are in the e2e tier, not the unit tier; the parts that need no TensorFlow (the math table's
"not compared" row, the random-op names, the command's checks) are unit tests
(tests/unit/test_keras_projection.py).

Bytes worked out by hand: the CNN's weights are 4154 x 4 = 16616 B in four variables (conv kernel
3x3x3x8 = 864 B, bias 32 B, dense kernel 392x10 = 15680 B, bias 40 B), which the BFC allocator takes
rounded up to 256 B each: 1024 + 256 + 15872 + 256 = 17408 B (Adam adds m and v of the same sizes);
its batch is 8 x 16 x 16 x 3 float32 images (24576 B) and 8 int64 labels (64 B).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tfprof_towers.cli import main

pytestmark = pytest.mark.slow

VARIANTS = Path(__file__).resolve().parents[1] / "variants"
CNN = VARIANTS / "keras_unseeded_cnn.py"
DROPOUT = VARIANTS / "keras_dropout.py"
STRATEGIES = ("one_device", "mirrored", "central_storage")
WEIGHTS = 4154 * 4
#: The four weight variables as the allocator holds them, each rounded up to 256 B.
WEIGHTS_HELD = 1024 + 256 + 15872 + 256
BATCH_BYTES = 8 * 16 * 16 * 3 * 4 + 8 * 8
#: Keras' own scalars next to the weights and Adam's slots (iterations, learning rate, loss tracker),
#: each a 256-byte block of the allocator.
KERAS_SCALARS_AT_MOST = 4 * 256


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keras-cnn") / "run"
    assert main(["profile", "--preset", "tiny", "--keras-model", str(CNN), "--variants", ",".join(STRATEGIES),
                 "--steps", "2", "--profile-steps", "1", "--out", str(out)]) == 0
    return out


def test_an_unseeded_model_and_shuffle_give_equal_first_losses_under_three_strategies(cnn_run: Path) -> None:
    math = summary(cnn_run)["math"]
    assert math["reference"]["variant"] == "one_device"
    rows = {r["variant"]: r for r in math["variants"]}
    assert {n: rows[n]["status"] for n in STRATEGIES} == {
        "one_device": "reference", "mirrored": "same", "central_storage": "same"}
    first = {n: rows[n]["losses"][0] for n in STRATEGIES}
    # step 1's loss is taken before any update: the same weights on the same batch, to float rounding
    assert max(first.values()) - min(first.values()) <= 1e-6 * abs(first["one_device"]), first
    assert not [f for f in summary(cnn_run)["findings"] if f["rule"] == "changed_math"]


def test_profile_on_a_cpu_only_machine_recommends_from_the_projection_with_memory(cnn_run: Path) -> None:
    doc = summary(cnn_run)
    rec = doc["recommendation"]
    assert rec["basis"] == "projected" and rec["hardware"] == "2x-gtx1060-pcie3"
    assert rec["variant"] in STRATEGIES
    assert rec["reason"].startswith(f"For the Keras model {CNN.name} (not measured)")
    projection = json.loads((cnn_run / "projection.json").read_text())
    assert projection["keras_model"] == {"file": str(CNN), "global_batch": 8, "batch_given": False}
    assert sorted(projection["ranking"]) == sorted(STRATEGIES)
    by_name = {v["name"]: v for v in projection["variants"]}
    for name in STRATEGIES:
        v = by_name[name]
        assert v["memory_fit"]["fits"] is True and v["memory_fit"]["verdict"].startswith("fits: peak")
        assert v["memory"]["/device:GPU:0"]["basis"] == "estimated"
    for name, where in (("mirrored", "/device:GPU:1"), ("central_storage", "/device:CPU:0")):
        persistent = by_name[name]["memory"][where]["persistent_bytes"]  # weights and Adam's m and v
        assert 3 * WEIGHTS_HELD <= persistent <= 3 * WEIGHTS_HELD + KERAS_SCALARS_AT_MOST, (name, persistent)
    assert by_name["central_storage"]["memory"]["/device:GPU:1"]["persistent_bytes"] == 0
    # the report's memory section shows the estimate, not "not estimated for --keras-model"
    assert "Not estimated for --keras-model" not in (cnn_run / "report.html").read_text()


def test_a_step_with_dropout_is_not_compared_and_not_excluded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--keras-model", str(DROPOUT), "--variants",
                 "one_device,mirrored", "--steps", "2", "--profile-steps", "1", "--out", str(out)]) == 0
    doc = summary(out)
    rows = {r["variant"]: r for r in doc["math"]["variants"]}
    for name in ("one_device", "mirrored"):
        assert rows[name]["status"] == "not compared"
        assert rows[name]["why"].startswith("the step draws random numbers (`")
        assert re.search(r"/dropout(_\d+)?/\.\.\.`\)$", rows[name]["why"]), rows[name]["why"]
    assert not [f for f in doc["findings"] if f["rule"] == "changed_math"]
    assert not doc["recommendation"].get("excluded")


def test_project_ranks_the_strategies_on_two_gtx1060s_with_fit_verdicts(capsys: pytest.CaptureFixture,
                                                                         ) -> None:
    assert main(["project", "--keras-model", str(CNN), "--hardware", "2x-gtx1060-pcie3",
                 "--variants", ",".join(STRATEGIES), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    for name in STRATEGIES:  # a progress line per strategy, as its graph is built
        assert f"{name}: graph built for 2 accelerator(s)" in captured.err
    assert doc["preset"] == {"name": CNN.name, "batch": 8, "keras_model": str(CNN)}
    assert sorted(doc["ranking"]) == sorted(STRATEGIES)
    assert doc["recommendation"]["variant"] == doc["ranking"][0]
    by_name = {v["name"]: v for v in doc["variants"]}
    for v in by_name.values():
        step = v["projected_step_s"]
        assert 0 < step["overlapped"] <= step["serial"]
        assert v["bottleneck"]["text"] and v["rank"] >= 1
        assert v["memory_fit"]["verdict"].startswith("fits: peak") and v["memory_fit"]["capacity_bytes"]
    links = {name: {(p["src"], p["dst"]): p["bytes_per_step"] for p in v["per_link"]}
             for name, v in by_name.items()}
    host, gpu0, gpu1 = "/device:CPU:0", "/device:GPU:0", "/device:GPU:1"
    assert links["one_device"] == {(host, gpu0): BATCH_BYTES}  # the batch, and nothing else
    assert links["mirrored"][(host, gpu0)] >= BATCH_BYTES // 2  # each replica's half of the batch
    assert min(links["mirrored"][(gpu0, gpu1)], links["mirrored"][(gpu1, gpu0)]) >= WEIGHTS  # gradients' ring
    assert links["central_storage"][(host, gpu1)] >= WEIGHTS + BATCH_BYTES // 2  # weights read, half a batch
    assert links["central_storage"][(gpu1, host)] >= WEIGHTS  # its gradients, to the host


def test_project_batch_overrides_the_files_global_batch(capsys: pytest.CaptureFixture) -> None:
    assert main(["project", "--keras-model", str(CNN), "--hardware", "2x-gtx1060-pcie3",
                 "--variants", "one_device", "--batch", "16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["keras_model"] == {"file": str(CNN), "global_batch": 16, "batch_given": True}
    [v] = doc["variants"]
    assert {(p["src"], p["dst"]): p["bytes_per_step"] for p in v["per_link"]} == {
        ("/device:CPU:0", "/device:GPU:0"): 2 * BATCH_BYTES}


STEP_FILE = '''
import keras
import numpy as np
import tensorflow as tf


def build_strategy(devices):
    return {strategy}


def build_step(strategy, devices):
    with strategy.scope():  # Keras' default initialisers, no seed
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    x = np.random.rand(8, 6).astype("float32")  # no seed either
    dataset = tf.data.Dataset.from_tensors((x, x.sum(axis=1, keepdims=True))).repeat().unbatch().batch(8)
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            per_example = tf.square(model(features, training=True) - labels)[:, 0]
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=8)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step():
        return strategy.reduce("SUM", strategy.run(replica_step, args=(next(batches),)), axis=None)

    return step
'''
FILE_STRATEGIES = {
    "unseeded_one": "tf.distribute.OneDeviceStrategy(devices.accelerators[0])",
    "unseeded_mirrored": "tf.distribute.MirroredStrategy(list(devices.accelerators))",
    "unseeded_central": ("tf.distribute.experimental.CentralStorageStrategy(list(devices.accelerators), "
                         "parameter_device=devices.host)"),
}


def test_unseeded_tf2_variant_files_start_from_the_same_weights(tmp_path: Path) -> None:
    argv = ["profile", "--preset", "tiny", "--steps", "2", "--profile-steps", "1",
            "--out", str(tmp_path / "run")]
    for name, strategy in FILE_STRATEGIES.items():
        path = tmp_path / f"{name}.py"
        path.write_text(STEP_FILE.format(strategy=strategy))
        argv += ["--variant-file", str(path)]
    assert main(argv) == 0
    math = summary(tmp_path / "run")["math"]
    assert math["reference"]["label"] == "the median of 3 variants (no baseline ran)"
    rows = {r["variant"]: r for r in math["variants"]}
    assert {n: rows[n]["status"] for n in FILE_STRATEGIES} == dict.fromkeys(FILE_STRATEGIES, "same")
    first = [rows[n]["losses"][0] for n in FILE_STRATEGIES]
    assert max(first) - min(first) <= 1e-6 * abs(first[0]), first
