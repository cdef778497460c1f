"""Who wrote a trace (trace/producer.py), and every trace rule's suggestion in that framework's and vendor's
words (advice/trace_rules/suggestions.py): one test per rule, framework and vendor, on the rule's own
firing trace with the producer set; the three real fixtures' producers."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from conftest import SHARED_FIXTURES
from test_trace_rules import GpuTrace, by_rule, host_bound_trace, launch_trace, status, two_workers
from trace_kit import TraceBuilder

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.advice.trace_rules.suggestions import TABLES, VENDOR_WORDS, copies_suggestion, suggestion
from tfprof_towers.trace.analysis import Analysis, analyze_xplane
from tfprof_towers.trace.producer import FRAMEWORKS, VENDORS, Producer, combine, detect_producer

# ------------------------------------------------------------------ detection


def test_tensorflow_on_nvidia_from_threads_executor_and_launch_calls() -> None:
    p = detect_producer(["/host:CPU", "/device:GPU:0"], [{}, {}], ["tf_Compute/1", "python"],
                        ["ExecutorState::Process", "dense/MatMul:MatMul", "cudaLaunchKernel"],
                        ["volta_sgemm_128x64_nn"])
    assert (p.framework, p.vendor) == ("tensorflow", "nvidia")
    assert p.evidence == ("TensorFlow host threads: `tf_Compute/1`",
                          "TensorFlow executor/function events: `ExecutorState::Process`",
                          "TensorFlow ops on the host (node:OpType): `dense/MatMul:MatMul`",
                          "framework confidence: high -- signs only TensorFlow writes",
                          "CUDA launch/API calls on the host: `cudaLaunchKernel`",
                          "CUDA kernel names: `volta_sgemm_128x64_nn`",
                          "vendor confidence: high -- the host's launch calls")


def test_jax_on_amd_from_pjit_hip_calls_and_kd_kernels() -> None:
    p = detect_producer(["/host:CPU", "/device:GPU:0"], [{}, {}], ["python3"],
                        ["PjitFunction(step)", "hipModuleLaunchKernel"], ["loop_fusion.kd"])
    assert (p.framework, p.vendor) == ("jax", "amd")
    assert p.evidence == ("JAX events on the host: `PjitFunction(step)`",
                          "framework confidence: high -- signs only JAX writes",
                          "HIP launch/API calls on the host: `hipModuleLaunchKernel`",
                          "ROCm kernel names: `loop_fusion.kd`",
                          "vendor confidence: high -- the host's launch calls")


def test_tensorflow_on_amd_and_the_vendor_stat_wins_over_names() -> None:
    p = detect_producer(["/device:GPU:0"], [{"device_vendor": "AMD"}], ["tf_Compute/3"],
                        ["__inference_train_step_123"], ["sgemm_kernel"])
    assert (p.framework, p.vendor) == ("tensorflow", "amd")
    assert "GPU planes' device_vendor stat: `AMD`" in p.evidence
    nv = detect_producer(["/device:GPU:0"], [{"device_vendor": "Nvidia", "compute_cap_major": 9}])
    assert nv.vendor == "nvidia" and nv.framework == "unknown"


def test_tpu_planes_and_pjrt_alone_is_jax() -> None:
    p = detect_producer(["/host:CPU", "/device:TPU:0", "/device:TPU:1", "/device:TPU:2"], host_events=[
        "PjRtCApiLoadedExecutable::Execute"])
    assert (p.framework, p.vendor) == ("jax", "google-tpu")
    assert p.evidence == ("PJRT client events and no TensorFlow sign: `PjRtCApiLoadedExecutable::Execute`",
                          "framework confidence: low -- PJRT serves JAX and TensorFlow; no sign only one "
                          "writes",
                          "TPU planes: `/device:TPU:0`, `/device:TPU:1` and 1 more",
                          "vendor confidence: high -- the trace's own TPU planes")
    # PJRT beside TensorFlow's signs: TensorFlow
    tf = detect_producer(["/device:TPU:0"], threads=["tf_Compute/1"], host_events=["PjRtClient::Compile"])
    assert tf.framework == "tensorflow"


def test_compute_capability_without_vendor_is_cuda_and_nothing_is_unknown() -> None:
    p = detect_producer(["/device:GPU:0"], [{"compute_cap_major": 7, "compute_cap_minor": 0}])
    assert p.vendor == "nvidia" and "(7.0)" in p.evidence[0]
    amd = detect_producer(["/device:GPU:0"], [{"compute_cap_major": 9, "device_vendor": "AMD"}])
    assert amd.vendor == "amd"
    none = detect_producer(["/host:CPU", "/device:GPU:0"], [{}, {}], ["main"], ["foo"], ["kernel"])
    assert none == Producer("unknown", "unknown", ())


def test_hosts_combine_agreeing_signs_and_unknown_where_they_disagree() -> None:
    a = Producer("jax", "unknown", ("a",))
    b = Producer("jax", "amd", ("b", "a"))
    assert combine([a, b]) == Producer("jax", "amd", ("a", "b"))
    mixed = combine([Producer("jax", "amd"), Producer("tensorflow", "nvidia")])
    assert mixed == Producer("unknown", "unknown", (
        "framework confidence: conflicting -- the hosts disagree (jax, tensorflow); the advice is worded for "
        "neither",
        "vendor confidence: conflicting -- the hosts disagree (amd, nvidia); the advice is worded for "
        "neither"))


FIXTURES = {
    "gpu_multi_worker_8xV100": ("tensorflow", "nvidia"),
    "jax_rocm_mi300x_gemm": ("jax", "amd"),
    "jax_rocm_gfx950_fused_attn": ("jax", "amd"),
}


@pytest.mark.parametrize("name", FIXTURES)
def test_the_real_fixtures_producers(name: str) -> None:
    path = SHARED_FIXTURES / f"{name}.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} is absent (a fresh clone without ../shared/fixtures)")
    doc = analyze_xplane(path).to_doc()
    assert (doc["producer"]["framework"], doc["producer"]["vendor"]) == FIXTURES[name]
    assert doc["producer"]["evidence"] and isinstance(doc["source"], str) and doc["source"].endswith(".pb")


# ------------------------------------------------------------------ the words of each producer

PRODUCERS = [Producer(fw, v) for fw, v in itertools.product(FRAMEWORKS, VENDORS)]

#: Words a suggestion must never hold for a framework or a vendor.
FORBIDDEN_FRAMEWORK = {"tensorflow": ("jax.", "jnp."), "jax": ("tf.", "TF_", "tf_"),
                       "unknown": ("tf.", "TF_", "jax.", "jnp.")}
FORBIDDEN_VENDOR = {
    "nvidia": ("HIP_", "ROCR_", "rocm-smi", "TPU_", "tpu-info"),
    "amd": ("CUDA", "nvidia-smi", "tensor core", "TPU_"),
    "google-tpu": ("CUDA", "HIP_", "ROCR_", "nvidia-smi", "rocm-smi", "tensor core", "mixed_float16", "GPUs"),
    "unknown": ("CUDA_", "HIP_", "ROCR_", "nvidia-smi", "rocm-smi", "TPU_"),
}


def fits(text: str, p: Producer) -> list[str]:
    """The forbidden words ``text`` holds for ``p`` (empty: it fits)."""
    return [w for w in (*FORBIDDEN_FRAMEWORK[p.framework], *FORBIDDEN_VENDOR[p.vendor]) if w in text]


def test_every_table_has_every_key_and_every_vendor_every_word() -> None:
    keys = set(TABLES["tensorflow"])
    assert all(set(t) == keys for t in TABLES.values())
    words = set(VENDOR_WORDS["nvidia"])
    assert all(set(w) == words for w in VENDOR_WORDS.values()) and set(VENDOR_WORDS) == set(VENDORS)


@pytest.mark.parametrize("p", PRODUCERS, ids=lambda p: f"{p.framework}-{p.vendor}")
def test_every_suggestion_fits_its_framework_and_vendor(p: Producer) -> None:
    for key in TABLES["tensorflow"]:
        text = suggestion(key, p, ops="x/y (Op)", slow="/device:GPU:0")
        assert text.startswith("Suggestion: ") and "{" not in text, key
        assert not fits(text, p), (key, fits(text, p))
    for slow in (False, True):
        assert not fits(copies_suggestion(p, slow, 1.0), p)


# Each rule's firing trace (from test_trace_rules), analysed once; the producer is then set on the trace.


@cache
def firing(rule: str) -> Analysis:
    if rule == "idle_accelerators":
        t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0)
        t.gpu(1)
    elif rule == "host_bound":
        t = host_bound_trace("framework")
    elif rule == "launch_bound":
        t = launch_trace(10, step_us=900)
    elif rule == "exposed_copies":
        t = GpuTrace().kernel(0, "volta_sgemm", 0, 200, launch_us=0)
        t.copy(0, "MemcpyH2D", 100, 400, 4_000_000)
    elif rule == "accelerator_imbalance":
        t = GpuTrace().kernel(0, "volta_sgemm", 0, 300, launch_us=0).kernel(1, "volta_sgemm", 0, 100,
                                                                             launch_us=0)
    elif rule == "straggler":  # a two-host logdir, read at once and removed
        import shutil
        import tempfile

        from tfprof_towers.trace.analysis import analyze_xplane

        root = Path(tempfile.mkdtemp(prefix="straggler"))
        try:
            a = analyze_xplane(two_workers(root, 3))
            return a
        finally:
            shutil.rmtree(root, ignore_errors=True)
    elif rule == "collective_bound":
        t = GpuTrace().kernel(0, "volta_sgemm", 0, 300, launch_us=0)
        t.kernel(0, "ncclKernel_AllReduce_RING_LL_Sum_float", 200, 400, launch_us=190,
                 stream="Stream #2(Nccl)")
    else:
        t = GpuTrace().kernel(0, "volta_sgemm_128x64_nn", 0, 500, launch_us=0)
    return t.analysis()


RULES = ["idle_accelerators", "host_bound", "launch_bound", "exposed_copies", "accelerator_imbalance",
         "collective_bound", "precision", "straggler"]
#: The table entry each firing trace's finding must carry.
EXPECTED = {"host_bound": "host_bound.launch", "collective_bound": "collective_bound.overlap"}


def as_written_by(a: Analysis, p: Producer) -> Analysis:
    return replace(a, trace=replace(a.trace, producer=p))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("p", PRODUCERS, ids=lambda p: f"{p.framework}-{p.vendor}")
def test_each_rule_speaks_the_producers_language(rule: str, p: Producer) -> None:
    ev = evaluate_trace(as_written_by(firing(rule), p))
    if rule == "precision" and p.vendor == "google-tpu":  # TPUs compute in bfloat16 natively
        assert rule not in by_rule(ev) and "bfloat16 natively" in status(ev, rule)["why_not"]
        return
    f = by_rule(ev)[rule]
    if rule == "straggler":  # its words name no framework's API nor vendor's tool: the same for all
        assert f.suggestion.startswith("Suggestion: find what slows") and not fits(f.suggestion, p)
        return
    key = EXPECTED.get(rule, rule)
    want = (copies_suggestion(p, False, 1.0) if rule == "exposed_copies"
            else suggestion(key, p, slow="/device:GPU:0"))
    assert f.suggestion == want
    assert not fits(f.suggestion, p), fits(f.suggestion, p)


def test_the_words_that_matter_are_there() -> None:
    jax_amd, tf_nv = Producer("jax", "amd"), Producer("tensorflow", "nvidia")
    idle = suggestion("idle_accelerators", jax_amd)
    assert "HIP_VISIBLE_DEVICES" in idle and "ROCR_VISIBLE_DEVICES" in idle and "jax.devices()" in idle
    launch = suggestion("host_bound.launch", jax_amd)
    assert "`jax.jit`" in launch and "XLA_FLAGS" in launch and "HIP_FORCE_DEV_KERNARG" in launch
    assert "larger batch" in launch and "Python" in launch
    assert "tf.function(jit_compile=True)" in suggestion("launch_bound", tf_nv)
    assert "TF_GPU_THREAD_MODE=gpu_private" in suggestion("launch_bound", tf_nv)
    assert "CUDA_VISIBLE_DEVICES" in suggestion("idle_accelerators", tf_nv)
    tpu = suggestion("precision", Producer("tensorflow", "google-tpu"))
    assert "mixed_bfloat16" in tpu and "bfloat16 natively" in tpu
    assert "tensor cores" in suggestion("precision", tf_nv)


# ------------------------------------------------------------------ where the user sees it


def test_analyze_says_who_wrote_it_in_text_json_and_html_escaped(tmp_path, capsys) -> None:
    from conftest import run_cli

    t = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0)
    t.executor.event("__inference_<script>alert(1)</script>", 0, 1000)  # a name from the trace, with markup
    path = t.b.write(tmp_path / "t.xplane.pb")
    assert run_cli("analyze", str(path)) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("producer:"))
    assert line.startswith("producer: framework tensorflow, vendor nvidia (TensorFlow host threads: ")
    assert "TensorFlow executor/function events: `__inference_<script>" in line
    assert run_cli("analyze", str(path), "--json") == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["producer"]["framework"] == "tensorflow" and doc["source"] == str(path)
    out = tmp_path / "page.html"
    assert run_cli("analyze", str(path), "--html", str(out)) == 0
    page = out.read_text()
    assert 'id="producer"' in page
    assert "<strong>TensorFlow</strong> on <strong>NVIDIA GPUs (CUDA)</strong>" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_multi_host_logdir_has_one_producer_from_every_host(tmp_path) -> None:
    """Host 0 shows TensorFlow and CUDA launches, host 1 only CUDA kernel names: together, TensorFlow on
    NVIDIA, with each host's evidence once."""
    a = GpuTrace().kernel(0, "volta_sgemm", 0, 500, launch_us=0)
    b = TraceBuilder("worker-1")
    b.plane("/device:GPU:0").line("Stream #1(Compute)").event("ampere_sgemm_64x64", 0, 100)
    a.b.write_logdir(tmp_path, run="r1", host="worker-0")
    b.write_logdir(tmp_path, run="r1", host="worker-1")
    p = analyze_xplane(tmp_path).trace.producer
    assert (p.framework, p.vendor) == ("tensorflow", "nvidia")
    assert p.evidence == ("TensorFlow host threads: `tf_gpu_private_0/1`, `tf_Compute/2`",
                          "tf.data input pipeline (used by TensorFlow and JAX alike, not counted): "
                          "`tf_data_private/3`",
                          "CUDA launch/API calls on the host: `cudaLaunchKernel`",
                          "CUDA kernel names: `volta_sgemm`",
                          "CUDA kernel names: `ampere_sgemm_64x64`",
                          "framework confidence: high -- signs only TensorFlow writes",
                          "vendor confidence: high -- the host's launch calls")


