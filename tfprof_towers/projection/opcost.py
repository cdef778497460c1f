"""The work of one graph op from its static shapes: FLOPs, bytes read and written, and its class.

Each op's work (:func:`op_cost`) is its FLOPs -- counted as datasheets count peak, a
multiply-add is 2 -- taken from TensorFlow's own ``flops`` statistics (the registry
``tf.compat.v1.profiler`` reads) where it has one for the op, else from this module's
formula (batch norm, depthwise backprops, Einsum, gathers, segment sums, optimizer
updates); the bytes it reads and writes (views -- Reshape, Identity, variable reads,
axis-0 Split -- move nothing; a gather reads only its rows; an update reads and writes
its variable); and its class (matmul, elementwise, reduction, small, view), which picks
the efficiency the hardware profile gives it (:func:`.model.op_seconds`).

Reads TensorFlow ops (imported inside the functions that need it): only the graph children
(:mod:`.graphcost`, :mod:`.strategy_graphs`, :mod:`.keras_graphs`) call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Ops that alias their input (or move nothing) in TensorFlow's runtime.
VIEW_OPS = frozenset({
    "Reshape", "Identity", "ReadVariableOp", "Const", "VarHandleOp", "Placeholder", "NoOp",
    "Shape", "ExpandDims", "Squeeze", "StopGradient", "PlaceholderWithDefault", "IdentityN",
    "VariableV2", "VarIsInitializedOp", "ShapeN", "Size", "Rank", "BroadcastGradientArgs",
})
#: Dense contractions: matrix products and convolutions (the accelerator's matmul rate).
MATMUL_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D",
                        "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "Conv3DBackpropInputV2",
                        "Conv3DBackpropFilterV2"})
#: Ops that reduce along an axis (statistics, bias and batch-norm gradients, softmax rows,
#: scatter-adds): memory-bound, at the profile's reduction efficiency.
REDUCTION_OPS = frozenset({
    "Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax", "ArgMin", "EuclideanNorm", "L2Loss",
    "BiasAddGrad", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
    "FusedBatchNormGradV2", "FusedBatchNormGradV3", "Softmax", "LogSoftmax",
    "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "UnsortedSegmentSum",
    "UnsortedSegmentMax", "SegmentSum", "SparseSegmentSum", "SparseSegmentMean", "Cumsum",
    "DepthwiseConv2dNativeBackpropFilter",
})
#: All-reduce ops, modeled as a ring over their members (NCCL; TF2's collective ops).
COLLECTIVE_OPS = frozenset({"NcclAllReduce", "CollectiveReduceV2", "CollectiveReduceV3"})
#: The op classes, each with its own efficiency in a hardware profile (:func:`.model.op_seconds`):
#: dense contractions, memory-bound elementwise ops, reductions, and small ops whose time is
#: their launch overhead; views cost nothing.
MATMUL, ELEMENTWISE, REDUCTION, SMALL, VIEW = "matmul", "elementwise", "reduction", "small", "view"
OP_CLASSES = (MATMUL, ELEMENTWISE, REDUCTION, SMALL, VIEW)
#: An op that reads and writes at most this many bytes is launch overhead, whatever it computes
#: (a scalar, a shape, a learning rate): at 5 µs and 500 GB/s the overhead moves 2.5 MB.
SMALL_OP_BYTES = 4096
#: FLOPs per element of batch normalisation, counted as datasheets count (a multiply-add is 2):
#: training: mean 1, variance 3 (subtract, square, add), normalise 4 (subtract, scale, shift and
#: the 1/sqrt folded into the scale); its gradient: two reductions (2 + 3) and dx (5).
BATCH_NORM_FLOPS = {"training": 8, "inference": 4, "grad": 10}
#: Optimizer updates: FLOPs per variable element (SGD: var -= lr*g; momentum: accum = m*accum + g,
#: var -= lr*accum; Adam: two moments, bias correction, sqrt, divide, update).
APPLY_FLOPS = {"GradientDescent": 2, "Momentum": 4, "KerasMomentum": 4, "Adam": 12, "AdamWithAmsgrad": 13,
               "RMSProp": 8, "CenteredRMSProp": 11, "Adagrad": 5, "AdagradV2": 5, "Adadelta": 11,
               "Ftrl": 15, "FtrlV2": 17, "AdaMax": 9, "AddSign": 8, "PowerSign": 10}


def tensor_nbytes(t: Any) -> int:
    """Static size of a tensor in bytes; 0 for resources, strings, unknown shapes."""
    import tensorflow as tf

    return 0 if t.dtype in (tf.resource, tf.variant, tf.string) else t.dtype.size * _elements(t)


@dataclass(frozen=True)
class OpCost:
    """One op's work: FLOPs (a multiply-add is 2), bytes read + written, its class, and where the
    FLOP count comes from (``tensorflow``: the profiler's registry; ``formula``: this module)."""

    flops: float
    bytes: float
    op_class: str
    flops_from: str = "formula"
    winograd: bool = False  # a 3x3 stride-1 convolution, which cuDNN runs with Winograd's algorithm


def op_cost(op: Any) -> OpCost:
    """The work of one op from static shapes (dimensions unknown when the graph is built count 0)."""
    kind = op.type
    if kind in VIEW_OPS or (kind == "Split" and bool(op.inputs) and static_int(op.inputs[0]) == 0):
        return OpCost(0.0, 0.0, VIEW)
    nbytes = float(_op_bytes(op))
    counted = registry_flops(op)
    flops = float(counted) if counted is not None else float(_formula_flops(op))
    source = "tensorflow" if counted is not None else "formula"
    if kind in MATMUL_OPS and flops > 0:
        return OpCost(flops, nbytes, MATMUL, source, winograd_eligible(op))
    if nbytes <= SMALL_OP_BYTES:
        return OpCost(flops, nbytes, SMALL, source)
    return OpCost(flops, nbytes, REDUCTION if kind in REDUCTION_OPS else ELEMENTWISE, source)


def winograd_eligible(op: Any) -> bool:
    """Whether ``op`` is a 2-D convolution (or backprop) with a 3x3 filter, stride 1 and no dilation:
    the case cuDNN's Winograd algorithms cover (Lavin & Gray, "Fast Algorithms for Convolutional
    Neural Networks", CVPR 2016; cuDNN 5 and later), which need fewer multiplies than the FLOPs
    counted here."""
    if op.type not in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        return False
    filt = _dims(op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1])
    strides, dilations = list(_attr(op, "strides", [])), list(_attr(op, "dilations", [1, 1, 1, 1]))
    return (len(filt) == 4 and filt[:2] == [3, 3] and all(int(x) == 1 for x in strides)
            and all(int(x) == 1 for x in dilations))


