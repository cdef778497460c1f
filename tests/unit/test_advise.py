"""Rules fire on runs built to trigger them and stay quiet otherwise; the recommendation's choices."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import typed_kit as typed
from report_kit import TOPOLOGY, variant_records

from tfprof_towers.advice import recommend
from tfprof_towers.advice import rules as advise
from tfprof_towers.analysis import audit
from tfprof_towers.rundir.placement_audit import Audit

GPU = {"kind": "gpu", "host": "/device:CPU:0", "accelerators": ["/device:GPU:0", "/device:GPU:1"]}
G0, G1 = GPU["accelerators"]


def entry(name: str, median: float | None, p10: float | None = None, p90: float | None = None,
          status: str = "ok", source: str = "builtin", speedup: float | None = None,
          efficiency: float | None = None) -> dict[str, Any]:
    return {"name": name, "status": status, "source": source,
            "step_time_s": {"median": median, "p10": p10 if p10 is not None else median,
                            "p90": p90 if p90 is not None else median, "n": 5},
            "speedup_vs_single": speedup, "scaling_efficiency": efficiency}


def facts(e: dict[str, Any], a: Audit | None, breakdown: dict[str, Any] | None = None,
          topology: dict[str, Any] = TOPOLOGY, baseline: dict[str, Any] | None = None) -> advise.Facts:
    return advise.Facts(replace(typed.entry(e), audit=a, breakdown=typed.breakdown(breakdown)),
                        typed.topology(topology),
                        typed.entry(baseline))


def audited(rec: dict[str, Any], topology: dict[str, Any] = TOPOLOGY,
            breakdown: dict[str, Any] | None = None) -> Audit | None:
    """The audit of a record document on a topology document."""
    return audit.audit_variant(typed.record(rec), typed.topology(topology), typed.breakdown(breakdown))


def rule(name: str) -> advise.Rule:
    return next(r for r in advise.RULES if r.name == name)


def check(name: str, f: advise.Facts) -> advise.Finding | None:
    r = rule(name)
    return r.check(r, f)


def gpu_audit(flops0: int, flops1: int, host_flops: int = 0,
              breakdown: dict[str, Any] | None = None) -> Audit:
    nodes = [{"name": "tower_0/mm", "type": "MatMul", "kernel": "MatMul", "device": G0, "requested": G0,
              "flops": flops0, "sources": []},
             {"name": "tower_1/mm", "type": "MatMul", "kernel": "MatMul", "device": G1, "requested": G1,
              "flops": flops1, "sources": []}]
    if host_flops:
        nodes.append({"name": "tower_0/fwd", "type": "MatMul", "kernel": "MatMul", "device": GPU["host"],
                      "requested": GPU["host"], "flops": host_flops, "sources": []})
    from tfprof_towers.capture.placement import summarise_devices

    placement = {"nodes": nodes, "devices": summarise_devices(nodes), "edges": [], "transfers": []}
    return audited({"name": "v", "placement": placement}, GPU, breakdown)


def gpu_breakdown(wall0: dict[str, float], wall1: dict[str, float], host_compute: float = 0.0,
                  window: float = 1.0) -> dict[str, Any]:
    def dev(wall: dict[str, float]) -> dict[str, Any]:
        return {"window_s": window, "wall": wall, "total": {c: {"seconds": s} for c, s in wall.items()}}

    return {"devices": {G0: dev(wall0), G1: dev(wall1),
                        GPU["host"]: {"window_s": window, "wall": {},
                                      "total": {"host_compute": {"seconds": host_compute}}}},
            "links": []}


BUG = variant_records()["towers_bug"]
SINGLE = variant_records()["single"]


# -- host_compute


def test_host_compute_fires_with_the_source_line_and_share() -> None:
    a = audited(BUG)
    f = check("host_compute", facts(entry("towers_bug", 0.05), a))
    assert f is not None
    assert (f.rule, f.severity, f.variant) == ("host_compute", "high", "towers_bug")
    assert f.sources == ("/src/train.py:57",)
    assert f.message == (
        "60.0% of estimated FLOPs (600 of 1,000 per step) ran on the host /device:CPU:0 while 2 "
        "accelerator(s) were available; heavy ops in tower_0, placed there by "
        "`with tf.device('/cpu:0')` at train.py:57"
    )
    assert f.suggestion.startswith("Suggestion: remove the `with tf.device(...)` at /src/train.py:57")
    assert f.evidence["host_flops_share"] == 0.6


def test_host_compute_quiet_when_the_host_only_updates() -> None:
    assert check("host_compute", facts(entry("single", 0.01), audited(SINGLE))) is None
    assert check("host_compute", facts(entry("v", 0.01), gpu_audit(500, 480, host_flops=50))) is None


def test_host_compute_tiers() -> None:
    found = check("host_compute", facts(entry("v", 1.0), gpu_audit(400, 400, host_flops=200)))
    assert found.severity == "medium"


# -- an accelerator idle while the host works: host_bound, a trace rule (test_trace_rules.py)


# -- unbalanced_towers


def test_unbalanced_towers_by_flops() -> None:
    f = check("unbalanced_towers", facts(entry("v", 1.0), gpu_audit(300, 100)))
    assert f is not None
    assert (f.severity, f.evidence["metric"], f.evidence["ratio"]) == ("high", "flops_per_step", 3.0)


def test_unbalanced_towers_leaves_measured_time_to_the_trace_rule() -> None:
    """Measured on GPUs, even FLOPs: the placement is balanced; the measured 1.5x is accelerator_imbalance's
    (test_trace_rules.py)."""
    bd = gpu_breakdown({"compute": 0.75, "idle": 0.25}, {"compute": 0.5, "idle": 0.5})
    even, uneven = gpu_audit(100, 100, breakdown=bd), gpu_audit(300, 100, breakdown=bd)
    assert check("unbalanced_towers", facts(entry("v", 1.0), even, bd, GPU)) is None
    f = check("unbalanced_towers", facts(entry("v", 1.0), uneven, bd, GPU))
    assert (f.severity, f.evidence["metric"], f.evidence["ratio"]) == ("high", "flops_per_step", 3.0)


def test_unbalanced_towers_quiet_when_balanced_or_single() -> None:
    assert check("unbalanced_towers", facts(entry("v", 1.0), gpu_audit(110, 100))) is None
    single = facts(entry("single", 1.0), audited(SINGLE))
    assert check("unbalanced_towers", single) is None


# -- poor_scaling


def test_poor_scaling_on_gpus() -> None:
    base = entry("single", 1.0, speedup=1.0, efficiency=1.0)
    f = check("poor_scaling", facts(entry("v", 2.5, speedup=0.4, efficiency=0.2), gpu_audit(1, 1), None, GPU,
                                    base))
    assert f is not None
    assert (f.severity, f.evidence["scaling_efficiency"], f.evidence["accelerators"]) == ("high", 0.2, 2)


def test_poor_scaling_quiet_when_scaling_or_on_logical_devices() -> None:
    base = entry("single", 1.0, speedup=1.0, efficiency=1.0)
    good = entry("v", 0.55, speedup=1.8, efficiency=0.9)
    assert check("poor_scaling", facts(good, gpu_audit(1, 1), None, GPU, base)) is None
    bad = entry("v", 2.5, speedup=0.4, efficiency=0.2)
    assert check("poor_scaling", facts(bad, gpu_audit(1, 1), None, TOPOLOGY, base)) is None


# -- variables_remote


def test_variables_remote_fires_when_every_tower_pulls() -> None:
    f = check("variables_remote", facts(entry("towers_bug", 0.05), audited(BUG)))
    assert f is not None
    assert (f.severity, f.evidence["bytes_per_step"], f.sources) == ("low", 2048, ("/src/train.py:40",))
    assert f.evidence["modeled_s"] == {"pcie3_x16": 2048 / 12e9}


def test_a_modeled_time_raises_the_tier_only_as_a_share_of_a_gpu_step() -> None:
    r = rule("variables_remote")  # low, medium from 10% of the step
    on_gpus = facts(entry("v", 1e-3), None, topology=GPU)
    assert on_gpus.share_of_step(2e-4) == pytest.approx(0.2)
    assert r.medium_at(on_gpus.share_of_step(2e-4), "medium_at_modeled_share") == "medium"
    assert r.medium_at(on_gpus.share_of_step(5e-5), "medium_at_modeled_share") == "low"
    stand_in = facts(entry("v", 1e-3), None)  # logical CPU devices: their step is not the GPUs'
    assert stand_in.share_of_step(2e-4) is None
    assert r.medium_at(None, "medium_at_modeled_share") == "low"


def test_variables_remote_quiet_without_pulls() -> None:
    assert check("variables_remote", facts(entry("v", 1.0), gpu_audit(100, 100))) is None
    single = facts(entry("single", 1.0), audited(SINGLE))
    assert check("variables_remote", single) is None


def test_rules_status_marks_timing_rules_not_evaluated_on_logical_devices() -> None:
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary({"topology": TOPOLOGY}))}
    assert [n for n, r in status.items() if not r["evaluated"]] == ["poor_scaling"]
    assert all(r.evaluated for r in advise.rules_status(typed.summary({"topology": GPU})))


def test_every_finding_has_evidence_and_a_suggestion() -> None:
    summary = {"topology": TOPOLOGY, "variants": [
        {**entry("towers_bug", 0.05), "audit": audited(BUG), "breakdown": None}]}
    found = advise.run_rules(typed.summary(summary))
    assert [f.rule for f in found] == ["host_compute", "variables_remote"]
    assert all(f.evidence and f.suggestion.startswith("Suggestion: ") for f in found)


# -- recommendation


def measured(summary: dict[str, Any]) -> dict[str, Any]:
    """The measured recommendation as summary.json holds it."""
    return recommend.measured(typed.summary(summary)).to_json()


def summary_of(*entries: dict[str, Any], topology: dict[str, Any] = GPU) -> dict[str, Any]:
    ok = sorted((e for e in entries if e["status"] == "ok"), key=lambda e: e["step_time_s"]["median"])
    ranking = [e["name"] for e in ok] + [e["name"] for e in entries if e["status"] != "ok"]
    return {"topology": topology, "variants": list(entries), "ranking": ranking}


def test_recommends_the_fastest_when_nothing_is_within_noise() -> None:
    rec = measured(summary_of(
        entry("single", 0.010, 0.009, 0.011, speedup=1.0),
        entry("replicated", 0.006, 0.0058, 0.0062, speedup=10 / 6),
        entry("broken", None, status="failed"),
    ))
    assert (rec["variant"], rec["fastest"], rec["runner_up"], rec["within_noise"]) == (
        "replicated", "replicated", "single", [])
    assert rec["reason"] == (
        "replicated has the fastest median un-profiled step: 6.00 ms (p10–p90 5.80 ms–6.20 ms, 5 steps), "
        "1.67× the speed of single. Runner-up: single at 10.0 ms, 1.67× slower."
    )


def test_prefers_a_simpler_variant_within_noise() -> None:
    rec = measured(summary_of(
        entry("single", 0.0102, 0.0095, 0.0110, speedup=1.0),
        entry("replicated", 0.0100, 0.0090, 0.0105, speedup=1.02),
    ))
    assert (rec["variant"], rec["fastest"], rec["within_noise"]) == ("single", "replicated", ["single"])
    assert "single is within measured noise (10.2 ms, p10–p90 ranges overlap) and simpler" in rec["reason"]


def test_never_prefers_the_buggy_variant_or_a_failed_one() -> None:
    rec = measured(summary_of(
        entry("towers_bug", 0.0101, 0.0090, 0.0110),
        entry("towers_host_vars", 0.0100, 0.0090, 0.0110),
        entry("single", 0.001, status="failed"),
    ))
    assert rec["variant"] == "towers_host_vars"


def test_no_recommendation_without_a_successful_variant() -> None:
    rec = measured(summary_of(entry("single", None, status="failed")))
    assert rec["variant"] is None
    assert rec["reason"].startswith("No variant finished successfully")


def test_logical_cpu_runs_say_what_the_ranking_means() -> None:
    rec = measured(summary_of(entry("single", 0.01), topology=TOPOLOGY))
    assert rec["reason"].endswith("profile on the GPU machine before changing production code.")


# -- named parameters and what can be evaluated


def test_rules_report_their_named_parameters() -> None:
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary({"topology": GPU}))}
    assert status["poor_scaling"]["params"] == {"max_efficiency": 0.5, "min_accelerators": 2}
    assert status["poor_scaling"]["threshold"] == 0.5
    assert status["variables_remote"]["params"]["link_model"] == "pcie3_x16"
    assert status["variables_remote"]["threshold"] == 2  # min_accelerators
    assert status["poor_scaling"]["needs"] == ["measured_timings", "baseline"]


def test_named_parameters_drive_the_checks() -> None:
    from dataclasses import replace

    bd = gpu_breakdown({"compute": 0.9, "idle": 0.1}, {"compute": 0.9, "idle": 0.1})
    slow = facts(entry("v", 1.0, speedup=0.8, efficiency=0.4), gpu_audit(100, 100), bd, GPU,
                 entry("single", 0.8))
    scaling = rule("poor_scaling")
    assert scaling.check(scaling, slow).severity == "medium"
    stricter = replace(scaling, params={**scaling.params, "max_efficiency": 0.3})
    assert stricter.check(stricter, slow) is None
    remote = rule("variables_remote")
    x8 = replace(remote, params={**remote.params, "link_model": "pcie3_x8"})
    f = x8.check(x8, facts(entry("towers_bug", 0.05), audited(BUG)))
    assert f.evidence["modeled_s"] == {"pcie3_x8": 2048 / 6e9}
    assert "modeled at PCIe 3.0 x8" in f.message
    three = replace(remote, params={**remote.params, "min_accelerators": 3})
    assert three.check(three, facts(entry("towers_bug", 0.05), audited(BUG))) is None


def test_a_rule_must_name_its_primary_parameter() -> None:
    with pytest.raises(ValueError, match="primary parameter 'x' is not among its params"):
        advise.Rule("r", "t", "low", check_nothing, params={"y": 1}, primary="x")


def check_nothing(rule: advise.Rule, f: advise.Facts) -> None:
    return None


def test_timing_rules_are_not_evaluated_on_a_gpu_variant_without_a_trace() -> None:
    a = gpu_audit(100, 100)
    good = gpu_breakdown({"compute": 0.4, "idle": 0.6}, {"compute": 0.4, "idle": 0.6}, host_compute=0.5)
    summary = {"topology": GPU, "variants": [
        {**entry("single", 0.5), "audit": a, "breakdown": good},
        {**entry("traced", 1.0, speedup=0.5, efficiency=0.25), "audit": a, "breakdown": good},
        {**entry("untraced", 1.0, speedup=0.5, efficiency=0.25), "audit": a,
         "breakdown": {"error": "corrupt trace"}}]}
    evaluation = advise.evaluate(typed.summary(summary))
    assert [(f.rule, f.variant) for f in evaluation.findings] == [("poor_scaling", "traced")]
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary(summary))}
    assert status["poor_scaling"]["evaluated"] is False
    assert status["poor_scaling"]["not_evaluated"] == {"untraced": "no device timings: corrupt trace"}
    assert status["poor_scaling"]["why_not"] == (
        "not evaluated on 1 variant(s): untraced: no device timings: corrupt trace")
    assert status["host_compute"]["evaluated"] is True and status["host_compute"]["not_evaluated"] == {}


def test_poor_scaling_needs_the_baseline() -> None:
    a = gpu_audit(100, 100)
    bd = gpu_breakdown({"compute": 0.9, "idle": 0.1}, {"compute": 0.9, "idle": 0.1})
    summary = {"topology": GPU, "variants": [{**entry("replicated", 1.0, speedup=None), "audit": a,
                                              "breakdown": bd}]}
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary(summary))}
    assert status["poor_scaling"]["not_evaluated"] == {"replicated": "the baseline single did not succeed"}


# -- rules that know the tf.distribute strategies (hand-built placements: 2 logical accelerators, tiny seed)

ACC = ("/device:CPU:1", "/device:CPU:2")
HOST = TOPOLOGY["host"]
PCIE3_X8 = {"name": "PCIe 3.0 x8", "bandwidth_gbs": 7.88, "efficiency": 0.8, "latency_us": 10.0}
STAGED = {"kind": "staged", "topology": "mesh", "name": "PCIe 3.0 x8, staged through host",
          "bandwidth_gbs": 7.88, "efficiency": 0.36, "latency_us": 20.0}
NVLINK = {"kind": "direct", "topology": "mesh", "name": "NVLink 2.0 x2", "bandwidth_gbs": 50.0,
          "efficiency": 0.8, "latency_us": 5.0}


def projection(peer: dict[str, Any], steps: dict[str, float]) -> dict[str, Any]:
    variants = [{"name": n, "projected_step_s": {"overlapped": s, "serial": s}} for n, s in steps.items()]
    return {"label": "projected", "hardware": "box", "variants": variants,
            "profile": {"name": "box", "peer": peer, "host_link": PCIE3_X8}}


def strategy_audit(strategy: str, ops: str | None, collective: int = 0, to_host: int = 0,
                   pulls: int = 0) -> Audit:
    """The audit of a TF2 strategy variant's placement: matmuls on both accelerators, and what crosses."""
    from tfprof_towers.capture.placement import summarise_devices, summarise_transfers

    nodes = [{"name": f"mm{i}", "type": "MatMul", "kernel": "MatMul", "device": a, "requested": a,
              "flops": 278528, "sources": []} for i, a in enumerate(ACC)]
    nodes.append({"name": "update", "type": "AssignSubVariableOp", "kernel": "AssignSubVariableOp",
                  "device": HOST, "requested": HOST, "flops": 0, "sources": []})
    edges = []
    for a in ACC:
        if pulls:
            edges.append({"src": HOST, "dst": a, "bytes": pulls, "tensor": "W:0",
                          "producer_type": "ReadVariableOp"})
        if to_host:
            edges.append({"src": a, "dst": HOST, "bytes": to_host, "tensor": "g:0", "producer_type": "AddN"})
    placement = {
        "nodes": nodes, "devices": summarise_devices(nodes), "edges": edges,
        "transfers": summarise_transfers(edges),
        "strategy": {"strategy": strategy, "replicas": 2, "cross_device_ops": ops},
        "collectives": [{"name": f"CollectiveReduceV2_{i}", "device": a, "kernel": "CollectiveReduceV2",
                         "bytes": collective, "group_size": 2, "communication_hint": "nccl"}
                        for i, a in enumerate(ACC) if collective],
    }
    return audited({"name": "v", "placement": placement})