def test_describe_in_words() -> None:
    assert Producer("jax", "amd").describe() == "JAX on AMD GPUs (ROCm)"
    assert Producer("unknown", "google-tpu").describe() == "an unknown framework on Google TPUs"


# ------------------------------------------------------------------ weighing: what only one writer writes


def test_tf_data_is_shared_and_never_decides() -> None:
    """A JAX job feeding from tf.data: JAX; tf.data alone tells nothing; its ops on the host do not count."""
    threads = ["python3", "tf_data_private_threadpool/7"]
    jax = detect_producer(["/host:CPU", "/device:GPU:0"], [{}, {}], threads,
                          ["PjitFunction(step)", "Iterator::Root::Prefetch", "IteratorGetNextOp::DoCompute",
                           "IteratorGetNext:IteratorGetNext", "ParallelMapDatasetV2:ParallelMapDatasetV2"],
                          ["jit_step(3)"])
    assert jax.framework == "jax"
    assert jax.evidence[:4] == (
        "JAX events on the host: `PjitFunction(step)`", "jax.jit programs: `jit_step(3)`",
        "tf.data input pipeline (used by TensorFlow and JAX alike, not counted): "
        "`tf_data_private_threadpool/7`",
        "framework confidence: high -- signs only JAX writes")
    alone = detect_producer(["/device:GPU:0"], [{}], ["tf_data_private_threadpool/7"], ["Iterator::Root"])
    assert alone.framework == "unknown"
    assert alone.evidence[-1] == "framework confidence: none -- only signs both frameworks write"
    # a TensorFlow op inside a scope named jit_...: not a jax.jit program
    tf = detect_producer(["/device:GPU:0"], [{}], [], ["jit_scope/MatMul:MatMul"], ["jit_scope/MatMul"])
    assert tf.framework == "tensorflow" and not any("jax" in e for e in tf.evidence)


