"""Bounded text: what a record, a summary or a message may keep of a child's output.

A variant's reason (``error``) is one line of at most :data:`ERROR_MAX_BYTES`
UTF-8 bytes; its ``stderr_tail`` the last :data:`TAIL_MAX_LINES` meaningful
lines, at most :data:`TAIL_MAX_BYTES` bytes in all and :data:`LINE_MAX_BYTES`
per line.  Bytes, not characters or lines: one 100 MB line is as bounded as a
million short ones.  TensorFlow's own info and warning log lines (``I0000 ...
oneDNN custom operations are on``) are never a reason and are left out of
reasons; the supervisor's notes (``[tfprof-towers] ...``) likewise.  No third-party imports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: Bytes of a one-line reason (``error``) in a record or the summary.
ERROR_MAX_BYTES = 1024
#: Bytes and lines of a record's ``stderr_tail``, and bytes of any one line in it.
TAIL_MAX_BYTES = 4096
TAIL_MAX_LINES = 25
LINE_MAX_BYTES = 512
#: How much of the end of ``stderr.txt`` is read to find its tail.
READ_TAIL_BYTES = 64 * 1024

ELLIPSIS = "…"
NOTE_PREFIX = "[tfprof-towers]"

#: absl/TensorFlow log lines of severity INFO or WARNING: ``I0000 00:00:1733.. 123 port.cc:153] ...``
#: (before absl is initialised the time is seconds since the epoch),
#: the older ``2024-12-01 10:00:00.123456: I tensorflow/...`` form and absl's pre-init banner.
#: ERROR and FATAL lines (``E0000``, ``F0000 ... Check failed``) are kept: they can be the cause.
_TF_NOISE = re.compile(
    r"^(?:[IW]\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$)"
)


def clip_bytes(text: str, max_bytes: int, keep: str = "head") -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (on a character boundary), marked with "…".

    ``keep="head"`` keeps the start, ``"tail"`` the end.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return text
    room = max(0, max_bytes - len(ELLIPSIS.encode()))
    if keep == "tail":
        return ELLIPSIS + data[len(data) - room:].decode("utf-8", errors="ignore")
    return data[:room].decode("utf-8", errors="ignore") + ELLIPSIS


def one_line(text: str, max_bytes: int = ERROR_MAX_BYTES) -> str:
    """Whitespace runs (newlines included) collapsed to one space, then clipped to ``max_bytes``."""
    return clip_bytes(" ".join(str(text).split()), max_bytes)


def is_tf_log(line: str) -> bool:
    """A TensorFlow/absl INFO or WARNING log line (``I0000 ... port.cc:153] oneDNN ...``)."""
    return bool(_TF_NOISE.match(line.strip()))


def is_noise(line: str, notes: bool = True) -> bool:
    """Blank lines, TensorFlow's INFO/WARNING log lines and (with ``notes``) the supervisor's notes."""
    s = line.strip()
    return not s or is_tf_log(s) or (notes and s.startswith(NOTE_PREFIX))


def meaningful_lines(text: str, notes: bool = True) -> list[str]:
    """The lines of ``text`` that are not :func:`is_noise` (``notes=False`` keeps the supervisor's)."""
    return [ln for ln in text.splitlines() if not is_noise(ln, notes)]


def last_cause(text: str, max_bytes: int = 200) -> str:
    """The last meaningful line of a child's output (what it died saying), clipped; "" if none."""
    lines = meaningful_lines(text)
    return clip_bytes(lines[-1].strip(), max_bytes) if lines else ""


def tail_text(text: str, max_lines: int = TAIL_MAX_LINES, max_bytes: int = TAIL_MAX_BYTES,
              line_bytes: int = LINE_MAX_BYTES) -> str:
    """The last lines of ``text`` that say something (TensorFlow's INFO/WARNING lines left out),
    each and all bounded in bytes; the supervisor's notes are kept."""
    lines = meaningful_lines(text, notes=False)
    kept: list[str] = []
    used = 0
    for line in reversed(lines[-max_lines:]):
        line = clip_bytes(line, line_bytes)
        cost = len(line.encode("utf-8", errors="replace")) + 1
        if used + cost > max_bytes:
            break
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept))


def read_tail(path: Path, max_bytes: int = READ_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a file as text ("" when it cannot be read); never the whole file."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                fh.seek(size - max_bytes)
            data = fh.read(max_bytes)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def file_tail(path: Path, max_lines: int = TAIL_MAX_LINES) -> str:
    """A record's ``stderr_tail`` from a child's ``stderr.txt``: its last lines, bounded in bytes."""
    return tail_text(read_tail(path), max_lines=max_lines)


#: Characters that change how the text around them is shown: C0/C1 controls (but newline and tab),
#: and the bidirectional embeddings, overrides, isolates and marks (U+202E shows "evil" as "live").
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control and bidi character shown as ``<U+202E>``: a name from a trace
    printed on a terminal cannot reorder, hide or recolour what follows it."""
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def single_line(text: str) -> str:
    """:func:`visible`, and line breaks shown as ``<U+000A>`` too: a user's path echoed in a one-line
    message (an ``--html`` name with a newline) stays one line."""
    return visible(text).replace("\n", "<U+000A>")


def has_invisible(text: str) -> bool:
    return _INVISIBLE.search(text) is not None
