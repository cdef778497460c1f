"""The bench's arithmetic and printing (no timing, no TensorFlow): `make bench` takes the numbers."""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `benchmarks/` sits beside the package, not inside it
    sys.path.insert(0, str(REPO))
bench = importlib.import_module("benchmarks.bench")
common = importlib.import_module("benchmarks.common")
overhead = importlib.import_module("benchmarks.bench_overhead")
harness = importlib.import_module("benchmarks.bench_harness")
fork = importlib.import_module("benchmarks.bench_fork")
collection = importlib.import_module("benchmarks.bench_collection")


def test_spread_is_min_median_max() -> None:
    s = common.Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (s.min, s.median, s.max, s.n) == (1.0, 2.5, 10.0, 4)
    assert s.fmt(1) == "1.0 / 2.5 / 10.0"
    assert s.fmt(0, 100, " %") == "100 / 250 / 1000 %"
    assert common.Spread.of([]) is None


def test_median_ratio() -> None:
    assert common.median_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == 2.0
    assert common.median_ratio([], [1.0]) is None
    assert common.median_ratio([1.0], [0.0]) is None


def test_overhead_figures_pair_adjacent_blocks_and_pool_all_steps() -> None:
    samples = {
        "on": [[5.0, 1.1, 1.1], [5.0, 1.2, 1.2], [2.0, 2.0, 2.0]],
        "off": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]],  # round 3: a burst of load
        "on_cpu": [[1.0], [1.0], [1.0]],
        "off_cpu": [[1.0], [0.5], [1.0]],
        "start_s": [0.01, 0.03, 0.02],
        "stop_s": [0.2, 0.4, 0.3],
        "trace_bytes": [100, 300, 200],
    }
    f = overhead.overhead_figures(samples)
    assert f["ratio"] == pytest.approx(1.1)  # median of the paired ratios 1.1, 1.2, 1.0
    assert f["rounds"] == {"min": pytest.approx(1.0), "median": pytest.approx(1.1),
                           "max": pytest.approx(1.2), "n": 3}
    assert f["pooled_ratio"] == pytest.approx(2.0 / 1.0)  # the burst moves the pooled figure
    assert f["cpu_ratio"] == pytest.approx(1.0)
    assert f["cpu_rounds"]["max"] == pytest.approx(2.0)
    assert f["stop_s"]["median"] == pytest.approx(0.3)
    assert f["trace_bytes"]["max"] == 300
    assert f["steps"] == {"on": 9, "off": 9}


def test_a_variant_s_overhead_is_the_median_of_its_processes_ratios() -> None:
    """Each process's ratio is its own rounds' median; the figure is the median over the processes,
    not the median of every round pooled (one loaded process moves one of three, not the figure)."""
    loaded = {"on": [[1.3], [1.3], [1.3]], "off": [[1.0], [1.0], [1.0]], "on_cpu": [[1.2]],
              "off_cpu": [[1.0]]}
    quiet = {"on": [[1.02], [1.01], [1.03]], "off": [[1.0], [1.0], [1.0]], "on_cpu": [[1.0]],
             "off_cpu": [[1.0]], "stop_s": [0.5]}
    fast = {"on": [[0.99, 0.99]], "off": [[1.0, 1.0]]}
    f = overhead.runs_figures([loaded, quiet, fast])
    assert f["run_ratios"] == pytest.approx([1.3, 1.02, 0.99]) and f["ratio"] == pytest.approx(1.02)
    assert f["rounds"] == {"min": pytest.approx(0.99), "median": pytest.approx(1.02),
                           "max": pytest.approx(1.3), "n": 3}
    assert f["round_ratios"]["n"] == 7 and f["round_ratios"]["median"] == pytest.approx(1.03)
    assert f["cpu_run_ratios"] == pytest.approx([1.2, 1.0]) and f["cpu_ratio"] == pytest.approx(1.1)
    assert f["steps"] == {"on": 8, "off": 8} and f["runs"] == 3 and f["stop_s"]["n"] == 1


