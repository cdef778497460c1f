"""Find the trace a path names: an ``*.xplane.pb`` file, or a directory holding
``plugins/profile/<run>/<host>.xplane.pb`` (a TensorBoard logdir, or a run directory's
``tensorboard/<variant>/``).

``path`` may also be ``plugins/profile`` itself, one ``plugins/profile/<run>/`` folder, or any
plain folder holding ``*.xplane.pb`` files (the folder is then the run, its files the hosts).

With several runs or hosts, :func:`locate` picks the newest run's first host and says
so in its notes; ``run`` (``--run``) chooses a run, ``RUN/HOST`` a host (a single file has
no runs: ``run`` is refused there).  Every file a walk finds is checked before it is opened
(:func:`check_path`): a FIFO, a device, a socket or a symbolic link loop named like a trace is
refused in one line, never opened (opening a FIFO would wait for a writer forever).
:func:`locate_hosts` picks a run the same way but keeps all its hosts (a multi-host
profile: one file per task); there a stray entry named like a trace (a dangling link, a folder, a
FIFO, a device) is one host that cannot be read (:func:`unreadable`), not a refusal of the whole run.
:func:`host_names` gives every host of a run a distinct name, even where two file names map to one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfprof_towers.vocab.errors import TraceError


@dataclass(frozen=True)
class Profile:
    """One ``*.xplane.pb`` found under a directory."""

    path: Path
    run: str  # "<logdir relative to the root>/<run>" or "<run>"
    host: str


PATTERNS = ("*.xplane.pb", "*.xplane.riegeli")


def find_profiles(root: Path) -> list[Profile]:
    """Every ``plugins/profile/<run>/<host>.xplane.{pb,riegeli}`` under ``root``, oldest run first;
    without any, the runs of ``root`` when it is ``plugins/profile`` (``<run>/<host>...``), else
    ``root``'s own trace files as one run named after the folder."""
    root = Path(root)
    found = []
    for pattern in PATTERNS:
        for p in root.glob(f"**/plugins/profile/*/{pattern}"):
            logdir = p.parent.parent.parent.parent.relative_to(root).as_posix()
            run = p.parent.name if logdir == "." else f"{logdir}/{p.parent.name}"
            found.append(Profile(p, run, host_name(p)))
    if not found and root.name == "profile" and root.parent.name == "plugins":
        found = [Profile(p, p.parent.name, host_name(p))
                 for pattern in PATTERNS for p in root.glob(f"*/{pattern}")]
    if not found:
        name = root.resolve().name or str(root)
        found = [Profile(p, name, host_name(p)) for pattern in PATTERNS for p in root.glob(pattern)]
    return sorted(found, key=lambda f: (f.path.parent.name, f.run, f.host))


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_path(path: Path, file_only: bool = False) -> None:
    """One line for a path that cannot hold a trace: missing, a link loop, a FIFO or device, unreadable
    (``file_only``: a folder too, for a path a walk found by its trace-like name)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise TraceError(f"{path}: a symbolic link to nothing ({os.readlink(path)})") from None
        raise TraceError(f"{path}: no such file or directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceError(f"{path}: a symbolic link loop (it leads back to itself)") from None
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        if file_only:
            raise TraceError(f"{path}: a directory, not a trace file")
        if not os.access(path, os.R_OK | os.X_OK):
            raise TraceError(f"{path}: permission denied (cannot list the directory)")
        return
    kind = next((what for test, what in _KINDS if test(st.st_mode)), None)
    if kind is not None:
        raise TraceError(f"{path}: {kind}, not a trace file or a directory")
    if not os.access(path, os.R_OK):
        raise TraceError(f"{path}: permission denied")


def locate(path: Path | str, run: str | None = None) -> tuple[Path, tuple[str, ...]]:
    """The trace file ``path`` names, and notes on which one was picked."""
    files, notes = locate_hosts(path, run)
    extra = ()
    pick = files[0]
    if len(files) > 1:  # the first host file that can hold a trace (a stray entry is never picked)
        pick = next((f for f in files if unreadable(f) is None), files[0])
        check_path(pick, file_only=True)
        hosts = ", ".join(host_names(files)[0])
        run_name = _run_name(Path(path), pick)
        extra = (
            f"run {run_name} has {len(files)} hosts ({hosts}); using {host_name(pick)} "
            f"(choose with --run {run_name}/HOST)",
        )
    return pick, notes + extra


def host_name(file: Path) -> str:
    """A trace file's host: its name without ``.xplane.pb``."""
    return file.name.split(".xplane.")[0]


