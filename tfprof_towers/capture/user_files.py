"""Import a user's Python file (a variant file, a Keras model file) inside the capture child.

The parent only parses these files (:mod:`tfprof_towers.variants.variant_files`); here they run,
and anything wrong -- a syntax error, an exception on import -- is one line.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tfprof_towers.vocab.errors import VariantError


def import_user_file(path: str | Path, what: str) -> ModuleType:
    """Import a user's Python file as a fresh module; one-line errors naming ``what`` it is."""
    path = Path(path)
    if not path.is_file():
        raise VariantError(f"{what} {path}: not found")
    module_name = f"_tfprof_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise VariantError(f"{what} {path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise VariantError(f"{what} {path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:
        raise VariantError(f"{what} {path}: raised {type(exc).__name__} on import: {exc}") from None
    return module