MIRRORED = strategy_audit("MirroredStrategy", "CollectiveAllReduce", collective=6528)
REDUCE_HOST = strategy_audit("MirroredStrategy", "ReductionToOneDevice", to_host=6536)
CENTRAL = strategy_audit("CentralStorageStrategy", "ReductionToOneDevice", to_host=13064, pulls=6528)


def tf2_facts(name: str, a: Audit, proj: dict[str, Any] | None) -> advise.Facts:
    return advise.Facts(replace(typed.entry({**entry(name, 1e-3), "family": "tf2-strategy"}), audit=a),
                        typed.topology(TOPOLOGY), projection=typed.projection(proj))


def test_staged_allreduce_fires_without_a_peer_path_citing_the_modeled_ring() -> None:
    proj = projection(STAGED, {"mirrored": 1e-3, "mirrored_reduce_host": 8e-4, "mirrored_hierarchical": 9e-4})
    f = check("staged_allreduce", tf2_facts("mirrored", MIRRORED, proj))
    assert f is not None and (f.rule, f.severity) == ("staged_allreduce", "low")
    # ring of 2: 2 latencies + 6528 B at 7.88e9 x 0.36; via the host: 2 x (10 us + 6528 B at 7.88e9 x 0.8)
    ring = 2 * 20e-6 + 6528 / (7.88e9 * 0.36)
    via_host = 2 * (10e-6 + 6528 / (7.88e9 * 0.8))
    assert f.evidence["modeled_ring_s"] == pytest.approx(ring)
    assert f.evidence["modeled_via_host_s"] == pytest.approx(via_host)
    assert (f.evidence["payload_bytes_per_replica"], f.evidence["replicas"]) == (6528, 2)
    assert f.evidence["share_of_projected_step"] == pytest.approx(ring / 1e-3)
    assert f.message == (
        "mirrored all-reduces 6.53 kB of gradients per replica per step with CollectiveReduceV2 (nccl) "
        "over 2 accelerators; on box they have no peer access (PCIe 3.0 x8, staged through host, 2.84 GB/s "
        "effective), so every step of the ring is staged through host memory: modeled 42.3 µs per step for "
        "the ring, against 22.1 µs to send each replica's gradients to the host and the sum back over its "
        "own PCIe 3.0 x8 link (6.30 GB/s)")
    assert "ReductionToOneDevice()" in f.suggestion and "HierarchicalCopyAllReduce()" in f.suggestion
    assert f.suggestion.endswith("Projected on box: mirrored 1.00 ms, mirrored_reduce_host 800 µs, "
                                 "mirrored_hierarchical 900 µs per step.")


