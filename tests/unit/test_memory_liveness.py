"""The memory estimate's walk of a step's tensors (``projection/liveness.py``) on graphs built in code,
with exact expected peaks: views (Reshape, Identity, axis-0 Split) allocate nothing and keep their
input's buffer alive for their readers; in-place ops write into an input's buffer at its last read;
a tensor read on another GPU is copied there, never between CPU devices of one process; a fed input
is the host's; every buffer is counted as the BFC allocator takes it (a multiple of 256 bytes)."""

from __future__ import annotations

from tfprof_towers.projection.liveness import (
    ORDERS,
    OpTensors,
    PeakRange,
    device_order,
    executor_order,
    peak_ranges,
    pool_order,
    rounded,
    trace_order,
    walk_peaks,
)

D, HOST = "/device:GPU:0", "/device:CPU:0"
CPU1, CPU2, GPU1 = "/device:CPU:1", "/device:CPU:2", "/device:GPU:1"


def peaks(ops: list[OpTensors], host: str = HOST) -> dict[str, int]:
    return {d: p for d, (p, _live) in walk_peaks(ops, host).items()}


def test_bfc_rounding() -> None:
    assert [rounded(n) for n in (0, 1, 256, 257, 1000, 4096)] == [0, 256, 256, 512, 1024, 4096]


def test_reshape_then_identity_alias_their_input() -> None:
    """a (1,000 B -> 1,024) -> Reshape -> Identity -> c (400 B -> 512) -> d (4 B -> 256).  The views
    allocate nothing; a's buffer lives until c has read the Identity: the peak is a + c at c."""
    ops = [
        OpTensors("a", "MatMul", D, (1000,)),
        OpTensors("r", "Reshape", D, (1000,), ((0, 0),)),
        OpTensors("i", "Identity", D, (1000,), ((1, 0),)),
        OpTensors("c", "MatMul", D, (400,), ((2, 0),)),
        OpTensors("d", "Sum", D, (4,), ((3, 0),)),
    ]
    result = walk_peaks(ops, HOST)
    assert result[D][0] == 1024 + 512
    assert sorted(result[D][1]) == [("a", 1024), ("c", 512)]  # live at the peak, by producer
    # counted as new buffers (grappler's static estimator does), each view holds a second copy at once
    as_copies = [OpTensors(o.name, "MatMul", o.device, o.outputs, o.inputs) for o in ops]
    assert peaks(as_copies)[D] == 2 * 1024


def test_a_view_keeps_its_input_alive_until_its_last_reader() -> None:
    """a -> Reshape r; b reads a, then e reads r later: a's buffer is live until e."""
    ops = [
        OpTensors("a", "MatMul", D, (1024,)),
        OpTensors("r", "Reshape", D, (1024,), ((0, 0),)),
        OpTensors("b", "MatMul", D, (2048,), ((0, 0),)),
        OpTensors("e", "MatMul", D, (256,), ((1, 0), (2, 0))),
    ]
    assert peaks(ops)[D] == 1024 + 2048 + 256


def test_in_place_ops_write_into_their_input_at_its_last_read() -> None:
    """MatMul -> BiasAdd -> Sigmoid, each read once: one buffer.  A second reader of the MatMul's
    output (Sum, after the Sigmoid) forbids writing into it: the BiasAdd then allocates."""
    chain = [
        OpTensors("mm", "MatMul", D, (4096,)),
        OpTensors("bias", "BiasAdd", D, (4096,), ((0, 0),)),
        OpTensors("act", "Sigmoid", D, (4096,), ((1, 0),)),
        OpTensors("loss", "Mean", D, (4,), ((2, 0),)),
    ]
    assert peaks(chain)[D] == 4096 + 256
    # the buffer is named by the op that wrote it last by the peak
    assert sorted(walk_peaks(chain, HOST)[D][1]) == [("act", 4096), ("loss", 256)]
    shared = [*chain[:3], OpTensors("sum", "Sum", D, (4,), ((0, 0), (2, 0)))]
    assert peaks(shared)[D] == 2 * 4096 + 256


def test_split_on_axis0_slices_its_input() -> None:
    ops = [
        OpTensors("x", "MatMul", D, (4096,)),
        OpTensors("s", "Split", D, (2048, 2048), ((0, 0),), view_of=0),
        OpTensors("u", "MatMul", D, (512,), ((1, 0),)),
        OpTensors("v", "MatMul", D, (512,), ((1, 1),)),
        OpTensors("w", "AddV2", D, (512,), ((2, 0), (3, 0))),  # in place, into u's buffer
    ]
    assert peaks(ops)[D] == 4096 + 512 + 512


