"""Placement arithmetic on plain values (no session run)."""

from __future__ import annotations

from tfprof_towers.capture.devices import plan_devices
from tfprof_towers.capture.placement import (
    conv2d_flops,
    matmul_flops,
    split_input,
    summarise_devices,
    summarise_transfers,
    tensor_bytes,
)
from tfprof_towers.variants.config import PRESETS
from tfprof_towers.vocab.device_names import canonical_device


def test_matmul_flops() -> None:
    assert matmul_flops([32, 16], [16, 8], False, False) == 2 * 32 * 8 * 16
    assert matmul_flops([16, 32], [16, 8], True, False) == 2 * 32 * 8 * 16
    assert matmul_flops([32, 16], [8, 16], False, True) == 2 * 32 * 8 * 16
    # batched, with broadcasting of the leading dims
    assert matmul_flops([5, 1, 4, 3], [7, 3, 2], False, False) == 2 * 5 * 7 * 4 * 2 * 3
    assert matmul_flops([3], [3, 2], False, False) == 0


def test_conv2d_flops() -> None:
    # out [1, 8, 8, 16], filter 3x3x4x16: 2 * 1024 * 9 * 4
    assert conv2d_flops([1, 8, 8, 16], [3, 3, 4, 16]) == 2 * 1024 * 9 * 4
    assert conv2d_flops([8, 8], [3, 3, 4, 16]) == 0


def test_seed_preset_flops() -> None:
    # 17 matmuls of [64*1000, 1000] x [1000, 1000]: 17 * 2 * 64e3 * 1e6 = 2.176e12
    assert PRESETS["seed"].flops_per_step() == 17 * 2 * 64_000 * 1000 * 1000 == 2.176e12
    # the tiny preset's count equals what the capture measures from its graphs (test_profile_e2e)
    assert PRESETS["tiny"].flops_per_step() == 17 * 2 * 64 * 16 * 16


def test_tensor_bytes() -> None:
    assert tensor_bytes(1, [4, 16, 16]) == 4096  # float32
    assert tensor_bytes(2, [3]) == 24  # float64
    assert tensor_bytes(1, []) == 4  # scalar
    assert tensor_bytes(7, [3]) is None  # string: unknown size
    assert tensor_bytes(1, [-1, 3]) is None


def test_split_input() -> None:
    assert split_input("a/b:2") == ("a/b", 2)
    assert split_input("a/b") == ("a/b", 0)


def test_canonical_device() -> None:
    assert canonical_device("/job:localhost/replica:0/task:0/device:CPU:1") == "/device:CPU:1"
    assert canonical_device("/gpu:3") == "/device:GPU:3"
    assert canonical_device("/device:GPU:0") == "/device:GPU:0"
    assert canonical_device("") == ""


def test_plan_devices() -> None:
    tiny = PRESETS["tiny"]
    d = plan_devices(0, None, tiny)
    assert (d.kind, d.host, d.accelerators) == ("logical-cpu", "/cpu:0", ("/cpu:1", "/cpu:2"))
    d = plan_devices(4, None, tiny)
    assert (d.kind, d.accelerators) == ("gpu", ("/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"))
    assert plan_devices(4, 2, tiny).accelerators == ("/gpu:0", "/gpu:1")
    assert plan_devices(0, 3, tiny).accelerators == ("/cpu:1", "/cpu:2", "/cpu:3")
    assert d.to_json()["accelerators"][0] == "/device:GPU:0"


def test_summaries() -> None:
    nodes = [
        {"name": "a", "type": "MatMul", "kernel": "_MklMatMul", "device": "/device:CPU:1", "flops": 10},
        {"name": "b", "type": "Add", "kernel": "AddV2", "device": "/device:CPU:1", "flops": 0},
        {"name": "s", "type": "_Send", "kernel": "_Send", "device": "/device:CPU:1", "flops": 0},
        {"name": "v", "type": "VarHandleOp", "kernel": "VarHandleOp", "device": "/device:CPU:0", "flops": 0},
    ]
    dev = summarise_devices(nodes)
    assert dev["/device:CPU:1"]["ops"] == 2 and dev["/device:CPU:1"]["flops_per_step"] == 10
    assert dev["/device:CPU:0"] == {"ops": 1, "flops_per_step": 0, "op_types": {"VarHandleOp": 1}}
    edges = [
        {"src": "h", "dst": "a", "bytes": 100},
        {"src": "h", "dst": "a", "bytes": 28},
        {"src": "a", "dst": "h", "bytes": 400},
    ]
    assert summarise_transfers(edges) == [
        {"src": "a", "dst": "h", "bytes_per_step": 400, "tensors": 1},
        {"src": "h", "dst": "a", "bytes_per_step": 128, "tensors": 2},
    ]
