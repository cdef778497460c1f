"""Checks on a user's files that need no TensorFlow (run before any variant starts).

A **variant file** belongs to the family whose function it defines
(``registry.FAMILIES``: ``build_variant`` for tf1-graph, ``build_step`` for
tf2-strategy); a file that defines neither, or both, is refused.  A **Keras model
file** (``--keras-model``) must define ``build_model`` and ``make_dataset``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tfprof_towers.variants import registry
from tfprof_towers.variants.config import VariantSpec
from tfprof_towers.vocab.errors import VariantError


def check_variant_file(path: str | Path) -> VariantSpec:
    """A variant file must exist, parse, and define one family's function (module docstring); its
    name is its stem.  A function bound to something that cannot be called (``build_variant = 42``)
    or taking too few arguments is refused."""
    p = Path(path)
    tree = parse_file(p, "variant file")
    own = file_families()
    bound = {f.key: _binding(tree, f.file_function) for f in own}
    families = [f for f in own if bound[f.key] is not None]
    if not families:
        wanted = " or ".join(f"{f.file_function}({', '.join(_params(f))})" for f in own)
        raise VariantError(f"variant file {p}: defines no {wanted} function")
    if len(families) > 1:
        raise VariantError(f"variant file {p}: defines both {families[0].file_function} and "
                           f"{families[1].file_function}; keep one ({families[0].key} or {families[1].key})")
    problem = _not_callable(bound[families[0].key], families[0])
    if problem:
        raise VariantError(f"variant file {p}: {problem}")
    name = p.stem
    if not name.isidentifier():
        raise VariantError(f"variant file {p}: its stem {name!r} is not a usable variant name")
    return VariantSpec(name=name, file=str(p.resolve()), family=families[0].key)


def file_families() -> list[registry.Family]:
    """The family a file's function names: the first in registry order with that function
    (a ``build_step`` file is a tf2-strategy variant; ``profile --workers`` runs it as a cluster one)."""
    seen: dict[str, registry.Family] = {}
    for f in registry.FAMILIES.values():
        seen.setdefault(f.file_function, f)
    return list(seen.values())


def _params(family: registry.Family) -> list[str]:
    """The parameters of the function a variant file of ``family`` defines (from its signature)."""
    inside = family.file_signature.split("(", 1)[1].split(")", 1)[0]
    return [x.strip() for x in inside.split(",") if x.strip()]


def parse_file(p: Path, what: str) -> ast.Module:
    """A user's Python file, parsed (not run); one-line errors."""
    if not p.exists():
        raise VariantError(f"{what} {p}: not found")
    if not p.is_file():
        raise VariantError(f"{what} {p}: not a file")
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VariantError(f"{what} {p}: cannot read ({exc})") from None
    if "\0" in source:
        line = source.count("\n", 0, source.index("\0")) + 1
        raise VariantError(f"{what} {p}: contains a NUL byte (line {line}); not a Python source file")
    try:
        return ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        raise VariantError(f"{what} {p}: syntax error{where}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # too deeply nested, too large
        raise VariantError(f"{what} {p}: cannot be parsed ({type(exc).__name__})") from None


#: What a ``--keras-model`` file must define.
KERAS_FUNCTIONS = ("build_model()", "make_dataset(global_batch_size)")


def check_keras_file(path: str | Path) -> str:
    """A Keras model file must exist, parse and define ``build_model`` and ``make_dataset``: its path."""
    p = Path(path)
    tree = parse_file(p, "keras model file")
    missing = [sig for sig in KERAS_FUNCTIONS if _binding(tree, sig.split("(", 1)[0]) is None]
    if missing:
        raise VariantError(f"keras model file {p}: defines no {' and no '.join(missing)} function")
    batch = _static_value(tree, "GLOBAL_BATCH_SIZE")
    if batch is not _UNKNOWN and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise VariantError(f"keras model file {p}: GLOBAL_BATCH_SIZE must be a positive int, got {batch!r}")
    return str(p.resolve())


_UNKNOWN = object()


def _static_value(tree: ast.Module, name: str, depth: int = 0) -> object:
    """The value of a top-level name where the file states it without running anything: a literal
    (``= 0``, ``= "32"``), a name bound so (``BATCH, DIM = 4, 16``), or arithmetic on those;
    :data:`_UNKNOWN` otherwise (absent names too: the child checks what is only known at run time)."""
    node = _binding(tree, name)
    if node is None:  # bound by unpacking (``BATCH, DIM = 4, 16``): the last such statement
        node = next((n for n in reversed(tree.body) if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in t.elts)
            for t in n.targets)), None)
    if depth > 20 or not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
        return _UNKNOWN
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        if isinstance(target, ast.Name) and target.id == name:
            return _static_expr(tree, node.value, depth)
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            for t, v in zip(target.elts, node.value.elts):
                if isinstance(t, ast.Name) and t.id == name:
                    return _static_expr(tree, v, depth)
    return _UNKNOWN


