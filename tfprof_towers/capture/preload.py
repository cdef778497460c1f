"""What a fork server imports once for every capture child (see :mod:`tfprof_towers.procs.forkserver`).

Importing this module imports TensorFlow and the runners' modules, and nothing more: it checks
that TensorFlow's runtime was *not* started (no eager context, no devices), since each child
still has to configure its own logical devices before its runtime initialises.  A server whose
import started it refuses to serve, and the children start fresh.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from tensorflow.python.eager import context as _context

import tfprof_towers.capture.child
import tfprof_towers.capture.families.tf1_graph
import tfprof_towers.capture.families.tf2_strategy
import tfprof_towers.capture.placement
import tfprof_towers.capture.tf1.builders
import tfprof_towers.capture.tf2.placement
import tfprof_towers.capture.tf2.strategies  # noqa: F401


def runtime_started() -> bool:
    """True once TensorFlow's eager context is initialised (devices listed, a tensor made)."""
    ctx = _context.context_safe()
    return ctx is not None and getattr(ctx, "_context_handle", None) is not None


if runtime_started():
    raise RuntimeError("importing the capture modules started TensorFlow's runtime; "
                       "a forked child could not configure its own devices")

__all__ = ["runtime_started", "tf"]
