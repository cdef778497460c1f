"""Same math: what a variant's graph exposes so that its first steps can be compared.

A variant shows what it computes through three graph collections.  Their names are plain
strings, so a variant file can use them without importing this package:

* :data:`LOSS` (``"tfprof_towers.loss"``): the step's loss tensors, one per tower, each a
  scalar over its shard of the batch.  The step's loss is their mean (the shards are equal).
* :data:`GRAD_NORM` (``"tfprof_towers.grad_norm"``): the global norm of the gradients that
  update the variables, before clipping -- the second output of ``tf.clip_by_global_norm``.
  With one norm per replica, their mean.
* :data:`INITIAL_VALUES` (``"tfprof_towers.initial_values"``): ``(variable, numpy value)``
  pairs.  After ``global_variables_initializer`` the runner runs each variable's initializer
  with its initial-value tensor fed, so the values never become graph constants (24 MB at
  the ``seed`` preset).

The math is fetched in the first two warm-up steps: the timed steps run the variant's fetches
alone, after at least one more step, so fetching it never perturbs them (and the variables are
not reloaded: a step's speed does not depend on their values).  A graph that exposes no loss
is shown as "not compared", and so is a step that draws random numbers (:mod:`.random_ops`:
Dropout, random augmentation -- each replica draws its own, so no two placements can agree).

Imported only inside a capture child or a variant file: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfprof_towers.capture.random_ops import random_ops
from tfprof_towers.rundir.records import MathCheck
from tfprof_towers.vocab.errors import VariantError

LOSS = "tfprof_towers.loss"
GRAD_NORM = "tfprof_towers.grad_norm"
INITIAL_VALUES = "tfprof_towers.initial_values"

#: Training steps :func:`first_steps` runs (they count as warm-up steps).
MATH_STEPS = 2

tf1 = tf.compat.v1


def expose_math(loss: Any = None, grad_norm: Any = None) -> None:
    """Add a tower's ``loss`` and/or the step's gradient norm to the default graph's collections."""
    if loss is not None:
        tf1.add_to_collection(LOSS, loss)
    if grad_norm is not None:
        tf1.add_to_collection(GRAD_NORM, grad_norm)


def load_after_init(variables: Sequence[Any], values: Sequence[np.ndarray]) -> None:
    """Have the runner load ``values[i]`` into ``variables[i]`` after initialisation."""
    if len(variables) != len(values):
        raise VariantError(f"load_after_init: {len(variables)} variables but {len(values)} values")
    for var, value in zip(variables, values):
        want = tuple(var.shape.as_list())
        if tuple(np.shape(value)) != want:
            raise VariantError(f"load_after_init: {var.name} has shape {list(want)}, "
                               f"its value {list(np.shape(value))}")
        tf1.add_to_collection(INITIAL_VALUES, (var, value))


def load_initial_values(sess: Any, graph: Any) -> int:
    """Load every registered initial value in one ``Session.run``; the number of variables loaded."""
    pairs = graph.get_collection(INITIAL_VALUES)
    if not pairs:
        return 0
    feed = {var.initializer.inputs[1]: value for var, value in pairs}
    sess.run([var.initializer for var, _ in pairs], feed)
    return len(pairs)


def _mean(values: Iterable[Any]) -> float:
    return float(np.mean([np.mean(np.asarray(v, np.float64)) for v in values]))


def first_steps(sess: Any, fetches: Any, feed: dict, graph: Any) -> MathCheck | None:
    """Run the first two training steps, fetching the exposed loss (and step-1 gradient norm).
    ``None`` -- and no step run -- when the graph exposes no loss.  A step's loss is read before its
    update (which depends on it), so step 1's loss is the loss at the initial values."""
    losses = graph.get_collection(LOSS)
    if not losses:
        return None
    norms = graph.get_collection(GRAD_NORM)
    _, first, norm = sess.run([fetches, losses, norms], feed)
    _, second = sess.run([fetches, losses], feed)
    drawn = random_ops(graph.as_graph_def(), step_op_names([fetches, losses]))
    return MathCheck((_mean(first), _mean(second)), _mean(norm) if norms else None, drawn)


def step_op_names(fetches: Any) -> set[str]:
    """The names of every op a ``Session.run(fetches)`` executes (inputs and control inputs, transitively)."""
    stack = [f if isinstance(f, tf.Operation) else f.op for f in tf.nest.flatten(fetches)]
    seen: set[str] = set()
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
