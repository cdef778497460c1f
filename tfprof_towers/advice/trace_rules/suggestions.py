"""Every trace rule's ``Suggestion:``, written for the framework and the vendor that wrote the trace.

One table per framework (:data:`TENSORFLOW`, :data:`JAX`, :data:`NEUTRAL` for a framework the trace does
not tell) and one of words per vendor (:data:`VENDOR_WORDS`); :func:`suggestion` picks the framework's
text for a rule and fills in the vendor's words.  A JAX trace never gets a TensorFlow API, a ROCm trace
never a CUDA variable, a TPU trace never tensor cores; where the framework or vendor is unknown the
words are neutral.  Adding a framework or vendor is a table here, nothing in the rules.

Keys: ``idle_accelerators``; ``host_bound.untraced`` / ``.input`` / ``.host_compute`` / ``.launch``;
``launch_bound``; ``exposed_copies`` (and ``exposed_copies.slow``); ``accelerator_imbalance``;
``collective_bound.overlap`` / ``.overlapped``; ``precision``.  Placeholders: ``{ops}`` (host ops),
``{slow}`` (the slowest device), ``{slow_gbps}``, and the vendor's words.
"""

from __future__ import annotations

from collections.abc import Mapping

from tfprof_towers.trace.producer import Producer

#: Per vendor: the words the suggestions fill in.
VENDOR_WORDS: dict[str, dict[str, str]] = {
    "nvidia": {
        "visible": "`CUDA_VISIBLE_DEVICES`",
        "monitor": "`nvidia-smi`",
        "tf_threads": " and set `TF_GPU_THREAD_MODE=gpu_private` so each GPU gets its own launch threads",
        "jax_launch": (" On NVIDIA GPUs, XLA's command buffers (CUDA graphs: "
                       "`--xla_gpu_enable_command_buffer` in `XLA_FLAGS`) launch many small kernels at "
                       "once."),
        "jax_overlap": (" On GPUs, XLA's latency-hiding scheduler overlaps collectives with compute "
                        "(`--xla_gpu_enable_latency_hiding_scheduler=true` in `XLA_FLAGS`)."),
        "matrix_units": "on GPUs with tensor cores (Volta and later)",
        "tf_precision": ("`tf.keras.mixed_precision.set_global_policy('mixed_float16')` (or 'mixed_bfloat16' "
                         "on Ampere and later), with loss scaling for a custom loop "
                         "(`tf.keras.mixed_precision.LossScaleOptimizer`)"),
        "pinned": "pageable host memory (pin it)",
    },
    "amd": {
        "visible": "`HIP_VISIBLE_DEVICES` (or `ROCR_VISIBLE_DEVICES`)",
        "monitor": "`rocm-smi` / `amd-smi`",
        "tf_threads": (" and set `TF_GPU_THREAD_MODE=gpu_private` so each GPU gets its own launch threads "
                       "(ROCm builds of TensorFlow read it too)"),
        "jax_launch": (" On ROCm, check the `XLA_FLAGS` that apply (XLA's command buffers, HIP graphs: "
                       "`--xla_gpu_enable_command_buffer`) and the `HIP_*` settings that cut launch latency "
                       "(`HIP_FORCE_DEV_KERNARG=1` puts kernel arguments in device memory)."),
        "jax_overlap": (" On ROCm, XLA's latency-hiding scheduler overlaps collectives with compute "
                        "(`--xla_gpu_enable_latency_hiding_scheduler=true` in `XLA_FLAGS`); RCCL reads "
                        "`NCCL_*` settings."),
        "matrix_units": "on AMD Instinct GPUs (matrix cores; bfloat16 and float16)",
        "tf_precision": ("`tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')` (or 'mixed_float16' "
                         "with loss scaling, `tf.keras.mixed_precision.LossScaleOptimizer`)"),
        "pinned": "pageable host memory (pin it)",
    },
    "google-tpu": {
        "visible": "`TPU_VISIBLE_CHIPS` (with `TPU_CHIPS_PER_PROCESS_BOUNDS` and `TPU_PROCESS_BOUNDS`)",
        "monitor": "`tpu-info`",
        "tf_threads": (" and run several steps per call (Keras `compile(steps_per_execution=...)`, or a loop "
                       "inside the `tf.function`)"),
        "jax_launch": (" On TPUs, run several steps per call (a `jax.lax.fori_loop` or `jax.lax.scan` over "
                       "steps inside one `jax.jit`)."),
        "jax_overlap": "",
        "matrix_units": "on TPUs (whose matrix units compute in bfloat16 natively)",
        "tf_precision": "`tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')`",
        "pinned": "host memory the runtime must stage",
    },
    "unknown": {
        "visible": "the environment variable that makes devices visible to the process (its runtime's)",
        "monitor": "the vendor's device monitor",
        "tf_threads": "",
        "jax_launch": "",
        "jax_overlap": "",
        "matrix_units": "on accelerators with 16-bit matrix units",
        "tf_precision": ("a mixed-precision Keras policy (`tf.keras.mixed_precision.set_global_policy`, "
                         "'mixed_bfloat16' or 'mixed_float16' with loss scaling)"),
        "pinned": "pageable host memory (pin it)",
    },
}

