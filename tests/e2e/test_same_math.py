"""No placement may change the math: a real tiny profile with a variant file that forgets a tower.

``tests/variants/forgot_tower_gradient.py`` averages the towers' gradients over
both towers but leaves the last one out.  Its losses agree with the others to
float32 precision (Adam's first steps barely depend on the gradient's size), its
step-1 gradient norm is half: the report must flag it, high, and never recommend
it.  ``examples/towers_fixed.py`` takes part the same way and must agree, and so must
``tests/variants/sleepy_towers.py`` (the fixed towers with 50 ms of sleep per step).

The run is the session's shared ``tiny_files_run`` (tests/conftest.py), which `diff`'s tests
read too: it used to be a run of its own here, with the same four variants and no sleepy one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.capture.seed_values import reference_steps, seed_values
from tfprof_towers.variants.config import PRESETS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def summary(tiny_files_run: Path) -> dict:
    return json.loads((tiny_files_run / "summary.json").read_text())


def test_the_forgotten_tower_is_flagged_with_its_numbers(summary: dict) -> None:
    p = PRESETS["tiny"]
    oracle = reference_steps(seed_values(p.batch, p.dim, p.blocks))
    by = {v["name"]: v for v in summary["variants"]}
    assert by["forgot_tower_gradient"]["losses"] == pytest.approx(list(oracle.losses), rel=1e-4)
    assert by["forgot_tower_gradient"]["grad_norm"] == pytest.approx(oracle.grad_norm / 2, rel=1e-3)
    [found] = [f for f in summary["findings"] if f["rule"] == "changed_math"]
    assert (found["variant"], found["severity"]) == ("forgot_tower_gradient", "high")
    assert found["message"].startswith(
        "this placement changes what is computed: step-1 gradient norm 0.0720857 against 0.144171 "
        "(relative difference 50.0%, tolerance 0.001)")
    assert found["evidence"]["grad_norm_rel_diff"] == pytest.approx(0.5, abs=1e-5)  # float32


def test_the_fixed_example_and_the_builtins_agree(summary: dict) -> None:
    assert {r["variant"]: r["status"] for r in summary["math"]["variants"]} == {
        "single": "reference", "towers_host_vars": "same", "forgot_tower_gradient": "differs",
        "towers_fixed": "same", "sleepy_towers": "same"}


def test_a_variant_that_changes_the_math_is_never_recommended(summary: dict) -> None:
    rec = summary["recommendation"]
    assert rec["variant"] != "forgot_tower_gradient"
    assert rec["excluded"]["forgot_tower_gradient"] == (
        "this placement changes what is computed (high-severity finding changed_math)")
