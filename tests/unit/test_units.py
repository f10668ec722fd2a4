"""How every lab writes numbers into sentences and tables: one set of helpers, one behaviour each."""

from __future__ import annotations

import math

import pytest

from explorers import units


@pytest.mark.parametrize(
    ("value", "written"),
    [(None, "n/a"), (3.14159e-9, "3.1e-09"), (0.0, "0.0e+00"), (math.inf, "inf"), (math.nan, "nan")],
)
def test_sci_writes_two_significant_figures_and_names_what_is_not_a_number(value, written):
    assert units.sci(value) == written


@pytest.mark.parametrize(("value", "written"), [(0.4321, "0.43 s"), (9.994, "9.99 s"), (12.54, "12.5 s")])
def test_seconds_keeps_two_decimals_under_ten(value, written):
    assert units.seconds(value) == written


@pytest.mark.parametrize(
    ("value", "written"),
    [(0.031234, "0.0312"), (2.0149, "2.01"), (139.4, "139"), (2351.0, "2,351"), (0.0, "0"), (math.inf, "∞")],
)
def test_ms_never_uses_an_exponent(value, written):
    assert units.ms(value) == written


def test_percent_of_a_share():
    assert units.percent(0.8734) == "87.3%"
    assert units.percent(1.0) == "100.0%"


def test_format_number_and_bytes():
    assert units.format_number(0.0) == "0" and units.format_number(1 / 3) == "0.333"
    assert units.format_number(math.nan) == "n/a"
    assert units.format_bytes(1536) == "1.5 KiB" and units.format_bytes(-2048) == "-2.0 KiB"
