"""The cost model against TensorFlow's published Benchmarks page: ``make bench-calibration``.

``python -m benchmarks.bench_calibration [--models ResNet50,InceptionV3,VGG16] [--gpus 1,2,4,8]
[--cache DIR] [--json FILE]``.

The published rows are the synthetic-data training tables of the TensorFlow Benchmarks page
(tensorflow.org/performance/benchmarks, May 2017; the source file is
tensorflow/docs_src/performance/benchmarks.md in the tensorflow/tensorflow repository), tf_cnn_benchmarks
on an NVIDIA DGX-1 (8x Tesla P100), Google Compute Engine n1-standard-32-k80x8 and Amazon EC2
p2.8xlarge (8x Tesla K80 each), at each page's batch size per GPU, optimizer SGD.

Each row's model is the ``keras.applications`` model of that name (``weights=None``), its training
step traced into a graph and never run, projected on the built-in profile of that machine
(``8x-p100-dgx1``, ``8x-k80-gce``, ``8x-k80-p2``), the overlapped bound:

* one GPU: a ``tf.function`` of one SGD step (``tf.GradientTape`` over the model, sparse
  categorical cross-entropy) traced on a logical CPU device standing in for the GPU;
* several GPUs: Keras' own train step under the ``tf2-strategy`` built-in that does what the
  page's ``variable_update`` did (:data:`STRATEGY_OF`), traced by
  :func:`tfprof_towers.projection.keras_graphs.keras_step_graph`, the global batch split over the
  replicas.

Printed per row: projected and published images/s and their ratio (projected / published), and for
several GPUs the scaling (images/s over the one-GPU row's) projected and published; then how many
one-GPU rows are within 0.6-1.5x of published, and per GPU count how many projected scalings lie
within the range the page's rows span (:func:`published_scaling_ranges`).  Traced graphs
are cached by model, batch, strategy and GPU count under ``--cache`` (default
``reports/calibration-cache``): a second run only projects.  A measurement: exits 0 whatever the
ratios, non-zero only on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The page's tables: (source, profile, variable_update per model, batch per GPU per model,
#: images/s per model per GPU count), synthetic data.
PAGE = "TensorFlow Benchmarks page (tensorflow.org/performance/benchmarks, May 2017)"


@dataclass(frozen=True)
class Published:
    """One published row: a model on a machine at a GPU count, images/s (synthetic data)."""

    source: str
    hardware: str
    model: str
    batch_per_gpu: int
    variable_update: str
    gpus: int
    images_per_s: float


def _rows(source: str, hardware: str, models: dict[str, tuple[int, str]],
          table: dict[int, tuple[float, ...]]) -> list[Published]:
    names = list(models)
    return [Published(source, hardware, m, models[m][0], models[m][1], g, ips[k])
            for g, ips in table.items() for k, m in enumerate(names)]


#: Synthetic-data training, images/s, from the page's "Training synthetic data" tables.
ROWS: tuple[Published, ...] = (
    *_rows("DGX-1 (8x P100 SXM2, NVLink)", "8x-p100-dgx1",
           {"InceptionV3": (64, "parameter_server (cpu)"), "ResNet50": (64, "parameter_server (cpu)"),
            "VGG16": (64, "replicated (NCCL)")},
           {1: (142, 219, 154), 2: (284, 422, 295), 4: (569, 852, 584), 8: (1131, 1734, 1081)}),
    *_rows("GCE n1-standard-32-k80x8", "8x-k80-gce",
           {"InceptionV3": (64, "parameter_server (cpu)"), "ResNet50": (64, "parameter_server (cpu)"),
            "VGG16": (32, "parameter_server (cpu)")},
           {1: (30.5, 51.9, 35.4), 2: (57.8, 99.0, 64.8), 4: (116, 195, 120), 8: (227, 387, 234)}),
    *_rows("AWS p2.8xlarge (8x K80)", "8x-k80-p2",
           {"InceptionV3": (64, "parameter_server (cpu)"), "ResNet50": (64, "replicated (no NCCL)"),
            "VGG16": (32, "parameter_server (gpu)")},
           {1: (30.8, 51.5, 36.3), 2: (58.7, 98.0, 69.4), 4: (117, 195, 141), 8: (230, 384, 260)}),
)

#: The tf2-strategy built-in doing what a tf_cnn_benchmarks ``variable_update`` did.  Variables on
#: the CPU, gradients summed there: ``mirrored_reduce_host`` (every gradient to the host, the sums
#: back) -- ``central_storage``, the exact analogue, cannot trace a Keras 3 model with
#: BatchNormalization (its moving averages are aggregating variables assigned in replica context);
#: replicated with NCCL all-reduce: ``mirrored_nccl``; replicated without NCCL, gradients summed by
#: copies between GPUs: ``mirrored_hierarchical``; variables spread over the GPUs as parameter
#: servers has no tf.distribute equivalent: the nearest, copies between GPUs (``mirrored_hierarchical``).
STRATEGY_OF = {
    "parameter_server (cpu)": "mirrored_reduce_host",
    "replicated (NCCL)": "mirrored_nccl",
    "replicated (no NCCL)": "mirrored_hierarchical",
    "parameter_server (gpu)": "mirrored_hierarchical",
}


def one_gpu_work(model: str, batch: int) -> dict[str, Any]:
    """One SGD step of ``keras.applications.<model>`` on one GPU: traced on ``/cpu:1`` standing in for
    ``/gpu:0`` (host ``/cpu:0``), never run; its work as :func:`.graphcost.extract_work` gives it."""
    import tensorflow as tf

    from tfprof_towers.projection.graphcost import extract_work
    from tfprof_towers.projection.strategy_graphs import capture_devices, rename_devices
    from tfprof_towers.vocab.device_names import canonical_device

    with tf.device("/cpu:1"):
        net = getattr(tf.keras.applications, model)(weights=None)
        opt = tf.keras.optimizers.SGD(0.01)
        opt.build(net.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    with tf.device("/cpu:1"):
        concrete = step.get_concrete_function(tf.TensorSpec([batch, *net.input_shape[1:]], tf.float32),
                                              tf.TensorSpec([batch], tf.int32))
    graph = concrete.graph
    work = extract_work(graph, [*graph.outputs, *graph.control_outputs], "/cpu:0", ["/cpu:1"],
                        default_to_accelerator=True, preplaced=capture_devices(concrete, "/cpu:0"),
                        group_control_edges=True)
    work = rename_devices(work, {canonical_device("/cpu:0"): canonical_device("/cpu:0"),
                                 canonical_device("/cpu:1"): canonical_device("/gpu:0")})
    work["variant"] = f"{model} one GPU"
    tf.keras.backend.clear_session()
    return work


_MODEL_FILE = '''"""keras.applications.{model} with random weights, for the calibration benchmark."""
import keras
import tensorflow as tf

GLOBAL_BATCH_SIZE = {batch}


def build_model():
    return keras.applications.{model}(weights=None)


def compile_kwargs():
    return {{"optimizer": keras.optimizers.SGD(0.01), "loss": "sparse_categorical_crossentropy"}}


def make_dataset(global_batch_size):
    x = tf.zeros([1, *build_shape()], tf.float32)
    y = tf.zeros([1], tf.int32)
    return tf.data.Dataset.from_tensors((x[0], y[0])).repeat().batch(global_batch_size)


def build_shape():
    return {shape}
'''


def strategy_work(model: str, batch: int, strategy: str, gpus: int, tmp: Path) -> dict[str, Any]:
    """Keras' train step of the model under ``strategy`` on ``gpus`` GPUs (global batch
    ``batch x gpus``), traced by the projection's Keras builder."""
    from unittest import mock

    from tfprof_towers.projection.keras_graphs import keras_step_graph

    shape = {"InceptionV3": [299, 299, 3], "Xception": [299, 299, 3]}.get(model, [224, 224, 3])
    path = tmp / f"{model.lower()}_model.py"
    path.write_text(_MODEL_FILE.format(model=model, batch=batch * gpus, shape=shape))
    layout = {"host": "/cpu:0", "accelerators": [f"/gpu:{i}" for i in range(gpus)], "kind": "gpu"}
    # memory is not what this benchmark measures: grappler's estimate of an 8-replica graph takes minutes
    with mock.patch("tfprof_towers.projection.graphcost.estimate_memory",
                    return_value={"error": "not estimated by the calibration benchmark"}):
        built = keras_step_graph(str(path), strategy, layout, batch=batch * gpus)
    work = dict(built.work)
    work["variant"] = f"{model} {strategy} x{gpus}"
    del built
    import tensorflow as tf

    tf.keras.backend.clear_session()
    return work


