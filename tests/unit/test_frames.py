"""`tfprof_towers.load`: tidy frames that agree with summary.json and `analyze --json`, Parquet, export."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_kit import ACC0, HOST, make_run_dir
from trace_kit import logical_cpu_trace, two_gpu_trace

import tfprof_towers as tt
from tfprof_towers.cli import main
from tfprof_towers.frames import FRAMES
from tfprof_towers.frames.export import read_frames
from tfprof_towers.frames.profile import load_run
from tfprof_towers.frames.schema import CATEGORIES, COLUMNS
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run
from tfprof_towers.vocab.errors import TowersError

REPO = Path(__file__).resolve().parents[2]
PS = 10**12


def ps(seconds: pd.Series) -> int:
    """Seconds back to the trace's integer picoseconds, summed (exact: each value is ps / 1e12)."""
    return int(np.rint(seconds.to_numpy() * PS).astype(np.int64).sum())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = make_run_dir(tmp_path_factory.mktemp("frames") / "run")
    finish_run(RunDir(root))  # summary.json, as `report` writes it
    return root


@pytest.fixture(scope="module")
def run_profile(run_dir: Path):
    return tt.load(run_dir)


def test_import_is_cheap() -> None:
    code = "import sys, tfprof_towers; print('pandas' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert tt.load is tt.frames.load and isinstance(tt.__version__, str)


def test_every_frame_has_its_columns_and_dtypes(run_profile) -> None:
    for name in FRAMES:
        df = getattr(run_profile, name)
        assert list(df.columns) == list(COLUMNS[name]), name
        assert df["variant"].dtype.ordered and list(df["variant"].cat.categories) == [
            "single", "towers_bug", "broken"], name
    assert list(run_profile.wall["category"].cat.categories) == list(CATEGORIES)
    assert run_profile.wall["category"].dtype.ordered and run_profile.wall["device"].dtype.ordered
    assert list(run_profile.wall["device"].cat.categories)[:1] == ["/host:CPU"]  # host threads first
    assert run_profile.events["start_s"].dtype == np.float64


def test_run_directory_agrees_with_summary_json(run_dir: Path, run_profile) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    p = run_profile
    checked = 0
    for entry in summary["variants"]:
        name = entry["name"]
        row = p.variants[p.variants.variant == name].iloc[0]
        assert row.status == entry["status"]
        if entry["status"] != "ok":
            assert not (p.wall.variant == name).any()
            continue
        assert row.median_s == entry["step_time_s"]["median"] and row.p90_s == entry["step_time_s"]["p90"]
        assert row["rank"] == entry["rank"] and row.speedup == entry["speedup_vs_single"]
        bd = entry["breakdown"]
        n = bd["steps"]
        wall, total = p.wall[p.wall.variant == name], p.total[p.total.variant == name]
        assert wall.step.nunique() == n
        for dev, d in bd["devices"].items():
            w = wall[wall.device == dev]
            for cat, seconds in d["wall"].items():
                assert ps(w[w.category == cat].seconds) / PS * (1.0 / n) == seconds, (name, dev, cat)
            for cat, t in d["total"].items():
                rows = total[(total.device == dev) & (total.category == cat)]
                assert ps(rows.seconds) / PS * (1.0 / n) == t["seconds"]
                assert int(rows["count"].sum()) * (1.0 / n) == t["count"]
                if "bytes" in t:
                    assert int(rows["bytes"].sum()) * (1.0 / n) == t["bytes"]
            steps = p.steps[(p.steps.variant == name) & (p.steps.device == dev)]
            assert ps(steps.end_s - steps.start_s) / PS * (1.0 / n) == pytest.approx(d["window_s"], rel=1e-12)
            checked += 1
        links = p.links[p.links.variant == name].astype({"src": str, "dst": str, "kind": str})
        assert len(links) == len(bd["links"])
        for link in bd["links"]:
            key = (link["src"], link["dst"], link["kind"])
            row = links[(links.src == key[0]) & (links.dst == key[1]) & (links.kind == key[2])]
            assert int(row["count"].iloc[0]) * (1.0 / n) == link["count"] and int(row["steps"].iloc[0]) == n
            if link["bytes"] is not None:
                assert int(row["bytes"].iloc[0]) * (1.0 / n) == link["bytes"]
        got = p.findings[p.findings.variant == name][["rule", "message"]].to_dict("records")
        want = [{"rule": f["rule"], "message": f["message"]} for f in summary["findings"]
                if f["variant"] == name]
        assert got == want
    assert checked >= 4
    assert set(p.findings.variant) == {"towers_bug"}
    assert p.variants.set_index("variant").recommended.to_dict() == {
        "single": True, "towers_bug": False, "broken": False}


