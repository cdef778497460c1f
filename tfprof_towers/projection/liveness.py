"""Each device's peak of one step from its ops' tensors, walked in order the way TensorFlow's executor
frees and reuses buffers.  No TensorFlow here: :func:`.graphcost.estimate_memory` builds the ops.

The rules, each TensorFlow's own (``core/common_runtime/executor.cc``, ``OpKernelContext``):

* ops run as soon as their inputs are ready, from one first-in first-out queue
  (:func:`executor_order`: the executor's ``ScheduleReady`` for inexpensive kernels, as GPU kernels are);
  on a CPU device an inexpensive kernel (a view, a shape) runs inline at once, ahead of the expensive
  kernels queued for a thread (:func:`runs_inline`); that is the point estimate, and a GPU's order.
  Which expensive CPU kernel waits in the inter-op pool differs from process to process, so
  :func:`peak_ranges` also walks the orders of a saturated pool (:func:`pool_order`, :data:`ORDERS`)
  and gives each device the least and the most;
* a tensor's buffer is allocated when its op runs and freed when the last op reading it has run
  (the executor drops an input's reference once its consumer finishes);
* a **view** (``Reshape``, ``Identity``, ``Squeeze``, ``ExpandDims``, ``StopGradient``,
  ``Snapshot`` ... and the forwarded identities ``tuple/control_dependency``) allocates nothing:
  its output shares its input's buffer, which then lives until the view's readers are done;
* ``Split``/``SplitV`` along axis 0 allocates nothing either: each part is a slice of its input;
* an **in-place** op (element-wise math, ``BiasAdd``, ``AddN``, the activations' gradients:
  kernels that call ``forward_input_or_allocate_output``) writes into an input's buffer when that
  buffer has the output's size and no other reader left, instead of allocating;
* a tensor read on another device is copied there (its own buffer on the reader's device, the
  tensor's bytes: a slice crosses alone), except between CPU devices of one process, which share
  the sender's buffer;
* a fed input (a ``Placeholder``) is made by the host's allocator; a GPU that reads it gets a copy.

Every buffer is counted as the BFC allocator takes it: rounded up to a multiple of 256 bytes.
The peak of a device is the most bytes its live buffers hold after any op's outputs are allocated
(the op's inputs are still live then).  Buffers allocated before the step (variables, optimizer
slots, constants) are not walked: the caller adds the variables as persistent bytes.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: Ops whose output 0 is a view of input 0 (no allocation).
VIEW_TYPES = frozenset({
    "Reshape", "Identity", "Squeeze", "ExpandDims", "StopGradient", "Snapshot", "PreventGradient",
    "EnsureShape", "CheckNumerics", "PlaceholderWithDefault", "DebugIdentity", "DebugIdentityV2",
})
#: Ops whose every output i is a view of input i.
VIEW_N_TYPES = frozenset({"IdentityN"})
#: Ops that may write their output into an input's buffer (``forward_input_or_allocate_output``).
INPLACE_TYPES = frozenset({
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Pow",
    "SquaredDifference", "BiasAdd", "AddN", "Neg", "Abs", "Sign", "Square", "Sqrt", "Rsqrt", "Exp",
    "Expm1", "Log", "Log1p", "Reciprocal", "Inv", "Floor", "Ceil", "Round", "Rint", "Sigmoid", "Tanh",
    "Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign", "LeakyRelu", "Gelu", "Erf", "Sin", "Cos",
    "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SigmoidGrad", "TanhGrad", "SqrtGrad",
    "RsqrtGrad", "SoftplusGrad", "SoftsignGrad", "LeakyReluGrad", "ReciprocalGrad", "InvGrad",
    "ClipByValue", "Select", "SelectV2", "FloorDiv", "FloorMod", "Mod", "TruncateDiv", "Xdivy",
    "Xlogy", "MulNoNan", "ZerosLike", "OnesLike", "LogicalNot", "LogicalAnd", "LogicalOr",
})
#: Op types made before the step (their buffers are held, not walked) or that hold no tensor bytes.
HELD_TYPES = frozenset({
    "Const", "VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "VarIsInitializedOp",
    "NoOp", "Shape", "ShapeN", "Size", "Rank", "_Arg", "HostConst",
})


@dataclass(frozen=True)
class OpTensors:
    """One op of the step as the walk sees it."""

    name: str
    type: str
    device: str
    outputs: tuple[int, ...]  # bytes of each output (0: none, a resource, an unknown shape)
    inputs: tuple[tuple[int, int], ...] = ()  # data inputs: (index of the producing op in the walk, slot)
    held: bool = False  # made before the step (a captured value, a constant): not walked
    fed: bool = False  # a fed input: made by the host's allocator
    view_of: int | None = None  # every output is a slice of this input's buffer (``Split`` on axis 0)
    after: tuple[int, ...] = ()  # control inputs: ops (indices in the walk) that must run first


@dataclass
class _Buffer:
    device: str
    nbytes: int
    readers: int = 0
    writers: list[tuple[int, str]] = field(default_factory=list)  # (when, op): who wrote it, in order
    born: int = 0
    died: int | None = None  # when it was freed (None: live at the end)

    @property
    def freed(self) -> bool:
        return self.died is not None

    def writer_at(self, t: int) -> str:
        """The op whose output the buffer held at time ``t``."""
        return next((op for when, op in reversed(self.writers) if when <= t), self.writers[0][1])


@dataclass
class _Walk:
    """The buffers, each device's bytes live, and when each device peaked (a clock of events, so
    that what was live at a peak is found once, at the end: :meth:`live_at_peak`)."""

    live: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    peak_at: dict[str, int] = field(default_factory=dict)
    buffers: list[_Buffer] = field(default_factory=list)
    clock: int = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def allocate(self, device: str, nbytes: int, producer: str, readers: int) -> int:
        nbytes = rounded(nbytes)
        t = self.tick()
        self.buffers.append(_Buffer(device, nbytes, readers, [(t, producer)], born=t))
        self.live[device] = self.live.get(device, 0) + nbytes
        return len(self.buffers) - 1

    def rewrite(self, b: int, producer: str) -> None:
        """An in-place op wrote its output into buffer ``b``."""
        self.buffers[b].writers.append((self.tick(), producer))

    def release(self, b: int) -> None:
        buf = self.buffers[b]
        buf.readers -= 1
        if buf.readers <= 0 and not buf.freed:
            buf.died = self.tick()
            self.live[buf.device] -= buf.nbytes

    def mark(self, devices: set[str]) -> None:
        t = self.tick()
        for d in devices:
            if self.live.get(d, 0) > self.peak.get(d, -1):
                self.peak[d] = self.live.get(d, 0)
                self.peak_at[d] = t

    def live_at_peak(self, device: str) -> list[tuple[str, int]]:
        """The buffers of ``device`` live at its peak: (the op that had written it then, bytes)."""
        t = self.peak_at.get(device)
        if t is None:
            return []
        return [(b.writer_at(t), b.nbytes) for b in self.buffers
                if b.device == device and b.nbytes > 0 and b.born <= t and (b.died is None or b.died > t)]


#: TensorFlow's BFC allocator hands out multiples of 256 bytes (``kMinAllocationSize``).
ALLOCATION_UNIT = 256


def rounded(nbytes: int) -> int:
    """The bytes the BFC allocator takes for ``nbytes``: rounded up to :data:`ALLOCATION_UNIT`."""
    return -(-nbytes // ALLOCATION_UNIT) * ALLOCATION_UNIT if nbytes > 0 else 0


def is_cpu(device: str) -> bool:
    """A CPU device (``/device:CPU:1``, ``/cpu:0``): logical CPU devices of one process share memory."""
    return "cpu" in device.lower().rsplit("/", 1)[-1]


def _shared(a: str, b: str) -> bool:
    """Whether an op on device ``b`` uses a buffer of device ``a`` as it is (no copy)."""
    return a == b or (is_cpu(a) and is_cpu(b))


#: Op types whose CPU kernel is never expensive (``OpKernel::IsExpensive`` is false): the CPU executor
#: runs them inline, ahead of the expensive ops waiting for a thread.
INLINE_TYPES = VIEW_TYPES | VIEW_N_TYPES | HELD_TYPES | frozenset({"Placeholder", "_Send", "_Recv"})


def runs_inline(op: OpTensors) -> bool:
    """Whether TensorFlow's CPU executor runs ``op`` inline as soon as it is ready (an inexpensive
    kernel on a CPU device); every GPU kernel is inexpensive, so GPU ops keep the one queue's order."""
    return is_cpu(op.device) and op.type in INLINE_TYPES