def test_signs_of_both_frameworks_are_a_conflict_worded_for_neither() -> None:
    p = detect_producer(["/device:GPU:0"], [{}], ["tf_Compute/1"],
                        ["PjitFunction(step)", "__inference_f_12"])
    assert p.framework == "unknown"
    assert p.evidence[-1] == ("framework confidence: conflicting -- signs only TensorFlow writes and signs "
                              "only JAX writes; the advice is worded for neither")
    text = suggestion("launch_bound", p)
    assert not fits(text, Producer("unknown", "unknown")) and "tf." not in text and "jax." not in text


def test_vendor_signs_are_weighed_not_counted() -> None:
    """Planes with a CUDA compute capability outweigh a ROCm kernel name, and a HIP call; launch calls
    outweigh kernel names; two vendors at the same weight are a conflict."""
    cc = [{"compute_cap_major": 7, "compute_cap_minor": 0}] * 8
    gpus = [f"/device:GPU:{i}" for i in range(8)]
    many_amd_names = ["Cijk_Ailk_Bljk_SB_MT64x64x8.kd", "loop_fusion.kd", "__amd_rocclr_copyBuffer.kd"]
    p = detect_producer(gpus, cc, [], ["hipLaunchKernel"], many_amd_names)
    assert p.vendor == "nvidia"
    assert p.evidence == (
        "8 GPU planes carry a CUDA compute capability (7.0) and no device_vendor stat: the form TensorFlow's "
        "CUDA tracer writes",
        "not counted, outweighed by the GPU planes' own stats: HIP launch/API calls on the host: "
        "`hipLaunchKernel`",
        "not counted, outweighed by the GPU planes' own stats: ROCm kernel names: "
        "`Cijk_Ailk_Bljk_SB_MT64x64x8.kd`, `loop_fusion.kd`",
        "vendor confidence: high -- the GPU planes' own stats")
    launch = detect_producer(["/device:GPU:0"], [{}], [], ["cudaLaunchKernel"], many_amd_names)
    assert launch.vendor == "nvidia"
    assert launch.evidence[-1] == "vendor confidence: high -- the host's launch calls"
    both = detect_producer(["/device:GPU:0"], [{}], [], [], ["volta_sgemm", "loop_fusion.kd"])
    assert both.vendor == "unknown" and both.evidence[-1].startswith("vendor confidence: conflicting -- ")
    names = detect_producer(["/device:GPU:0"], [{}], [], [], ["loop_fusion.kd"])
    assert names.vendor == "amd"
    assert names.evidence[-1] == "vendor confidence: low -- kernel names only, which any library can mimic"
    stat = detect_producer(["/device:GPU:0"], [{"device_vendor": "AMD", "compute_cap_major": 9}], [],
                           ["cudaLaunchKernel"], ["volta_sgemm"])
    assert stat.vendor == "amd"


