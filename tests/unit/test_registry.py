"""The variant registry: one place for what each built-in is, its family, baseline and builder."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from tfprof_towers.cli import main
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import VariantSpec, parse_variant_names
from tfprof_towers.variants.variant_files import check_variant_file, resolve_variants
from tfprof_towers.vocab.errors import VariantError


def _defined_functions(module: str) -> set[str]:
    """Top-level functions of ``module``'s source, read without importing it (it imports TensorFlow)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    tree = ast.parse(Path(spec.origin).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


TF1 = ("single", "towers_host_vars", "towers_accel0_vars", "towers_bug", "replicated")
TF2 = ("one_device", "mirrored", "mirrored_nccl", "mirrored_hierarchical", "mirrored_reduce_host",
       "central_storage")


def test_builtins_in_order() -> None:
    assert registry.names(registry.TF1_GRAPH) == TF1
    assert registry.names(registry.TF2_STRATEGY) == TF2
    assert registry.BUILTIN_NAMES == TF1 + TF2  # the families side by side, in registry order
    assert parse_variant_names(None) == registry.BUILTIN_NAMES
    assert parse_variant_names(None, family=registry.TF2_STRATEGY) == TF2
    picked = parse_variant_names("mirrored,one_device", family=registry.TF2_STRATEGY)
    assert picked == ("mirrored", "one_device")
    with pytest.raises(VariantError, match="single is a tf1-graph variant; with this option choose among the "
                                           "tf2-strategy variants: one_device, mirrored"):
        parse_variant_names("mirrored,single", family=registry.TF2_STRATEGY)


def test_every_builder_reference_names_a_function_of_its_module() -> None:
    for v in registry.BUILTINS:
        module, _, attr = v.builder.partition(":")
        assert attr in _defined_functions(module), v.builder


def test_every_family_has_a_runner_with_run_and_one_baseline() -> None:
    for key, fam in registry.FAMILIES.items():
        assert "run" in _defined_functions(fam.runner), fam.runner
        assert registry.baseline(key).family == key
    assert registry.baseline_name() == "single"
    assert registry.baseline_name(registry.TF2_STRATEGY) == "one_device"
    assert registry.builtin("mirrored_nccl").needs == ("nccl",)
    assert [v.name for v in registry.BUILTINS if v.needs] == ["mirrored_nccl"]


def test_simplicity_and_baseline_come_from_the_registry_for_builtins_only() -> None:
    assert [registry.simplicity(n) for n in TF1] == [0, 1, 1, 9, 2]
    assert [registry.simplicity(n) for n in TF2] == [0, 1, 2, 2, 2, 2]
    assert registry.simplicity("mine", "file:/x/mine.py") == registry.USER_SIMPLICITY == 2
    assert registry.simplicity("single", "file:/x/single.py") == 2  # a file does not borrow a built-in's role
    assert registry.is_baseline("single") and not registry.is_baseline("single", "file:/x/single.py")
    assert not registry.is_baseline("replicated")


def test_needs_and_resolution() -> None:
    v = registry.Variant("x", registry.TF1_GRAPH, "d", "k", 1, "os.path:join", needs=("gpu", "nccl"))
    assert registry.unmet_needs(v.needs, {"gpu"}) == ("nccl",)
    assert registry.unmet_needs(v.needs, {"gpu", "nccl"}) == ()
    assert v.load_builder() is __import__("os").path.join
    with pytest.raises(ValueError, match="not a 'module:attribute' reference"):
        registry.resolve("os.path")
    with pytest.raises(KeyError, match="unknown variant family 'nope'"):
        registry.family("nope")


def test_builtin_of_a_family() -> None:
    assert registry.builtin_of("mirrored", registry.TF2_STRATEGY) is registry.BY_NAME["mirrored"]
    with pytest.raises(KeyError, match="'mirrored' is not a built-in tf1-graph variant"):
        registry.builtin_of("mirrored", registry.TF1_GRAPH)
    with pytest.raises(KeyError, match="'nope' is not a built-in tf2-strategy variant"):
        registry.builtin_of("nope", registry.TF2_STRATEGY)


def test_variant_specs_carry_the_family(tmp_path: Path) -> None:
    assert VariantSpec.builtin("replicated") == VariantSpec("replicated", None, "tf1-graph")
    with pytest.raises(VariantError, match="unknown variant 'nope'"):
        VariantSpec.builtin("nope")
    f = tmp_path / "mine.py"
    f.write_text("def build_variant(devices):\n    return None, {}\n")
    assert check_variant_file(f) == VariantSpec("mine", str(f.resolve()), "tf1-graph")
    specs = resolve_variants(("single",), [str(f)])
    assert [(s.name, s.source, s.family) for s in specs] == [
        ("single", "builtin", "tf1-graph"),
        ("mine", f"file:{f.resolve()}", "tf1-graph"),
    ]


def test_variants_command_lists_them_by_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variants"]) == 0
    out = capsys.readouterr().out
    assert out.index("tf1-graph") < out.index("single") < out.index("tf2-strategy") < out.index("one_device")
    assert "single (baseline)" in out
    assert "one_device (baseline)" in out
    assert "variant files define build_variant(devices) -> (fetches, feed_dict)" in out
    tf2 = "variant files define build_step(strategy, devices) -> tf.function (+ build_strategy(devices))"
    assert tf2 in out
    for name in registry.BUILTIN_NAMES:
        assert name in out
