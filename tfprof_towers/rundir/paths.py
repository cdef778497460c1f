"""The run directory: the saved middle between capture and analysis.

Layout (everything analysis needs, so a report can be re-rendered anywhere)::

    RUN_DIR/
      run.json                         config, topology, versions, start/end times
      summary.json                     ranked variants, breakdowns, recommendation
      report.html                      the self-contained report
      variants/<name>/record.json      status, timings, placement, transfers, sources
      variants/<name>/stderr.txt       the child's stderr
      tensorboard/<name>/plugins/profile/<ts>/<host>.xplane.pb

Every file is written to a temporary name and renamed into place, so a crash
never leaves a half-written JSON behind.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.vocab.errors import TowersError

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
REPORT_HTML = "report.html"
RECORD_JSON = "record.json"
PROJECTION_JSON = "projection.json"
#: OSError numbers that mean "this place cannot take our files" (not a bug): a full disk, a quota,
#: a read-only filesystem, no permission.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def is_disk_error(exc: BaseException) -> bool:
    """An OSError whose cause is the place written to, not the program (see :data:`DISK_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # shutil, bz2 and lzma with it: not for a command that writes nothing

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make reports unshareable
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # a write or fsync: name the file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, doc: Any) -> None:
    atomic_write_text(path, json_text(doc) + "\n")


def json_text(doc: Any, indent: int | None = 2) -> str:
    """Strict JSON (RFC 8259): NaN and infinities become null, never ``NaN``/``Infinity``.

    Every JSON the tool writes -- run-directory documents and ``--json`` output --
    goes through here.  Inputs reject non-finite numbers where they are read; this
    is the last line, for a value computed from nothing (a mean of no steps).
    """
    try:
        return json.dumps(doc, indent=indent, allow_nan=False, default=_json_default)
    except ValueError:  # a NaN or an infinity somewhere: replace, then encode strictly
        return json.dumps(finite(doc), indent=indent, allow_nan=False, default=_json_default)


def save_json(path: Path, doc: Any, smallest: Any = None) -> bool:
    """Write ``doc`` at ``path``; on a full disk, the smallest write that can still say something:
    the compact JSON (then ``smallest``, a shorter document) over the old file's own bytes.

    The atomic write needs a new file; a full disk refuses it.  Overwriting an existing
    file's bytes in place needs no new block (``r+b``, padded with spaces, which JSON
    ignores), so a ``run.json`` written at the start can still be told how the run ended.
    False when nothing could be written; an error that is not the disk's is raised.
    """
    try:
        write_json(path, doc)
        return True
    except OSError as exc:
        if not is_disk_error(exc):
            raise
    return any(c is not None and overwrite_in_place(path, c) for c in (doc, smallest))


def overwrite_in_place(path: Path, doc: Any) -> bool:
    """``doc`` as compact JSON over ``path``'s existing bytes, when it fits in them; whether it did."""
    data = json_text(doc, indent=None).encode("utf-8")
    try:
        with open(path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if len(data) > size:
                return False
            fh.seek(0)
            fh.write(data + b" " * (size - len(data)))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        return False
    return True


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet (what ``mkdir(parents=True)`` would create)."""
    path = Path(path).absolute()
    return [p for p in (path, *path.parents) if not p.exists() and not p.is_symlink()]


def remove_empty(dirs: list[Path]) -> None:
    """Remove those of ``dirs`` that are empty, deepest first (what a refused run created)."""
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-inf) replaced by None, containers rebuilt."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return finite(value.item())
    if hasattr(value, "tolist"):
        return finite(value.tolist())
    return value


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return finite(obj.item())
    if hasattr(obj, "tolist"):
        return finite(obj.tolist())
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: Path) -> Any:
    """Read a JSON file, turning every way it can be broken into a one-line TowersError."""
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read until killed
            raise TowersError(f"{path}: cannot read (not a regular file)")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TowersError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TowersError(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TowersError(f"{path}: corrupt JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # an integer of 5000 digits; nesting 100000 deep
        raise TowersError(f"{path}: corrupt JSON ({type(exc).__name__}: {str(exc)[:200]})") from None


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_dir(reports: Path, now: _dt.datetime | None = None) -> Path:
    """Create ``reports/<YYYYmmdd-HHMMSS>/`` (suffixed if taken); never reuses a directory."""
    now = now or _dt.datetime.now()
    stamp = now.strftime("%Y%m%d-%H%M%S")
    reports = Path(reports)
    reports.mkdir(parents=True, exist_ok=True)
    for i in range(1000):
        candidate = reports / (stamp if i == 0 else f"{stamp}-{i}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise TowersError(f"{reports}: could not create a new run directory")


#: The file that marks an ``--out`` directory as taken by a run, created exclusively (``O_EXCL``) so
#: that of two runs started together on one folder exactly one gets it; removed when that run ends.
CLAIM_FILE = ".tfprof-towers-run"


def claim_out_dir(out: Path) -> Path:
    """Take an explicit ``--out DIR`` for this run: it must not exist yet or be empty.

    The claim is atomic: the folder is created if missing, then :data:`CLAIM_FILE` is created in it
    exclusively, so of two runs started together on one folder one wins and the other is refused
    (a check followed by ``mkdir(exist_ok=True)`` let both write into it).  The winner calls
    :func:`release_out_dir` when it ends.
    """
    out = Path(out)
    _refuse_taken(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file appeared there since the check
        _refuse_taken(out)
        raise TowersError(f"--out {out}: exists and is not a directory") from None
    except OSError as exc:
        raise TowersError(f"--out {out}: cannot create directory ({exc.strerror})") from None
    claim = out / CLAIM_FILE
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise TowersError(_in_use(out)) from None
    except OSError as exc:
        raise TowersError(f"{out}: not writable ({exc.strerror or exc})") from None
    try:
        os.write(fd, f"{os.getpid()} {utc_now()}\n".encode())
    finally:
        os.close(fd)
    try:
        if [p.name for p in out.iterdir() if p.name != CLAIM_FILE]:  # filled before the claim
            raise TowersError(f"--out {out}: directory is not empty; a run never overwrites an earlier one")
        check_writable(out)
    except BaseException:
        release_out_dir(out)
        raise
    return out


def _refuse_taken(out: Path) -> None:
    """Refuse ``out`` when it is a file, or a folder that already holds something (a run's, or another)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise TowersError(f"--out {out}: exists and is not a directory")
    names = [p.name for p in out.iterdir()]
    if CLAIM_FILE in names:
        raise TowersError(_in_use(out))
    if names:
        raise TowersError(f"--out {out}: directory is not empty; a run never overwrites an earlier one")


def _in_use(out: Path) -> str:
    return (f"--out {out}: another run is writing into this directory; a run never shares its directory "
            f"(remove {out / CLAIM_FILE} if no run is using it)")


def release_out_dir(out: Path) -> None:
    """Remove the claim :func:`claim_out_dir` made on ``out`` (the run ended, or was refused)."""
    with contextlib.suppress(OSError):
        (Path(out) / CLAIM_FILE).unlink()


def check_writable(folder: Path) -> None:
    """Fail early, in one line, when ``folder`` cannot take files."""
    try:
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".write-test.", dir=folder)
        os.write(fd, b"x" * 4096)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise TowersError(f"{folder}: not writable ({exc.strerror or exc})") from None


def point_latest(reports: Path, run_dir: Path) -> None:
    """Make ``reports/latest`` a symlink to ``run_dir``, replaced atomically (a rename over it).

    The link is made under a name no other process can pick (``mkdtemp``'s), so two runs ending
    together each replace ``latest`` whole: it names one of them, never a half-made link.
    """
    reports = Path(reports)
    try:
        import tempfile

        holder = Path(tempfile.mkdtemp(prefix=".latest.", dir=reports))
    except OSError:
        return  # a read-only reports folder: the run directory is still there
    tmp = holder / "latest"
    try:
        os.symlink(Path(run_dir).name, tmp)
        os.replace(tmp, reports / "latest")
    except OSError:
        pass  # a filesystem without symlinks, or a ``latest`` that is a real folder: the run is still there
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        with contextlib.suppress(OSError):
            holder.rmdir()


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory."""

    root: Path

    @property
    def run_json(self) -> Path:
        return self.root / RUN_JSON

    @property
    def summary_json(self) -> Path:
        return self.root / SUMMARY_JSON

    @property
    def report_html(self) -> Path:
        return self.root / REPORT_HTML

    @property
    def fork_server_txt(self) -> Path:
        """The output of the fork server the TensorFlow children were forked from (bounded)."""
        return self.root / "fork-server.txt"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    def variant_dir(self, name: str) -> Path:
        return self.root / "variants" / name

    def record_json(self, name: str) -> Path:
        return self.variant_dir(name) / RECORD_JSON

    def stderr_txt(self, name: str) -> Path:
        return self.variant_dir(name) / "stderr.txt"

    def logdir(self, name: str) -> Path:
        return self.tensorboard / name

    def variant_names(self) -> list[str]:
        folder = self.root / "variants"
        if not folder.is_dir():
            return []
        # "<name>@<count>" folders are a scaling sweep's points (rundir/scaling.py), not variants of the run
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and "@" not in p.name)

    def xplane_files(self, name: str) -> list[Path]:
        return logdir_xplanes(self.logdir(name))


def logdir_xplanes(logdir: Path) -> list[Path]:
    """The trace files of a TensorBoard log directory (``plugins/profile/<run>/<host>.xplane.pb``), sorted."""
    return sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))


def is_run_dir(path: Path) -> bool:
    """True for a folder holding ``run.json`` or ``variants/``; False also where it cannot be looked into."""
    path = Path(path)
    try:
        return (path / RUN_JSON).is_file() or (path / "variants").is_dir()
    except OSError:  # no permission to look inside: the caller says so
        return False