def test_staged_allreduce_is_medium_when_the_ring_is_a_large_share_of_the_step() -> None:
    f = check("staged_allreduce", tf2_facts("mirrored", MIRRORED, projection(STAGED, {"mirrored": 3e-4})))
    assert f.severity == "medium" and f.evidence["share_of_projected_step"] == pytest.approx(42.3e-6 / 3e-4,
                                                                                             rel=1e-3)


def test_staged_allreduce_quiet_over_nvlink_or_without_an_all_reduce() -> None:
    assert check("staged_allreduce", tf2_facts("mirrored", MIRRORED, projection(NVLINK, {}))) is None
    reduce_host = tf2_facts("mirrored_reduce_host", REDUCE_HOST, projection(STAGED, {}))
    assert check("staged_allreduce", reduce_host) is None


def test_reduction_through_host_fires_over_direct_links() -> None:
    proj = projection(NVLINK, {"mirrored_reduce_host": 1e-3, "mirrored": 9e-4})
    f = check("reduction_through_host", tf2_facts("mirrored_reduce_host", REDUCE_HOST, proj))
    via_host = 2 * (10e-6 + 6536 / (7.88e9 * 0.8))  # 22.1 us: 2.2% of the projected 1 ms, so low
    assert f is not None and f.severity == "low"
    assert f.evidence["modeled_via_host_s"] == pytest.approx(via_host)
    assert f.evidence["modeled_ring_s"] == pytest.approx(2 * 5e-6 + 6536 / (50e9 * 0.8))
    assert f.message.startswith("mirrored_reduce_host sums the gradients on the host: each of 2 replicas "
                                "sends up to 6.54 kB per step to /device:CPU:0 and receives the sum back")
    assert "use `tf.distribute.MirroredStrategy()` with its default cross-device ops" in f.suggestion
    assert f.suggestion.endswith("Projected on box: mirrored_reduce_host 1.00 ms, mirrored 900 µs per step.")


