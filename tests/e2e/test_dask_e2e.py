"""A pod analysed on a real Dask cluster: the same document and the same frames as on this machine.

One ``LocalCluster`` of two worker processes serves the module: reached by its address (as ``analyze
--dask ADDRESS`` and ``load(dask=ADDRESS)`` reach one) and through a ``distributed.Client``; a cluster
whose workers cannot read the host files is sent their bytes.  A Dask cluster leaves threads behind in
the process that used it, after which the local pool can no longer fork (trace/hosts.py), so these
runs stay out of the unit tier: the executors on this machine are tests/unit/test_pod.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas.testing as pdt
import pytest
from pod_kit import EDGE_BYTES, TASKS4, copy_heavy_logdir, four_hosts, full_doc, text

from tfprof_towers.frames import load
from tfprof_towers.trace.executors import analyze_pod

POD_FRAMES = ("steps", "wall", "total", "idle", "links")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two worker processes of one thread each, on the loopback, for the module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as made:
        yield made


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_heavy_logdir(tmp_path_factory.mktemp("pod"))


@pytest.fixture(scope="module")
def profile(logdir: Path):
    return load(logdir, dask="serial")


def test_a_dask_cluster_gives_the_same_document(cluster: Any, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    root = four_hosts(tmp_path)

    def run(executor: Any) -> str:
        return text(full_doc(analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor=executor)))

    serial = run("serial")
    assert run(cluster.scheduler_address) == serial
    with distributed.Client(cluster) as client:
        pod = analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor=client)
        assert text(full_doc(pod)) == serial
        assert "its workers read the host files" in pod.executor_note


def test_dask_workers_that_cannot_read_the_files_are_sent_their_bytes(tmp_path: Path, monkeypatch) -> None:
    """A cluster whose workers do not share the path: the files' bytes travel with the jobs, the document
    is the same, and the note says so.  The workers are threads of this process here
    (``processes=False``), so patching what a worker answers reaches them."""
    distributed = pytest.importorskip("distributed")
    from tfprof_towers.trace import executors

    root = four_hosts(tmp_path)
    serial = text(full_doc(analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor="serial")))
    monkeypatch.setattr(executors, "_can_read", lambda paths: False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        pod = analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor=client)
    assert text(full_doc(pod)) == serial
    assert "cannot read the host files here, so each file's bytes were sent to them" in pod.executor_note


def test_dask_cluster_gives_the_same_frames(cluster: Any, logdir: Path, profile) -> None:
    on_dask = load(logdir, dask=cluster.scheduler_address)
    frames = {name: getattr(on_dask, name) for name in POD_FRAMES}
    local = load(logdir)  # the default: a local process pool
    for name in POD_FRAMES:
        pdt.assert_frame_equal(frames[name], getattr(local, name), obj=name)
        pdt.assert_frame_equal(frames[name], getattr(profile, name), obj=name)
