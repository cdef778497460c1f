"""Which ops of a training step draw random numbers: such a step cannot give equal losses in two placements.

Dropout and random augmentation draw per replica: each replica of ``MirroredStrategy`` draws its
own mask for its shard, one device draws one for the whole batch, so even from the same initial
weights and batch the losses differ.  The math check then says "not compared: the step draws random
numbers (`dropout/...`)" instead of ``changed_math`` (:mod:`tfprof_towers.analysis.samemath`).

Reads a ``GraphDef`` (any object with ``node`` and ``library.function[].node_def``, each node with
``name`` and ``op``); no TensorFlow import.
"""

from __future__ import annotations

from typing import Any

#: Op types that draw random numbers besides those named ``Random*``, ``StatelessRandom*``,
#: ``Stateful<distribution>`` and ``Rng*`` (:func:`is_random_op`).
RANDOM_OPS = frozenset({
    "TruncatedNormal", "StatelessTruncatedNormal", "StatelessTruncatedNormalV2",
    "ParameterizedTruncatedNormal", "StatelessParameterizedTruncatedNormal", "Multinomial",
    "StatelessMultinomial", "StatelessShuffle",
    "SampleDistortedBoundingBox", "SampleDistortedBoundingBoxV2", "StatelessSampleDistortedBoundingBox",
    "StatelessRandomBinomial", "StatelessRandomPoisson", "StatelessRandomGammaV2", "StatelessRandomGammaV3",
})
#: ``Stateful*`` ops that are not random: function calls.
_STATEFUL_CALLS = frozenset({"StatefulPartitionedCall"})
#: Random ops a record keeps (the note names the first).
RANDOM_OPS_KEPT = 8


def is_random_op(op_type: str) -> bool:
    """Whether an op of ``op_type`` draws random numbers (seeded or not: each replica draws its own)."""
    if op_type in RANDOM_OPS:
        return True
    if op_type.startswith("Stateful"):
        return op_type not in _STATEFUL_CALLS
    return op_type.startswith(("Random", "StatelessRandom", "Rng"))


def short_scope(name: str) -> str:
    """An op's name as the note shows it: a replica's prefix dropped, the first two scopes kept
    (``replica_1/sequential/dropout/stateless_dropout/...`` -> ``sequential/dropout/...``)."""
    parts = name.split("/")
    if parts and parts[0].startswith("replica_"):
        parts = parts[1:]
    return "/".join(parts[:2]) + ("/..." if len(parts) > 2 else "")


def random_ops(graph_def: Any, only: set[str] | None = None) -> tuple[str, ...]:
    """The random ops of a ``GraphDef`` and of the functions its library holds (a ``tf.function``'s
    nested steps), by :func:`short_scope`, in the order met; ``only``: the top-level nodes to consider
    (a TF1 step's executed ops, not its initialisers)."""
    nodes = [n for n in graph_def.node if only is None or n.name in only]
    for fn in graph_def.library.function:
        nodes.extend(fn.node_def)
    out: dict[str, None] = {}
    for n in nodes:
        if is_random_op(n.op):
            out.setdefault(short_scope(n.name), None)
    return tuple(out)[:RANDOM_OPS_KEPT]