TENSORFLOW: dict[str, str] = {
    "idle_accelerators": (
        "check that the job means to use them: {visible}, the devices given to the strategy "
        "(`tf.distribute.MirroredStrategy(devices=...)`, `tf.config.set_visible_devices`), and for a "
        "multi-worker job that each worker's trace is in the logdir (a trace holds only its own process's "
        "work)."),
    "host_bound.untraced": (
        "for most of those gaps no traced host thread was busy, so the time goes to work this trace does "
        "not show: Python between steps (logging, a `.numpy()` that waits for each step, a loop outside "
        "`tf.function`), another process on the host, or waiting for other workers -- or the step window "
        "spans more than this device's step (separate processes merged into one file).  Trace Python too: "
        "`tf.profiler.experimental.ProfilerOptions(python_tracer_level=1)`."),
    "host_bound.input": (
        "the input pipeline is what the accelerator waits for: end it with `.prefetch(tf.data.AUTOTUNE)`, "
        "give `.map(...)` and `.interleave(...)` `num_parallel_calls=tf.data.AUTOTUNE`, and `.cache()` what "
        "does not change between epochs."),
    "host_bound.host_compute": (
        "{ops} compute on the host while the accelerator waits: a placement bug -- a "
        "`with tf.device('/cpu:0')` around model code, or an op without an accelerator kernel; run them on "
        "the accelerator (remove the scope; `tf.debugging.set_log_device_placement(True)` shows where each "
        "op runs)."),
    "host_bound.launch": (
        "the host cannot issue work fast enough (framework and launch overhead per op): compile the step "
        "with `tf.function(jit_compile=True)` (XLA fuses ops into fewer kernels), use a larger batch per "
        "replica{tf_threads}."),
    "launch_bound": (
        "make fewer, larger kernels: compile the step with `tf.function(jit_compile=True)` so XLA fuses the "
        "small ops, use a larger batch per replica{tf_threads}."),
    "exposed_copies": (
        "overlap the copies with compute and move fewer bytes: `.prefetch(tf.data.AUTOTUNE)` (with a "
        "distribution strategy, `strategy.experimental_distribute_dataset` prefetches to the devices), keep "
        "tensors on the device between steps instead of fetching them back (`.numpy()` in the loop)"),
    "accelerator_imbalance": (
        "give every accelerator the same work: an even share of the batch per replica, the variable update "
        "and gradient reduction spread over all devices rather than on {slow}; if the work is equal, {slow} "
        "itself is slower (clocks, bus slot, another process on it: check {monitor})."),
    "collective_bound.overlap": (
        "overlap the all-reduce with the backward pass and send fewer, larger messages: pack gradients "
        "(`tf.distribute.NcclAllReduce(num_packs=...)`, "
        "`tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...)`), and use a larger batch per "
        "replica so each byte sent buys more compute."),
    "collective_bound.overlapped": (
        "the communication already overlaps compute; send fewer bytes (16-bit gradients with mixed "
        "precision) or use a larger batch per replica so each byte sent buys more compute."),
    "precision": (
        "{matrix_units} train in mixed precision: {tf_precision}; matrix multiplies and convolutions then "
        "run in 16-bit."),
}

JAX: dict[str, str] = {
    "idle_accelerators": (
        "check that the job means to use them: {visible}, what `jax.devices()` lists, and that the "
        "computation is sharded over them (a `jax.sharding.Mesh` with `NamedSharding`, or `shard_map`): a "
        "plain `jax.jit` on unsharded inputs runs on one device; for a multi-process job, that each "
        "process's trace is in the logdir (a trace holds only its own process's work)."),
    "host_bound.untraced": (
        "for most of those gaps no traced host thread was busy, so the time goes to work this trace does "
        "not show: Python between steps (logging, `float(loss)` or `jax.device_get` that waits for each "
        "step, work outside `jax.jit`), another process on the host, or waiting for other processes -- or "
        "the step window spans more than this device's step.  Keep Python work out of the step, and trace "
        "Python too (the JAX profiler's `python_tracer_level`)."),
    "host_bound.input": (
        "the input pipeline is what the accelerator waits for: load and preprocess batches ahead of the "
        "step in background workers (a prefetching data loader such as `grain`), and put the next batch on "
        "the device while the current step runs (`jax.device_put` ahead of the step)."),
    "host_bound.host_compute": (
        "{ops} run on the host while the accelerator waits: move that work into the `jax.jit`-compiled "
        "step, or off the step's path."),
    "host_bound.launch": (
        "the host cannot issue work fast enough (dispatch and launch overhead per call): use fewer, larger "
        "`jax.jit` regions (jit the whole training step, not its pieces), a larger batch, and keep Python "
        "work out of the step (no printing or `float(...)` of device values inside the loop).{jax_launch}"),
    "launch_bound": (
        "make fewer, larger kernels: use fewer, larger `jax.jit` regions (the whole step in one) so XLA "
        "fuses the small ops, a larger batch, and keep Python work out of the step.{jax_launch}"),
    "exposed_copies": (
        "overlap the copies with compute and move fewer bytes: put the next batch on the device while the "
        "current step runs (`jax.device_put` ahead of the step), and keep arrays on the device between "
        "steps instead of fetching them back (`jax.device_get`, `np.asarray(x)` or `float(loss)` in the "
        "loop)"),
    "accelerator_imbalance": (
        "give every device the same work: shard the batch evenly over the mesh (its batch axis over all "
        "devices) and keep no step work pinned to {slow}; if the work is equal, {slow} itself is slower "
        "(clocks, bus slot, another process on it: check {monitor})."),
    "collective_bound.overlap": (
        "overlap the collectives with compute and send fewer bytes: a larger batch per device so each byte "
        "sent buys more compute, gradients in bfloat16, and a sharding that keeps the big tensors where they "
        "are used.{jax_overlap}"),
    "collective_bound.overlapped": (
        "the communication already overlaps compute; send fewer bytes (bfloat16 gradients) or use a larger "
        "batch per device so each byte sent buys more compute."),
    "precision": (
        "{matrix_units} compute in bfloat16: keep the parameters in float32 and run the model in "
        "`jnp.bfloat16` (Flax: `dtype=jnp.bfloat16, param_dtype=jnp.float32`); matrix multiplies and "
        "convolutions then run in 16-bit."),
}