def test_a_gpu_reading_another_devices_tensor_gets_a_copy_cpus_share() -> None:
    """x on GPU 0, read by GPU 1 (a copy there) and by a logical CPU device (none)."""
    gpus = [OpTensors("x", "MatMul", D, (1024,)), OpTensors("y", "MatMul", GPU1, (256,), ((0, 0),))]
    assert peaks(gpus) == {D: 1024, GPU1: 1024 + 256}
    cpus = [OpTensors("x", "MatMul", CPU1, (1024,)), OpTensors("y", "MatMul", CPU2, (256,), ((0, 0),))]
    assert peaks(cpus) == {CPU1: 1024, CPU2: 256}


def test_fed_inputs_are_the_hosts_held_values_are_not_walked() -> None:
    ops = [
        OpTensors("input", "Placeholder", CPU1, (4096,), fed=True),
        OpTensors("w", "VariableV2", CPU1, (1024,), held=True),
        OpTensors("mm", "MatMul", CPU1, (512,), ((0, 0), (1, 0))),
    ]
    assert peaks(ops) == {HOST: 4096, CPU1: 512}


def test_a_slice_read_on_another_gpu_crosses_alone() -> None:
    """The host's fed batch (4,096 B) split on axis 0: each GPU gets a copy of its own half."""
    ops = [
        OpTensors("input", "Placeholder", HOST, (4096,), fed=True),
        OpTensors("split", "Split", HOST, (2048, 2048), ((0, 0),), view_of=0),
        OpTensors("t0", "MatMul", D, (256,), ((1, 0),)),
        OpTensors("t1", "MatMul", GPU1, (256,), ((1, 1),)),
    ]
    assert peaks(ops) == {HOST: 4096, D: 2048 + 256, GPU1: 2048 + 256}


def _last_block(device: str) -> list[OpTensors]:
    """A model's last block and its gradient, as a Keras step has it: the activation ``act`` (4,096 B)
    is read by its gradient (``grad``, with ``dy`` made from constants at the step's start) and, through
    a Reshape, by the loss (a Mean); the gradient then feeds the input's gradient ``dx`` (4,096 B)."""
    return [
        OpTensors("dy", "Fill", device, (4096,)),
        OpTensors("mm", "MatMul", device, (4096,)),
        OpTensors("act", "Sigmoid", device, (4096,), ((1, 0),)),  # in place, into mm's buffer
        OpTensors("grad", "SigmoidGrad", device, (4096,), ((2, 0), (0, 0))),
        OpTensors("flat", "Reshape", device, (4096,), ((2, 0),)),
        OpTensors("dx", "MatMul", device, (4096,), ((3, 0),)),
        OpTensors("loss", "Mean", device, (4,), ((4, 0),)),
    ]


def test_a_cpu_executor_runs_views_inline_before_expensive_kernels() -> None:
    """On a CPU device the Reshape runs inline as soon as ``act`` is done, and the loss it makes ready
    joins the queue before ``dx`` (which waits for ``grad``): ``act`` is freed before ``dx`` allocates.
    ``grad`` writes into dy's buffer (read once) both times.  CPU: the peak is grad + act + the loss's
    256 B, at the loss.  GPU: every kernel is inline, in one queue: the loss runs after ``dx``, so
    grad + act + dx are live at ``dx``."""
    cpu = walk_peaks(_last_block(CPU1), HOST)[CPU1]
    assert cpu[0] == 2 * 4096 + 256
    assert sorted(cpu[1]) == [("act", 4096), ("grad", 4096), ("loss", 256)]
    gpu = walk_peaks(_last_block(D), HOST)[D]
    assert gpu[0] == 3 * 4096
    assert sorted(gpu[1]) == [("act", 4096), ("dx", 4096), ("grad", 4096)]


def _gradient_siblings(device: str) -> list[OpTensors]:
    """An activation ``y`` (4,096 B) and the gradient ``dy`` it feeds; ``dy`` makes two readers ready at
    once: the weight gradient ``dw`` (1,024 B, read by nothing) and ``sg = SigmoidGrad(y, dy)``, which
    writes into ``y`` when nothing else reads ``y`` any more; ``dx`` (4,096 B) reads ``sg``."""
    return [
        OpTensors("y", "MatMul", device, (4096,)),
        OpTensors("dy", "MatMul", device, (4096,), ((0, 0),)),
        OpTensors("dw", "MatMul", device, (1024,), ((0, 0), (1, 0))),
        OpTensors("sg", "SigmoidGrad", device, (4096,), ((0, 0), (1, 0))),
        OpTensors("dx", "MatMul", device, (4096,), ((3, 0),)),
    ]


