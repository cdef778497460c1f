"""Every file a user names on the command line (``--html OUT``, ``export --parquet DIR``) is written here.

:func:`output_path` decides where OUT may be written, before anything is computed or written:

* an OUT that exists and is not a regular file (a device such as ``/dev/full``, a FIFO, a socket, a
  directory) is refused: writing by rename would replace the device node with a regular file;
* a **symbolic link is written through**: the file written is the link's target (the link stays a
  link; ``latest.html -> reports/x.html`` keeps pointing at the new page), and the target is checked
  like any OUT (a link to a device or to an input is refused; a link loop is refused) -- but a file
  the tool names inside a folder the user named (``export --parquet DIR``: ``DIR/steps.parquet``,
  ``follow_links=False``) is the tool's, not a link's target: a link there is replaced, never
  followed (it may point at anything);
* an OUT that is one of the command's inputs (the same file, however named), any ``*.xplane.pb``
  trace, or a file the tool owns inside a run directory (``run.json``, ``summary.json``,
  ``report.html``, ``projection.json``, ``scaling.json``, ``cluster.json``, anything under
  ``variants/`` or ``tensorboard/``) is refused: ``report`` and ``diff`` read them again later.

:func:`write_output` writes atomically (a temporary file beside the target, then a rename) and turns
every failure into one :class:`~tfprof_towers.vocab.errors.TowersError` naming the user's path and the
cause -- never the temporary file's name, never a library's own wording; a full disk is said to be
one (``ENOSPC``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from tfprof_towers.rundir.paths import (
    PROJECTION_JSON,
    REPORT_HTML,
    RUN_JSON,
    SUMMARY_JSON,
    atomic_write_bytes,
    is_run_dir,
)
from tfprof_towers.vocab.errors import TowersError

#: Files of a run directory's top level that the tool writes (and reads back): never a user's OUT.
OWNED_FILES = frozenset({RUN_JSON, SUMMARY_JSON, REPORT_HTML, PROJECTION_JSON, "scaling.json",
                         "cluster.json"})
#: Folders of a run directory whose whole contents the tool owns.
OWNED_FOLDERS = frozenset({"variants", "tensorboard"})
TRACE_SUFFIXES = (".xplane.pb", ".xplane.riegeli")
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def output_path(out: Path | str, inputs: Iterable[Path | str] = (), what: str = "--html",
                follow_links: bool = True) -> Path:
    """The path to write for the user's ``out``: ``out`` itself, or a symbolic link's target (with
    ``follow_links=False``: ``out`` itself, a link there to be replaced).
    Raises :class:`TowersError` (exit 2) for an OUT that must not be written (module docstring)."""
    out = Path(out)
    label = f"{what} {out}"
    if not str(out).strip():
        raise TowersError(f"{what} {out!r}: an empty name; give a path")
    replace_link = not follow_links and out.is_symlink()  # the link itself is replaced, whatever it points at
    try:
        target = out.resolve() if out.is_symlink() and not replace_link else out
    except (OSError, RuntimeError):  # RuntimeError: Python 3.11's pathlib on a loop
        raise TowersError(f"{label}: a symbolic link loop (it leads back to itself)") from None
    st = None if replace_link else _stat(target, label)
    via = f" (the target of the link, {target})" if target != out else ""
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        hint = "; give a file name" if stat.S_ISDIR(st.st_mode) else ""
        raise TowersError(f"{label}: is {kind}{via}, not a regular file; refusing to replace it{hint}")
    for inp in () if replace_link else inputs:
        if _same(target, Path(inp)):
            raise TowersError(f"{label}: is one of the inputs ({inp}){via}; refusing to overwrite it")
    if target.name.endswith(TRACE_SUFFIXES):
        raise TowersError(f"{label}: is a trace file name{via}; refusing to write over a trace")
    owned = owned_by_run_dir(target)
    if owned is not None:
        raise TowersError(f"{label}: belongs to the run directory {owned}{via} (the tool writes and reads it "
                          "back); write the page elsewhere")
    return target


def owned_by_run_dir(path: Path) -> Path | None:
    """The run directory that owns ``path`` (one of its documents, or inside ``variants/`` or
    ``tensorboard/``), or None."""
    path = Path(os.path.abspath(path))
    if path.name in OWNED_FILES and is_run_dir(path.parent):
        return path.parent
    for folder in path.parents:
        if folder.name in OWNED_FOLDERS and is_run_dir(folder.parent):
            return folder.parent
    return None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def write_output(out: Path | str, data: bytes | str, inputs: Iterable[Path | str] = (),
                 what: str = "--html", follow_links: bool = True) -> Path:
    """Check ``out`` (:func:`output_path`) and write ``data`` there atomically; the path written."""
    target = output_path(out, inputs, what, follow_links)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        atomic_write_bytes(target, raw)
    except OSError as exc:
        raise TowersError(f"{what} {out}: {write_error(exc)}") from None
    return target


def write_error(exc: OSError) -> str:
    """The cause of a failed write, in words (a full disk named as such)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device (the disk or quota is full); nothing was written"
    return f"cannot write ({exc.strerror or exc})"


def _stat(path: Path, label: str) -> os.stat_result | None:
    """``path``'s stat (following links); None when nothing is there; one line for a loop or any
    other reason it cannot be used."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TowersError(f"{label}: a symbolic link loop (it leads back to itself)") from None
        raise TowersError(f"{label}: cannot use it ({exc.strerror or exc})") from None


def output_folder(folder: Path | str, inputs: Iterable[Path | str] = (), what: str = "--parquet",
                  make: bool = True) -> Path:
    """A folder to write files into: made if needed (``make``); refused when it exists and is not a
    folder, or is (or is inside) a folder the tool owns in a run directory."""
    if not str(folder).strip():  # Path("") is the current directory: never what was meant
        raise TowersError(f"{what} {str(folder)!r}: an empty name; give a folder")
    folder = Path(folder)
    label = f"{what} {folder}"
    st = _stat(folder, label)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "a file")
        raise TowersError(f"{label}: exists and is {kind}, not a directory")
    resolved = folder.resolve()
    if owned_by_run_dir(resolved / "x") is not None:
        raise TowersError(f"{label}: is inside a run directory's own files; write the frames elsewhere")
    for inp in inputs:
        if _same(resolved, Path(inp)):
            raise TowersError(f"{label}: is one of the inputs ({inp})")
    try:
        if make:
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TowersError(f"{label}: {write_error(exc)}") from None
    return folder
