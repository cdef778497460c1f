"""Per-op work of real models' ops on small graphs: FLOPs, bytes and class, every number worked out by hand.

A multiply-add is 2 FLOPs; bytes are what the op reads and writes (float32: 4 bytes an element).
Built with TensorFlow (never run), hence in the e2e tier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tfprof_towers.projection.opcost import SMALL_OP_BYTES, einsum_flops, op_cost

pytestmark = pytest.mark.slow


def _ops(build: Callable[[Any], Any]) -> dict[str, list[Any]]:
    """The ops of a graph ``build(tf)`` makes, by type."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        build(tf)
    out: dict[str, list[Any]] = {}
    for op in graph.get_operations():
        out.setdefault(op.type, []).append(op)
    return out


def _one(build: Callable[[Any], Any], kind: str) -> Any:
    ops = _ops(build)[kind]
    assert len(ops) == 1, f"{kind}: {len(ops)} ops"
    return ops[0]


def _conv_and_grads(tf: Any, stride: int = 1) -> None:
    x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 2])
    w = tf.compat.v1.placeholder(tf.float32, [3, 3, 2, 5])
    y = tf.nn.conv2d(x, w, strides=stride, padding="SAME")
    tf.gradients(tf.reduce_sum(y), [x, w])


def test_conv2d_and_its_backprops_count_as_the_forward_conv() -> None:
    ops = _ops(_conv_and_grads)
    # output 1x4x4x5 = 80 elements, each 3x3x2 multiply-adds: 2 x 80 x 18 = 2880
    for kind in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        cost = op_cost(ops[kind][0])
        assert (cost.flops, cost.op_class, cost.flops_from) == (2880, "matmul", "tensorflow")
        assert cost.winograd
    # Conv2D reads x (32 floats) and w (90), writes y (80): 202 x 4
    assert op_cost(ops["Conv2D"][0]).bytes == 808


def test_a_strided_conv_is_not_winograd() -> None:
    ops = _ops(lambda tf: _conv_and_grads(tf, stride=2))
    # output 1x2x2x5 = 20 elements: 2 x 20 x 18 = 720
    cost = op_cost(ops["Conv2D"][0])
    assert (cost.flops, cost.winograd) == (720, False)


def test_depthwise_conv_and_its_backprops() -> None:
    def build(tf: Any) -> None:
        x = tf.compat.v1.placeholder(tf.float32, [1, 16, 16, 8])
        w = tf.compat.v1.placeholder(tf.float32, [3, 3, 8, 1])
        y = tf.nn.depthwise_conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
        tf.gradients(tf.reduce_sum(y), [x, w])

    ops = _ops(build)
    # 1x16x16x8 = 2048 outputs, 3x3 multiply-adds each: 2 x 2048 x 9 = 36864, forward and both backprops
    fwd = op_cost(ops["DepthwiseConv2dNative"][0])
    assert (fwd.flops, fwd.flops_from) == (36864, "tensorflow")
    # reads x (2048 floats) and w (72), writes y (2048): 4168 x 4
    assert (fwd.bytes, fwd.op_class) == (16672, "elementwise")
    back_in = op_cost(ops["DepthwiseConv2dNativeBackpropInput"][0])
    back_filter = op_cost(ops["DepthwiseConv2dNativeBackpropFilter"][0])
    assert (back_in.flops, back_in.flops_from, back_in.op_class) == (36864, "formula", "elementwise")
    assert (back_filter.flops, back_filter.op_class) == (36864, "reduction")
    # reads x and dy (2048 floats each) and the filter's shape (4 int32), writes dw (72 floats)
    assert back_filter.bytes == (2048 + 2048 + 72) * 4 + 16