def test_placement_names_the_source_lines(run_profile) -> None:
    pl = run_profile.placement
    mm = pl[(pl.variant == "towers_bug") & (pl.node == "tower_0/block0/MatMul")].iloc[0]
    assert (mm.device, mm.op_type, mm.flops) == (HOST, "MatMul", 600)
    assert (mm.source_file, mm.source_line) == ("/src/train.py", 57)
    assert mm.sources == "/src/train.py:57 (/cpu:0); /src/train.py:55 (/cpu:1)"
    assert pl[pl.variant == "single"].device.tolist() == [ACC0]


def test_events_join_nodes_to_their_devices(run_profile) -> None:
    ev = run_profile.events
    bug = ev[(ev.variant == "towers_bug") & (ev.op_type == "MatMul")]
    assert bug.groupby("node", observed=True).device.first().astype(str).to_dict() == {
        "tower_0/block0/MatMul": HOST, "tower_0/gradients/MatMul_grad": ACC0,
        "tower_1/gradients/MatMul_grad": "/device:CPU:2"}
    assert (bug.dur_s == 200e-9).all() and len(bug) == 9  # 3 MatMuls x 3 steps


def test_a_variant_directory_is_that_variant_of_its_run(run_dir: Path, run_profile) -> None:
    p = tt.load(run_dir / "variants" / "towers_bug")
    assert p.kind == "variant" and p.variant_names == ("towers_bug",)
    mine = run_profile.wall[run_profile.wall.variant == "towers_bug"].reset_index(drop=True)
    assert p.wall.seconds.tolist() == mine.seconds.tolist()
    assert p.variants.iloc[0]["rank"] == 2  # the run's rank, not a run of one
    with pytest.raises(TowersError, match="variant nope: not in the run"):
        load_run(run_dir, only="nope")


def _two_hosts(root: Path) -> Path:
    for host in ("worker0_6001", "worker1_6002"):
        two_gpu_trace().write_logdir(root, run="2024_01_01_00_00_00", host=host)
    return root


@pytest.mark.parametrize("make", [
    lambda d: two_gpu_trace().write(d / "host.xplane.pb"),
    lambda d: logical_cpu_trace().write(d / "host.xplane.pb"),
    lambda d: _two_hosts(d / "host"),
])
def test_trace_agrees_with_analyze_json(tmp_path: Path, capsys, make) -> None:
    path = make(tmp_path)
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    p = tt.load(path)
    assert p.kind == "trace" and p.variant_names == ("host",)
    tasks = sorted(t["task"] for t in doc["tasks"])
    assert sorted(p.events.task.cat.categories) == tasks  # "" for one host; a task per host file
    if len(tasks) > 1:
        by_task = p.events.groupby("task", observed=True).device.agg(lambda d: {str(x) for x in d})
        assert all(all(dev.startswith(task) for dev in devs) for task, devs in by_task.items())
    assert len(p.variants) == 0 and len(p.findings) == 0
    assert list(p.findings.columns) == list(COLUMNS["findings"])
    for dev, d in doc["devices"].items():
        for cat, seconds in d["wall"].items():
            assert ps(p.wall[(p.wall.device == dev) & (p.wall.category == cat)].seconds) / PS == seconds
        for cat, t in d["total"].items():
            rows = p.total[(p.total.device == dev) & (p.total.category == cat)]
            assert ps(rows.seconds) / PS == t["seconds"] and int(rows["count"].sum()) == t["count"]
            if "bytes" in t:
                assert int(rows["bytes"].sum()) == t["bytes"]
        for kind, seconds in (d.get("idle_split") or {}).items():
            assert ps(p.idle[(p.idle.device == dev) & (p.idle.kind == kind)].seconds) / PS == seconds
    links = p.links.astype({"src": str, "dst": str, "kind": str})
    for link in doc["links"]:
        row = links[(links.src == link["src"]) & (links.dst == link["dst"]) & (links.kind == link["kind"])]
        assert len(row) == 1 and int(row["count"].iloc[0]) == link["count"]
        if link["bytes"] is not None:
            assert int(row["bytes"].iloc[0]) == link["bytes"]
    ev = p.events
    time = ev[ev.category.isin(["compute", "host_compute", "h2d", "d2h", "p2p", "d2d", "memset"])]
    tot = p.total[p.total.category.isin(time.category.unique())]
    assert ps(time[time.step >= 0].dur_s) == ps(tot.seconds)  # events counted in full, per step


