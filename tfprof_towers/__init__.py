"""tfprof-towers: profile a TensorFlow training step under several multi-device placements.

Data flow (design.md): ``capture`` (one child process per variant) writes a run
directory; ``trace`` loads XSpace traces into pandas and attributes time;
``audit`` and ``advise`` turn measurements into findings; ``render`` writes the
report.  Only ``capture`` imports TensorFlow, and only inside child processes.
"""

__version__ = "0.1.0"

from tfprof_towers.vocab.errors import TowersError, TraceError

__all__ = ["TowersError", "TraceError", "__version__", "load", "sql"]


def __getattr__(name: str):
    """``tfprof_towers.load`` (:func:`tfprof_towers.frames.load`) and ``tfprof_towers.sql``
    (:func:`tfprof_towers.frames.profile.sql`), imported on first use: importing the package stays cheap
    (no pandas, no DuckDB, never TensorFlow)."""
    if name == "load":
        from tfprof_towers.frames import load

        return load
    if name == "sql":  # DuckDB over the frames of several paths (tfprof_towers.frames.sql)
        from tfprof_towers.frames.profile import sql

        return sql
    if name == "frames":
        import tfprof_towers.frames as frames

        return frames
    raise AttributeError(f"module 'tfprof_towers' has no attribute {name!r}")
