"""Your numbers in your tools: a trace, logdir or run directory as tidy pandas frames.

``tfprof_towers.load(path)`` (:func:`.profile.load`) returns a :class:`.profile.Profile` whose
frames follow one convention (:mod:`.schema`); ``Profile.to_parquet(DIR)`` and ``to_csv(DIR)``
save them.  :mod:`.diff` compares two profiles (``tfprof-towers diff``).  No TensorFlow.
"""

from __future__ import annotations

from tfprof_towers.frames.export import read_frames, read_parquet
from tfprof_towers.frames.names import FRAMES
from tfprof_towers.frames.profile import Profile, load, per_step, sql

__all__ = ["FRAMES", "Profile", "load", "per_step", "read_frames", "read_parquet", "sql"]
