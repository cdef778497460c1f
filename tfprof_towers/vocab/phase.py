"""Names the timed phases of a capture: the keys of a record's ``phases_s``.

The capture (its families, a Keras ``fit`` and a cluster task) times each phase under these
names; the benchmarks split a run's wall time by them.  Pure data.
"""

from __future__ import annotations

# start-up: TensorFlow's import, sessions, devices and the seed values
TF_IMPORT = "tf_import"
SESSION_INIT = "session_init"
LOAD_VALUES = "load_values"
DEVICES = "devices"
BUILD = "build"
# the first steps: the math check, a tf.function's first call (traced for the placement) and second call
MATH = "math"
FIRST_CALL = "first_call"
SECOND_CALL = "second_call"
# the placement: TF1's one FULL_TRACE step, a tf.function's first call with graph collection, the reading
PLACEMENT_TRACE = "placement_trace"
FIRST_CALL_PLACEMENT = "first_call_placement"
PLACEMENT_EXTRACT = "placement_extract"
# the steps: warm-up, timed without the profiler, profiled with step markers
WARMUP = "warmup"
TIMED = "timed"
PROFILED = "profiled"
# the profiler's start and its collection of the trace
PROFILER_START = "profiler_start"
COLLECT = "collect"
# a Keras model's one ``fit`` call that holds the warm-up, timed and profiled batches
FIT_PHASES = "fit_phases"
# a cluster task: its strategy, server and coordinator, its waits on its peers and the driver, and a
# server task serving until the release
STRATEGY_INIT = "strategy_init"
SERVER_START = "server_start"
COORDINATOR_INIT = "coordinator_init"
WAIT_CAPTURE = "wait_capture"
WAIT_PEERS = "wait_peers"
WAIT_RELEASE = "wait_release"
WAIT_SERVERS = "wait_servers"
SERVING = "serving"
# the profiler-overhead bench's paired blocks in a cluster task (only when the bench asks for them)
OVERHEAD = "overhead_blocks"