def op_work(op: Any) -> tuple[float, float]:
    """The FLOPs and the bytes read and written of one op, from static shapes (see :func:`op_cost`)."""
    cost = op_cost(op)
    return cost.flops, cost.bytes


def registry_flops(op: Any) -> int | None:
    """The op's FLOPs from TensorFlow's own ``flops`` statistics -- the registry that
    ``tf.compat.v1.profiler`` reads (``ops.get_stats_for_node_def``): MatMul, BatchMatMul,
    Conv2D and its backprops, depthwise Conv2D, pooling and its gradients, Softmax, BiasAdd,
    elementwise arithmetic, reductions.  None where it has no entry for the op or cannot count
    it (unknown shapes, NCHW layouts)."""
    from tensorflow.python.framework import ops as tf_ops
    from tensorflow.python.util import deprecation

    if op.type not in _registered():
        return None
    try:
        with deprecation.silence():  # the registry reads shapes through a TF1-era helper
            value = tf_ops.get_stats_for_node_def(op.graph, op.node_def, "flops").value
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return None if value is None else int(value)


_REGISTERED: list[frozenset[str]] = []


def _registered() -> frozenset[str]:
    """Op types with a ``flops`` statistic in TensorFlow's registry (read once)."""
    if not _REGISTERED:
        import tensorflow.python.profiler.internal.flops_registry  # noqa: F401  (registers its ops)
        from tensorflow.python.framework import ops as tf_ops

        names = tf_ops._stats_registry.list()  # "Type,statistic"
        _REGISTERED.append(frozenset(n.rsplit(",", 1)[0] for n in names if n.endswith(",flops")))
    return _REGISTERED[0]


_GATHERS = frozenset({"GatherV2", "Gather", "ResourceGather", "GatherNd", "ResourceGatherNd"})
_SCATTERS = frozenset({"ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterUpdate",
                       "TensorScatterAdd", "TensorScatterUpdate"})


def _op_bytes(op: Any) -> int:
    """Bytes an op reads and writes: its inputs and outputs, except where the kernel touches less
    (a gather reads only the rows it returns) or more (an update reads and writes its variable
    through a resource handle; batch norm reads its input twice; a segment sum zeroes its output)."""
    kind = op.type
    ins = [tensor_nbytes(t) for t in op.inputs]
    out = sum(tensor_nbytes(t) for t in op.outputs)
    if kind in _GATHERS:  # the gathered rows, read and written, and the indices
        return 2 * out + (ins[1] if len(ins) > 1 else 0)
    if kind in _SCATTERS:  # the updates read, and the rows they land on read and written
        updates = ins[-1] if ins else 0
        return 3 * updates + (ins[1] if len(ins) > 1 else 0)
    if kind.startswith("ResourceApply"):
        # var and slots are read and written through their resource handles
        resources = sum(1 for t in op.inputs if t.dtype.name == "resource")
        return sum(ins) + 2 * resources * max(ins, default=0) + out
    if kind in ("AssignAddVariableOp", "AssignSubVariableOp"):  # read the variable and the value, write
        return 3 * sum(ins)
    if kind == "AssignVariableOp":
        return 2 * sum(ins)
    if kind.startswith("FusedBatchNorm") and not kind.startswith("FusedBatchNormGrad"):
        training = _attr(op, "is_training", True)
        return sum(ins) + (ins[0] if training else 0) + out  # statistics pass, then normalise
    if kind.startswith("FusedBatchNormGrad"):
        return sum(ins) + ins[0] + ins[1] + out  # the reductions' pass over dy and x, then dx
    if kind.startswith("UnsortedSegment") or kind.startswith("SparseSegment") or kind.startswith("Segment"):
        return sum(ins) + 2 * out  # the output zeroed, then accumulated into
    return sum(ins) + out