def executor_order(ops: Sequence[OpTensors], reverse: bool = False) -> list[int]:
    """The order TensorFlow's executor runs ``ops`` in when each runs as soon as its inputs are ready:
    one ready queue, first in first out (``ExecutorState::ScheduleReady`` with inexpensive kernels, as
    every GPU kernel is); an op's readers join the queue in the order of ``ops`` when its last input
    arrives.  So an op that needs only variables (an optimizer's ``beta * m``) runs at the step's start
    and its output waits for the gradient.  On a CPU device an inexpensive kernel (a view, a shape:
    :func:`runs_inline`) goes to the executor's inline queue, which runs before the queue of expensive
    kernels waiting for a thread: a view of a tensor (and a reader it makes ready) is done before the
    expensive readers queued beside it.  ``reverse``: an op's readers join in the reverse order."""
    readers, pending = _ready_graph(ops, reverse)
    queue = [i for i, n in enumerate(pending) if n == 0]
    inline: list[int] = []
    order: list[int] = []
    head = 0
    while inline or head < len(queue):
        if inline:
            i = inline.pop(0)
        else:
            i = queue[head]
            head += 1
        order.append(i)
        for r in readers[i]:
            pending[r] -= 1
            if pending[r] == 0:
                (inline if runs_inline(ops[r]) else queue).append(r)
    seen = set(order)
    return order + [i for i in range(len(ops)) if i not in seen]  # a cycle (never in a step): as given