def test_parquet_round_trips_the_frames_with_their_dtypes(tmp_path: Path, run_profile) -> None:
    written = run_profile.to_parquet(tmp_path / "pq")
    assert sorted(x.name for x in written) == sorted(f"{n}.parquet" for n in FRAMES)
    back = read_frames(tmp_path / "pq")
    assert list(back) == sorted(FRAMES)
    for name in FRAMES:
        pd.testing.assert_frame_equal(back[name], getattr(run_profile, name), check_exact=True)
        if len(back[name]):  # pandas alone reads a frame with rows back as written, too
            plain = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
            pd.testing.assert_frame_equal(plain, getattr(run_profile, name), check_exact=True)


def test_csv_and_the_export_command(tmp_path: Path, run_dir: Path, capsys) -> None:
    assert main(["export", str(run_dir), "--csv", str(tmp_path / "csv")]) == 0
    out = capsys.readouterr().out.split()
    assert len(out) == len(FRAMES)
    wall = pd.read_csv(tmp_path / "csv" / "wall.csv")
    assert list(wall.columns) == list(COLUMNS["wall"]) and set(wall.variant) == {"single", "towers_bug"}
    assert main(["export", str(run_dir), "--parquet", str(tmp_path / "pq")]) == 0
    assert (tmp_path / "pq" / "events.parquet").is_file()


def test_export_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path / "missing"), "--csv", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file or directory" in err[0]
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff not a trace")
    assert main(["export", str(bad), "--csv", str(tmp_path / "o")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_run_without_traces_still_has_its_variants(tmp_path: Path) -> None:
    root = make_run_dir(tmp_path / "run")
    shutil.rmtree(root / "tensorboard")
    p = tt.load(root)
    assert len(p.wall) == 0 and list(p.wall.columns) == list(COLUMNS["wall"])
    assert p.variants.variant.tolist() == ["single", "towers_bug", "broken"]


def test_the_package_exposes_frames_lazily() -> None:
    code = ("import sys, tfprof_towers as tt; f = tt.frames; "
            "print(callable(f.read_frames), callable(f.per_step), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["True", "True", "False"]


def test_steps_are_each_devices_own_windows(tmp_path: Path) -> None:
    """Two GPUs that stepped ~5 ms apart (trace_kit.apart_trace): each device's rows are its own
    Steps line's windows, not one window spanning both."""
    from trace_kit import apart_trace

    path = tmp_path / "apart.xplane.pb"
    path.write_bytes(apart_trace().to_bytes())
    s = tt.load(path).steps.set_index(["device", "step"])
    assert s.loc[("/device:GPU:0", 0), "start_s"] == 0.0
    assert s.loc[("/device:GPU:0", 1), "end_s"] == pytest.approx(800e-6, abs=1e-12)
    assert s.loc[("/device:GPU:1", 0), "start_s"] == pytest.approx(5000e-6, abs=1e-12)
    assert s.loc[("/device:GPU:1", 1), "end_s"] == pytest.approx(5900e-6, abs=1e-12)