def test_reduction_through_host_quiet_without_direct_links_or_for_central_storage() -> None:
    staged = tf2_facts("mirrored_reduce_host", REDUCE_HOST, projection(STAGED, {}))
    assert check("reduction_through_host", staged) is None
    central = tf2_facts("central_storage", CENTRAL, projection(NVLINK, {}))
    assert check("reduction_through_host", central) is None


def test_central_storage_pulls_fires_with_the_bytes_each_accelerator_pulls() -> None:
    f = check("central_storage_pulls", tf2_facts("central_storage", CENTRAL, None))
    assert f is not None and f.severity == "low"  # logical devices: the modeled time is not a share of a step
    assert f.evidence["pulls_per_accelerator"] == {ACC[0]: 6528, ACC[1]: 6528}
    assert f.evidence["modeled_s"] == {"pcie3_x16": (6528 + 13064) / 12e9}
    assert f.message == (
        "CentralStorageStrategy keeps the variables on the host /device:CPU:0: every step each of 2 "
        "accelerators pulls them (/device:CPU:1 6.53 kB, /device:CPU:2 6.53 kB; 2 tensors in all) and sends "
        "gradients back (13.1 kB from /device:CPU:1), and the host runs the update (1 op); modeled at "
        "PCIe 3.0 x16: 1.63 µs per step on /device:CPU:1's link")
    # the generic rule leaves central storage to this one
    assert check("variables_remote", tf2_facts("central_storage", CENTRAL, None)) is None