def _ready_graph(ops: Sequence[OpTensors], reverse: bool) -> tuple[list[list[int]], list[int]]:
    """Each op's readers (in the order of ``ops``, or reversed) and how many producers it waits for."""
    readers: list[list[int]] = [[] for _ in ops]
    pending = []
    for i, op in enumerate(ops):
        producers = sorted({src for src, _ in op.inputs} | set(op.after))  # a tensor read twice counts once
        pending.append(len(producers))
        for j in producers:
            readers[j].append(i)
    if reverse:
        readers = [r[::-1] for r in readers]
    return readers, pending


def pool_order(ops: Sequence[OpTensors], lifo: bool = True, reverse: bool = False) -> list[int]:
    """The order TensorFlow's CPU executor runs ``ops`` in when its one inter-op thread is saturated:
    each op that finishes makes its readers ready (``ExecutorState::ScheduleReady``); the inexpensive
    ones (:func:`runs_inline`; every GPU kernel) join the thread's inline queue, the last expensive one
    runs inline too when that queue is empty, and the other expensive ones are handed to the pool, which
    runs them only when the inline chain has ended: the newest first (``lifo``: Eigen's pool takes a
    worker's own tasks from the front) or the oldest first (a thread that steals takes from the back).
    ``reverse``: readers become ready in the reverse order of ``ops`` (TensorFlow's order of a node's
    out-edges follows pointer hashes beyond 8 edges), so another sibling is the one deferred.

    A deferred expensive sibling keeps its inputs alive while the chain runs on: an activation that a
    weight gradient still reads cannot be the buffer its ``SigmoidGrad`` writes into."""
    readers, pending = _ready_graph(ops, reverse)
    pool = deque(i for i, n in enumerate(pending) if n == 0)  # the step's roots, handed to the pool in order
    order: list[int] = []
    while pool:
        inline = deque([pool.popleft()])
        while inline:
            i = inline.popleft()
            order.append(i)
            expensive = []
            for r in readers[i]:
                pending[r] -= 1
                if pending[r] == 0:
                    (expensive if is_expensive(ops[r]) else inline).append(r)
            if expensive and not inline:
                inline.append(expensive.pop())
            if lifo:
                pool.extendleft(expensive)  # the last handed over is the first taken
            else:
                pool.extend(expensive)
    seen = set(order)
    return order + [i for i in range(len(ops)) if i not in seen]


