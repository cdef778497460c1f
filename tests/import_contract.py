"""The package's import contract, read from the source (no module is imported).

The stack, bottom first. A module may import its own layer and the layers below it;
an import that points up the stack breaks the contract. ARCHITECTURE.md shows the same
table. ``testing`` builds traces for tests and benchmarks: the tool never imports it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "tfprof_towers"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: Bottom first: each layer may import the ones before it.
LAYERS: tuple[str, ...] = (
    "vocab",       # errors, categories, device names, links, number formats, bounded text
    "xplane",      # the XSpace reader: no TensorFlow meaning
    "trace",       # TensorFlow's meaning of events, attribution
    "variants",    # registry, presets and options, users' variant files
    "rundir",      # the run directory's documents
    "procs",       # supervised child processes
    "capture",     # one child per variant (TensorFlow)
    "analysis",    # a run's traces, audit, across tasks, the math check
    "advice",      # findings, rules, the recommender
    "projection",  # what-if on hardware profiles
    "render",      # report.html, the analyze page, charts
    "session",     # a profile from start to report
    "frames",      # load(): traces and runs as tidy frames (report's analysis), diff of two
    "commands",    # the command line
)
#: Modules at the package root, and where they stand.
ROOT_MODULES = {"__init__": "commands", "__main__": "commands", "cli": "commands"}
#: Only these may import TensorFlow (projection.keras_graphs traces a --keras-model file's step, in the
#: strategy graphs' child; projection.opcost prices the graph children's ops, reading TensorFlow's own
#: FLOPs registry and static shapes, and only those children import it).
TENSORFLOW_ALLOWED = ("capture", "projection.graphcost", "projection.opcost", "projection.strategy_graphs",
                      "projection.keras_graphs")
NEVER_IMPORTED = ("testing",)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted, without the package
    target: str  # the imported module (or module.attribute), dotted, with the package
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> Iterator[Import]:
    mod = module_name(path, root)
    is_pkg = path.name == "__init__.py"
    pkg = [PACKAGE, *mod.split(".")] if is_pkg and mod != "__init__" else [PACKAGE, *mod.split(".")[:-1]]
    for level, module, names, line in import_statements(path.read_text()):
        if level is None:  # import a, b
            for name in names:
                yield Import(mod, name, line)
            continue
        if level:
            base = pkg[: len(pkg) - (level - 1)]
            target = ".".join(base + ([module] if module else []))
        else:
            target = module or ""
        for name in names:
            yield Import(mod, f"{target}.{name}", line)


@functools.cache
def import_statements(text: str) -> tuple[tuple[int | None, str | None, tuple[str, ...], int], ...]:
    """A source's import statements at any depth, as ``(level, module, names, line)`` (level None for
    ``import a, b``): parsed once per distinct text, so the tests that plant one import in a copy of
    the package parse only the file they changed."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.append((None, None, tuple(a.name for a in node.names), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module, tuple(a.name for a in node.names), node.lineno))
    return tuple(out)


def layer_of(module: str) -> str:
    head = module.split(".")[0]
    return ROOT_MODULES.get(head, head)


def violations(root: Path = ROOT) -> list[str]:
    """Every import that breaks the contract, as ``file:line: why``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for imp in imports_of(path, root):
            where = f"{path.relative_to(root.parent)}:{imp.line}"
            src_layer = layer_of(imp.module)
            if imp.target == "tensorflow" or imp.target.startswith("tensorflow."):
                if not any(imp.module == a or imp.module.startswith(a + ".") for a in TENSORFLOW_ALLOWED):
                    found.append(f"{where}: imports TensorFlow outside {', '.join(TENSORFLOW_ALLOWED)}")
                continue
            if not imp.target.startswith(PACKAGE + "."):
                continue
            dst_layer = layer_of(imp.target[len(PACKAGE) + 1:])
            if src_layer in NEVER_IMPORTED or (dst_layer not in LAYERS and dst_layer not in NEVER_IMPORTED):
                continue
            if dst_layer in NEVER_IMPORTED:
                found.append(f"{where}: the tool imports {dst_layer}/ ({imp.target})")
            elif src_layer not in LAYERS:
                found.append(f"{where}: {src_layer} is in no layer of the contract")
            elif LAYERS.index(dst_layer) > LAYERS.index(src_layer):
                found.append(f"{where}: {src_layer} imports {dst_layer} ({imp.target}), which is above it")
    return found


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package modules it imports (at any depth of the file)."""
    names = {module_name(p, root) for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {n: set() for n in names}
    for path in root.rglob("*.py"):
        for imp in imports_of(path, root):
            if not imp.target.startswith(PACKAGE + "."):
                continue
            dotted = imp.target[len(PACKAGE) + 1:]
            # the longest prefix that is a module: "a.b.c.name" -> "a.b.c"
            while dotted and dotted not in names:
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != imp.module:
                graph[imp.module].add(dotted)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


#: What a command that only reads a trace and prints JSON must not import: the pandas stack, Arrow,
#: the HTML templates, the terminal's tables, Dask, TensorFlow.
HEAVY: tuple[str, ...] = ("pandas", "pyarrow", "jinja2", "rich", "dask", "tensorflow")

#: What ``analyze FILE --json`` must not import of the package: it reads one trace and runs the trace
#: rules, so a run directory's records (variants, placements, the summary and what it holds), the
#: variants' options and the run rules' inputs (the math check, the audit) stay out.
RUN_SIDE: tuple[str, ...] = tuple(f"{PACKAGE}.{m}" for m in (
    "rundir.records", "rundir.summary", "rundir.placement_doc", "rundir.placement_audit",
    "rundir.projection_doc", "rundir.scaling", "rundir.math_table", "rundir.cluster_doc",
    "variants.config", "variants.registry", "analysis.samemath", "analysis.audit", "advice.strategy",
))

#: A fresh interpreter runs the command line in-process (stdout to /dev/null) and prints every
#: module it imported, one per line.
_IMPORTED = (
    "import contextlib, os, sys\n"
    "exec(sys.argv[1])\n"
    "from tfprof_towers.cli import main\n"
    "with open(os.devnull, 'w') as out, contextlib.redirect_stdout(out):\n"
    "    try:\n"
    "        code = main(sys.argv[2:])\n"
    "    except SystemExit as e:\n"
    "        code = e.code\n"
    "print(code)\n"
    "print('\\n'.join(sorted(sys.modules)))\n"
)


def imported_by(argv: list[str], prelude: str = "") -> tuple[int, set[str]]:
    """``tfprof-towers ARGV`` run in a fresh interpreter (this checkout's package first on the path):
    its exit code and every module it imported, dotted (a package's submodule comes with the package:
    ``numpy._core`` and ``numpy``) (``prelude``: Python run before it)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _IMPORTED, prelude, *argv], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    if proc.returncode:
        raise RuntimeError(f"the interpreter failed: {proc.stderr.strip()[-500:]}")
    code, *modules = proc.stdout.split()
    return int(code) if code.lstrip("-").isdigit() else -1, set(modules)
