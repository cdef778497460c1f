"""Read profiler traces in the XSpace format (``*.xplane.pb``) into raw numpy columns.

The reader knows the format, not the framework: it never asks what an event means.
TensorFlow's meaning lives in :mod:`tfprof_towers.trace`; a JAX or PyTorch trace
source reuses this reader and brings its own classifier.

::

    raw = read_xspace("host.xplane.pb", stats=("step", "hlo_op"), as_bytes={"details": parse})
    raw.planes.names, raw.planes.kinds        # per plane: name; HOST / DEVICE / OTHER
    raw.lines.names, raw.lines.plane, raw.lines.derived
    raw.event_line, raw.event_plane           # per event (derived lines' events last: [n_kept:])
    raw.name, raw.start_ps, raw.dur_ps        # name as a code into raw.strings.items
    raw.stats["step"].index / .nums / .codes  # the events that have the stat, their values
    raw.stats["step"].num / .code / .present  # the same per event (made on demand)
    raw.stats["details"].parsed               # what ``parse`` made of each batch's bytes
    raw.strings.items, raw.hostnames

No event ever becomes a Python object; how the reader stays fast and bounded in memory is
in the docstrings of :mod:`.layout`, :mod:`.events`, :mod:`.columns` and :mod:`.decode`.
Where the optional C kernel is built (:mod:`.native`), it walks the lines and decodes the
events instead of numpy, to the same arrays; the numpy decoders are its fallback and oracle.
"""

from tfprof_towers.xplane.columns import Parser
from tfprof_towers.xplane.decode import decode_space
from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.reader import decode_buffer, read_layout, read_xspace
from tfprof_towers.xplane.strings import Strings, categorical, dense_unique, distinct, used_codes
from tfprof_towers.xplane.tables import (
    DEVICE,
    HOST,
    NUMBER,
    OTHER,
    LineTable,
    PlaneTable,
    RawSpace,
    RowNames,
    StatColumn,
)

__all__ = [
    "DEVICE", "HOST", "NUMBER", "OTHER", "LineTable", "Parser", "PlaneTable", "Ragged", "RawSpace",
    "RowNames", "StatColumn", "Strings", "categorical", "decode_buffer", "decode_space", "dense_unique",
    "distinct", "read_layout", "read_xspace", "used_codes"
]
