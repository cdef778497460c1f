"""Measures one variant's step times with and without the profiler, in the one process it runs in.

The overhead child of :mod:`.bench_overhead`: it builds the variant's training step as its
family's capture child builds it (a TensorFlow stepper), warms it up, then times blocks of
un-profiled and profiled steps per tracer setting.  Started as
``python -m benchmarks.overhead_child SPEC RESULT`` or forked from the bench's fork server
(:func:`overhead_entry`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.paths import write_json

TF2 = "tf2-strategy"


@dataclass(frozen=True)
class _Stepper:
    """One variant's training step, stepped as its capture child steps it.

    ``call`` runs one step and waits for it (``Session.run`` for a tf1-graph variant; the
    ``tf.function`` with its loss read back for a tf2-strategy one, as
    ``capture.families.tf2_strategy.fetched``); the loop adds the process CPU time of each step.
    """

    tf: Any
    call: Callable[[], None]
    close: Callable[[], None] = lambda: None

    def steps(self, n: int, marker: Any = None) -> tuple[list[float], list[float]]:
        """(wall seconds, process CPU seconds) of each of ``n`` steps."""
        wall, cpu = [], []
        for i in range(n):
            w0, c0 = time.perf_counter(), time.process_time()
            if marker is None:
                self.call()
            else:
                with marker("train", step_num=i, _r=1):
                    self.call()
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        return wall, cpu

    def plain(self, n: int) -> dict[str, Any]:
        wall, cpu = self.steps(n)
        return {"off": wall, "off_cpu": cpu}

    def profiled(self, n: int, options: dict[str, int], logdir: Path) -> dict[str, Any]:
        """n steps under the profiler with step markers; start and stop timed apart."""
        prof = self.tf.profiler.experimental
        t0 = time.perf_counter()
        prof.start(str(logdir), options=prof.ProfilerOptions(**options))
        t1 = time.perf_counter()
        try:
            wall, cpu = self.steps(n, prof.Trace)
        finally:
            t2 = time.perf_counter()
            prof.stop()
            t3 = time.perf_counter()
        size = sum(p.stat().st_size for p in logdir.rglob("*.xplane.pb"))
        shutil.rmtree(logdir, ignore_errors=True)
        return {"on": wall, "on_cpu": cpu, "start_s": t1 - t0, "stop_s": t3 - t2, "trace_bytes": size}


class Skipped(Exception):
    """The machine lacks what the variant needs (NCCL without GPUs): no figure, and why."""


def _open_stepper(spec: Mapping[str, Any]) -> tuple[_Stepper, dict[str, Any]]:
    """The variant's step built as its family's capture child builds it (tf1-graph or tf2-strategy)."""
    from tfprof_towers.variants import registry

    if registry.builtin(spec["variant"]).family == TF2:
        return _open_tf2_stepper(spec)
    from tfprof_towers.capture.devices import plan_devices
    from tfprof_towers.capture.families import tf1_graph
    from tfprof_towers.variants.config import Preset

    tf = tf1_graph.import_tensorflow()
    preset = Preset(**spec["preset"])
    devices = plan_devices(len(tf.config.list_physical_devices("GPU")), spec.get("accelerators"), preset)
    graph, fetches, feed, init = tf1_graph.build_graph(tf, spec["variant"], None, devices)
    sess = tf1_graph.new_session(tf, graph, devices)
    sess.run(init)
    about = {"devices": devices.to_json(), "tensorflow": tf.__version__}
    return _Stepper(tf, lambda: sess.run(fetches, feed), sess.close), about


def tf2_variant(spec: Mapping[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """A built-in TF2 variant set up as ``capture.families.tf2_strategy`` sets it up, its step not yet
    built: ``(tf, devices, child spec, strategy, build_step)``; raises :class:`Skipped` where the
    machine lacks what the variant needs."""
    from tfprof_towers.capture.families import import_tensorflow, tf2_strategy
    from tfprof_towers.capture.tf2.strategies import machine_offers
    from tfprof_towers.rundir.records import ChildSpec
    from tfprof_towers.variants import registry
    from tfprof_towers.variants.config import Preset

    tf = import_tensorflow()
    child = ChildSpec(name=spec["variant"], family=TF2, file=None, preset=Preset(**spec["preset"]),
                      accelerators=spec.get("accelerators"), warmup=0, steps=0, profile_steps=0, logdir="",
                      record="")
    devices = tf2_strategy.plan(tf, child)
    accelerators = tuple(devices.topology().accelerators)
    why = registry.skip_reason(tf2_strategy.needs(child), machine_offers(devices), devices.kind, accelerators)
    if why:
        raise Skipped(why)
    strategy, build_step, _ = tf2_strategy.strategy_and_step(child, devices)
    return tf, devices, child, strategy, build_step


def _open_tf2_stepper(spec: Mapping[str, Any]) -> tuple[_Stepper, dict[str, Any]]:
    from tfprof_towers.capture.families import tf2_strategy

    tf, devices, child, strategy, build_step = tf2_variant(spec)
    step = tf2_strategy.check_step(build_step(strategy, devices), f"built-in variant {child.name}")
    call = tf2_strategy.fetched(step)
    about = {"devices": devices.to_json(), "tensorflow": tf.__version__}
    return _Stepper(tf, call), about


def rotated(names: Sequence[str], r: int) -> list[str]:
    """Round ``r``'s order of the settings: each goes first in turn."""
    k = r % len(names) if names else 0
    return [*names[k:], *names[:k]]


