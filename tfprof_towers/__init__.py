"""tfprof-towers: profile a TensorFlow training step under several multi-device placements.

Data flow (design.md): ``capture`` (one child process per variant) writes a run
directory; ``trace`` loads XSpace traces into pandas and attributes time;
``audit`` and ``advise`` turn measurements into findings; ``render`` writes the
report.  Only ``capture`` imports TensorFlow, and only inside child processes.
"""

__version__ = "0.1.0"