def test_central_storage_pulls_quiet_for_other_strategies() -> None:
    assert check("central_storage_pulls", tf2_facts("mirrored", MIRRORED, None)) is None


def test_peer_path_rules_say_why_they_were_not_evaluated_without_a_profile() -> None:
    summary = {"topology": TOPOLOGY, "variants": [
        {**entry("mirrored", 1e-3), "family": "tf2-strategy", "audit": MIRRORED, "breakdown": None},
        {**entry("single", 1e-3), "audit": audited(SINGLE), "breakdown": None}]}
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary(summary))}
    assert status["staged_allreduce"]["not_evaluated"] == {
        "mirrored": "it reduces across devices, and no hardware profile says how its accelerators are linked "
                    "(profile --project-on NAME, or project RUN_DIR --hardware NAME)"}
    assert status["central_storage_pulls"]["evaluated"] is True
    assert [f.rule for f in advise.run_rules(typed.summary(summary))] == []
    summary["projection"] = projection(STAGED, {})
    assert [f.rule for f in advise.run_rules(typed.summary(summary))] == ["staged_allreduce"]


def test_host_compute_in_a_tf2_step_names_the_lines_that_created_the_ops() -> None:
    nodes = [{"name": "fwd/MatMul", "type": "MatMul", "kernel": "MatMul", "device": HOST, "requested": HOST,
              "flops": 600, "sources": [{"file": "/src/step.py", "line": 12, "function": "replica_step"}]},
             {"name": "bwd/MatMul", "type": "MatMul", "kernel": "MatMul", "device": ACC[0],
              "requested": ACC[0], "flops": 400, "sources": []}]
    from tfprof_towers.capture.placement import summarise_devices

    placement = {"nodes": nodes, "devices": summarise_devices(nodes), "edges": [], "transfers": []}
    a = audited({"name": "mine", "placement": placement})
    f = check("host_compute", tf2_facts("mine", a, None))
    assert f.message.endswith("heavy ops in fwd, created at step.py:12")
    assert f.suggestion.startswith("Suggestion: run the ops created at /src/step.py:12 inside `strategy.run`")
    assert f.sources == ("/src/step.py:12",)


