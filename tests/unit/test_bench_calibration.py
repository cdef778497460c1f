"""The calibration benchmark's arithmetic and its published rows (no TensorFlow: works built in code)."""

from __future__ import annotations

import pytest

from benchmarks.bench_calibration import ROWS, STRATEGY_OF, projected_images_per_s

CPU, G0, G1 = "/device:CPU:0", "/device:GPU:0", "/device:GPU:1"


def _conv(device: str, flops: float, winograd: bool = False) -> dict:
    return {"name": f"conv-{device}", "type": "Conv2D", "device": device, "flops": flops, "bytes": 0.0,
            "matmul": True, "op_class": "matmul", "winograd": winograd, "deps": [], "copies": []}


def test_one_gpu_images_per_second_by_hand() -> None:
    # P100 at 10.6 TFLOP/s x 0.6 = 6.36e12 FLOP/s: 6.36e12 FLOPs take 1 s, plus 5 us of overhead
    work = {"host": CPU, "accelerators": [G0], "ops": [_conv(G0, 6.36e12)]}
    assert projected_images_per_s(work, "8x-p100-dgx1", 64) == pytest.approx(64 / (1 + 5e-6))
    # a 3x3 stride-1 convolution: Winograd's 2x
    work = {"host": CPU, "accelerators": [G0], "ops": [_conv(G0, 6.36e12, winograd=True)]}
    assert projected_images_per_s(work, "8x-p100-dgx1", 64) == pytest.approx(64 / (0.5 + 5e-6))


def test_two_gpus_of_an_eight_gpu_machine() -> None:
    # K80 at 2.8 x 0.6 = 1.68e12 FLOP/s; two GPUs side by side, 1 s each: 128 images in 1 s
    work = {"host": CPU, "accelerators": [G0, G1], "ops": [_conv(G0, 1.68e12), _conv(G1, 1.68e12)]}
    assert projected_images_per_s(work, "8x-k80-gce", 128) == pytest.approx(128 / (1 + 5e-6))


def test_published_rows_are_the_pages_tables() -> None:
    assert len(ROWS) == 3 * 3 * 4  # three machines, three models, 1/2/4/8 GPUs
    one = {(r.hardware, r.model): r.images_per_s for r in ROWS if r.gpus == 1}
    assert one[("8x-p100-dgx1", "ResNet50")] == 219
    assert one[("8x-k80-gce", "InceptionV3")] == 30.5
    assert one[("8x-k80-p2", "VGG16")] == 36.3
    assert {r.batch_per_gpu for r in ROWS if r.model == "VGG16" and r.hardware != "8x-p100-dgx1"} == {32}
    assert {r.variable_update for r in ROWS} <= set(STRATEGY_OF)


def test_published_scaling_ranges_span_the_pages_rows() -> None:
    from benchmarks.bench_calibration import published_scaling_ranges

    ranges = published_scaling_ranges()
    assert set(ranges) == {2, 4, 8}
    # 8 GPUs: GCE VGG16 234 / 35.4 = 6.61x at the bottom, DGX-1 InceptionV3 1131 / 142 = 7.96x at the top
    assert ranges[8] == (pytest.approx(234 / 35.4), pytest.approx(1131 / 142))
