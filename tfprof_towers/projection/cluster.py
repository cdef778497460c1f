"""What-if projection of the cluster variants on N hosts of a multi-host hardware profile.

``project --workers N --hardware NAME [--ps M]`` ranks ``multi_worker`` against
``parameter_server`` for the seed workload at a preset, on N hosts of a profile with a
``[network]`` section (each host's network card).  Unlike the single-host projection
(:mod:`.model`, which places a built TensorFlow graph), this is arithmetic on the seed
workload's sizes -- nothing is built, TensorFlow is not imported -- and every term is
named in :data:`ASSUMPTIONS` and in each variant's ``terms``.

The result has the shape of :func:`.api.project`'s document (variants, ranking,
recommendation), so ``profile --workers N --project-on NAME`` shows it in the report.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from tfprof_towers.projection.hardware import Hardware, HardwareError, Link, load_hardware
from tfprof_towers.projection.model import Rates, ring_seconds
from tfprof_towers.variants.config import ClusterOptions, Preset

if TYPE_CHECKING:
    from tfprof_towers.rundir.paths import RunDir

SCHEMA = 1
ADAM_PASSES = 10  # reads and writes of parameter-sized arrays by one Adam update (p, g, m, v)
BLOCK_PASSES = 7  # element-wise passes over a block's activations, forward and backward
ASSUMPTIONS = (
    "projected, not measured: arithmetic on the seed workload's sizes; no graph is built",
    "the global batch is the preset's, split evenly over every accelerator of every host",
    "replica compute = matmul FLOPs / (matmul rate x efficiency) + element-wise bytes / memory bandwidth "
    "+ per-op overhead",
    "multi_worker: one ring all-reduce of the gradients over all accelerators (NCCL's ring): 2(R-1)/R x "
    "gradient bytes cross each link, the slowest link (a host's network card) sets the pace",
    "parameter_server: variables on the ps hosts (the profile's host, its network card); each worker host "
    "pulls the variables and pushes its gradients once per step, after an all-reduce among its own "
    "accelerators; each ps card carries workers x bytes / ps each way",
    "overlapped: communication runs while accelerators compute; serial: nothing overlaps",
)


def network_of(hw: Hardware) -> Link:
    if hw.network is None:
        raise HardwareError(f"hardware profile {hw.name} describes one machine (no [network] section); "
                            "project --workers needs a multi-host profile such as 8x-a100-100gbe, or add "
                            "[network] (bandwidth_gbs, efficiency, latency_us, name, source) to your TOML")
    return hw.network


def sizes(preset: Preset) -> dict[str, float]:
    params = preset.blocks * (preset.dim * preset.dim + preset.dim)
    return {"params": float(params), "gradient_bytes": 4.0 * params, "flops": preset.flops_per_step(),
            "activation_bytes": 4.0 * preset.batch * preset.dim * preset.dim,
            "ops": float(24 * preset.blocks + 10)}


def replica_compute_s(preset: Preset, replicas: int, rates: Rates, adam_on_replica: bool) -> float:
    z = sizes(preset)
    elementwise = BLOCK_PASSES * preset.blocks * z["activation_bytes"] / replicas
    if adam_on_replica:
        elementwise += ADAM_PASSES * z["gradient_bytes"]
    return (z["flops"] / replicas / rates.accel_matmul_flops + elementwise / rates.accel_bytes
            + z["ops"] * rates.accel_overhead_s)


def _entry(name: str, compute: float, comm: dict[str, float], bottleneck_text: dict[str, str],
           per_link: list[dict[str, Any]], terms: dict[str, float]) -> dict[str, Any]:
    busy = {"accelerator compute": compute, **comm}
    resource, busy_s = max(sorted(busy.items()), key=lambda kv: kv[1])
    overlapped = max(busy.values())
    serial = compute + sum(terms[k] for k in terms if k.startswith("comm:"))
    return {
        "name": name,
        "projected_step_s": {"overlapped": overlapped, "serial": serial},
        "bottleneck": {"kind": "link" if resource != "accelerator compute" else "accelerator compute",
                       "resource": resource, "busy_s": busy_s,
                       "share": busy_s / overlapped if overlapped else 0.0,
                       "text": bottleneck_text.get(resource, resource)},
        "per_link": per_link, "terms": terms,
    }


def multi_worker(preset: Preset, hw: Hardware, hosts: int, rates: Rates) -> dict[str, Any]:
    nic = network_of(hw)
    g = hw.accelerator.count
    r = hosts * g
    s = sizes(preset)["gradient_bytes"]
    link = nic if hosts > 1 else hw.peer.link
    compute = replica_compute_s(preset, r, rates, adam_on_replica=True)
    allreduce = ring_seconds(s, r, link)
    each = 2 * (r - 1) / r * s if r > 1 else 0.0
    per_link = [{"src": f"host {k}", "dst": f"host {(k + 1) % hosts}", "bytes_per_step": round(each),
                 "seconds": allreduce, "route": f"{nic.name} (ring all-reduce)"} for k in range(hosts)] \
        if hosts > 1 else []
    text = {"ring all-reduce": (f"ring all-reduce over {r} accelerators: {link.name}" + (
        f", {each / 1e6:.1f} MB per step through each host's card" if hosts > 1 else ""))}
    return _entry("multi_worker", compute, {"ring all-reduce": allreduce}, text, per_link,
                  {"compute": compute, "comm:ring all-reduce": allreduce})


def parameter_server(preset: Preset, hw: Hardware, hosts: int, ps: int, rates: Rates) -> dict[str, Any]:
    nic = network_of(hw)
    g = hw.accelerator.count
    s = sizes(preset)["gradient_bytes"]
    compute = replica_compute_s(preset, hosts * g, rates, adam_on_replica=False)
    local = ring_seconds(s, g, hw.peer.link) + hw.host_link.latency_us * 1e-6 + s / hw.host_link.bytes_per_s
    lat = 2 * nic.latency_us * 1e-6
    ps_card = lat + hosts * s / ps / nic.bytes_per_s  # each way; in and out run at once
    worker_card = lat + s / nic.bytes_per_s
    pull = push = max(ps_card, worker_card)
    update = hosts * ADAM_PASSES * s / ps / rates.host_bytes
    per_link = [{"src": f"ps {j}", "dst": f"worker host {k}", "bytes_per_step": round(s / ps),
                 "seconds": pull / hosts if ps_card > worker_card else pull, "route": nic.name}
                for j in range(ps) for k in range(hosts)]
    per_link += [{"src": f"worker host {k}", "dst": f"ps {j}", "bytes_per_step": round(s / ps),
                  "seconds": push / hosts if ps_card > worker_card else push, "route": nic.name}
                 for j in range(ps) for k in range(hosts)]
    card = "ps" if ps_card >= worker_card else "worker"
    text = {
        "network (pull + push)": f"the {card} hosts' network cards ({nic.name}): {hosts} worker host(s) pull "
                                 f"and push {s / 1e6:.1f} MB each per step through {ps} ps",
        "ps update": f"Adam on the ps hosts' CPUs ({hw.host.model}), {hosts} updates per step",
        "local (host link + peer)": f"each worker host's own links ({hw.host_link.name}; "
                                    f"{hw.peer.link.name})",
    }
    comm = {"network (pull + push)": pull + push, "ps update": update, "local (host link + peer)": local}
    terms = {"compute": compute, "comm:pull": pull, "comm:push": push, "comm:ps update": update,
             "comm:local": local}
    return _entry("parameter_server", compute, comm, text, per_link, terms)


def project_cluster_run(run_dir: RunDir, hardware: str, preset: Preset, opts: ClusterOptions,
                        host_build: str | None = None, write: bool = True) -> dict[str, Any]:
    """A cluster run projected on as many hosts of ``hardware`` as it had workers (and its ps, else 1),
    written to RUN_DIR/projection.json (``write`` False: not written): the twin of
    :func:`.api.project_run`."""
    from tfprof_towers.projection.api import PROJECTION_JSON
    from tfprof_towers.rundir.paths import write_json

    hw = load_hardware(hardware)
    doc = project_cluster(hw.with_host_build(host_build) if host_build else hw, preset, *cluster_size(opts))
    if write:
        write_json(run_dir.root / PROJECTION_JSON, doc)
    return doc


def cluster_size(opts: ClusterOptions) -> tuple[int, int]:
    """(worker hosts, ps hosts) of a cluster run: ``--workers``/``--ps``, or its cluster file's
    (parameter_server: its workers; multi_worker: its chief and workers); at least one ps."""
    workers, ps = opts.workers, opts.ps
    if opts.file is not None:
        from tfprof_towers.capture.cluster.spec import Cluster

        spec = Cluster.load(opts.file)
        ps = len(spec.tasks("ps"))
        workers = len(spec.tasks("worker")) if ps else len(spec.tasks("chief", "worker"))
    return workers, max(ps, 1)


def project_cluster(hw: Hardware, preset: Preset, workers: int, ps: int = 1) -> dict[str, Any]:
    """Both cluster variants on ``workers`` hosts (and ``ps`` ps hosts) of ``hw``: projection.json's shape."""
    from tfprof_towers.projection.api import rank, recommend

    network_of(hw)
    if workers < 1 or ps < 1:
        raise HardwareError("project --workers needs at least one worker host and one ps host")
    rates = Rates.of(hw)
    entries = [multi_worker(preset, hw, workers, rates), parameter_server(preset, hw, workers, ps, rates)]
    ranking = rank(entries)
    for e in entries:
        e["rank"] = ranking.index(e["name"]) + 1
    label = f"{workers} x {hw.name} (+{ps} ps host{'s' if ps > 1 else ''} for parameter_server)"
    return {
        "schema": SCHEMA, "label": "projected", "hardware": label, "profile": hw.summary(),
        "preset": asdict(preset), "assumptions": list(ASSUMPTIONS),
        "rates": {k: v for k, v in asdict(rates).items() if k != "calibrated"} | {"calibrated": []},
        "variants": entries, "ranking": ranking,
        "recommendation": recommend(entries, ranking, label),
        "calibration": None, "tensorflow": None,
        "cluster": {"workers": workers, "ps": ps, "accelerators_per_host": hw.accelerator.count,
                    "network": hw.summary()["network"]},
    }
