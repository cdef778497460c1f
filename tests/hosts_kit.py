"""Analysis documents of a multi-host profile built in code, for the Hosts section's tests
(:mod:`tfprof_towers.render.hosts`): known step times per host, and per device a known wall breakdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def hosts_doc(step_times: Sequence[Sequence[float]], walls: Mapping[int, Mapping[str, float]] | None = None,
              hosts: Sequence[str] | None = None) -> dict[str, Any]:
    """Host ``i`` is ``/job:worker/task:i`` (file name ``hosts[i]``, else ``w{i}``) with steps of
    ``step_times[i]`` seconds back to back and two GPUs, each with wall totals (over all its steps)
    ``walls[i]`` (default: all compute), and a host CPU busy 9 s (never counted as an accelerator)."""
    tasks, devices = [], {}
    for i, times in enumerate(step_times):
        task = f"/job:worker/task:{i}"
        steps, t = [], 0.0
        for n, s in enumerate(times):
            steps.append({"step": n, "start_s": t, "end_s": t + s, "collective_s": 0.0})
            t += s
        tasks.append({"task": task, "host": hosts[i] if hosts else f"w{i}", "steps": steps})
        wall = dict((walls or {}).get(i) or {"compute": t})
        for gpu in range(2):
            devices[f"{task}/device:GPU:{gpu}"] = {"window_s": t, "total": {}, "wall": wall}
        devices[f"{task}/host:CPU"] = {"window_s": t, "total": {}, "wall": {"host_compute": 9.0, "idle": 0.0}}
    return {"source": "pod", "steps": max(len(s) for s in step_times), "window": "markers", "per_step": False,
            "devices": devices, "links": [], "tasks": tasks, "hosts": len(step_times), "failed_hosts": [],
            "notes": [], "findings": [], "rules": [], "memory": {}}
