"""A cluster of task processes: its spec (``cluster.json``), each task's ``TF_CONFIG``, free ports.

The same spec serves the loopback run and a real cluster.  A spec is ``{"worker":
["host:port", ...], "ps": [...], "chief": [...]}``; a whole ``TF_CONFIG`` (its ``cluster``
key) is accepted too.

TensorFlow's gRPC server binds ``0.0.0.0:<port>`` whatever host the spec names, so a
loopback port must be free on every interface (:func:`free_ports`), and a loopback
cluster's tasks listen on every interface, unauthenticated, while the run lasts.

Pure Python; never imports TensorFlow.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.vocab.errors import TowersError

#: Jobs in the order tasks are listed (and their traces shown).
JOBS_ORDER = ("chief", "ps", "worker", "evaluator")
LOOPBACK = "127.0.0.1"
#: Most tasks one spec may name (each is a TensorFlow process; on loopback all share this machine).
MAX_TASKS = 64


class ClusterError(TowersError):
    """A cluster spec, task name or cluster run that cannot be used (one line)."""


@dataclass(frozen=True, order=True)
class TaskId:
    """One task: its job and index (``worker:1``)."""

    job: str
    index: int

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """``worker:1`` (also ``/job:worker/task:1`` and ``/job:worker/replica:0/task:1``)."""
        t = str(text).strip()
        if t.startswith("/job:"):
            parts = dict(p.split(":", 1) for p in t.strip("/").split("/") if ":" in p)
            job, index = parts.get("job", ""), parts.get("task", "")
        else:
            job, _, index = t.partition(":")
        if not job or not index.isdigit() or not job.replace("_", "").isalnum():
            raise ClusterError(f"task {text!r}: expected JOB:INDEX, for example worker:1")
        return cls(job, int(index))

    def __str__(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def slug(self) -> str:
        """File-name form: ``worker-1``."""
        return f"{self.job}-{self.index}"

    @property
    def device_prefix(self) -> str:
        """The canonical task prefix of its devices: ``/job:worker/task:1``."""
        return f"/job:{self.job}/task:{self.index}"

    @property
    def cpu(self) -> str:
        """The task's host CPU device, canonically: ``/job:worker/task:1/device:CPU:0``."""
        return f"{self.device_prefix}/device:CPU:0"


def _job_order(job: str) -> tuple[int, str]:
    return (JOBS_ORDER.index(job) if job in JOBS_ORDER else len(JOBS_ORDER), job)