def test_every_variant_runs_once_before_any_runs_again(monkeypatch, tmp_path) -> None:
    """Run 1 of every variant, then run 2: a spell of load spoils one process of several variants,
    not all of one variant's.  A skipped variant is asked once."""
    import contextlib

    from tfprof_towers.procs import forkserver

    calls: list[tuple[str, str]] = []

    def child(opts, variant, configs, tmp):
        calls.append((variant, tmp.name))
        if variant == "mirrored_nccl":
            return {"skipped": "needs NCCL"}
        ratio = {"run0": 1.1, "run1": 1.0, "run2": 1.02}[tmp.name]
        return {"samples": {"harness": {"on": [[ratio]], "off": [[1.0]]}}, "first_start_s": 0.1,
                "first_stop_s": 0.2, "devices": ["/cpu:0"], "tensorflow": "2.x"}

    monkeypatch.setattr(overhead, "_run_child", child)
    monkeypatch.setattr(forkserver, "serving", lambda *a, **k: contextlib.nullcontext())
    opts = bench.parse_args(["--variants", "single,mirrored_nccl,mirrored"])
    doc = overhead.measure_overhead(opts, lambda line: None)
    assert calls == [("single", "run0"), ("mirrored_nccl", "run0"), ("mirrored", "run0"),
                     ("single", "run1"), ("mirrored", "run1"), ("single", "run2"), ("mirrored", "run2")]
    assert doc["skipped_variants"] == {"mirrored_nccl": "needs NCCL"}
    for v in ("single", "mirrored"):
        assert doc["variants"][v]["harness"]["run_ratios"] == pytest.approx([1.1, 1.0, 1.02])
        assert doc["variants"][v]["harness"]["ratio"] == pytest.approx(1.02)
    assert doc["runs"] == 3 and doc["meets_target"] and doc["first_start"]["single"]["first_start_s"] == 0.1


def test_paired_ratios_skip_empty_blocks() -> None:
    assert overhead.paired_ratios([[2.0], []], [[1.0], [1.0]]) == [2.0]


def test_choose_config_takes_the_first_setting_that_meets_the_target_everywhere() -> None:
    per_variant = {
        "a": {"harness": {"ratio": 1.02}, "host3": {"ratio": 1.01}, "python": {"ratio": 1.3}},
        "b": {"harness": {"ratio": 1.07}, "host3": {"ratio": 1.04}, "python": {"ratio": 1.5}},
    }
    got = overhead.choose_config(per_variant, ["harness", "host3", "python"])
    assert got["chosen"] == "host3"
    assert got["worst_ratio"] == {"harness": 1.07, "host3": 1.04, "python": 1.5}
    assert overhead.choose_config(per_variant, ["python"])["chosen"] is None


RECORD = {
    "wall_s": 3.0,
    "process_s": {"start": 0.1, "exit": 0.05},
    "phases_s": {"tf_import": 1.5, "build": 0.2, "session_init": 0.05, "warmup": 0.3,
                 "placement_trace": 0.02, "placement_extract": 0.01, "timed": 0.5,
                 "profiler_start": 0.001, "profiled": 0.2, "collect": 0.019},
}


def test_variant_breakdown_sums_to_its_wall_time() -> None:
    parts = harness.variant_breakdown(RECORD)
    assert parts[harness.TF_STARTUP] == pytest.approx(1.5 + 0.05 + 0.05)
    assert parts["trace collection"] == pytest.approx(0.02)
    assert parts["placement trace"] == pytest.approx(0.03)
    assert sum(parts.values()) == pytest.approx(3.0)
    assert parts["child bookkeeping"] == pytest.approx(3.0 - 2.8 - 0.1 - 0.05)  # phases, start, exit


def test_a_failed_variant_counts_whole() -> None:
    assert harness.variant_breakdown({"wall_s": 2.0, "phases_s": {}}) == {"failed variants": 2.0}


def _doc() -> dict:
    figures = overhead.overhead_figures({"on": [[1.01, 1.02]], "off": [[1.0, 1.0]], "on_cpu": [[1.0]],
                                      "off_cpu": [[1.0]], "start_s": [0.001], "stop_s": [0.02],
                                      "trace_bytes": [10]})
    run_doc = {"harness_s": {"setup": 0.1, "variants": 3.2, "finish": 0.3},
               "tensorflow_starts": {"imports": 1, "import_s": 1.4}}
    run = {**harness.run_breakdown(run_doc, [RECORD], 4.0), "total": 4.0}
    run["own_share"] = harness.own_share({k: v for k, v in run.items() if k != "total"})
    run.update(harness.tensorflow_starts(run_doc, [RECORD], 4.0))
    return {
        "profiler_overhead": {
            "method": "m", "preset": "cpu", "variants": {"single": {"harness": figures}},
            "worst_ratio": {"harness": figures["ratio"]}, "chosen": "harness", "meets_target": True,
        },
        "harness_overhead": {
            "preset": "cpu", "runs": [run], "meets_target": True,
            "spread": {k: common.spread_json(common.Spread.of([v])) for k, v in run.items()},
        },
        "fork_server": {
            "preset": "cpu", "identical": True,
            "runs": {"fresh": {"total": 40.0, "tf_imports": 4.0, "tf_start_s": 28.0, "lower_bound_s": 12.0},
                     "forked": {"total": 19.0, "tf_imports": 1.0, "tf_start_s": 7.5, "lower_bound_s": 11.5}},
            "variants": {"single": {"fresh_step_s": 0.04, "forked_step_s": 0.041, "step_ratio": 1.025,
                                    "same_losses": True, "same_placement": True, "same_ops": True}},
        },
        "parse": {"events_per_s": 2.5e6, "trace": "synthetic"},
    }