def cached_work(cache: Path, key: str, build: Any) -> dict[str, Any]:
    """The work under ``cache/key.json``, built (and saved) when absent."""
    path = cache / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    work = build()
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(work))
    return work


def projected_images_per_s(work: dict[str, Any], hardware: str, images: int) -> float:
    """Images per second of one step's ``work`` on the profile (overlapped bound)."""
    from tfprof_towers.projection.hardware import load_hardware
    from tfprof_towers.projection.model import GraphWork, project_work

    hw = load_hardware(hardware)
    one = dict(work)
    if len(one["accelerators"]) != hw.accelerator.count:  # fewer GPUs than the machine: its profile at n
        import dataclasses

        hw = dataclasses.replace(hw, accelerator=dataclasses.replace(hw.accelerator,
                                                                     count=len(one["accelerators"])))
    doc = project_work(GraphWork.from_json(one), hw)
    return images / doc["projected_step_s"]["overlapped"]


def published_scaling_ranges() -> dict[int, tuple[float, float]]:
    """Per GPU count above one, the lowest and highest published scaling (images/s over the same
    machine's and model's one-GPU row) across every row of the page."""
    one = {(r.hardware, r.model): r.images_per_s for r in ROWS if r.gpus == 1}
    out: dict[int, tuple[float, float]] = {}
    for r in ROWS:
        if r.gpus > 1:
            x = r.images_per_s / one[(r.hardware, r.model)]
            low, high = out.get(r.gpus, (x, x))
            out[r.gpus] = (min(low, x), max(high, x))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_calibration", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="ResNet50,InceptionV3,VGG16")
    parser.add_argument("--gpus", default="1,2,4,8")
    parser.add_argument("--cache", default="reports/calibration-cache")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    counts = [int(g) for g in args.gpus.split(",")]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(1 + max(counts))])
    tf.config.list_logical_devices("CPU")  # starts the runtime: the builders then keep these devices
    cache = Path(args.cache)
    rows = [r for r in ROWS if r.model in models and r.gpus in counts]
    one_gpu = {(r.hardware, r.model): r.images_per_s for r in ROWS if r.gpus == 1}
    results: list[dict[str, Any]] = []
    print(f"calibration against the {PAGE}; projected = overlapped bound")
    header = (f"{'machine':<30} {'model':<12} {'batch':>5} {'GPUs':>4} {'variable_update':<24} "
              f"{'projected':>9} {'published':>9} {'ratio':>6} {'scaling proj/pub':>17}")
    print(header)
    base: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-calibration-") as tmp:
        for r in sorted(rows, key=lambda r: (r.source, r.model, r.gpus)):
            strategy = "one_device" if r.gpus == 1 else STRATEGY_OF[r.variable_update]
            key = f"{r.model}-b{r.batch_per_gpu}-{strategy}-x{r.gpus}"
            t0 = time.perf_counter()
            try:
                if r.gpus == 1:
                    work = cached_work(cache, key, lambda r=r: one_gpu_work(r.model, r.batch_per_gpu))
                else:
                    work = cached_work(cache, key, lambda r=r, s=strategy: strategy_work(
                        r.model, r.batch_per_gpu, s, r.gpus, Path(tmp)))
            except ImportError as exc:
                print(f"{r.source:<30} {r.model:<12} {r.batch_per_gpu:>5} {r.gpus:>4} not projected: {exc}")
                continue
            print(f"  built {key} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            ips = projected_images_per_s(work, r.hardware, r.batch_per_gpu * r.gpus)
            if r.gpus == 1:
                base[(r.hardware, r.model)] = ips
            scaling = ""
            entry = {**asdict(r), "strategy": strategy, "projected_images_per_s": ips,
                     "ratio": ips / r.images_per_s, "build_s": time.perf_counter() - t0}
            if r.gpus > 1 and (r.hardware, r.model) in base:
                proj_s = ips / base[(r.hardware, r.model)]
                pub_s = r.images_per_s / one_gpu[(r.hardware, r.model)]
                entry.update(projected_scaling=proj_s, published_scaling=pub_s)
                scaling = f"{proj_s:5.2f}x / {pub_s:5.2f}x"
            results.append(entry)
            print(f"{r.source:<30} {r.model:<12} {r.batch_per_gpu:>5} {r.gpus:>4} {r.variable_update:<24} "
                  f"{ips:9.1f} {r.images_per_s:9.1f} {ips / r.images_per_s:6.2f} {scaling:>17}", flush=True)
    ones = [e["ratio"] for e in results if e["gpus"] == 1]
    if ones:
        inside = sum(0.6 <= x <= 1.5 for x in ones)
        print(f"one-GPU rows within 0.6-1.5x of published: {inside} of {len(ones)} "
              f"(ratios {min(ones):.2f}-{max(ones):.2f})")
    for g, (low, high) in sorted(published_scaling_ranges().items()):
        got = [e["projected_scaling"] for e in results if e["gpus"] == g and "projected_scaling" in e]
        if got:
            inside = sum(low <= x <= high for x in got)
            print(f"{g} GPUs: published scaling {low:.2f}x-{high:.2f}x over one GPU; projected "
                  f"{min(got):.2f}x-{max(got):.2f}x, {inside} of {len(got)} rows inside the published range")
    if args.json:
        Path(args.json).write_text(json.dumps({"source": PAGE, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
