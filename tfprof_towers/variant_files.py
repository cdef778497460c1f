"""Checks on a user's files that need no TensorFlow (run before any variant starts).

A **variant file** belongs to the family whose function it defines
(``registry.FAMILIES``: ``build_variant`` for tf1-graph, ``build_step`` for
tf2-strategy); a file that defines neither, or both, is refused.  A **Keras model
file** (``--keras-model``) must define ``build_model`` and ``make_dataset``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from . import registry
from .config import VariantSpec
from .errors import VariantError


def check_variant_file(path: str | Path) -> VariantSpec:
    """A variant file must exist, parse, and define one family's function; its name is its stem.

    The family is the one whose ``file_function`` (registry) the file defines:
    ``build_variant`` (TF1 graph) or ``build_step`` (TF2 strategy).  A file that defines
    several families' functions is refused.
    """
    p = Path(path)
    tree = parse_file(p, "variant file")
    families = [f for f in registry.FAMILIES.values() if _defines(tree, f.file_function)]
    if not families:
        wanted = " or ".join(f"{f.file_function}({f.file_signature.split('(', 1)[1].split(')', 1)[0]})"
                             for f in registry.FAMILIES.values())
        raise VariantError(f"variant file {p}: defines no {wanted} function")
    if len(families) > 1:
        raise VariantError(f"variant file {p}: defines both {families[0].file_function} and "
                           f"{families[1].file_function}; keep one ({families[0].key} or {families[1].key})")
    name = p.stem
    if not name.isidentifier():
        raise VariantError(f"variant file {p}: its stem {name!r} is not a usable variant name")
    return VariantSpec(name=name, file=str(p.resolve()), family=families[0].key)


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
    try:
        return ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        raise VariantError(f"{what} {p}: syntax error at line {exc.lineno}: {exc.msg}") from None


#: What a ``--keras-model`` file must define.
KERAS_FUNCTIONS = ("build_model()", "make_dataset(global_batch_size)")


def check_keras_file(path: str | Path) -> str:
    """A Keras model file must exist, parse and define ``build_model`` and ``make_dataset``: its path."""
    p = Path(path)
    tree = parse_file(p, "keras model file")
    missing = [sig for sig in KERAS_FUNCTIONS if not _defines(tree, sig.split("(", 1)[0])]
    if missing:
        raise VariantError(f"keras model file {p}: defines no {' and no '.join(missing)} function")
    return str(p.resolve())


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def resolve_variants(builtin: tuple[str, ...], files: list[str]) -> tuple[VariantSpec, ...]:
    """Built-ins then variant files, with names unique across both."""
    specs = [VariantSpec.builtin(n) for n in builtin] + [check_variant_file(f) for f in files]
    seen: dict[str, VariantSpec] = {}
    for s in specs:
        if s.name in seen:
            clash = "a built-in variant" if registry.builtin(s.name) and not seen[s.name].file else "another"
            raise VariantError(
                f"variant name {s.name!r} is used twice ({clash}); rename the variant file"
            )
        seen[s.name] = s
    return tuple(specs)
