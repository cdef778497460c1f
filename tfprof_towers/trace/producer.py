"""Which framework and which vendor wrote a trace, read from what the trace itself holds.

A leaf: plain strings in, a :class:`Producer` out (no numpy, no other module of the package).
:func:`detect_producer` weighs what an XSpace shows of its writer by what only one writer puts there,
never by a count of signs:

* **framework** -- strong signs, each written by one framework only.  TensorFlow: its executor and
  eager runtime (``ExecutorState::Process``, ``EagerKernelExecute``, ``SessionRun``, ...),
  ``__inference_`` functions, ``node:OpType`` ops on the host, its session threads (``tf_Compute``,
  ``tf_gpu_private``, ...).  JAX: ``PjitFunction(...)``, ``jit_<name>`` programs, Python
  ``$jax``/``$jaxlib`` frames.  Weak: the PJRT client's ``PjRt*``/``PJRT_*`` events (TensorFlow runs on
  PJRT too): JAX, with low confidence, only when nothing else tells.  Shared, never deciding: tf.data
  (``tf_data*`` threads, ``Iterator::`` events, iterator ops), the input library both frameworks use;
  :func:`~.load.producer_of` leaves the events of tf.data's threads out (a map function's ops).
  Strong signs of both frameworks: ``"unknown"``, and the advice is worded for neither.
* **vendor** -- in order of weight: the GPU planes' ``device_vendor`` stat (``AMD``, ``Nvidia``) or TPU
  planes (``/device:TPU:<n>``); a GPU plane with a CUDA compute capability stat and no vendor stat (what
  TensorFlow's CUDA tracer wrote before ``device_vendor`` existed); host launch calls
  (``cuLaunchKernel``/``cudaLaunchKernel`` & co., ``hip*``); last, kernel name forms (``.kd`` code objects
  and ``Cijk_`` Tensile GEMMs on ROCm; ``sm80_``/``volta_``/``cutlass`` on CUDA), which any library can
  mimic.  The heaviest kind of sign present decides; a lighter sign that disagrees is named as not
  counted; two vendors at the same weight: ``"unknown"``.

Each sign found is one line of ``evidence``, and one line states each decision's confidence
(``framework confidence: high|low|none|conflicting -- why``, the same for the vendor).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FRAMEWORKS = ("tensorflow", "jax", "unknown")
VENDORS = ("nvidia", "amd", "google-tpu", "unknown")


@dataclass(frozen=True)
class Producer:
    """The framework and the vendor that wrote a trace, and the signs that tell."""

    framework: str  # "tensorflow" | "jax" | "unknown"
    vendor: str  # "nvidia" | "amd" | "google-tpu" | "unknown"
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"framework": self.framework, "vendor": self.vendor, "evidence": list(self.evidence)}

    def describe(self) -> str:
        """One line: ``JAX on AMD GPUs (ROCm)``."""
        framework = FRAMEWORK_NAMES.get(self.framework, self.framework)
        return f"{framework} on {VENDOR_NAMES.get(self.vendor, self.vendor)}"


#: What the report and the terminal call each framework and vendor.
FRAMEWORK_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "unknown": "an unknown framework"}
VENDOR_NAMES = {"nvidia": "NVIDIA GPUs (CUDA)", "amd": "AMD GPUs (ROCm)", "google-tpu": "Google TPUs",
                "unknown": "an unknown vendor's devices"}

UNKNOWN = Producer("unknown", "unknown", ())

_TPU_PLANE = re.compile(r"^/device:TPU:\d+")
_GPU_PLANE = re.compile(r"^/device:GPU:\d+")
_TF_THREAD = re.compile(r"^(tf_Compute|tf_gpu_private|tf_GPU_Event_Manager|tf_inter_op|tf_intra_op)")
_TF_EVENT = re.compile(
    r"^(__inference_|__forward_|__backward_|ExecutorState::Process|EagerKernelExecute|EagerExecute|"
    r"EagerLocalExecute|SessionRun$|FunctionRun$|ExecutorDoneCallback)")
_TF_OP = re.compile(r"^[^:\s#$]+:[A-Z_][A-Za-z0-9_]*$")  # node:OpType
#: tf.data, which JAX input pipelines use too: its threads, its iterator events, its ops.
TF_DATA_THREAD = re.compile(r"^tf_data")
_TF_DATA_EVENT = re.compile(
    r"(^Iterator::|^(Anonymous|MultiDevice)?Iterator\w*(Op)?(::|$)|^InstantiatedCapturedFunction::|"
    r":(\w*Iterator\w*|\w*Dataset\w*|Optional(GetValue|HasValue|None|FromValue))$)")
_JAX_EVENT = re.compile(r"^(PjitFunction\(|\$(jax|jaxlib)[./ ]|\$[\w./-]*jax/)")
_JAX_PROGRAM = re.compile(r"^jit_[\w.-]+(\(\d+\))?($|:XLA)")  # a program, not a TF op in a jit_ scope
_PJRT_EVENT = re.compile(r"^(PJRT_|PjRt)")
_CUDA_API = re.compile(r"^(cu(da)?LaunchKernel|cuLaunchKernelEx|cudaLaunchKernelExC|"
                       r"cuLaunchCooperativeKernel|cu(da)?Memcpy|cu(da)?StreamSynchronize|cuCtxSynchronize|cudaGraphLaunch|cuGraphLaunch)")
_HIP_API = re.compile(r"^hip[A-Z]\w*$")
_AMD_KERNEL = re.compile(r"(\.kd$|^Cijk_|^__amd_rocclr_|ck_tile::|gfx\d{3})")
_NVIDIA_KERNEL = re.compile(r"(^(sm\d\d|volta|turing|ampere|hopper|maxwell|pascal)_|cutlass|^nvjet_|cudnn::)")


def _first(pattern: re.Pattern[str], names: Iterable[str], n: int = 2) -> list[str]:
    found = []
    for name in names:
        if pattern.search(name):
            found.append(name)
            if len(found) >= n:
                break
    return found


def _shown(names: Sequence[str]) -> str:
    return ", ".join(f"`{_clip(x)}`" for x in names)


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def detect_framework(threads: Sequence[str], host_events: Sequence[str],
                     device_events: Sequence[str] = ()) -> tuple[str, list[str]]:
    """``(framework, evidence)`` from host thread names, host event names and device event names.

    Decided by the strong signs only one framework writes (module docstring); the last line of the
    evidence states the confidence.
    """
    own = [e for e in host_events if not _TF_DATA_EVENT.search(e)]
    tf: list[str] = []
    if found := _first(_TF_THREAD, threads):
        tf.append(f"TensorFlow host threads: {_shown(found)}")
    if found := _first(_TF_EVENT, own):
        tf.append(f"TensorFlow executor/function events: {_shown(found)}")
    if found := _first(_TF_OP, own):
        tf.append(f"TensorFlow ops on the host (node:OpType): {_shown(found)}")
    jax: list[str] = []
    if found := _first(_JAX_EVENT, own):
        jax.append(f"JAX events on the host: {_shown(found)}")
    if found := _first(_JAX_PROGRAM, [*own, *device_events]):
        jax.append(f"jax.jit programs: {_shown(found)}")
    shared: list[str] = []
    if found := _first(TF_DATA_THREAD, threads) or _first(_TF_DATA_EVENT, host_events):
        shared.append(f"tf.data input pipeline (used by TensorFlow and JAX alike, not counted): "
                      f"{_shown(found)}")
    if tf and jax:
        return "unknown", [*tf, *jax, *shared, "framework confidence: conflicting -- signs only TensorFlow "
                           "writes and signs only JAX writes; the advice is worded for neither"]
    if tf:
        return "tensorflow", [*tf, *shared, "framework confidence: high -- signs only TensorFlow writes"]
    if jax:
        return "jax", [*jax, *shared, "framework confidence: high -- signs only JAX writes"]
    if found := _first(_PJRT_EVENT, own):
        return "jax", [f"PJRT client events and no TensorFlow sign: {_shown(found)}", *shared,
                       "framework confidence: low -- PJRT serves JAX and TensorFlow; no sign only one writes"]
    if shared:
        return "unknown", [*shared, "framework confidence: none -- only signs both frameworks write"]
    return "unknown", []


def detect_vendor(planes: Sequence[str], plane_stats: Sequence[Mapping[str, object]],
                  host_events: Sequence[str], device_events: Sequence[str]) -> tuple[str, list[str]]:
    """``(vendor, evidence)`` from plane names and stats, host launch calls and kernel names.

    The heaviest kind of sign present decides (module docstring); lighter signs that disagree are named
    as not counted, and the last line of the evidence states the confidence.
    """
    tpus = [p for p in planes if _TPU_PLANE.match(p)]
    if tpus:
        more = f" and {len(tpus) - 2} more" if len(tpus) > 2 else ""
        return "google-tpu", [f"TPU planes: {_shown(tpus[:2])}{more}",
                              "vendor confidence: high -- the trace's own TPU planes"]
    stats = list(plane_stats) + [{}] * (len(planes) - len(plane_stats))
    gpu_stats = [s for p, s in zip(planes, stats) if _GPU_PLANE.match(p)]
    tiers = [_plane_signs(gpu_stats), {"amd": [], "nvidia": []}, {"amd": [], "nvidia": []}]
    if found := _first(_HIP_API, host_events):
        tiers[1]["amd"].append(f"HIP launch/API calls on the host: {_shown(found)}")
    if found := _first(_CUDA_API, host_events):
        tiers[1]["nvidia"].append(f"CUDA launch/API calls on the host: {_shown(found)}")
    if found := _first(_AMD_KERNEL, device_events):
        tiers[2]["amd"].append(f"ROCm kernel names: {_shown(found)}")
    if found := _first(_NVIDIA_KERNEL, device_events):
        tiers[2]["nvidia"].append(f"CUDA kernel names: {_shown(found)}")
    weight = ("the GPU planes' own stats", "the host's launch calls", "kernel names only, which any library "
              "can mimic")
    for level, signs in enumerate(tiers):
        said = [v for v in ("amd", "nvidia") if signs[v]]
        if not said:
            continue
        if len(said) > 1:
            return "unknown", [*signs["amd"], *signs["nvidia"], f"vendor confidence: conflicting -- "
                               f"{weight[level]} name both AMD and NVIDIA; the advice is worded for neither"]
        vendor = said[0]
        other = "nvidia" if vendor == "amd" else "amd"
        below = [f"not counted, outweighed by {weight[level]}: {line}" for t in tiers[level + 1:]
                 for line in t[other]]
        agree = [line for t in tiers[level + 1:] for line in t[vendor]]
        confidence = "high" if level < 2 else "low"
        return vendor, [*signs[vendor], *agree, *below, f"vendor confidence: {confidence} -- {weight[level]}"]
    return "unknown", []


def _plane_signs(gpu_stats: Sequence[Mapping[str, object]]) -> dict[str, list[str]]:
    """The vendor signs of the GPU planes' stats: ``device_vendor``, else a CUDA compute capability."""
    signs: dict[str, list[str]] = {"amd": [], "nvidia": []}
    said = sorted({str(s.get("device_vendor", "")).strip() for s in gpu_stats} - {""})
    for v in said:
        key = "amd" if v.lower().startswith("amd") else "nvidia" if v.lower().startswith("nvidia") else ""
        if key:
            signs[key].append(f"GPU planes' device_vendor stat: `{v}`")
    caps = [s for s in gpu_stats if "compute_cap_major" in s and "device_vendor" not in s]
    if caps and not said:
        c = caps[0]
        cap = f"{c.get('compute_cap_major')}.{c.get('compute_cap_minor', 0)}"
        n = f"{len(caps)} GPU planes carry" if len(caps) > 1 else "GPU planes carry"
        signs["nvidia"].append(f"{n} a CUDA compute capability ({cap}) and no device_vendor stat: "
                               "the form TensorFlow's CUDA tracer writes")
    return signs