def host_names(files: Sequence[Path]) -> tuple[list[str], tuple[str, ...]]:
    """A distinct name per file, and a note naming what was told apart: :func:`host_name`, but where two
    files give one name, each of those is named by its file name less only its last ``.xplane.*``
    suffix (``h0.xplane.pb.xplane.pb`` is ``h0.xplane.pb``), else by its whole file name, else
    ``NAME~2``, ``NAME~3``...; a file whose name gives no host name (``.xplane.pb``) is named by its
    file name."""
    plain = [host_name(f) for f in files]
    twice = {n for n in plain if plain.count(n) > 1} | {""}  # ".xplane.pb" names no host: its file name
    taken: set[str] = set()
    out, renamed = [], []
    for f, name in zip(files, plain):
        pick = name
        if name in twice:
            for pick in (f.name.rsplit(".xplane.", 1)[0], f.name):
                if pick and pick not in taken:
                    break
            k = 2
            while pick in taken or (pick in plain and pick not in twice):
                pick, k = f"{name or f.name}~{k}", k + 1
            renamed.append(f"{f.name} is host {pick}")
        taken.add(pick)
        out.append(pick)
    notes = ()
    if renamed:
        notes = (f"host files whose names give one host name were told apart: {'; '.join(renamed)}",)
    return out, notes


def unreadable(path: Path) -> str | None:
    """Why a host file a walk found cannot hold a trace (:func:`check_path` with ``file_only``), else None."""
    try:
        check_path(path, file_only=True)
    except TraceError as exc:
        return str(exc)
    return None


def _run_name(root: Path, file: Path) -> str:
    for p in find_profiles(root) if root.is_dir() else ():
        if p.path == file:
            return p.run
    return file.parent.name


def locate_hosts(path: Path | str, run: str | None = None) -> tuple[list[Path], tuple[str, ...]]:
    """The trace files of the run ``path`` names (one per host; one file when ``path`` is a file or
    ``run`` names a host), and notes on which run was picked."""
    path = Path(path)
    check_path(path)
    if not path.is_dir():
        if run is not None:
            raise TraceError(f"--run {run}: does not apply to a single trace file ({path}); it chooses a run "
                             "of a logdir (or a variant of a run directory)")
        return [path], ()
    profiles = find_profiles(path)
    if not profiles:
        raise TraceError(
            f"{path}: no profile found (expected plugins/profile/<run>/<host>.xplane.pb below it, "
            "or *.xplane.pb files in it)"
        )
    chosen = profiles
    if run is not None:
        chosen = [p for p in profiles if run in (p.run, p.path.parent.name, f"{p.run}/{p.host}", p.host)
                  or p.run.startswith(run.rstrip("/") + "/")]
        if not chosen:
            raise TraceError(
                f"--run {run}: no such run under {path}; runs: {', '.join(sorted({p.run for p in profiles}))}"
            )
    newest = [p for p in chosen if p.path.parent.name == chosen[-1].path.parent.name]
    candidates = [p for p in newest if p.run == newest[0].run]  # one run: its hosts
    notes = []
    runs = sorted({p.run for p in profiles})
    if len(runs) > 1 and run is None:
        pick = candidates[0].run
        notes.append(f"{len(runs)} runs under {path}; using the newest, {pick} (choose with --run)")
    if len(candidates) == 1:  # a FIFO named like a trace would block the reader's open() forever
        check_path(candidates[0].path, file_only=True)  # several: each is the map's (unreadable())
    return [p.path for p in candidates], tuple(notes)
