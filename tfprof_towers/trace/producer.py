"""Which framework and which vendor wrote a trace, read from what the trace itself holds.

A leaf: plain strings in, a :class:`Producer` out (no numpy, no other module of the package).
:func:`detect_producer` weighs what an XSpace shows of its writer:

* **framework** -- TensorFlow: host threads ``tf_Compute``/``tf_data*``/``tf_gpu_private*``, executor
  events (``ExecutorState::Process``, ``EagerKernelExecute``, ``SessionRun``), ``__inference_``
  functions, ``node:OpType`` ops; JAX: ``PjitFunction(...)``, ``jit_<name>`` programs, Python
  ``$jax``/``$jaxlib`` frames, the PJRT client's ``PjRt*``/``PJRT_*`` events.  PJRT serves TensorFlow too,
  so PJRT names count for JAX only when no TensorFlow sign is there.
* **vendor** -- the device planes' ``device_vendor`` stat (``AMD``, ``Nvidia``); TPU planes
  (``/device:TPU:<n>``); host launch calls (``cuLaunchKernel``/``cudaLaunchKernel`` & co., ``hip*``); kernel
  name forms (``.kd`` code objects and ``Cijk_`` Tensile GEMMs on ROCm; ``sm80_``/``volta_``/``cutlass``
  on CUDA); last, a GPU plane with a CUDA compute capability stat and no vendor stat (what TensorFlow's
  CUDA tracer wrote before ``device_vendor`` existed).

Each sign found is one line of ``evidence``; a framework or vendor with no sign is ``"unknown"``.
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
_TF_THREAD = re.compile(r"^(tf_Compute|tf_data|tf_gpu_private|tf_GPU_Event_Manager|tf_inter_op|tf_intra_op)")
_TF_EVENT = re.compile(
    r"^(__inference_|__forward_|__backward_|ExecutorState::Process|EagerKernelExecute|EagerExecute|"
    r"EagerLocalExecute|SessionRun$|FunctionRun$|Iterator::|ExecutorDoneCallback)")
_TF_OP = re.compile(r"^[^:\s#$]+:[A-Z_][A-Za-z0-9_]*$")  # node:OpType
_JAX_EVENT = re.compile(r"^(PjitFunction\(|\$(jax|jaxlib)[./ ]|\$[\w./-]*jax/|jit_[\w.]+:XLA)")
_JAX_PROGRAM = re.compile(r"^jit_\w+")
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
    """``(framework, evidence)`` from host thread names, host event names and device event names."""
    tf: list[str] = []
    if found := _first(_TF_THREAD, threads):
        tf.append(f"TensorFlow host threads: {_shown(found)}")
    if found := _first(_TF_EVENT, host_events):
        tf.append(f"TensorFlow executor/function events: {_shown(found)}")
    if found := _first(_TF_OP, host_events):
        tf.append(f"TensorFlow ops on the host (node:OpType): {_shown(found)}")
    jax: list[str] = []
    if found := _first(_JAX_EVENT, host_events):
        jax.append(f"JAX events on the host: {_shown(found)}")
    if found := _first(_JAX_PROGRAM, [*host_events, *device_events]):
        jax.append(f"jax.jit programs: {_shown(found)}")
    if tf and len(tf) >= len(jax):
        return "tensorflow", tf
    if jax:
        return "jax", jax
    if found := _first(_PJRT_EVENT, host_events):
        return "jax", [f"PJRT client events and no TensorFlow sign: {_shown(found)}"]
    return "unknown", []


def detect_vendor(planes: Sequence[str], plane_stats: Sequence[Mapping[str, object]],
                  host_events: Sequence[str], device_events: Sequence[str]) -> tuple[str, list[str]]:
    """``(vendor, evidence)`` from plane names and stats, host launch calls and kernel names."""
    tpus = [p for p in planes if _TPU_PLANE.match(p)]
    if tpus:
        more = f" and {len(tpus) - 2} more" if len(tpus) > 2 else ""
        return "google-tpu", [f"TPU planes: {_shown(tpus[:2])}{more}"]
    stats = list(plane_stats) + [{}] * (len(planes) - len(plane_stats))
    gpu_stats = [s for p, s in zip(planes, stats) if _GPU_PLANE.match(p)]
    said = {str(s.get("device_vendor", "")).strip() for s in gpu_stats} - {""}
    evidence: dict[str, list[str]] = {"amd": [], "nvidia": []}
    for v in said:
        key = "amd" if v.lower().startswith("amd") else "nvidia" if v.lower().startswith("nvidia") else ""
        if key:
            evidence[key].append(f"GPU planes' device_vendor stat: `{v}`")
    if found := _first(_HIP_API, host_events):
        evidence["amd"].append(f"HIP launch/API calls on the host: {_shown(found)}")
    if found := _first(_CUDA_API, host_events):
        evidence["nvidia"].append(f"CUDA launch/API calls on the host: {_shown(found)}")
    if found := _first(_AMD_KERNEL, device_events):
        evidence["amd"].append(f"ROCm kernel names: {_shown(found)}")
    if found := _first(_NVIDIA_KERNEL, device_events):
        evidence["nvidia"].append(f"CUDA kernel names: {_shown(found)}")
    amd, nvidia = evidence["amd"], evidence["nvidia"]
    if amd or nvidia:
        return ("amd", amd) if len(amd) >= len(nvidia) else ("nvidia", nvidia)
    caps = [s for s in gpu_stats if "compute_cap_major" in s and "device_vendor" not in s]
    if caps:
        c = caps[0]
        cap = f"{c.get('compute_cap_major')}.{c.get('compute_cap_minor', 0)}"
        return "nvidia", [f"GPU planes carry a CUDA compute capability ({cap}) and no device_vendor stat: "
                          "the form TensorFlow's CUDA tracer writes"]
    return "unknown", []


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
    sign do not disagree), else ``"unknown"``; evidence of every host, once."""
    if not producers:
        return UNKNOWN

    def agreed(values: list[str]) -> str:
        known = set(values) - {"unknown"}
        return known.pop() if len(known) == 1 else "unknown"

    evidence = tuple(dict.fromkeys(e for p in producers for e in p.evidence))
    return Producer(agreed([p.framework for p in producers]), agreed([p.vendor for p in producers]), evidence)
