"""One vocabulary: device names and categories."""

from __future__ import annotations

import pytest

from tfprof_towers.vocab import categories as cat
from tfprof_towers.vocab.device_names import (
    HOST_THREADS,
    canonical_device,
    device_role,
    device_sort_key,
    is_accelerator_plane,
    link_kind,
    parse_device,
)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("/cpu:1", "/device:CPU:1"),
        ("/gpu:3", "/device:GPU:3"),
        ("GPU:0", "/device:GPU:0"),
        ("/device:cpu:1", "/device:CPU:1"),
        ("/device:GPU:0", "/device:GPU:0"),
        ("/job:localhost/replica:0/task:0/device:CPU:2", "/device:CPU:2"),
        ("/job:localhost/replica:0/task:0/cpu:0", "/device:CPU:0"),
        ("/job:worker/replica:0/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:0"),
        ("/job:ps/replica:0/task:0/device:GPU:1", "/job:ps/task:0/device:GPU:1"),
        ("/job:worker/replica:0/task:1", "/job:worker/task:1"),
        ("/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:0"),
        (HOST_THREADS, HOST_THREADS),
        ("", ""),
        ("tower_0/MatMul", "tower_0/MatMul"),
    ],
)
def test_canonical_device(name: str, canonical: str) -> None:
    assert canonical_device(name) == canonical
    assert canonical_device(canonical) == canonical  # idempotent


def test_parse_device_parts() -> None:
    p = parse_device("/job:worker/replica:0/task:1/device:GPU:2")
    assert (p.job, p.replica, p.task, p.type, p.index) == ("worker", 0, 1, "GPU", 2)
    assert p.in_cluster and p.task_prefix == "/job:worker/task:1"
    assert parse_device(HOST_THREADS) is None


def test_sort_host_first_then_task_type_index() -> None:
    names = ["/device:GPU:10", "/device:GPU:2", HOST_THREADS, "/device:CPU:0",
             "/job:worker/task:1/device:CPU:0", "/job:worker/task:0/device:CPU:0", "odd"]
    assert sorted(names, key=device_sort_key) == [
        HOST_THREADS, "/device:CPU:0", "/device:GPU:2", "/device:GPU:10",
        "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0", "odd",
    ]


def test_roles_and_link_kinds() -> None:
    topo = {"host": "/device:CPU:0", "accelerators": ["/device:CPU:1", "/device:CPU:2"]}
    assert device_role("/device:CPU:0", topo) == "host"
    assert device_role(HOST_THREADS, topo) == "host"
    assert device_role("/device:CPU:2", topo) == "accelerator"
    assert device_role("/device:GPU:7", topo) == "other"
    assert link_kind("/device:CPU:0", "/device:CPU:1", topo) == "host_to_device"
    assert link_kind("/device:CPU:1", "/device:CPU:0", topo) == "device_to_host"
    assert link_kind("/device:CPU:1", "/device:CPU:2", topo) == "device_to_device"
    assert is_accelerator_plane("/job:worker/task:0/device:GPU:0")
    assert not is_accelerator_plane("/device:CPU:1") and not is_accelerator_plane(HOST_THREADS)


def test_category_table_is_consistent() -> None:
    assert set(cat.WALL_ORDER) == set(cat.TIME_CATEGORIES)
    assert cat.WALL_ORDER[:3] == ("compute", "collective", "host_compute")
    assert cat.WALL_CATEGORIES[-1] == "idle"
    assert cat.COPY_CATEGORIES == ("p2p", "d2d", "h2d", "d2h")
    assert set(cat.DEVICE_CATEGORIES) | set(cat.HOST_CATEGORIES) == set(cat.TIME_CATEGORIES)
    assert [c["key"] for c in cat.legend()] == list(cat.DISPLAY_ORDER)
    assert len({c.colour for c in cat.BY_KEY.values()}) == len(cat.BY_KEY)