def test_strategy_findings_say_when_the_projection_keeps_the_variant_ahead() -> None:
    proj = projection(STAGED, {"central_storage": 6e-4, "mirrored": 1.7e-3, "mirrored_reduce_host": 1.6e-3})
    f = check("central_storage_pulls", tf2_facts("central_storage", CENTRAL, proj))
    assert f.suggestion.endswith(
        "Projected on box: central_storage 600 µs, mirrored 1.70 ms, mirrored_reduce_host 1.60 ms per step: "
        "at this preset central_storage stays ahead, so the change pays only where more bytes cross.")


# -- changed_math: a placement must not change what is computed

LOSSES = [0.47490591, 0.47462937]


def with_math(e: dict[str, Any], losses: list[float] | None, norm: float | None) -> dict[str, Any]:
    return {**e, "losses": losses, "grad_norm": norm, "family": "tf1-graph"}


def test_changed_math_fires_on_a_forgotten_tower_with_the_numbers() -> None:
    single = with_math(entry("single", 0.01), LOSSES, 0.144170716)
    forgot = with_math(entry("forgot", 0.01, source="file:/x/forgot.py"), [0.47490594, 0.47462937],
                       0.0720857)
    summary = {"topology": TOPOLOGY, "variants": [{**single, "audit": None}, {**forgot, "audit": None}]}
    [found] = [f for f in advise.evaluate(typed.summary(summary)).findings if f.rule == "changed_math"]
    assert (found.severity, found.variant) == ("high", "forgot")
    assert found.message == (
        "this placement changes what is computed: step-1 gradient norm 0.0720857 against 0.144171 "
        "(relative difference 50.0%, tolerance 0.001); losses of the first steps 0.474906, 0.474629 against "
        "0.474906, 0.474629 (relative difference 6.3e-08, 0, tolerance 0.0001); reference: single "
        "(the baseline: one device)")
    assert found.suggestion.startswith("Suggestion: check how the towers' gradients are combined")
    assert found.evidence["grad_norm_rel_diff"] == pytest.approx(1 - 0.0720857 / 0.144170716)
    assert found.evidence["reference_losses"] == LOSSES


