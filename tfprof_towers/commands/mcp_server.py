"""The MCP server behind `tfprof-towers mcp`: each tool parses its arguments with the command's own parser
and returns the document the command's ``--json`` prints.

Every tool goes through :func:`answer`: the document as JSON text (strict, as ``--json`` prints it) and as
structured content (a document that is a list, ``hardware``'s, is ``{"result": [...]}`` there); a
:class:`~tfprof_towers.vocab.errors.TowersError` or a usage error is a tool error (``isError``) whose text
is the line the command prints on stderr, and the server goes on.  Tools run one at a time, each in the
SDK's worker thread.  Paths are only read: ``--html``, ``export`` and ``project``'s write of
``projection.json`` are not reachable.  The command modules, pandas and DuckDB are imported by the tool
that needs them; TensorFlow never (``project`` builds its graphs in a supervised child).
"""

import contextlib
import io
import json
import shlex
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from tfprof_towers import __version__
from tfprof_towers.commands.mcp_stdio import INSTRUCTIONS, SERVER_NAME
from tfprof_towers.rundir.paths import json_text
from tfprof_towers.vocab.errors import TowersError

#: Most rows the ``sql`` tool returns (the command prints every row).
MAX_ROWS = 5000
#: Tools run one at a time: an analysis takes the machine's memory and cores.
_LOCK = threading.Lock()
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                             open_world_hint=False)


class UsageError(TowersError):
    """Arguments the command's parser refused; the message is the parser's own line."""


def answer(build: Callable[[], Any]) -> CallToolResult:
    """``build()``'s document as a tool result, or its failure as a tool error (module docstring)."""
    with _LOCK:
        try:
            doc = build()
        except UsageError as exc:
            return _error(str(exc))
        except TowersError as exc:
            return _error(f"tfprof-towers: error: {exc}")
        except MemoryError:
            return _error("tfprof-towers: error: out of memory (the input is too large for the memory "
                          "available)")
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            return _error(f"tfprof-towers: error: {where}{exc.strerror or exc}")
    text = json_text(doc)
    structured = json.loads(text)
    if not isinstance(structured, dict):  # structured content is an object
        structured = {"result": structured}
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _error(line: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)


def parse(command: str, argv: Sequence[str]) -> Any:
    """``argv`` parsed by ``command``'s own parser; its refusal is a :class:`UsageError` with its line."""
    from tfprof_towers.cli import build_parser

    parser = build_parser(command)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args([command, *argv])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise UsageError(lines[-1] if lines else f"tfprof-towers {command}: error: bad arguments") from None


def _opt(flag: str, value: Any) -> list[str]:
    """``[flag, value]``, or nothing for a value not given."""
    return [] if value is None else [flag, str(value)]


# --------------------------------------------------------------------------------------------------
# The documents (plain functions: the unit tests call them without a client)


def analyze_doc(path: str, run: str | None = None) -> dict[str, Any]:
    """What ``analyze PATH [--run RUN] --json`` prints."""
    from tfprof_towers.commands.analyze import document

    doc, _ = document(parse("analyze", ["--json", *_opt("--run", run), "--", path]))
    return doc


def diff_doc(base: str, new: str, fail_if_slower: float | None = None) -> dict[str, Any]:
    """What ``diff BASE NEW [--fail-if-slower PCT] --json`` prints (the gate's verdict in the document)."""
    from tfprof_towers.commands.diff import document

    return document(parse("diff", ["--json", *_opt("--fail-if-slower", fail_if_slower), "--", base, new]))


