"""The record codec (rundir.fields: Record, meta): the exact JSON each document writes (the bytes
the hand-written to_json wrote before the codec), round trips, older documents without newer keys,
and errors that name the file and the field exactly as before."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest
from records_kit import GPU, TINY, placement, record, run_doc

from tfprof_towers.capture.cluster.docs import TaskRecord, TaskSpec, Timeouts
from tfprof_towers.rundir.fields import Fields, Record, RecordError, if_none, meta
from tfprof_towers.rundir.records import (
    ChildSpec,
    MathCheck,
    RunDoc,
    StepStats,
    Timings,
    Topology,
    VariantRecord,
)
from tfprof_towers.rundir.summary import NOT_ADVISED, Recommendation, Summary, SummaryEntry
from tfprof_towers.variants.config import ClusterOptions


def _bytes(rec: Any) -> str:
    return json.dumps(rec.to_json())


def _round_trip(rec: Any) -> None:
    assert type(rec).from_json(json.loads(_bytes(rec))) == rec


_PRESET = ('{"name": "tiny", "batch": 4, "dim": 16, "blocks": 6, "warmup": 2, "steps": 10, '
           '"profile_steps": 3, "variant_timeout_s": 300.0, "description": ""}')


def test_variant_record_bytes() -> None:
    failed = VariantRecord.failed("v", "boom", stage="build")
    assert _bytes(failed) == (
        '{"schema": 1, "name": "v", "source": "builtin", "status": "failed", "error": "boom", '
        '"stage": "build", "versions": {}, "topology": null, "timings": {}, "placement": null}')
    place = placement({"/device:CPU:1": (3, 100)}, [("a", "b", 4, 1)])
    full = replace(
        record("towers_bug", 0.05, topology=GPU, place=place),
        math=MathCheck((1.0, 2.0), 0.5), pid=7, phases_s={"a": 1.0}, profiler_options={"x": 1},
        clock_unix={"s": 1.0}, returncode=0, process_s={"cpu": 1.0},
        cluster={"family": "multi_worker", "loopback": True, "tasks": [{"task": "w", "status": "ok"}],
                 "attempts": [{"attempt": 1, "status": "ok"}]},
        host_tasks={"h": "worker:0"}, timings=Timings(StepStats(1.5), None, (1.0, 2.0), (3.0,)))
    assert _bytes(full) == (
        '{"schema": 1, "name": "towers_bug", "source": "builtin", "family": "tf1-graph", "status": "ok", '
        '"error": null, "stage": null, "versions": {"python": "3.11.0", "tensorflow": "2.99.0"}, '
        '"topology": {"kind": "gpu", "host": "/device:CPU:0", '
        '"accelerators": ["/device:GPU:0", "/device:GPU:1"]}, '
        '"timings": {"step_times_s": [1.0, 2.0], "step_time_s": {"median": 1.5, "p10": null, "p90": null, '
        '"min": null, "max": null, "n": 0}, "profiled_step_times_s": [3.0]}, '
        '"placement": {"nodes": [], "edges": [], '
        '"devices": {"/device:CPU:1": {"ops": 3, "flops_per_step": 100}}, '
        '"transfers": [{"src": "a", "dst": "b", "bytes_per_step": 4, "tensors": 1}]}, '
        '"math": {"losses": [1.0, 2.0], "grad_norm": 0.5}, "pid": 7, "phases_s": {"a": 1.0}, '
        '"profiler_options": {"x": 1}, "clock_unix": {"s": 1.0}, "returncode": 0, "wall_s": 1.0, '
        '"process_s": {"cpu": 1.0}, "stderr_tail": "", "xplane_files": [], '
        '"cluster": {"family": "multi_worker", "loopback": true, "tasks": [{"task": "w", "status": "ok"}], '
        '"attempts": [{"attempt": 1, "status": "ok"}]}, "host_tasks": {"h": "worker:0"}}')
    _round_trip(failed)
    _round_trip(full)


def test_run_doc_and_child_spec_bytes() -> None:
    run = run_doc(["single", "mine"], accelerators=2)
    run = replace(run, interrupted=True, interrupted_by="SIGINT", harness_s={"a": 1.0},
                  config=replace(run.config, keras_model="/k.py", cluster=ClusterOptions(2, 1, None, 3)))
    assert _bytes(run) == (
        '{"schema": 1, "tool": "tfprof-towers", "started": "2026-01-01T00:00:00+00:00", '
        '"started_local": null, "finished": "2026-01-01T00:01:00+00:00", "interrupted": true, '
        '"interrupted_by": "SIGINT", "command": [], '
        f'"config": {{"preset": {_PRESET}, "variants": [{{"name": "single", "source": "builtin", '
        '"family": "tf1-graph"}, {"name": "mine", "source": "file:/x/mine.py", "family": "tf1-graph"}], '
        '"accelerators": 2, "warmup": 1, "steps": 5, "profile_steps": 3, "variant_timeout_s": null, '
        '"out_dir": null, '
        '"keras_model": "/k.py", "cluster": {"workers": 2, "ps": 1, "file": null, "attempts": 3}}, '
        '"versions": {"python": "3.11.0", "tensorflow": "2.99.0"}, "host": {}, '
        '"topology": {"kind": "logical-cpu", "host": "/device:CPU:0", "accelerators": ["/device:CPU:1", '
        '"/device:CPU:2"]}, "nvidia_smi_topo": null, "harness_s": {"a": 1.0}}')
    _round_trip(run)
    spec = ChildSpec("v", "tf2-strategy", "/f.py", TINY, 2, 1, 5, 3, "/l", "/r.json", "/k.py",
                     ClusterOptions(2, 0, "/c", 1), 9.5)
    assert _bytes(spec) == (
        f'{{"schema": 1, "name": "v", "family": "tf2-strategy", "file": "/f.py", "preset": {_PRESET}, '
        '"accelerators": 2, "warmup": 1, "steps": 5, "profile_steps": 3, "logdir": "/l", '
        '"record": "/r.json", "keras_model": "/k.py", '
        '"cluster": {"workers": 2, "ps": 0, "file": "/c", "attempts": 1}, "timeout_s": 9.5}')
    _round_trip(spec)


def test_recommendation_bytes_measured_and_projected() -> None:
    measured = Recommendation("a", "fast", fastest="a", runner_up="b", speedup_vs_baseline=1.5,
                              median_step_s=0.1, within_noise=("b",), excluded={"c": "bad"})
    assert _bytes(measured) == (
        '{"variant": "a", "fastest": "a", "runner_up": "b", "speedup_vs_single": 1.5, "median_step_s": 0.1, '
        '"within_noise": ["b"], "basis": "measured", "reason": "fast", "excluded": {"c": "bad"}}')
    projected = Recommendation("a", "fast", basis="projected", hardware="hw", preset="seed", error="e",
                               projected_step_s={"overlapped": 1.0, "serial": 2.0}, measured_pick="b")
    assert _bytes(projected) == (
        '{"variant": "a", "fastest": null, "runner_up": null, "speedup_vs_single": null, '
        '"median_step_s": null, "within_noise": [], "basis": "projected", "reason": "fast", '
        '"hardware": "hw", "preset": "seed", "label": "projected on hw", '
        '"projected_step_s": {"overlapped": 1.0, "serial": 2.0}, "measured_pick": "b", "error": "e"}')
    _round_trip(measured)
    _round_trip(projected)


def test_summary_entry_nests_the_profiled_median_and_leaves_cluster_out() -> None:
    entry = SummaryEntry("v", "ok", profiled_median_s=0.5)
    doc = entry.to_json()
    assert list(doc)[:5] == ["name", "source", "family", "status", "error"]
    assert doc["profiled_step_time_s"] == {"median": 0.5}
    assert "cluster" not in doc
    _round_trip(entry)
    summary = Summary("/r", (entry,), ("v",))
    assert list(summary.to_json())[:11] == [
        "schema", "run_dir", "partial", "interrupted_by", "topology", "config", "versions", "started",
        "finished", "ranking", "variants"]
    _round_trip(summary)


def test_task_spec_bytes_and_task_record() -> None:
    spec = TaskSpec("multi_worker", "mw", TINY, 1, 2, 3, ("worker:0",), ("worker:0",),
                    faults={"worker:1": "segv@x"}, straggle_s={"worker:0": 0.5}, overhead_rounds=10,
                    overhead_block_steps=4)
    assert _bytes(spec) == (
        f'{{"family": "multi_worker", "variant": "mw", "preset": {_PRESET}, "warmup": 1, "steps": 2, '
        '"profile_steps": 3, "capture_tasks": ["worker:0"], "ready_tasks": ["worker:0"], '
        '"timeouts": {"startup_s": 120.0, "capture_start_s": 60.0, "peer_s": 60.0, "release_s": 120.0, '
        '"serve_s": 300.0, "collective_s": 60.0, "task_s": 300.0}, "capture_duration_ms": null, '
        '"capture_min_ms": 1000, "file": null, "keras_model": null, "accelerators": null, '
        '"faults": {"worker:1": "segv@x"}, "straggle_s": {"worker:0": 0.5}, "overhead_rounds": 10, '
        '"overhead_block_steps": 4}')
    _round_trip(spec)
    task = TaskRecord.from_json({"task": "w:0", "status": "ok", "profiled_spans_unix": [[1, 2], [3], "x"],
                                 "math": {"losses": [1.0], "grad_norm": 2}})
    assert (task.address, task.profiled_spans_unix, task.math) == ("", ((1.0, 2.0),), MathCheck((1.0,), 2.0))


# ------------------------------------------------------------------------------------------
# Older documents: an absent key takes its default


def test_old_documents_load_with_defaults() -> None:
    doc = run_doc(["single"]).to_json()
    for key in ("tool", "schema", "interrupted", "command", "harness_s", "started_local"):
        doc.pop(key, None)
    del doc["config"]["preset"]["description"], doc["config"]["preset"]["blocks"]
    run = RunDoc.from_json(doc)
    assert (run.tool, run.schema, run.interrupted, run.command, run.harness_s) == (
        "tfprof-towers", 1, False, (), None)
    assert (run.preset.description, run.preset.blocks) == ("", 6)
    entry = SummaryEntry.from_json({"name": "v", "status": "ok"})
    assert (entry.family, entry.stderr_tail, entry.step_time_s, entry.devices, entry.losses) == (
        "tf1-graph", "", StepStats(), {}, None)
    assert Summary.from_json({}) == Summary("", (), recommendation=NOT_ADVISED)
    assert Recommendation.from_json({"variant": "x", "basis": "projected on 8x-a100"}).basis == "projected"
    assert Recommendation.from_json({"variant": "x"}).reason == ""
    spec = TaskSpec.from_json({**TaskSpec("multi_worker", "mw", TINY, 1, 2, 3, (), ()).to_json(),
                               "timeouts": None, "capture_min_ms": None})
    assert (spec.timeouts, spec.capture_min_ms) == (Timeouts(), 1000)
    record_doc = record("v").to_json()
    del record_doc["timings"], record_doc["versions"]
    assert (VariantRecord.from_json(record_doc).timings, VariantRecord.from_json(record_doc).versions) == (
        Timings(), {})
    # a null where a list of texts may be: an empty tuple, as before; absent: None
    without = {k: v for k, v in record_doc.items() if k != "xplane_files"}
    assert VariantRecord.from_json({**record_doc, "xplane_files": None}).xplane_files == ()
    assert VariantRecord.from_json(without).xplane_files is None
    tasks = {"h": "w", "g": None}
    assert VariantRecord.from_json({**record_doc, "host_tasks": tasks}).host_tasks == {"h": "w"}


# ------------------------------------------------------------------------------------------
# Errors: the texts the hand-written readers gave


@pytest.mark.parametrize(
    ("cls", "doc", "message"),
    [
        (ChildSpec, {"family": "x"}, "W: name is missing"),
        (ChildSpec, {"name": "v", "family": "x", "preset": "s"},
         'W: preset must be an object, not the string "s"'),
        (ChildSpec, {"name": "v", "family": "x", "preset": {"name": "t", "dim": 1}},
         "W: preset.batch is missing"),
        (RunDoc, {"config": {"preset": {"name": "t", "batch": "s", "dim": 1}}},
         'W: config.preset.batch must be an integer, not the string "s"'),
        (RunDoc, {"config": {"variants": [{"k": 1}]}}, "W: config.variants[0].name is missing"),
        (RunDoc, {"config": {"cluster": {"ps": 1.5}}},
         "W: config.cluster.ps must be an integer, not the number 1.5"),
        (RunDoc, {"harness_s": {"a": float("nan")}},
         "W: harness_s.a must be a finite number, not the number nan"),
        (RunDoc, {"interrupted": "s"}, 'W: interrupted must be true or false, not the string "s"'),
        (RunDoc, {"command": [None]}, "W: command[0] must be a string, not null"),
        (VariantRecord, {"name": "v", "status": "ok", "math": {"losses": ["x"]}},
         'W: math.losses[0] must be a number, not the string "x"'),
        (VariantRecord, {"name": "v", "status": "ok", "cluster": {}}, "W: cluster.family is missing"),
        (VariantRecord, {"name": "v", "status": "ok", "cluster": {"family": "f", "loopback": "s"}},
         'W: cluster.loopback must be true or false, not the string "s"'),
        (VariantRecord, {"name": "v", "status": None}, "W: status must be a string, not null"),
        (Summary, {"variants": [{"k": 1}]}, "W: variants[0]: name is missing"),
        (Summary, {"variants": [None]}, "W: variants[0] must be an object, not null"),
        (Summary, {"variants": [{"name": "v", "status": "s"}]},
         "W: variants[0]: status must be one of 'ok', 'failed', 'skipped', not the string \"s\""),
        (Summary, {"variants": [{"name": "v", "status": "ok", "devices": {"k": 1}}]},
         "W: variants[0]: devices.k must be an object, not the number 1"),
        (Summary, {"variants": [{"name": "v", "status": "ok", "profiled_step_time_s": "s"}]},
         'W: variants[0]: profiled_step_time_s must be an object, not the string "s"'),
        (Summary, {"ranking": ["ghost"]}, "W: ranking names variants the summary lacks: ghost"),
        (Summary, {"recommendation": {"reason": 2}},
         "W: recommendation: reason must be a string, not the number 2"),
        (Summary, {"findings": [{"rule": "r"}]}, "W: findings[0].severity is missing"),
        (Summary, {"rules": [{"rule": "r", "evaluated": 1}]}, "W: rules[0].evaluated must be true or false, "
                                                              "not the number 1"),
        (Recommendation, {"variant": "x", "projected_step_s": {"serial": "s"}},
         'W: projected_step_s.serial must be a number, not the string "s"'),
        (TaskSpec, {"family": "mirrored"}, "W: family must be one of 'multi_worker', 'parameter_server', "
                                           'not the string "mirrored"'),
        (TaskSpec, {"family": "multi_worker", "variant": "v", "preset": {"name": "t", "batch": 1, "dim": 1},
                    "warmup": 1, "steps": 1, "profile_steps": 1, "timeouts": {"peer_s": "s"}},
         'W: timeouts.peer_s must be a number, not the string "s"'),
        (TaskRecord, {"task": "t", "status": "ok", "phases_s": []},
         "W: phases_s must be an object, not a list"),
        (TaskRecord, [], "W: must be an object, not a list"),
    ],
)
def test_errors_name_the_file_and_field_as_before(cls: Any, doc: Any, message: str) -> None:
    with pytest.raises(RecordError) as info:
        cls.from_json(doc, "W")
    assert str(info.value) == message


def test_default_where_names_the_document() -> None:
    with pytest.raises(RecordError, match=r"^record\.json: name is missing$"):
        VariantRecord.from_json({})
    with pytest.raises(RecordError, match=r"^summary\.json: variants\[\]: name is missing$"):
        SummaryEntry.from_json({})
    with pytest.raises(RecordError, match=r"^topology: kind must be a string, not the number 1$"):
        Topology.from_json({"kind": 1})


# ------------------------------------------------------------------------------------------
# meta(): the per-field hooks on a record of its own


def _check_even(f: Fields) -> None:
    if len(f.data) % 2:
        raise RecordError(f.where, f.prefix, "must have an even number of keys")


@dataclass(frozen=True)
class _Doc(Record):
    title: str
    body: str = meta(missing="(none)")
    seconds: float | None = meta(None, key="s", omit=if_none)
    parts: Mapping[str, Any] = meta(factory=dict, check=_check_even)
    upper: str = meta("", read=lambda f, key: (f.text(key) or "").upper(), write=str.lower)
    WHERE = "doc.json"
    JSON_ORDER = ("upper",)


def test_meta_hooks() -> None:
    doc = _Doc("t", "b", 1.5, {"a": 1, "b": 2}, "X")
    assert _bytes(doc) == '{"upper": "x", "title": "t", "body": "b", "s": 1.5, "parts": {"a": 1, "b": 2}}'
    assert _Doc.from_json(doc.to_json()) == doc
    assert _Doc("t", "").to_json() == {"upper": "", "title": "t", "body": "", "parts": {}}
    assert _Doc.from_json({"title": "t"}) == _Doc("t", "(none)")
    with pytest.raises(RecordError, match=r"^doc\.json: title is missing$"):
        _Doc.from_json({})
    with pytest.raises(RecordError, match=r"^doc\.json: parts must have an even number of keys$"):
        _Doc.from_json({"title": "t", "parts": {"a": 1}})


def test_a_type_the_codec_cannot_read_is_a_bug_named_at_once() -> None:
    @dataclass(frozen=True)
    class Odd(Record):
        ids: tuple[int, ...] = ()

    with pytest.raises(TypeError, match=r"cannot read ids: a tuple of <class 'int'>; give it meta\(read="):
        Odd.from_json({"ids": [1]})
