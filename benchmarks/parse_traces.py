"""Builds the synthetic XSpace traces the parse benchmarks time (it measures nothing itself).

* the *default* trace (:func:`build_trace`): at least one million events -- GPU kernels and
  copies with their usual stats, host TF ops, step markers, derived lines -- made by
  replicating template lines (few distinct strings);
* the *copy-heavy* trace (:func:`copy_heavy_file`, from
  :func:`tfprof_towers.testing.synth.copy_heavy_trace`): GPU-shaped, a quarter of its events
  ``MemcpyH2D``/``MemcpyD2H`` of varied sizes, so nearly every ``memcpy_details`` text is distinct.
"""

from __future__ import annotations

from pathlib import Path


def build_trace(n_events: int = 1_000_000, gpus: int = 4, line_events: int = 5000) -> tuple[bytes, int]:
    """A realistic synthetic XSpace with at least ``n_events`` events: (bytes, event count)."""
    from tfprof_towers.testing.synth import Ref, TraceBuilder, memcpy_details

    b = TraceBuilder()
    host = b.plane("/host:CPU")
    planes = [b.plane(f"/device:GPU:{g}") for g in range(gpus)]
    templates = []  # (plane builder, line proto) to replicate
    period = line_events * 10_000
    # host: a python thread with step markers, and executor threads with TF ops
    py = host.line("python", line_id=1)
    steps = 20
    for s in range(steps):
        py.event("train", s * period // steps, period // steps - 1000, {"step_num": s, "_r": 1})
    tf_line = host.line("tf_Compute/1", line_id=2)
    for i in range(line_events):
        t = i * 10_000
        if i % 5 == 0:
            tf_line.event("ExecutorState::Process", t, 9_000, {"id": i, "iter_num": 0, "_ct": 2, "_c": i})
        elif i % 5 == 4:
            tf_line.event(
                f"x_{i % 40}/_{i % 7}:_Send",
                t,
                900,
                {
                    "from": Ref(f"x_{i % 40}"),
                    "to": Ref("y"),
                    "key": Ref(
                        f"/job:localhost/replica:0/task:0/device:CPU:0;1;/job:localhost/replica:0/task:0/"
                        f"device:GPU:{i % gpus};edge_{i % 40}_x;0:0"
                    ),
                },
            )
        else:
            tf_line.event(f"layer_{i % 60}/mm:MatMul", t, 3_000)
    templates.append((host, tf_line.proto))
    for g, plane in enumerate(planes):
        compute = plane.line("Stream #13(Compute)", line_id=13)
        copies = plane.line("Stream #14(MemcpyH2D)", line_id=14)
        ops = plane.line("TensorFlow Ops")
        for i in range(line_events):
            t = i * 10_000
            op = f"layer_{i % 60}/mm:MatMul"
            compute.event(
                f"volta_sgemm_128x64_nn_{i % 12}",
                t,
                7_000,
                {
                    "correlation_id": i,
                    "context_id": 1,
                    "kernel_details": Ref(f"regs:64 grid:{i % 12},1,1"),
                    "tf_op": Ref(op),
                    "group_id": i // 250,
                },
            )
            kind = ("MemcpyH2D", "MemcpyD2H", "MemcpyP2P", "Memset")[i % 4]
            dest = (g + 1) % gpus if kind == "MemcpyP2P" else g
            copies.event(
                kind,
                t + 2_000,
                4_000,
                {
                    "correlation_id": i,
                    "context_id": 1,
                    "tf_op": Ref(op),
                    "memcpy_details": memcpy_details(4096 * (1 + i % 16), dest, "pinned", "device"),
                },
            )
            if i % 2 == 0:
                ops.event(op, t, 7_000, {"group_id": i // 250})
        templates += [(plane, compute.proto), (plane, copies.proto), (plane, ops.proto)]
    count = sum(len(line.events) for plane in b.space.planes for line in plane.lines)
    copy_no = 0
    while count < n_events:  # more threads / streams with the same content (the parser cannot tell)
        for plane, line in templates:
            copy_no += 1
            new = plane.proto.lines.add()
            new.CopyFrom(line)
            new.id = 1000 + copy_no
            new.name = f"{line.name} #{copy_no}" if new.id > 0 else line.name
            count += len(line.events)
    return b.to_bytes(), count


def copy_heavy_file(path: Path, n_events: int, seed: int = 0) -> int:
    """Writes a copy-heavy trace of ``n_events`` events to ``path``: its size in bytes."""
    from tfprof_towers.testing.synth import copy_heavy_trace

    data = copy_heavy_trace(n_events, seed=seed).to_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def events_in(path: Path) -> int:
    """The number of events in a trace file."""
    from tfprof_towers.xplane import read_xspace

    return read_xspace(path).n_events
