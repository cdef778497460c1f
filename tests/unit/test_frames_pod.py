"""``load()`` of a multi-host logdir: frames from the hosts' results (trace/pod.py) with a ``host`` column;
the events frame built only when asked for; ``export --dask``.  ``load(dask=ADDRESS)`` on a real Dask
cluster is in tests/e2e/test_dask_e2e.py."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from pod_kit import HOSTS, copy_heavy_logdir

from tfprof_towers.frames import load
from tfprof_towers.frames.schema import PS
from tfprof_towers.testing.synth import copy_heavy_trace
from tfprof_towers.trace.analysis import analyze_xplane

POD_FRAMES = ("steps", "wall", "total", "idle", "links")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_heavy_logdir(tmp_path_factory.mktemp("pod"))


@pytest.fixture(scope="module")
def merged(logdir: Path):
    return analyze_xplane(logdir)


@pytest.fixture(scope="module")
def profile(logdir: Path):
    return load(logdir, dask="serial")


def test_wall_per_device_is_the_merged_paths(profile, merged) -> None:
    wall = profile.wall
    got = wall.groupby(wall["device"].astype(str))["seconds"].sum().sort_index()
    w = merged.breakdown.wall
    want = (w.groupby(w["device"].astype(str))["dur_ps"].sum() / PS).sort_index()
    assert list(got.index) == list(want.index)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())


def test_every_row_names_its_host(profile, merged) -> None:
    c = merged.trace.columns
    hosts = [h.name for h in merged.trace.hosts]
    assert hosts == list(HOSTS)
    own = {c.text(int(d)): hosts[int(h)] for d, h in zip(c.device.tolist(), c.host.tolist())}
    for name in POD_FRAMES:
        df = profile.__getattribute__(name)
        assert list(df.columns[:2]) == ["variant", "host"], name
        assert isinstance(df["host"].dtype, pd.CategoricalDtype) and df["host"].dtype.ordered, name
        assert set(df["host"].astype(str)) == set(HOSTS), name
        col = "src" if name == "links" else "device"
        named = df[col].astype(str).map(own)
        known = named.notna()
        assert known.any(), name
        assert (df.loc[known, "host"].astype(str) == named[known]).all(), name


def test_steps_are_on_the_pods_clock(profile, merged) -> None:
    steps = profile.steps
    for d in merged.breakdown.devices:
        t = merged.trace.steps_of(d)
        mine = steps[steps["device"].astype(str) == d].sort_values("step")
        np.testing.assert_array_equal(mine["step"].to_numpy(), t.step)
        np.testing.assert_allclose(mine["start_s"].to_numpy(), t.start_ps / PS, rtol=0, atol=1e-12)
        np.testing.assert_allclose(mine["end_s"].to_numpy(), t.end_ps / PS, rtol=0, atol=1e-12)


def test_links_are_the_merged_paths(profile, merged) -> None:
    lk = profile.links.drop(columns=["variant", "host"])
    want = merged.links
    assert len(lk) == len(want)
    assert (lk["src"].astype(str).to_numpy() == want["src"].to_numpy()).all()
    assert (lk["count"].to_numpy() == want["count"].to_numpy()).all()


def test_events_are_built_only_when_asked_for(logdir: Path) -> None:
    from tfprof_towers.trace.hosts import load_hosts

    with mock.patch("tfprof_towers.trace.hosts.load_hosts", wraps=load_hosts) as spy:
        p = load(logdir, dask="serial")
        assert len(p.wall) and len(p.steps) and len(p.links)
        spy.assert_not_called()
        ev = p.events
        spy.assert_called_once()
        assert set(ev["task"].astype(str)) and len(ev) > 0
        p.memory  # noqa: B018 -- the same merged analysis: not read again
        spy.assert_called_once()
    assert set(ev["device"].dropna().astype(str)) <= set(ev["device"].dtype.categories)
    assert ev["device"].notna().all()


def test_single_host_keeps_one_host(tmp_path: Path) -> None:
    f = copy_heavy_trace(5000, gpus=2).write(tmp_path / "solo.xplane.pb")
    p = load(f)
    a = analyze_xplane(f)
    assert set(p.wall["host"].astype(str)) == {"solo"}
    w = a.breakdown.wall
    np.testing.assert_array_equal(p.wall["seconds"].to_numpy(), w["dur_ps"].to_numpy() / PS)


def test_export_parquet_has_a_host_column(logdir: Path, tmp_path: Path) -> None:
    from tfprof_towers.cli import main

    out = tmp_path / "out"
    assert main(["export", str(logdir), "--parquet", str(out), "--dask", "serial"]) == 0
    for name in POD_FRAMES:
        df = pd.read_parquet(out / f"{name}.parquet")
        assert "host" in df.columns, name
        if len(df):
            assert set(df["host"].astype(str)) <= set(HOSTS), name
    assert set(pd.read_parquet(out / "wall.parquet")["host"].astype(str)) == set(HOSTS)


def test_export_with_a_truncated_host_writes_the_others_and_exits_7(
        logdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from tfprof_towers.cli import main
    from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS

    root = tmp_path / "logs"
    shutil.copytree(logdir, root)
    bad = root / "plugins" / "profile" / "r" / f"{HOSTS[1]}.xplane.pb"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    out = tmp_path / "out"
    assert main(["export", str(root), "--parquet", str(out), "--dask", "serial"]) == EXIT_SOME_HOSTS
    err = capsys.readouterr().err
    assert f"host {HOSTS[1]}: could not be read: " in err and "error: 1 host(s) could not be read" in err
    kept = {HOSTS[0], HOSTS[2]}
    assert set(pd.read_parquet(out / "wall.parquet")["host"].astype(str)) == kept
    events = pd.read_parquet(out / "events.parquet")  # the merged events leave the bad host out too
    assert {t.split("/")[1][4:] for t in events["task"].astype(str).unique()} == kept


def test_export_of_some_frames_never_reads_the_events_together(logdir: Path, tmp_path: Path) -> None:
    from tfprof_towers.cli import main
    from tfprof_towers.trace.hosts import load_hosts

    out = tmp_path / "out"
    with mock.patch("tfprof_towers.trace.hosts.load_hosts", wraps=load_hosts) as spy:
        assert main(["export", str(logdir), "--parquet", str(out), "--frames", "wall,links", "--dask",
                     "serial"]) == 0
        spy.assert_not_called()
    assert sorted(p.name for p in out.iterdir()) == ["links.parquet", "wall.parquet"]
    with pytest.raises(ValueError, match="no frame named wal"):
        load(logdir, dask="serial").frames(["wal"])