def test_fused_batch_norm_and_its_gradient() -> None:
    def build(tf: Any) -> None:
        x = tf.compat.v1.placeholder(tf.float32, [8, 16, 16, 4])
        scale, offset = tf.ones([4]), tf.zeros([4])
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, is_training=True)
        tf.gradients(tf.reduce_sum(y), [x, scale, offset])

    ops = _ops(build)
    bn, grad = ops["FusedBatchNormV3"][0], ops["FusedBatchNormGradV3"][0]
    x_bytes = 8 * 16 * 16 * 4 * 4  # 8192 elements, 32768 bytes
    per_channel = sum(t.shape.num_elements() * 4 for t in [*bn.inputs[1:], *bn.outputs[1:]]
                      if t.shape.is_fully_defined())
    cost = op_cost(bn)
    # training: 8 FLOPs an element (mean 1, variance 3, normalise 4); x read twice, y written once
    assert (cost.flops, cost.op_class, cost.flops_from) == (8 * 8192, "reduction", "formula")
    assert cost.bytes == 3 * x_bytes + per_channel
    g = op_cost(grad)
    grad_small = sum(t.shape.num_elements() * 4 for t in [*grad.inputs[2:], *grad.outputs[1:]]
                     if t.shape.is_fully_defined())
    # 10 FLOPs an element; dy and x read twice (the reductions' pass, then dx), dx written
    assert (g.flops, g.op_class) == (10 * 8192, "reduction")
    assert g.bytes == 5 * x_bytes + grad_small


def test_pooling_and_its_gradient() -> None:
    def build(tf: Any) -> None:
        x = tf.compat.v1.placeholder(tf.float32, [1, 32, 32, 4])
        y = tf.nn.max_pool2d(x, 2, 2, "VALID")
        tf.gradients(tf.reduce_sum(y), [x])

    ops = _ops(build)
    pool = op_cost(ops["MaxPool"][0])
    # 1x16x16x4 = 1024 outputs, a 2x2 window each: 4096; reads 4096 floats, writes 1024
    assert (pool.flops, pool.bytes, pool.op_class) == (4096, 20480, "elementwise")
    assert pool.flops_from == "tensorflow"
    grad = op_cost(ops["MaxPoolGrad"][0])
    # TensorFlow's count: the pooling again plus one per output: 4096 + 1024;
    # reads x (4096), y (1024), dy (1024), writes dx (4096): 10240 floats
    assert (grad.flops, grad.bytes, grad.op_class) == (5120, 40960, "elementwise")


def test_relu_grad_is_memory_bound_elementwise() -> None:
    def build(tf: Any) -> None:
        x = tf.compat.v1.placeholder(tf.float32, [32, 32])
        tf.gradients(tf.reduce_sum(tf.nn.relu(x)), [x])

    cost = op_cost(_one(build, "ReluGrad"))
    # 1024 elements: reads dy and x, writes dx
    assert (cost.flops, cost.bytes, cost.op_class) == (1024, 3 * 4096, "elementwise")


def test_einsum_and_batch_matmul_count_two_per_multiply_add() -> None:
    def build(tf: Any) -> None:
        a = tf.compat.v1.placeholder(tf.float32, [2, 3, 4])
        b = tf.compat.v1.placeholder(tf.float32, [2, 4, 5])
        tf.einsum("bij,bjk->bik", a, b)
        tf.linalg.matmul(a, b)

    ops = _ops(build)
    # 2 batches x 3x5 outputs x 4 multiply-adds x 2 = 240
    einsum = op_cost(ops["Einsum"][0])
    assert (einsum.flops, einsum.op_class, einsum.flops_from) == (240, "matmul", "formula")
    bmm = op_cost(ops["BatchMatMulV2"][0])
    assert (bmm.flops, bmm.op_class, bmm.flops_from) == (240, "matmul", "tensorflow")
    # attention's shapes, with an ellipsis: 2 x (8 x 4) x 16 x 16 x 32 = 524288
    assert einsum_flops("...qd,...kd->...qk", [[8, 4, 16, 32], [8, 4, 16, 32]]) == 524288