def with_event(data: bytes, plane_name: str, line_name: str, event: str) -> bytes:
    """``data`` (an XSpace) with one more line on ``plane_name`` holding one event named ``event``,
    at the start of the plane's first line."""
    from tfprof_towers.xplane.schema import XSpace

    space = XSpace.FromString(data)
    plane = next(p for p in space.planes if p.name == plane_name)
    mid = max(plane.event_metadata, default=0) + 1
    plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, event
    first = next(ln for ln in plane.lines if ln.events)
    line = plane.lines.add(id=max(ln.id for ln in plane.lines) + 1, name=line_name,
                           timestamp_ns=first.timestamp_ns)
    line.events.add(metadata_id=mid, offset_ps=first.events[0].offset_ps, duration_ps=1_000_000)
    return space.SerializeToString()


def fixture_bytes(name: str) -> bytes:
    path = SHARED_FIXTURES / f"{name}.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path} is absent (a fresh clone without ../shared/fixtures)")
    return path.read_bytes()


def test_a_real_jax_trace_with_a_tf_data_thread_stays_jax(tmp_path: Path) -> None:
    data = with_event(fixture_bytes("jax_rocm_mi300x_gemm"), "/host:CPU", "tf_data_private_threadpool/7",
                      "Iterator::Root::Prefetch")
    a = analyze_xplane((tmp_path / "t.xplane.pb").write_bytes(data) and tmp_path / "t.xplane.pb")
    p = a.trace.producer
    assert (p.framework, p.vendor) == ("jax", "amd")
    assert "framework confidence: high -- signs only JAX writes" in p.evidence
    findings = evaluate_trace(a).findings
    assert {f.rule for f in findings} >= {"idle_accelerators", "host_bound"}
    for f in findings:
        assert not fits(f.suggestion, p), (f.rule, fits(f.suggestion, p))