def _formula_flops(op: Any) -> int:
    """FLOPs of an op TensorFlow's registry does not count (a multiply-add is 2)."""
    from tfprof_towers.capture.placement import op_flops

    kind = op.type
    if kind in MATMUL_OPS - {"Einsum"}:
        return op_flops(op) or 0
    if kind == "Einsum":
        return einsum_flops(op.get_attr("equation").decode(), [_dims(t) for t in op.inputs])
    if kind.startswith("DepthwiseConv2dNative"):  # 2 x kh x kw per element of the forward output
        grad = op.inputs[2] if kind != "DepthwiseConv2dNative" else op.outputs[0]
        filt = op.outputs[0] if kind.endswith("BackpropFilter") else op.inputs[1]
        window = _dims(filt)[:2]
        return 2 * _elements(grad) * math.prod(window) if len(window) == 2 else 0
    if kind.startswith("FusedBatchNormGrad"):
        return BATCH_NORM_FLOPS["grad"] * _elements(op.inputs[0])
    if kind.startswith("FusedBatchNorm"):
        mode = "training" if _attr(op, "is_training", True) else "inference"
        return BATCH_NORM_FLOPS[mode] * _elements(op.inputs[0])
    if kind.startswith("ResourceApply"):
        per = APPLY_FLOPS.get(kind[len("ResourceApply"):], 2)
        return per * max((_elements(t) for t in op.inputs), default=0)
    if kind in ("AssignAddVariableOp", "AssignSubVariableOp"):
        return _elements(op.inputs[1])
    if kind in _GATHERS or kind in ("AssignVariableOp", "Cast", "Transpose", "Tile", "Pad", "Slice",
                                    "ConcatV2", "Pack", "Unpack", "Fill", "ZerosLike", "OnesLike"):
        return 0 if kind != "Cast" else _elements(op.outputs[0])
    if kind in ("UnsortedSegmentSum", "SegmentSum", "UnsortedSegmentMax", "SparseSegmentSum"):
        return _elements(op.inputs[0])
    if kind in ("LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"):
        return 5 * _elements(op.inputs[0])  # as TensorFlow's registry counts Softmax
    if kind in REDUCTION_OPS and op.inputs:
        return _elements(op.inputs[0])
    return sum(_elements(t) for t in op.outputs)


def einsum_flops(equation: str, shapes: list[list[int | None]]) -> int:
    """FLOPs of an einsum: 2 x the product of every index's size for a product of two operands
    (each output element is a sum of products over the contracted indices), else the operand's size."""
    lhs = equation.replace(" ", "").partition("->")[0]
    terms = lhs.split(",")
    if len(terms) != len(shapes) or any(None in s for s in shapes):
        return 0
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if "..." in term:
            head, _, tail = term.partition("...")
            broad = len(shape) - len(head) - len(tail)
            term = head + "".join(chr(0x100 + k) for k in range(broad)) + tail
        if len(term) != len(shape):
            return 0
        for letter, dim in zip(term, shape):
            sizes[letter] = max(sizes.get(letter, 1), int(dim))
    if len(shapes) == 1:
        return math.prod(int(d) for d in shapes[0])
    return 2 * math.prod(sizes.values())


def _dims(t: Any) -> list[int | None]:
    return [] if t.shape.rank is None else t.shape.as_list()


def _attr(op: Any, name: str, default: Any) -> Any:
    try:
        return op.get_attr(name)
    except ValueError:
        return default


def _elements(t: Any) -> int:
    if t.shape.rank is None or any(d is None for d in t.shape.as_list()):
        return 0
    return math.prod(t.shape.as_list())


def static_int(t: Any) -> int | None:
    """A graph tensor's value as an int where it is known when the graph is built, else None."""
    import tensorflow as tf

    try:
        value = tf.get_static_value(t)
    except (TypeError, ValueError, IndexError):
        return None
    return None if value is None else int(value)