def test_orders_of_a_saturated_cpu_pool() -> None:
    """After ``dy`` the CPU executor runs the last ready expensive kernel (``sg``) inline and hands
    ``dw`` to the pool, which runs it when the chain has ended; readers reversed, ``dw`` runs inline."""
    ops = _gradient_siblings(CPU1)
    assert executor_order(ops) == [0, 1, 2, 3, 4]
    assert pool_order(ops) == pool_order(ops, lifo=False) == [0, 1, 3, 4, 2]
    assert pool_order(ops, reverse=True) == [0, 1, 2, 3, 4]
    assert executor_order(ops, reverse=True) == [0, 1, 3, 2, 4]


def test_a_deferred_sibling_keeps_its_inputs_alive_the_range_of_orders() -> None:
    """Queue order: ``dw`` runs first (y + dy + dw = 9,216 B), then ``sg`` writes into ``y``.  Pool
    order: ``sg`` runs while ``dw`` waits, so ``y`` and ``dy`` are both still read: ``sg`` allocates, and
    ``dx`` too before ``sg`` is freed: y + dy + sg + dx = 16,384 B.  On a GPU every kernel is inline in
    the one queue; readers made ready in reverse run ``sg`` before ``dw``: y + dy + sg + dw = 13,312 B."""
    cpu = peak_ranges(_gradient_siblings(CPU1), HOST)[CPU1]
    assert cpu == PeakRange(low=9216, point=9216, high=16384, high_order="pool newest first")
    peak, live = walk_peaks(_gradient_siblings(CPU1), HOST, pool_order(_gradient_siblings(CPU1)))[CPU1]
    assert (peak, sorted(live)) == (16384, [("dx", 4096), ("dy", 4096), ("sg", 4096), ("y", 4096)])
    gpu = peak_ranges(_gradient_siblings(D), HOST)[D]
    assert gpu == PeakRange(low=9216, point=9216, high=13312, high_order="queue, readers reversed")
    assert ORDERS[0][0] == "queue"  # the point estimate's order


def test_the_order_a_trace_shows_replays_its_peak() -> None:
    """The trace shows ``sg`` and ``dx`` before ``dw`` (a deferred weight gradient): walked in that order
    the peak is the pool's 16,384 B; ``y`` and ``dy``, absent from the trace, take their inputs' time."""
    ops = _gradient_siblings(CPU1)
    order = trace_order(ops, {"sg": 10.0, "dx": 20.0, "dw": 30.0})
    assert order == [0, 1, 3, 4, 2]
    assert walk_peaks(ops, HOST, order)[CPU1][0] == 16384
    assert trace_order(ops, {"dw": 5.0, "sg": 10.0, "dx": 20.0}) == executor_order(ops)


def test_one_devices_executor_running_ahead() -> None:
    """The host reads ``a1`` (CPU:1, after ``x1``) and ``a2`` (CPU:2); ``b2`` (2,048 B) runs on CPU:2 after
    ``a2``.  In the queue's order ``b2`` runs before the host's ``s`` has freed ``a2``: 1,024 + 2,048 B on
    CPU:2.  The first device ahead (the host, then CPU:1) runs ``s`` as soon as ``a2`` is there, before
    ``b2``: 2,048 B.  The last device ahead runs CPU:2's ops first: 3,072 B again."""
    ops = [
        OpTensors("x1", "MatMul", CPU1, (256,)),
        OpTensors("a1", "MatMul", CPU1, (1024,), ((0, 0),)),
        OpTensors("a2", "MatMul", CPU2, (1024,)),
        OpTensors("s", "MatMul", HOST, (256,), ((1, 0), (2, 0))),
        OpTensors("b2", "MatMul", CPU2, (2048,), after=(2,)),
    ]
    assert executor_order(ops) == [0, 2, 1, 4, 3]
    assert device_order(ops) == [0, 1, 2, 3, 4]
    assert device_order(ops, descending=True) == [2, 4, 0, 1, 3]
    orders = (executor_order(ops), device_order(ops), device_order(ops, descending=True))
    assert [walk_peaks(ops, HOST, order)[CPU2][0] for order in orders] == [3072, 2048, 3072]
    assert peak_ranges(ops, HOST)[CPU2] == PeakRange(low=2048, point=3072, high=3072, high_order="queue")