def project_doc(hardware: str, run_dir: str | None = None, variants: str | Sequence[str] | None = None,
                preset: str | None = None, batch: int | None = None,
                keras_model: str | None = None) -> dict[str, Any]:
    """What ``project [RUN_DIR] --hardware NAME ... --json`` prints, RUN_DIR only read; ``keras_model``:
    the user's Keras model under each tf2-strategy variant instead of the seed."""
    from tfprof_towers.commands.project import document

    names = variants if variants is None or isinstance(variants, str) else ",".join(variants)
    argv = ["--json", "--hardware", hardware, *_opt("--preset", preset), *_opt("--batch", batch),
            *_opt("--variants", names), *_opt("--keras-model", keras_model)]
    args = parse("project", [*argv, *(["--", run_dir] if run_dir is not None else [])])
    doc, _, _ = document(args, write=False)
    return doc


def sql_doc(paths: str | Sequence[str], query: str) -> dict[str, Any]:
    """What ``sql PATH... QUERY --json`` prints; a result of more than :data:`MAX_ROWS` rows is refused
    (an agent cannot read it: it should aggregate, or add a LIMIT)."""
    from tfprof_towers.commands.sql import result, result_doc

    items = [paths] if isinstance(paths, str) else list(paths)
    if not items:
        raise UsageError("tfprof-towers sql: error: give at least one path")
    df, _ = result(parse("sql", ["--json", "--", *items, query]))
    if len(df) > MAX_ROWS:
        raise TowersError(f"the result has {len(df):,} rows, more than the {MAX_ROWS:,} this tool returns: "
                          "aggregate (GROUP BY) or add a LIMIT; `tfprof-towers sql ... --csv` prints all")
    return result_doc(df)


def run_summary_doc(run_dir: str) -> dict[str, Any]:
    """:func:`~tfprof_towers.rundir.digest.run_digest` of the run's ``summary.json`` (of its analysis in
    memory where it has none yet: nothing is written)."""
    from tfprof_towers.rundir.digest import run_digest
    from tfprof_towers.rundir.paths import RunDir, is_run_dir, read_json
    from tfprof_towers.rundir.summary import Summary
    from tfprof_towers.trace.locate import check_path

    p = Path(run_dir)
    check_path(p)
    if not (p.is_dir() and is_run_dir(p)):
        raise TowersError(f"{p}: not a run directory (no run.json); for a trace or a logdir call analyze, "
                          "and to make a run, run the command profile_command returns")
    rd = RunDir(p)
    if rd.summary_json.is_file():
        summary = Summary.from_json(read_json(rd.summary_json), where=str(rd.summary_json))
    else:
        from tfprof_towers.session.report import analyze_run

        summary = analyze_run(rd)[0]
    return run_digest(summary)


def hardware_doc(name: str | None = None) -> Any:
    """What ``hardware [NAME] --json`` prints (without a name, a list)."""
    from tfprof_towers.commands.hardware import document

    return document(parse("hardware", ["--json", *(["--", name] if name is not None else [])]))


def profile_command_doc(variants: str | Sequence[str] | None = None, preset: str | None = None,
                        keras_model: str | None = None, variant_files: Sequence[str] = (),
                        accelerators: int | None = None, project_on: str | None = None,
                        out: str | None = None) -> dict[str, Any]:
    """The `profile` command for these options, checked by its parser (and the preset and built-in
    names), not run."""
    from tfprof_towers.variants.config import get_preset, parse_variant_names

    names = variants if variants is None or isinstance(variants, str) else ",".join(variants)
    if preset is not None:
        get_preset(preset)
    if names is not None:
        parse_variant_names(names)
    argv = [*_opt("--preset", preset), *_opt("--variants", names), *_opt("--keras-model", keras_model),
            *(x for f in variant_files for x in ("--variant-file", f)), *_opt("--accelerators", accelerators),
            *_opt("--project-on", project_on), *_opt("--out", out)]
    parse("profile", argv)
    command = shlex.join(["tfprof-towers", "profile", *argv])
    return {
        "command": command,
        "runs": "in the user's terminal, not here: each variant is one training step of the real model in "
                "its own TensorFlow process, minutes in all",
        "then": "it prints the run directory (reports/<time>/, or --out DIR; reports/latest is the newest): "
                "pass it to run_summary",
    }