def _static_expr(tree: ast.Module, node: ast.expr, depth: int) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return _static_value(tree, node.id, depth + 1)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _static_expr(tree, node.operand, depth)
        return -v if isinstance(v, int) and not isinstance(v, bool) else _UNKNOWN
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.FloorDiv):
        a, b = _static_expr(tree, node.left, depth), _static_expr(tree, node.right, depth)
        if not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) < 2**62 for x in (a, b)):
            return _UNKNOWN
        if isinstance(node.op, ast.FloorDiv):
            return a // b if b else _UNKNOWN  # type: ignore[operator]
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__}
        return ops[type(node.op)](a, b)  # type: ignore[arg-type]
    return _UNKNOWN


def _binding(tree: ast.Module, name: str) -> ast.stmt | None:
    """The last top-level statement that binds ``name`` (the one Python keeps), or None."""
    found = None
    for node in tree.body:
        if name in _bound_names(node):
            found = node
    return found


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return {node.target.id}
    if isinstance(node, ast.ImportFrom | ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    return set()


#: Expressions that can never be a function: ``build_variant = 42``, ``= "x"``, ``= [f]``, ``= None``.
_NOT_CALLABLE = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.ListComp,
                 ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.BinOp, ast.Compare, ast.BoolOp)


def _not_callable(node: ast.stmt | None, family: registry.Family) -> str | None:
    """Why ``node``'s binding of the family's function cannot be it; None when it may be.

    A def must accept as many positional arguments as the family passes
    (``file_signature``: ``build_variant(devices)`` -> one).
    """
    name = family.file_function
    if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, _NOT_CALLABLE):
        value = ast.unparse(node.value)
        value = value if len(value) <= 40 else value[:40] + "…"
        return f"{name} is {value} (line {node.lineno}), not a function"
    if isinstance(node, ast.AsyncFunctionDef):
        return f"{name} is an async function (line {node.lineno}); define a plain def"
    if isinstance(node, ast.FunctionDef):
        params = _params(family)
        a = node.args
        if len(a.posonlyargs) + len(a.args) < len(params) and a.vararg is None:
            return (f"{name}() takes {len(a.posonlyargs) + len(a.args)} argument(s) (line {node.lineno}); "
                    f"it is called as {name}({', '.join(params)})")
    return None


def variant_notices(specs: tuple[VariantSpec, ...]) -> list[str]:
    """One line for each variant file named like a built-in variant it does not replace.

    A file never takes a built-in's role: ``single.py`` runs as a user variant
    named ``single``, not as the baseline that speedups are measured against.
    """
    notes = []
    for s in specs:
        known = registry.builtin(s.name)
        if s.file is None or known is None:
            continue
        role = " and not the baseline that speedups are measured against" if known.baseline else ""
        notes.append(f"note: variant file {s.file} is named like the built-in variant {s.name!r} but is "
                     f"your own: it runs as a user variant{role}")
    return notes


def resolve_variants(builtin: tuple[str, ...], files: list[str]) -> tuple[VariantSpec, ...]:
    """Built-ins then variant files, with names unique across both."""
    specs = [VariantSpec.builtin(n) for n in builtin] + [check_variant_file(f) for f in files]
    seen: dict[str, VariantSpec] = {}
    for s in specs:
        if s.name in seen:
            clash = "a built-in variant" if registry.builtin(s.name) and not seen[s.name].file else "another"
            raise VariantError(f"variant name {s.name!r} is used twice ({clash}); rename the variant file")
        seen[s.name] = s
    return tuple(specs)