NEUTRAL: dict[str, str] = {
    "idle_accelerators": (
        "check that the job means to use them: {visible}, the devices the framework is given, and for a "
        "multi-process job that each process's trace is in the logdir (a trace holds only its own process's "
        "work)."),
    "host_bound.untraced": (
        "for most of those gaps no traced host thread was busy, so the time goes to work this trace does "
        "not show: Python between steps (logging, reading a value back each step), another process on the "
        "host, or waiting for other processes -- or the step window spans more than this device's step.  "
        "Trace the host's Python too."),
    "host_bound.input": (
        "the input pipeline is what the accelerator waits for: prepare batches ahead of the step in "
        "parallel workers and copy the next one to the device while the current step runs."),
    "host_bound.host_compute": (
        "{ops} compute on the host while the accelerator waits: run them on the accelerator."),
    "host_bound.launch": (
        "the host cannot issue work fast enough (framework and launch overhead per op): compile the step "
        "into fewer, larger kernels (XLA or the framework's graph compiler), use a larger batch, and keep "
        "host work out of the step."),
    "launch_bound": (
        "make fewer, larger kernels: compile the step so that small ops fuse (XLA or the framework's graph "
        "compiler), use a larger batch, and keep host work out of the step."),
    "exposed_copies": (
        "overlap the copies with compute and move fewer bytes: copy the next batch to the device while the "
        "current step runs, and keep tensors on the device between steps instead of reading them back"),
    "accelerator_imbalance": (
        "give every accelerator the same work: an even share of the batch per device, the parameter update "
        "and gradient reduction spread over all devices rather than on {slow}; if the work is equal, {slow} "
        "itself is slower (clocks, bus slot, another process on it: check {monitor})."),
    "collective_bound.overlap": (
        "overlap the collectives with compute and send fewer, larger messages (gradient bucketing), and use "
        "a larger batch per device so each byte sent buys more compute."),
    "collective_bound.overlapped": (
        "the communication already overlaps compute; send fewer bytes (16-bit gradients) or use a larger "
        "batch per device so each byte sent buys more compute."),
    "precision": (
        "{matrix_units} train in mixed precision (bfloat16, or float16 with loss scaling); matrix "
        "multiplies and convolutions then run in 16-bit."),
}

#: Per framework: its table.
TABLES: dict[str, dict[str, str]] = {"tensorflow": TENSORFLOW, "jax": JAX, "unknown": NEUTRAL}

#: Appended to ``exposed_copies`` when the copies are slow (``{slow_gbps}``), per vendor's words.
SLOW_COPIES = ("; at under {slow_gbps} GB/s the copies are small or from {pinned}: batch them into fewer, "
               "larger transfers.")


def suggestion(key: str, producer: Producer, **values: object) -> str:
    """``"Suggestion: ..."`` for rule text ``key``, in the words of ``producer``'s framework and vendor."""
    table = TABLES.get(producer.framework, NEUTRAL)
    words: Mapping[str, str] = VENDOR_WORDS.get(producer.vendor, VENDOR_WORDS["unknown"])
    return "Suggestion: " + table[key].format(**{**words, **{k: str(v) for k, v in values.items()}})


def copies_suggestion(producer: Producer, slow: bool, slow_gbps: float) -> str:
    """The ``exposed_copies`` suggestion, with the slow-copies clause when ``slow``."""
    text = suggestion("exposed_copies", producer)
    if not slow:
        return text + "."
    words = VENDOR_WORDS.get(producer.vendor, VENDOR_WORDS["unknown"])
    return text + SLOW_COPIES.format(slow_gbps=f"{slow_gbps:g}", pinned=words["pinned"])