def test_softmax_and_layer_norm_pieces() -> None:
    def build(tf: Any) -> None:
        x = tf.compat.v1.placeholder(tf.float32, [64, 32])
        tf.nn.softmax(x)
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        tf.math.rsqrt(tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True) + 1e-3)

    ops = _ops(build)
    soft = op_cost(ops["Softmax"][0])
    # TensorFlow counts 5 an element: 2048 x 5; reads and writes 2048 floats
    assert (soft.flops, soft.bytes, soft.op_class) == (10240, 16384, "reduction")
    mean = op_cost(ops["Mean"][0])
    # a sum over 2048 inputs into 64 outputs plus a divide each: 2048; reads 2048 floats, writes 64
    # (the reduction axis, a 4-byte constant, is read too)
    assert (mean.flops, mean.bytes, mean.op_class) == (2048, 8192 + 256 + 4, "reduction")
    sqd = op_cost(ops["SquaredDifference"][0])
    # TensorFlow counts 2 an element (subtract, square); reads x and the 64 means, writes 2048
    assert (sqd.flops, sqd.bytes, sqd.op_class) == (4096, 8192 + 256 + 8192, "elementwise")
    rsqrt = op_cost(ops["Rsqrt"][0])  # 64 elements: launch overhead only
    assert (rsqrt.flops, rsqrt.op_class) == (64 * 2, "small")  # TensorFlow counts 2 an element


def test_gather_and_its_gradient_scatter() -> None:
    def build(tf: Any) -> None:
        table = tf.Variable(tf.zeros([1000, 16]))
        ids = tf.compat.v1.placeholder(tf.int32, [100])
        tf.raw_ops.ResourceGather(resource=table.handle, indices=ids, dtype=tf.float32)
        data = tf.compat.v1.placeholder(tf.float32, [100, 16])
        tf.math.unsorted_segment_sum(data, ids, 1000)

    ops = _ops(build)
    gather = op_cost(ops["ResourceGather"][0])
    # 100 rows of 16 floats read and written (6400 bytes each way), 100 int32 indices read
    assert (gather.flops, gather.bytes, gather.op_class) == (0, 2 * 6400 + 400, "elementwise")
    seg = op_cost(ops["UnsortedSegmentSum"][0])
    # one add per input element (1600); reads data, ids and num_segments; the 1000x16 output zeroed
    # and then accumulated into
    assert (seg.flops, seg.bytes, seg.op_class) == (1600, 6400 + 400 + 4 + 2 * 64000, "reduction")


def test_cast_under_mixed_precision() -> None:
    cost = op_cost(_one(lambda tf: tf.cast(tf.compat.v1.placeholder(tf.float32, [64, 64]), tf.float16),
                        "Cast"))
    # 4096 elements: 4 bytes read, 2 written each
    assert (cost.flops, cost.bytes, cost.op_class) == (4096, 4096 * 6, "elementwise")


def test_optimizer_updates_read_and_write_their_variables() -> None:
    def build(tf: Any) -> None:
        var, m, v = (tf.Variable(tf.zeros([64, 64])) for _ in range(3))
        g = tf.compat.v1.placeholder(tf.float32, [64, 64])
        tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=0.1, delta=g)
        tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=0.9,
                                     beta2_power=0.99, lr=0.1, beta1=0.9, beta2=0.99, epsilon=1e-7, grad=g)
        var.assign_sub(g)

    ops = _ops(build)
    grad_bytes = 64 * 64 * 4
    sgd = op_cost(ops["ResourceApplyGradientDescent"][0])
    # var -= lr * g: 2 FLOPs an element; g and lr read, var read and written
    assert (sgd.flops, sgd.bytes, sgd.op_class) == (2 * 4096, grad_bytes + 4 + 2 * grad_bytes, "elementwise")
    adam = op_cost(ops["ResourceApplyAdam"][0])
    # 12 FLOPs an element; g and six scalars read, var, m and v read and written
    assert (adam.flops, adam.bytes) == (12 * 4096, grad_bytes + 6 * 4 + 3 * 2 * grad_bytes)
    sub = op_cost(ops["AssignSubVariableOp"][0])
    # Keras' SGD: var.assign_sub(lr * g): the value and the variable read, the variable written
    assert (sub.flops, sub.bytes) == (4096, 3 * grad_bytes)


def test_scalar_arithmetic_is_a_small_op_and_views_are_free() -> None:
    def build(tf: Any) -> None:
        a = tf.compat.v1.placeholder(tf.float32, [])
        tf.reshape(a * 2.0, [1])

    ops = _ops(build)
    mul = op_cost(ops["Mul"][0])
    assert (mul.flops, mul.bytes, mul.op_class) == (1, 12, "small")
    assert mul.bytes <= SMALL_OP_BYTES
    view = op_cost(ops["Reshape"][0])
    assert (view.flops, view.bytes, view.op_class) == (0, 0, "view")
