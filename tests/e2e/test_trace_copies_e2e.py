"""The numpy parse of ``memcpy_details`` against the plain-Python one, on hundreds of hypothesis-made texts.

tests/unit/test_xplane_io.py runs the same check on a quarter of the examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memcpy_kit import check_parse_details, detail_rows


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(detail_rows, st.randoms())
def test_parse_details_matches_the_python_parse(rows: list[str], rnd) -> None:
    check_parse_details(rows, rnd)