def overhead_child(spec: Mapping[str, Any]) -> dict[str, Any]:
    """In one process: build the variant, warm up, then per round and setting an off and an on block.

    The pair's order flips every round (ABBA), so a slow drift of the machine
    weighs on both sides alike.
    """
    try:
        stepper, about = _open_stepper(spec)
    except Skipped as exc:
        return {"variant": spec["variant"], "skipped": str(exc)}
    stepper.plain(max(spec["warmup"], 2))  # a tf.function's first call traces it
    tmp = Path(spec["tmp"])
    configs: dict[str, dict[str, int]] = spec["configs"]
    # A first start in the process, in case loading the profiler costs once: reported apart.
    first = stepper.profiled(1, next(iter(configs.values())), tmp / "first")
    samples: dict[str, dict[str, list]] = {n: defaultdict(list) for n in configs}
    k = spec["block_steps"]
    for r in range(spec["rounds"]):
        for name in rotated(list(configs), r):
            for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
                block = (stepper.plain(k) if side == "off"
                         else stepper.profiled(k, configs[name], tmp / f"{name}-{r}"))
                for key, value in block.items():
                    samples[name][key].append(value)
    stepper.close()
    return {
        "variant": spec["variant"], **about,
        "first_start_s": first["start_s"], "first_stop_s": first["stop_s"], "samples": samples,
    }


def overhead_entry(args: Sequence[str]) -> int:
    """The overhead child as a call (forked from the fork server): ``[SPEC, RESULT]``."""
    write_json(Path(args[1]), overhead_child(json.loads(Path(args[0]).read_text())))
    return 0


def child_main(argv: Sequence[str] | None, entry: Callable[[Sequence[str]], int], usage: str) -> int:
    """A bench child's command line, ``SPEC RESULT``: ``entry`` run as a process, which then exits without
    TensorFlow's teardown; ``usage`` printed for anything else."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0].startswith("-"):
        print(f"usage: {usage}", file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    entry(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip TensorFlow's teardown


def main(argv: Sequence[str] | None = None) -> int:
    """``SPEC RESULT``: the overhead child as a process; exits without TensorFlow's teardown."""
    return child_main(argv, overhead_entry, "python -m benchmarks.overhead_child SPEC.json RESULT.json "
                      "(the overhead child of benchmarks.bench_overhead)")


if __name__ == "__main__":
    sys.exit(main())