def test_the_8xv100_trace_with_one_rocm_kernel_name_stays_nvidia(tmp_path: Path) -> None:
    data = with_event(fixture_bytes("gpu_multi_worker_8xV100"), "/device:GPU:4", "Stream #99(Compute)",
                      "Cijk_Ailk_Bljk_SB_MT64x64x8_SN_1LDSB0.kd")
    a = analyze_xplane((tmp_path / "t.xplane.pb").write_bytes(data) and tmp_path / "t.xplane.pb")
    p = a.trace.producer
    assert (p.framework, p.vendor) == ("tensorflow", "nvidia")
    assert any(e.startswith("not counted, outweighed by the GPU planes' own stats: ROCm kernel names: `Cijk_")
               for e in p.evidence)
    idle = by_rule(evaluate_trace(a))["idle_accelerators"]
    assert "CUDA_VISIBLE_DEVICES" in idle.suggestion and "HIP_VISIBLE_DEVICES" not in idle.suggestion


def test_a_host_whose_own_signs_conflict_makes_the_pod_neutral() -> None:
    torn = detect_producer(["/device:GPU:0"], [{}], ["tf_Compute/1"], ["PjitFunction(step)"])
    jax = detect_producer(["/device:GPU:0"], [{}], [], ["PjitFunction(step)"])
    pod = combine([jax, torn])
    assert pod.framework == "unknown"
    assert pod.evidence[-1].startswith("framework confidence: conflicting -- signs only TensorFlow writes")
    assert combine([jax, jax]).framework == "jax"