def test_changed_math_quiet_within_float_tolerance_and_on_the_reference() -> None:
    summary = {"topology": TOPOLOGY, "variants": [
        with_math(entry("single", 0.01), LOSSES, 0.14417072),
        with_math(entry("replicated", 0.01), [0.47490594, 0.47462937], 0.14417073)]}
    assert [f.rule for f in advise.evaluate(typed.summary(summary)).findings] == []
    status = {r.rule: r.to_json() for r in advise.rules_status(typed.summary(summary))}
    assert status["changed_math"]["evaluated"] is True


def test_a_variant_that_exposes_no_loss_is_not_compared_never_flagged() -> None:
    summary = {"topology": TOPOLOGY, "variants": [
        with_math(entry("single", 0.01), LOSSES, 0.14417072),
        with_math(entry("mine", 0.01, source="file:/x/mine.py"), None, None)]}
    evaluation = advise.evaluate(typed.summary(summary))
    assert evaluation.findings == ()
    assert evaluation.skipped["changed_math"] == {
        "mine": "its graph exposes no loss (see docs/variants.md: same math)"}


# -- never recommend a variant with a disqualifying high-severity finding


def bug_summary(bug_median: float, topology: dict[str, Any] = GPU) -> dict[str, Any]:
    bug = {**entry("towers_bug", bug_median, speedup=0.01 / bug_median),
           "audit": audited(BUG)}
    single = {**entry("single", 0.01, 0.0095, 0.0105, speedup=1.0),
              "audit": audited(SINGLE)}
    host = {**entry("towers_host_vars", 0.008, 0.0075, 0.0085, speedup=1.25), "audit": None}
    return summary_of(bug, single, host, topology=topology)