# --------------------------------------------------------------------------------------------------
# The tools: what an agent sees (names, descriptions, parameters)

def analyze(
    path: Annotated[str, Field(description="an *.xplane.pb trace, a TensorBoard logdir (every host of its "
                                           "newest run) or a tfprof-towers run directory")],
    run: Annotated[str | None, Field(description="which profile run of a logdir, or which variant of a run "
                                                 "directory (default: the newest run; a run directory "
                                                 "needs it)")] = None,
) -> CallToolResult:
    """Where each device's time goes in one profile, and what to change: call this first for a trace.

    Answers `tfprof-towers analyze PATH --json`: the steps and step time, per device the exclusive wall
    breakdown (compute, host->device, device->host and peer copies, send/recv, framework overhead, idle,
    and the idle split: waiting on the host or between kernels), per link bytes and GB/s, per task the
    step start/end and time in collectives, memory per device (peak, capacity, largest live op), and
    the findings of the trace rules, most severe first, each with a suggestion. Reads any TensorFlow or
    JAX trace (NVIDIA, AMD, TPU). For a run directory, prefer run_summary first."""
    return answer(lambda: analyze_doc(path, run))


def diff(
    base: Annotated[str, Field(description="a run directory, RUN_DIR/variants/NAME, a trace or a logdir "
                                           "(LOGDIR:RUN picks a run of a logdir)")],
    new: Annotated[str, Field(description="the same kind of path as base")],
    fail_if_slower: Annotated[float | None, Field(
        description="a percentage: the result's gate says 'slower' when a variant's median step is more "
                    "than this much slower, beyond noise")] = None,
) -> CallToolResult:
    """What changed between two runs, two variants or two traces, and whether it is beyond noise.

    Answers `tfprof-towers diff BASE NEW --json`: per variant the step time of both (a Mann-Whitney U
    test: changed beyond noise when p < 0.05), the wall time per device and category, the ops, the
    placement, the links, the findings and the math that changed. With fail_if_slower, its "gate" says
    whether the CI gate would fail (as a result, not as an error)."""
    return answer(lambda: diff_doc(base, new, fail_if_slower))


def project(
    hardware: Annotated[str, Field(description="a built-in hardware profile (see the hardware tool) or a "
                                               "profile's TOML file")],
    run_dir: Annotated[str | None, Field(description="a run directory whose variants, preset and "
                                                     "measurements calibrate the projection (read only: "
                                                     "projection.json is not written)")] = None,
    variants: Annotated[list[str] | str | None, Field(description="built-in variants to project (names, or "
                                                                   "one comma-separated string); default: "
                                                                   "the run's, or every built-in")] = None,
    preset: Annotated[str | None, Field(description="workload size: tiny, cpu or seed (default: the run's, "
                                                    "or seed)")] = None,
    batch: Annotated[int | None, Field(description="the preset's batch size instead")] = None,
    keras_model: Annotated[str | None, Field(description="a Python file defining the user's Keras model, "
                                                         "projected under each strategy (where this "
                                                         "build's project takes --keras-model)")] = None,
) -> CallToolResult:
    """Projected step time and memory fit of each placement on GPUs that are not at hand.

    Answers `tfprof-towers project [RUN_DIR] --hardware NAME --json`: per variant two bounds
    (copies overlapped with compute, and serialised), the bottleneck, the peak memory per device and
    whether it fits, a ranking and a recommendation with its reason. Every number is projected, not
    measured. Builds the graphs in a child process (tens of seconds), never runs a training step."""
    return answer(lambda: project_doc(hardware, run_dir, variants, preset, batch, keras_model))