def trace_order(ops: Sequence[OpTensors], start: Mapping[str, float]) -> list[int]:
    """The order a run's own trace shows: each time, of the ops whose inputs are ready, the one that
    started first there (``start``: op name -> its start in one step); an op the trace does not show
    (a view folded away, a constant) takes the time its last input became ready.  Walking a step in it
    (:func:`walk_peaks`) explains a measured peak that differs from the estimate: the buffer rules are
    the same, only the executor's order differs."""
    readers, pending = _ready_graph(ops, reverse=False)
    ready: list[tuple[float, int]] = []

    def push(i: int, t: float) -> None:
        heapq.heappush(ready, (start.get(ops[i].name, t), i))

    for i, n in enumerate(pending):
        if n == 0:
            push(i, float("-inf"))
    order: list[int] = []
    while ready:
        t, i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            pending[r] -= 1
            if pending[r] == 0:
                push(r, t)
    seen = set(order)
    return order + [i for i in range(len(ops)) if i not in seen]


def device_order(ops: Sequence[OpTensors], descending: bool = False) -> list[int]:
    """The order when one device's executor runs ahead of the others: of the ready ops, one on the
    first device (by name; the last with ``descending``) runs first, each device's ops first in first
    out.  Each device's partition has an executor of its own; which one runs ahead decides which side
    of a cross-device reader waits: a tower whose gradient the host reduces right away frees it early,
    the tower that ran ahead holds its own until the other's arrives."""
    devices = sorted({op.device for op in ops}, reverse=descending)
    rank = {d: k for k, d in enumerate(devices)}
    readers, pending = _ready_graph(ops, reverse=False)
    ready: list[tuple[int, int, int]] = []
    seq = 0

    def push(i: int) -> None:
        nonlocal seq
        heapq.heappush(ready, (rank[ops[i].device], seq, i))
        seq += 1

    for i, n in enumerate(pending):
        if n == 0:
            push(i)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)[2]
        order.append(i)
        for r in readers[i]:
            pending[r] -= 1
            if pending[r] == 0:
                push(r)
    seen = set(order)
    return order + [i for i in range(len(ops)) if i not in seen]


def is_expensive(op: OpTensors) -> bool:
    """Whether TensorFlow's executor hands ``op`` to the inter-op pool rather than running it inline: an
    expensive kernel on a CPU device (every GPU kernel is inexpensive)."""
    return is_cpu(op.device) and op.type not in INLINE_TYPES


#: The orders the estimate's range walks: the executor's queue in graph order (the point estimate, and
#: a GPU's), the same with readers made ready in reverse, a saturated CPU pool taking the deferred
#: kernels newest first or oldest first, each with readers in either order, and one device's executor
#: running ahead of the others (the first device, or the last).
ORDERS: tuple[tuple[str, Callable[[Sequence[OpTensors]], list[int]]], ...] = (
    ("queue", lambda ops: executor_order(ops)),
    ("queue, readers reversed", lambda ops: executor_order(ops, reverse=True)),
    ("pool newest first", lambda ops: pool_order(ops, lifo=True)),
    ("pool newest first, readers reversed", lambda ops: pool_order(ops, lifo=True, reverse=True)),
    ("pool oldest first", lambda ops: pool_order(ops, lifo=False)),
    ("pool oldest first, readers reversed", lambda ops: pool_order(ops, lifo=False, reverse=True)),
    ("first device ahead", lambda ops: device_order(ops)),
    ("last device ahead", lambda ops: device_order(ops, descending=True)),
)


@dataclass(frozen=True)
class PeakRange:
    """One device's peak of the step's tensors over :data:`ORDERS`: the least, the point estimate (the
    queue's order) and the most, with the order that gave the most."""

    low: int
    point: int
    high: int
    high_order: str


def peak_ranges(ops: Sequence[OpTensors], host: str) -> dict[str, PeakRange]:
    """Per device, its :class:`PeakRange`: :func:`walk_peaks` in each of :data:`ORDERS`."""
    walks = [(name, walk_peaks(ops, host, order(ops))) for name, order in ORDERS]
    devices = sorted({d for _, w in walks for d in w})
    out = {}
    for d in devices:
        each = [(w.get(d, (0, []))[0], name) for name, w in walks]
        high, high_order = max(each, key=lambda x: x[0])  # the first order that reaches the most
        out[d] = PeakRange(min(p for p, _ in each), each[0][0], high, high_order)
    return out