def test_the_measured_fastest_is_passed_over_when_it_computes_on_the_host() -> None:
    advice = advise.advise(typed.summary(bug_summary(0.005)))
    rec = advice.recommendation
    assert (rec.variant, rec.fastest, rec.runner_up) == ("towers_host_vars", "towers_bug", "towers_bug")
    assert rec.excluded == {"towers_bug": "heavy compute on the host while accelerators are available "
                                          "(high-severity finding host_compute)"}
    assert rec.reason.startswith(
        "towers_bug has the fastest median un-profiled step (5.00 ms) but is not recommended: heavy compute "
        "on the host while accelerators are available (high-severity finding host_compute). "
        "towers_host_vars has the fastest median un-profiled step of the others: 8.00 ms")


def test_a_medium_host_compute_finding_does_not_disqualify() -> None:
    a = gpu_audit(400, 400, host_flops=200)  # 20% on the host: medium
    summary = summary_of({**entry("v", 0.005, speedup=2.0), "audit": a},
                         {**entry("single", 0.01, speedup=1.0), "audit": None})
    advice = advise.advise(typed.summary(summary))
    assert [(f.rule, f.severity) for f in advice.findings] == [("host_compute", "medium")]
    assert (advice.recommendation.variant, advice.recommendation.excluded) == ("v", {})


def test_when_every_variant_is_disqualified_the_best_is_named_with_a_caveat() -> None:
    bug = {**entry("towers_bug", 0.05), "audit": audited(BUG)}
    rec = advise.advise(typed.summary(summary_of(bug, entry("single", None, status="failed")))).recommendation
    assert rec.variant == "towers_bug"
    assert "Every variant here has a high-severity finding or failed, so towers_bug is only the best of " \
           "them: fix its findings before using it." in rec.reason


# -- one hardware profile: modeled link times from the projection's profile


def test_variables_remote_quotes_the_projection_profiles_host_link() -> None:
    from tfprof_towers.projection.hardware import load_hardware

    [host_link, _peer] = [m.to_json() for m in audit.link_models_from_profile(
        load_hardware("2x-gtx1060-pcie3").summary())]
    summary = {"topology": TOPOLOGY, "link_models": [host_link], "variants": [
        {**entry("towers_bug", 0.05), "audit": audited(BUG), "breakdown": None}]}
    [found] = [f for f in advise.run_rules(typed.summary(summary)) if f.rule == "variables_remote"]
    assert found.evidence["modeled_s"] == {"host_link": 2048 / (7.88e9 * 0.8)}
    assert "modeled at PCIe 3.0 x8 (2x-gtx1060-pcie3): 325 ns per step" in found.message


def test_poor_scaling_divides_by_the_accelerators_the_variant_used() -> None:
    base = entry("single", 1.0, speedup=1.0, efficiency=1.0)
    used_one = {**entry("v", 0.8, speedup=1.25, efficiency=0.3), "accelerators_used": 4}
    f = check("poor_scaling", facts(used_one, gpu_audit(1, 1), None, GPU, base))
    assert f.evidence["accelerators"] == 4  # the entry's own count, as its efficiency used


def test_a_variant_that_failed_here_is_never_the_projected_pick() -> None:
    failed = entry("replicated", None, status="failed")
    failed["error"] = "crashed: exit code 1"
    summary = {**summary_of(entry("single", 0.01), failed, topology=TOPOLOGY), "projection": {
        "label": "projected", "hardware": "hw", "preset": {"name": "seed"},
        "ranking": ["replicated", "single"],
        "variants": [{"name": "replicated", "projected_step_s": {"overlapped": 0.4, "serial": 0.5},
                      "bottleneck": "x"},
                     {"name": "single", "projected_step_s": {"overlapped": 0.7, "serial": 0.7},
                      "bottleneck": "x"}]}}
    assert advise.excluded(typed.summary(summary), ()) == {
        "replicated": "it failed in this run (crashed: exit code 1)"}
    rec = advise.advise(typed.summary(summary)).recommendation
    assert (rec.basis, rec.variant, rec.fastest) == ("projected", "single", "replicated")