def detect_producer(planes: Sequence[str], plane_stats: Sequence[Mapping[str, object]] = (),
                    threads: Sequence[str] = (), host_events: Sequence[str] = (),
                    device_events: Sequence[str] = ()) -> Producer:
    """The :class:`Producer` of a trace from its plane names and stats, host thread names, and the distinct
    event names of its host and device planes (module docstring)."""
    framework, fw_evidence = detect_framework(threads, host_events, device_events)
    vendor, v_evidence = detect_vendor(planes, plane_stats, host_events, device_events)
    return Producer(framework, vendor, tuple(fw_evidence + v_evidence))


def combine(producers: Sequence[Producer]) -> Producer:
    """One producer for the hosts of one trace: a framework or vendor the hosts agree on (hosts with no
    sign do not disagree), else ``"unknown"``; evidence of every host, once, and one confidence line per
    decision (the surest host's that agrees; ``conflicting`` where the hosts disagree)."""
    if not producers:
        return UNKNOWN
    framework = _agreed([p.framework for p in producers])
    vendor = _agreed([p.vendor for p in producers])
    signs = tuple(dict.fromkeys(e for p in producers for e in p.evidence if not _is_confidence(e)))
    sure = tuple(line for aspect, value, of in (("framework", framework, lambda p: p.framework),
                                                 ("vendor", vendor, lambda p: p.vendor))
                 if (line := _confidence(aspect, value, [(of(p), p) for p in producers])))
    return Producer(framework, vendor, signs + sure)


def _agreed(values: list[str]) -> str:
    known = set(values) - {"unknown"}
    return known.pop() if len(known) == 1 else "unknown"


_RANK = {"high": 0, "conflicting": 1, "low": 2, "none": 3}


def _is_confidence(line: str) -> bool:
    return line.startswith(("framework confidence: ", "vendor confidence: "))


def _confidence(aspect: str, value: str, told: list[tuple[str, Producer]]) -> str | None:
    """The confidence line of ``aspect`` for the hosts' ``value`` (None: no host stated one)."""
    known = sorted({v for v, _ in told} - {"unknown"})
    if len(known) > 1:
        return (f"{aspect} confidence: conflicting -- the hosts disagree ({', '.join(known)}); the advice is "
                "worded for neither")
    prefix = f"{aspect} confidence: "
    lines = [e for v, p in told if v == value for e in p.evidence if e.startswith(prefix)]
    return min(lines, key=lambda e: _RANK.get(e[len(prefix):].split(" ", 1)[0], 9), default=None)