def walk_peaks(ops: Sequence[OpTensors], host: str, order: Sequence[int] | None = None
               ) -> dict[str, tuple[int, list[tuple[str, int]]]]:
    """Per device: (peak bytes of the step's tensors, the buffers live at the peak as (op, bytes)).

    ``ops``: every producer before its readers; walked in ``order`` (default: :func:`executor_order`;
    any order that runs every producer before its readers).  ``host``: the device whose allocator makes
    fed inputs.
    """
    readers, readers_on = _readers(ops)
    walk = _Walk()
    where: dict[tuple[int, int], int] = {}  # (op, slot) -> buffer
    copies: dict[tuple[int, str, tuple[int, int]], int] = {}  # (buffer, device, tensor) -> its copy
    for i in executor_order(ops) if order is None else order:
        op = ops[i]
        if op.held:
            continue
        touched = {op.device}
        ins = [_input_buffer(walk, where, copies, readers_on, ops, src, op.device, touched)
               for src in op.inputs]
        ins_by_slot = dict(zip(op.inputs, ins))
        for slot, nbytes in enumerate(op.outputs):
            n_read = readers.get((i, slot), 0)
            view = _viewed(op, slot)
            if view is not None and view < len(op.inputs):  # a view: shares its input's buffer, if any
                b = ins_by_slot.get(op.inputs[view])
                if b is not None:
                    walk.buffers[b].readers += n_read
                    where[(i, slot)] = b
                continue
            if nbytes <= 0:
                continue
            reuse = _reusable(walk, op, ins, nbytes) if slot == 0 else None
            if reuse is not None:
                walk.buffers[reuse].readers += n_read
                walk.rewrite(reuse, op.name)
                where[(i, slot)] = reuse
                continue
            device = host if op.fed else op.device
            where[(i, slot)] = walk.allocate(device, nbytes, op.name, max(n_read, 1))
            touched.add(device)
            if n_read == 0:  # nothing reads it (a fetch, an unused output): freed after the op
                walk.mark(touched)
                walk.release(where[(i, slot)])
        walk.mark(touched)
        for b in ins:
            if b is not None:
                walk.release(b)
    return {d: (p, walk.live_at_peak(d)) for d, p in walk.peak.items()}


def _readers(ops: Sequence[OpTensors]
             ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int, str], int]]:
    """How many data inputs read each (op, slot), in all and per reading device: the references the
    executor counts."""
    out: dict[tuple[int, int], int] = {}
    on: dict[tuple[int, int, str], int] = {}
    for op in ops:
        if op.held:
            continue
        for src in op.inputs:
            out[src] = out.get(src, 0) + 1
            on[(*src, op.device)] = on.get((*src, op.device), 0) + 1
    return out, on


def _viewed(op: OpTensors, slot: int) -> int | None:
    """The input that output ``slot`` of ``op`` views, or None."""
    if op.view_of is not None:
        return op.view_of
    if op.type in VIEW_TYPES and slot == 0:
        return 0
    if op.type in VIEW_N_TYPES:
        return slot
    return None


def _input_buffer(walk: _Walk, where: Mapping[tuple[int, int], int],
                  copies: dict[tuple[int, str, tuple[int, int]], int],
                  readers_on: Mapping[tuple[int, int, str], int], ops: Sequence[OpTensors],
                  src: tuple[int, int], device: str, touched: set[str]) -> int | None:
    """The buffer ``device`` reads for ``src``: the producer's, or its copy on ``device`` (made at its
    first reader there, freed after its last)."""
    b = where.get(src)
    if b is None:  # held (a variable, a constant) or of no bytes
        return None
    buf = walk.buffers[b]
    if _shared(buf.device, device):
        return b
    key = (b, device, src)  # a slice (an axis-0 Split's part) crosses alone: its own bytes
    if key not in copies:
        nbytes = ops[src[0]].outputs[src[1]] if src[1] < len(ops[src[0]].outputs) else buf.nbytes
        copies[key] = walk.allocate(device, nbytes, ops[src[0]].name, readers_on[(*src, device)])
        touched.add(device)
        walk.release(b)  # the send is one reader of the source
    return copies[key]


def _reusable(walk: _Walk, op: OpTensors, ins: Sequence[int | None], nbytes: int) -> int | None:
    """An input buffer ``op`` may write its output into, or None (the first that qualifies)."""
    if op.type not in INPLACE_TYPES:
        return None
    for b in ins:
        if b is None:
            continue
        buf = walk.buffers[b]
        fits = buf.nbytes == rounded(nbytes) and _shared(buf.device, op.device)
        if buf.readers == 1 and fits and not buf.freed:
            return b
    return None