def sql(
    paths: Annotated[list[str], Field(description="one or more traces, logdirs or run directories; with "
                                                  "several, every view has a `run` column (each path's "
                                                  "name)")],
    query: Annotated[str, Field(description="a DuckDB SQL query (read-only)")],
) -> CallToolResult:
    """Any figure the other tools do not hold, in DuckDB SQL over the profile's frames.

    Answers `tfprof-towers sql PATH... QUERY --json`: {"columns": [...], "rows": [{...}]}. Views (the
    frames of tfprof_towers.load, in seconds): steps(variant, host, device, step, start_s, end_s),
    wall(variant, host, device, step, category, seconds: exclusive, sums to the step), total(... category,
    count, seconds, bytes), idle(... kind, seconds), links(variant, host, src, dst, kind, steps, count,
    bytes, seconds, gbps, measured), memory (allocator events), events (one row per event: large),
    and for run directories variants(variant, status, median_s, p10_s, p90_s, speedup, rank,
    recommended, ...), findings(variant, rule, severity, message, suggestion), step_times, losses,
    placement(variant, node, op_type, device, requested, flops, source_file, source_line); runs lists
    the paths. Only the views the query names are built. The query cannot write or read other files.
    At most 5,000 rows come back: aggregate, or add a LIMIT."""
    return answer(lambda: sql_doc(paths, query))


def run_summary(
    run_dir: Annotated[str, Field(description="a run directory written by `tfprof-towers profile` "
                                              "(reports/<time>/ or reports/latest)")],
) -> CallToolResult:
    """The answer of a profile run: call this first for a run directory.

    From its summary.json: the ranking of the placements (median un-profiled step, p10/p90, speedup over
    single), the recommendation with its reason (measured, or projected on target GPUs), the findings
    most severe first (each with the `with tf.device` line to change where known), each device's peak
    memory with its fit verdict, and the projection's memory verdicts. Then analyze(run_dir, run=VARIANT)
    for one variant's trace, or sql for anything else. To make a run, see profile_command."""
    return answer(lambda: run_summary_doc(run_dir))


def hardware(
    name: Annotated[str | None, Field(description="a built-in profile's name or a TOML file (default: "
                                                  "every built-in)")] = None,
) -> CallToolResult:
    """The hardware profiles project can target: accelerators, memory, links and their sources.

    Answers `tfprof-towers hardware [NAME] --json` (without a name a list, given here as
    {"result": [...]} in the structured content)."""
    return answer(lambda: hardware_doc(name))


def profile_command(
    variants: Annotated[list[str] | str | None, Field(description="built-in variants (default: every "
                                                                   "built-in)")] = None,
    preset: Annotated[str | None, Field(description="tiny, cpu or seed (default: cpu)")] = None,
    keras_model: Annotated[str | None, Field(description="a Python file defining the user's Keras "
                                                         "model, run under each strategy")] = None,
    variant_files: Annotated[list[str] | None, Field(
        description="the user's own placements (build_variant / build_step files)")] = None,
    accelerators: Annotated[int | None, Field(description="how many accelerators to use")] = None,
    project_on: Annotated[str | None, Field(description="a hardware profile to project onto")] = None,
    out: Annotated[str | None, Field(description="the run directory (default: reports/<time>)")] = None,
) -> CallToolResult:
    """The `tfprof-towers profile` command to run for a new profile; it is not run here.

    A profile runs one training step under each placement, each in its own TensorFlow process: it takes
    minutes, so this server never starts one. Returns {"command": ..., "runs": ..., "then": ...}: give
    the command to the user (or run it in a terminal), then call run_summary on the run directory it
    prints."""
    return answer(lambda: profile_command_doc(variants, preset, keras_model, variant_files or (),
                                              accelerators, project_on, out))


TOOLS: tuple[Callable[..., CallToolResult], ...] = (run_summary, analyze, sql, diff, project, hardware,
                                                    profile_command)


def build_server() -> MCPServer:
    """The server with every tool of :data:`TOOLS`, each read-only (its docstring is its description)."""
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for fn in TOOLS:
        server.add_tool(fn, name=fn.__name__, description=" ".join((fn.__doc__ or "").split()),
                        annotations=_READ_ONLY, structured_output=False)
    return server