def test_report_lines_show_ratios_breakdown_and_parse_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str):
        raise ImportError(name)

    monkeypatch.setattr(bench.importlib, "import_module", absent)  # the plain fallback for parse figures
    text = "\n".join(bench.report_lines(_doc()))
    assert "single" in text and "harness" in text and "1.015" in text
    assert "chosen setting: harness" in text
    assert "TensorFlow start-up" in text and "harness's own share" in text
    assert "events_per_s: 2500000.0" in text
    assert "TensorFlow imports 1 / 1 / 1" in text and "import-free lower bound 2.40 / 2.40 / 2.40 s" in text
    assert "fresh   whole command 40.0 s, 4 TensorFlow import(s)" in text
    assert "step forked / fresh  1.02 (41.0 ms / 40.0 ms); identical: losses, placement, ops" in text
    assert "skipped" in "\n".join(bench.format_parse({"skipped": "absent"}))


def test_quick_sets_defaults_that_explicit_options_override() -> None:
    quick = bench.parse_args(["--quick", "--profile-runs", "0"])
    assert (quick.preset, quick.rounds, quick.profile_runs) == ("tiny", 2, 0)
    full = bench.parse_args(["--variants", "single,replicated", "--no-sweep"])
    assert (full.preset, full.variants, full.sweep) == ("cpu", ("single", "replicated"), False)
    assert full.parts == ("overhead", "harness", "fork", "parse", "allocator")
    assert bench.parse_args([]).sweep is False and bench.parse_args(["--sweep"]).sweep is True
    assert bench.parse_args(["--full-parse"]).full_parse is True
    assert bench.parse_args(["--only", "harness"]).parts == ("harness",)
    for bad in (["--variants", "bogus"], ["--only", "speed"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_parse_bench_is_called_through_its_function(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(figures=lambda: {"events": 1_000_000, "seconds": 0.5})
    monkeypatch.setattr(bench.importlib, "import_module", lambda name: fake)
    assert bench.measure_parse(lambda msg: None) == {"events": 1_000_000, "seconds": 0.5}

    def missing(name: str):
        raise ImportError("No module named 'benchmarks.bench_parse'")

    monkeypatch.setattr(bench.importlib, "import_module", missing)
    assert "skipped" in bench.measure_parse(lambda msg: None)


def test_main_writes_bench_json_and_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _doc()
    monkeypatch.setattr(overhead, "measure_overhead", lambda opts, say: doc["profiler_overhead"])
    monkeypatch.setattr(harness, "measure_harness", lambda opts, say: doc["harness_overhead"])
    monkeypatch.setattr(fork, "measure_fork", lambda opts, say: doc["fork_server"])
    monkeypatch.setattr(bench, "measure_parse", lambda say, full=False: doc["parse"])
    monkeypatch.setattr(bench, "measure_allocator", lambda opts, say: {"rounds": 1, "variants": {"single": {
        "steps": [20, 20], "bfc_min_s": 0.101, "default_min_s": 0.1, "min_ratio": 1.01, "bfc_median_s": 0.11,
        "default_median_s": 0.1, "median_ratio": 1.1}}})
    out = tmp_path / "reports" / "bench.json"
    assert bench.main(["--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["profiler_overhead"]["chosen"] == "harness"
    assert saved["fork_server"]["identical"] is True
    assert saved["schema"] == common.SCHEMA
    assert set(saved["part_wall_s"]) == {"overhead", "harness", "fork", "parse", "allocator"}
    assert saved["host_allocator"]["variants"]["single"]["min_ratio"] == 1.01
    assert [p.name for p in out.parent.iterdir()] == ["bench.json"]  # no temporary left
    assert f"wrote {out}" in capsys.readouterr().out


def test_a_stopped_bench_keeps_the_parts_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the second part: bench.json already holds the first, and says the rest is missing."""
    doc = _doc()

    def interrupted(opts, say):
        raise KeyboardInterrupt

    monkeypatch.setattr(overhead, "measure_overhead", lambda opts, say: doc["profiler_overhead"])
    monkeypatch.setattr(harness, "measure_harness", interrupted)
    out = tmp_path / "bench.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["profiler_overhead"]["chosen"] == "harness"
    assert saved["harness_overhead"] == {"skipped": "not measured yet (the bench stopped before it)"}
    assert saved["fork_server"] == saved["parse"] == saved["harness_overhead"]


def test_parts_left_out_are_marked_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "measure_parse", lambda say, full=False: {"skipped": "stubbed"})
    out = tmp_path / "bench.json"
    assert bench.main(["--only", "parse", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["profiler_overhead"] == {"skipped": "not in --only parse"}
    assert "profiler_overhead: skipped (not in --only parse)" in capsys.readouterr().out


def test_only_settings_the_analysis_can_use_are_chosen_and_twins_are_a_noise_gauge() -> None:
    usable = {c.name for c in overhead.SWEEP if c.usable}
    assert usable == {"host3", "host2+python"}  # host1 drops op events; -device drops GPU activity
    configs = {c.name: c.options() for c in (overhead.TracerConfig("harness", 3, 0, 1), *overhead.SWEEP)}
    assert overhead.same_settings(configs) == [("harness", "host3")]


def test_run_breakdown_sums_to_the_total_and_share_counts_only_the_harness() -> None:
    run_doc = {"harness_s": {"setup": 0.1, "variants": 6.5, "finish": 0.4}}
    parts = harness.run_breakdown(run_doc, [RECORD, RECORD], total_wall_s=7.5)
    assert sum(parts.values()) == pytest.approx(7.5)
    assert parts["runner bookkeeping"] == pytest.approx(0.5)
    assert parts["CLI start and exit"] == pytest.approx(0.5)
    not_own = 2 * (1.6 + 0.2 + 0.3 + 0.5 + 0.2)  # start-up, graph build, warm-up, timed, profiled steps
    assert harness.own_share(parts) == pytest.approx((7.5 - not_own) / 7.5)
    old_not_own = 2 * (1.6 + 0.3 + 0.5 + 0.2)  # the old share counted the graph build as the harness's
    assert harness.own_share(parts, harness.OLD_OWN) == pytest.approx((7.5 - old_not_own) / 7.5)
    assert {name for name, _ in harness.CATEGORIES} == set(parts)


def test_the_default_bench_covers_every_family() -> None:
    from tfprof_towers.variants import registry

    opts = bench.parse_args([])
    assert {registry.builtin(v).family for v in opts.variants} == {
        registry.TF1_GRAPH, registry.TF2_STRATEGY, registry.CLUSTER}
    assert set(registry.BUILTIN_NAMES) <= set(opts.variants)


def test_run_breakdown_counts_the_projection_once() -> None:
    run_doc = {"harness_s": {"setup": 0.1, "variants": 6.5, "finish": 2.4, "projection": 2.0}}
    parts = harness.run_breakdown(run_doc, [RECORD, RECORD], total_wall_s=9.5)
    assert sum(parts.values()) == pytest.approx(9.5)
    assert parts["projection"] == pytest.approx(2.0) and parts["CLI start and exit"] == pytest.approx(0.5)


def test_a_cluster_record_is_split_from_its_lead_task_s_phases() -> None:
    record = {"family": "cluster", "status": "ok", "wall_s": 20.0, "cluster": {"tasks": [
        {"task": "worker:0", "phases_s": {"tf_import": 5.0, "strategy_init": 1.0, "build": 0.5, "warmup": 0.2,
                                          "first_call_placement": 2.0, "timed": 0.3, "wait_capture": 1.5,
                                          "profiled": 0.4}},
        {"task": "worker:1", "phases_s": {"tf_import": 9.0}}]}}
    parts = harness.cluster_breakdown(record)
    assert parts[harness.TF_STARTUP] == 6.0 and parts["cluster coordination"] == 1.5
    assert parts[harness.COLLECTION] == 2.0 and parts[harness.FIRST_CALL] == 0.0  # nothing measured: whole
    assert parts["placement trace"] == 0.0 and parts["child bookkeeping"] == pytest.approx(20.0 - 10.9)
    # a cluster task's first call: split by every pair's ratio (no pair measured it)
    measured = harness.cluster_breakdown(record, collection.CollectionCost({"mirrored": 2.0}, pooled=1.25))
    assert measured[harness.COLLECTION] == pytest.approx(2.0 * (1 - 1 / 1.25))
    assert measured[harness.FIRST_CALL] == pytest.approx(1.6)
    assert sum(measured.values()) == pytest.approx(20.0)
    assert sum(parts.values()) == pytest.approx(20.0)
    assert harness.cluster_breakdown({**record, "status": "failed"}) == {"failed variants": 20.0}


def test_a_tf2_child_and_the_fork_servers_import_land_in_their_categories() -> None:
    """A tf.function's first call (made with graph collection on) is graph collection as far as it was
    measured to cost (unmeasured: all of it), TensorFlow's first call the rest; reading the partition
    graphs is the placement's trace, the second call a warm-up step; the fork server's import, waited
    out by the first child before it starts, is TensorFlow's start-up, not the harness's."""
    tf2 = {"name": "mirrored", "wall_s": 4.0, "process_s": {"start": 2.5, "exit": 0.1},
           "phases_s": {"tf_import": 0.0, "devices": 0.05, "build": 0.2, "first_call_placement": 0.6,
                        "placement_extract": 0.1, "second_call": 0.05, "warmup": 0.1, "timed": 0.2}}
    parts = harness.variant_breakdown(tf2)
    assert parts["placement trace"] == pytest.approx(0.1)
    assert parts[harness.COLLECTION] == pytest.approx(0.6) and parts[harness.FIRST_CALL] == 0.0
    cost = collection.CollectionCost({"mirrored": 1.2, "one_device": 3.0}, pooled=2.0)
    split = harness.variant_breakdown(tf2, cost)
    assert split[harness.COLLECTION] == pytest.approx(0.1)  # 0.6 s at 1.2x: 0.5 s without collection
    assert split[harness.FIRST_CALL] == pytest.approx(0.5)
    assert sum(split.values()) == pytest.approx(4.0)
    assert parts["warm-up steps"] == pytest.approx(0.15)
    assert parts["child bookkeeping"] == pytest.approx(4.0 - 3.9)
    run = harness.run_breakdown({"harness_s": {"variants": 4.0}, "tensorflow_starts": {"import_s": 2.4}},
                              [tf2], 4.5)
    assert run[harness.TF_STARTUP] == pytest.approx(0.05 + 0.1 + 2.4)
    assert run["child process start"] == pytest.approx(0.1)
    assert sum(run.values()) == pytest.approx(4.5)


def test_the_projection_is_its_own_part_outside_the_harness_s_share() -> None:
    run_doc = {"harness_s": {"setup": 0.5, "variants": 6.0, "finish": 3.0, "projection": 2.0}}
    parts = harness.run_breakdown(run_doc, [RECORD, RECORD], total_wall_s=10.0)
    without = harness.own_share({k: v for k, v in parts.items() if k != "projection"})
    own = sum(v for k, v in parts.items() if k in harness.OWN)
    assert "projection" not in harness.OWN
    assert harness.own_share(parts) == pytest.approx(own / 10.0)  # the projection is in the total only
    assert harness.own_share(parts) < without
    assert "projection (product work" in harness.SHARE_MEANS and "graph build" in harness.SHARE_MEANS
    lines = harness.format_harness({"preset": "cpu", "runs": [parts], "meets_target": True,
                                    "spread": {k: common.spread_json(common.Spread.of([v]))
                                               for k, v in parts.items()}})
    assert any("projection" in line and "product work, its own part" in line for line in lines)
    assert any("not counted" in line for line in lines)


def blocks(on: list[list[float]], off: list[list[float]], **more: object) -> dict[str, object]:
    return {"on": on, "off": off, **more}


def test_a_cluster_variant_s_overhead_is_the_median_of_its_runs_paired_ratios() -> None:
    """Each run's ratio is the median over its rounds of median(on block) / median(off block), as a
    single-process variant's; the figure is the median over the runs; the record's one-block ratio
    is printed beside it, not mixed in."""
    steps = overhead.ClusterSteps
    loaded = steps(blocks([[1.3, 1.3], [1.02, 1.02], [1.04, 1.04]], [[1.0, 1.0]] * 3,
                          on_cpu=[[0.33]] * 3, off_cpu=[[0.3]] * 3), (1.2,), (1.0,))  # 1.04; cpu 1.1
    quiet = steps(blocks([[1.01, 1.0, 1.02]] * 2, [[1.0, 1.0, 1.0], [0.5, 1.0, 2.0]]),
                  (1.0,), (1.0,))  # 1.01 both rounds; no CPU times
    fast = steps(blocks([[2.0]], [[2.0]], start_s=[0.1], stop_s=[0.4]), (0.9,), (1.0,))  # 1.0
    f = overhead.cluster_figures([loaded, quiet, fast])
    assert f["run_ratios"] == pytest.approx([1.04, 1.01, 1.0])
    assert f["ratio"] == pytest.approx(1.01)
    assert f["rounds"] == {"min": pytest.approx(1.0), "median": pytest.approx(1.01),
                           "max": pytest.approx(1.04), "n": 3}
    assert f["cpu_run_ratios"] == pytest.approx([1.1]) and f["cpu_ratio"] == pytest.approx(1.1)
    assert f["record_run_ratios"] == pytest.approx([1.2, 1.0, 0.9])
    assert f["record_ratio"] == pytest.approx(1.0)
    assert f["runs"] == 3 and f["steps"] == {"on": 6 + 6 + 1, "off": 6 + 6 + 1}
    assert f["stop_s"]["median"] == pytest.approx(0.4) and f["start_s"]["n"] == 1


def test_a_cluster_run_s_block_step_is_its_slowest_task_s_and_its_cpu_the_tasks_sum() -> None:
    a = {"on": [[1.0, 2.0]], "off": [[1.0, 1.0]], "on_cpu": [[0.5, 0.5]], "off_cpu": [[0.25, 0.25]],
         "start_s": [0.1], "stop_s": [0.3]}
    b = {"on": [[1.5, 1.0, 9.0]], "off": [[0.5, 3.0]], "on_cpu": [[0.25, 0.5]], "off_cpu": [[0.25, 0.5]],
         "start_s": [0.2], "stop_s": [0.2]}
    got = overhead.across_tasks([a, b])
    assert got == {"on": [[1.5, 2.0]], "off": [[1.0, 3.0]], "on_cpu": [[0.75, 1.0]],
                   "off_cpu": [[0.5, 0.75]], "start_s": [0.2], "stop_s": [0.3]}


def test_a_cluster_run_s_stepping_tasks_are_its_last_attempt_s(tmp_path) -> None:
    """The tasks that timed steps, of the last attempt (a ps task has none)."""
    tasks = tmp_path / "attempt-2" / "tasks"
    for name, doc in {"worker-0": {"step_times_s": [1.0]}, "worker-1": {"step_times_s": [1.0]},
                      "ps-0": {"phases_s": {"serving": 3.0}}}.items():
        (tasks / name).mkdir(parents=True)
        (tasks / name / "record.json").write_text(json.dumps(doc))
    docs = overhead.task_records(tmp_path, {"cluster": {"attempts": [{"folder": "attempt-1"},
                                                                     {"folder": "attempt-2"}]}})
    assert len(docs) == 2 and all(d["step_times_s"] == [1.0] for d in docs)


def test_a_cluster_overhead_run_profiles_as_many_steps_as_it_times() -> None:
    argv = overhead.cluster_steps_argv(bench.parse_args([]), "multi_worker")
    assert argv[argv.index("--profile-steps") + 1] == "20" and "--workers" in argv
    assert argv[argv.index("--warmup") + 1] == "7"  # the bench's 5 warm-up steps past the two math calls


def test_overhead_runs_default_to_three_and_quick_to_one() -> None:
    assert bench.parse_args([]).overhead_runs == 3
    assert bench.parse_args(["--quick"]).overhead_runs == 1
    assert bench.parse_args(["--quick", "--overhead-runs", "2"]).overhead_runs == 2


def test_collection_pairs_default_to_four_and_quick_to_one() -> None:
    assert bench.parse_args([]).collection_pairs == 4  # each order twice
    assert bench.parse_args(["--quick"]).collection_pairs == 1
    assert bench.parse_args(["--collection-pairs", "5"]).collection_pairs == 5
    tf2 = collection.tf2_variants(bench.parse_args([]))
    assert "mirrored" in tf2 and "single" not in tf2 and "multi_worker" not in tf2


def test_the_share_divides_by_the_categories_alone() -> None:
    """A run's dict also holds ``tf_start_s``, ``lower_bound_s`` and the like: not in the share's total."""
    parts = {harness.TF_STARTUP: 6.0, "graph build": 1.0, "analysis and rendering": 1.0, "timed steps": 2.0,
             "tf_start_s": 5.0, "lower_bound_s": 5.0, "server_import_s": 4.0, "tf_imports": 1.0}
    assert harness.own_share(parts) == pytest.approx(1.0 / 10.0)
    assert harness.own_share(parts, harness.OLD_OWN) == pytest.approx(2.0 / 10.0)


CLUSTER_RECORD = {"family": "cluster", "status": "ok", "wall_s": 20.0,
                  "process_s": {"start": 4.5, "exit": 0.2},
                  "clock_unix": {"main_start": 100.0, "main_end": 115.3},
                  "cluster": {"attempts": [{"folder": "attempt-1"}], "tasks": [
                      {"task": "worker:0", "phases_s": {"tf_import": 5.0, "strategy_init": 1.0, "build": 0.5,
                                                        "first_call_placement": 2.0, "timed": 3.0,
                                                        "wait_capture": 0.1, "profiler_start": 0.05,
                                                        "profiled": 0.4, "collect": 0.45,
                                                        "wait_release": 1.5}}]}}


def test_a_cluster_driver_s_start_and_its_task_s_start_are_process_start_not_bookkeeping(tmp_path) -> None:
    """The driver's spawn-to-main() (the fork server's import waited out) and the lead task's start
    (the driver's main() to the task's) are "child process start"; the task's profiler start and stop
    are the trace's collection, its wait for the driver's release is coordination; only the rest is
    bookkeeping."""
    task = tmp_path / "attempt-1" / "tasks" / "worker-0"
    task.mkdir(parents=True)
    (task / "record.json").write_text('{"clock_unix": {"main_start": 101.2, "main_end": 115.0}}')
    record = harness.with_lead_clock(CLUSTER_RECORD, tmp_path)
    parts = harness.cluster_breakdown(record)
    assert parts["child process start"] == pytest.approx(4.5 + 1.2)
    assert parts[harness.TF_STARTUP] == pytest.approx(6.2) and parts["trace collection"] == pytest.approx(0.5)
    assert parts["cluster coordination"] == pytest.approx(1.6)
    assert parts["child bookkeeping"] == pytest.approx(20.0 - 5.7 - 6.2 - 0.5 - 2.0 - 3.0 - 0.4 - 0.5 - 1.6)
    assert sum(parts.values()) == pytest.approx(20.0)
    run = harness.run_breakdown({"harness_s": {"variants": 20.0}, "tensorflow_starts": {"import_s": 4.0}},
                                [record], 20.0)
    assert run[harness.TF_STARTUP] == pytest.approx(10.2) and run["child process start"] == pytest.approx(1.7)


def test_a_cluster_record_without_its_task_s_clock_keeps_the_driver_s_start() -> None:
    assert harness.with_lead_clock(CLUSTER_RECORD, Path("/nonexistent")) is CLUSTER_RECORD
    assert harness.cluster_breakdown(CLUSTER_RECORD)["child process start"] == pytest.approx(4.5)


def test_graph_collection_figures_are_the_medians_of_the_pairs() -> None:
    f = collection.collection_figures([1.2, 2.0, 1.1], [1.0, 1.0, 1.0], [0.6, 0.9, 0.7], [0.5, 0.5, 0.7])
    assert f["ratio"] == pytest.approx(1.2) and f["diff_s"] == pytest.approx(0.2)
    assert f["cpu_ratio"] == pytest.approx(1.2) and f["pairs"] == 3
    assert f["ratios"]["max"] == pytest.approx(2.0) and f["diffs_s"]["min"] == pytest.approx(0.1)
    assert collection.collection_figures([], [])["ratio"] is None
    assert collection.paired_ratios([1.0, 2.0], [0.0, 4.0]) == [0.5]
    assert [collection.pair_order(i) for i in range(3)] == [("on", "off"), ("off", "on"), ("on", "off")]


def test_graph_collection_cost_is_the_first_call_less_the_call_at_the_measured_ratio() -> None:
    doc = {"variants": {"mirrored": {"ratio": 1.25}, "one_device": {"ratio": 0.9}, "x": {"ratio": None}},
           "pooled_ratio": 1.1}
    cost = collection.CollectionCost.of(doc)
    assert cost is not None and cost.ratios == {"mirrored": 1.25, "one_device": 0.9} and cost.pooled == 1.1
    assert cost.cost("mirrored", 2.5) == pytest.approx(0.5)  # 2.5 s at 1.25x: 2.0 s without collection
    assert cost.cost("one_device", 2.5) == 0.0  # measured free (a ratio below 1 is noise)
    assert cost.cost("central_storage", 1.1) == pytest.approx(0.1)  # unmeasured: every pair's ratio
    assert collection.CollectionCost().cost("mirrored", 2.5) == 2.5  # nothing measured: the whole call
    assert collection.cost_of(None, "mirrored", 2.5) == 2.5
    assert collection.CollectionCost.of({"skipped": "--collection-pairs 0"}) is None
    # a loaded machine moves the wall times: the larger of the wall-time and CPU-time ratios counts
    loaded = collection.CollectionCost.of({"variants": {"mirrored": {"ratio": 0.8, "cpu_ratio": 1.25}},
                                           "pooled_ratio": 0.9, "pooled_cpu_ratio": 1.1})
    assert loaded is not None and loaded.ratios == {"mirrored": 1.25} and loaded.pooled == 1.1
    assert loaded.cost("mirrored", 2.5) == pytest.approx(0.5)
    assert collection.larger(None, None) is None and collection.larger(0.9, None) == 0.9
    assert collection.CollectionCost.of(None) is None


def test_the_share_and_the_old_share_side_by_side() -> None:
    """The old share counted the graph build and the whole first call as the harness's; the share
    counts only what graph collection added to the call: both are printed, the old one named so."""
    tf2 = {"name": "mirrored", "wall_s": 4.0, "process_s": {"start": 0.1, "exit": 0.1},
           "phases_s": {"tf_import": 0.0, "devices": 0.05, "build": 0.2, "first_call_placement": 1.5,
                        "placement_extract": 0.1, "second_call": 0.05, "warmup": 0.1, "timed": 1.6}}
    cost = collection.CollectionCost({"mirrored": 1.5}, pooled=1.5)
    run = {**harness.run_breakdown({"harness_s": {"setup": 0.2, "variants": 4.3, "finish": 0.5}}, [tf2], 5.0,
                                   cost), "total": 5.0}
    harness.with_shares(run)
    # own: collection 0.5, placement trace 0.1, child start 0.1, bookkeeping 0.2, runner 0.3, setup 0.2,
    # analysis 0.5, CLI 0.0
    assert run[harness.COLLECTION] == pytest.approx(0.5) and run["child bookkeeping"] == pytest.approx(0.2)
    assert run["own_share"] == pytest.approx(1.9 / 5.0)
    assert run["old_share"] == pytest.approx((1.9 + 1.0 + 0.2) / 5.0)
    doc = {"preset": "cpu", "runs": [run], "meets_target": False,
           "spread": {k: common.spread_json(common.Spread.of([v])) for k, v in run.items()},
           "graph_collection": {"preset": "cpu", "pairs": 1, "pooled_ratio": 1.5, "skipped_variants": {},
                                "variants": {"mirrored": collection.collection_figures([1.5], [1.0])}}}
    text = "\n".join(harness.format_harness(doc))
    assert "harness's own share: 38.0 / 38.0 / 38.0 %" in text
    assert "the old share" in text and "62.0 / 62.0 / 62.0 %" in text
    assert "ratio 1.500, difference +500 ms" in text
    assert "first call (trace and optimise)" in text and "a plain program pays it" in text


def test_the_fork_comparison_compares_tf_ops_not_the_runtime_s_own_events() -> None:
    """An allocator growing its pool in one run's profiled steps only is not a different computation."""
    import pandas as pd

    fresh = pd.DataFrame({"name": ["MatMul", "BasicCPUAllocator::Alloc", "ExecutorState::Process"],
                          "tf_op": ["dense/MatMul", "", ""]})
    forked = pd.DataFrame({"name": ["MatMul", "ExecutorState::Process"], "tf_op": ["dense/MatMul", ""]})
    assert fork.trace_ops(fresh) == fork.trace_ops(forked) == {"dense/MatMul"}
    other = pd.DataFrame({"name": ["MatMul"], "tf_op": ["dense_1/MatMul"]})
    assert fork.trace_ops(other) != fork.trace_ops(fresh)