@dataclass(frozen=True)
class Cluster:
    """Job name -> task addresses (``host:port``), in task-index order."""

    jobs: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_dict(cls, doc: Any, origin: str = "cluster spec") -> Cluster:
        """A validated spec: every address ``host:port``, no address twice, at most one chief."""
        if isinstance(doc, dict) and "cluster" in doc:  # a whole TF_CONFIG is fine too
            doc = doc["cluster"]
        if not isinstance(doc, dict) or not doc:
            raise ClusterError(f"{origin}: expected an object of job -> list of \"host:port\"")
        jobs: dict[str, tuple[str, ...]] = {}
        for job, addrs in doc.items():
            if not isinstance(job, str) or not job or not job.replace("_", "").isalnum():
                raise ClusterError(f"{origin}: job name {job!r} must be letters, digits or _")
            if not isinstance(addrs, list) or not addrs or not all(isinstance(a, str) for a in addrs):
                raise ClusterError(f"{origin}: job {job!r} must list \"host:port\" strings")
            for a in addrs:
                host, _, port = a.rpartition(":")
                if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in a):
                    raise ClusterError(f"{origin}: job {job!r}: {a!r} is not host:port")
            jobs[job] = tuple(addrs)
        total = sum(map(len, jobs.values()))
        if total > MAX_TASKS:
            raise ClusterError(f"{origin}: {total} tasks; at most {MAX_TASKS}")
        if len({a for addrs in jobs.values() for a in addrs}) != total:
            raise ClusterError(f"{origin}: two tasks share one address")
        if len(jobs.get("chief", ())) > 1:
            raise ClusterError(f"{origin}: at most one chief")
        return cls(jobs)

    @classmethod
    def load(cls, path: Path | str) -> Cluster:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise ClusterError(f"{path}: cannot read the cluster spec ({why})") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ClusterError(f"{path}: the cluster spec is not JSON ({exc})") from None
        return cls.from_dict(doc, str(path))

    def check_runnable(self, origin: str) -> None:
        """What a run needs of a cluster file beyond its syntax, checked before the run starts: a
        ``worker`` job (both cluster variants train on the workers), and host names that resolve."""
        if not self.jobs.get("worker"):
            jobs = ", ".join(sorted(self.jobs))
            raise ClusterError(f"{origin}: no 'worker' job (it has {jobs}); a cluster run needs at least one "
                               "worker task")
        import socket

        for task in self.tasks():
            host, _, port = self.address(task).rpartition(":")
            try:
                socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
            except (socket.gaierror, UnicodeError) as exc:
                why = getattr(exc, "strerror", None) or exc
                raise ClusterError(f"{origin}: the host name {host!r} of {task} does not resolve "
                                   f"({why})") from None

    def to_dict(self) -> dict[str, list[str]]:
        return {job: list(addrs) for job, addrs in self.jobs.items()}

    def tasks(self, *jobs: str) -> list[TaskId]:
        """Tasks of ``jobs`` (default: all), chief first, then ps, then workers."""
        wanted = jobs or tuple(self.jobs)
        found = [TaskId(j, i) for j in wanted for i in range(len(self.jobs.get(j, ())))]
        return sorted(found, key=lambda t: (_job_order(t.job), t.index))

    def address(self, task: TaskId) -> str:
        try:
            return self.jobs[task.job][task.index]
        except (KeyError, IndexError):
            known = ", ".join(map(str, self.tasks()))
            raise ClusterError(f"task {task} is not in the cluster ({known})") from None

    def port(self, task: TaskId) -> int:
        return int(self.address(task).rpartition(":")[2])

    def host_file(self, task: TaskId) -> str:
        """The profiler's name for the task's trace file: ``127.0.0.1_45523`` (``.xplane.pb``)."""
        return self.address(task).replace(":", "_")

    def host_tasks(self) -> dict[str, str]:
        """Trace host file name -> canonical task (``{"127.0.0.1_45523": "/job:worker/task:1"}``)."""
        return {self.host_file(t): t.device_prefix for t in self.tasks()}

    def tf_config(self, task: TaskId) -> dict[str, Any]:
        self.address(task)
        return {"cluster": self.to_dict(), "task": {"type": task.job, "index": task.index}}

    def profiler_service(self, tasks: Iterable[TaskId]) -> str:
        """The ``service_addr`` of ``tf.profiler.experimental.client.trace`` for ``tasks``."""
        return ",".join(f"grpc://{self.address(t)}" for t in tasks)

    @property
    def loopback(self) -> bool:
        """Every task on this machine's loopback interface."""
        hosts = {a.rpartition(":")[0] for addrs in self.jobs.values() for a in addrs}
        return hosts <= {LOOPBACK, "localhost", "[::1]"}


def free_ports(n: int, host: str = "0.0.0.0") -> list[int]:
    """``n`` distinct ports that were free on every interface a moment ago.

    All ``n`` sockets are bound and listening at once (so they differ, and none is
    handed out as an ephemeral port meanwhile), then closed.  Another process may
    still take one before TensorFlow binds it: callers treat "could not start gRPC
    server" as a start failure to retry with fresh ports.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
            s.listen(1)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def loopback_cluster(workers: int, ps: int = 0, chief: int = 0, host: str = LOOPBACK) -> Cluster:
    """A cluster of ``chief`` + ``ps`` + ``workers`` tasks on ``host`` at fresh ports."""
    ports = iter(free_ports(workers + ps + chief))
    jobs = {"chief": chief, "ps": ps, "worker": workers}
    return Cluster({j: tuple(f"{host}:{next(ports)}" for _ in range(k)) for j, k in jobs.items() if k})
