"""URL fields: strict parsing, safe notices, and a lossless round trip."""

import pytest

from ui.fields import (
    BoolField,
    ChoiceField,
    IntField,
    SequenceField,
    encode_query,
    named,
    options_values,
    quote,
    read_query,
)

FIELDS = (
    IntField("width", 4, 1, 64),
    ChoiceField("preset", "mlp", ("mlp", "scalar")),
    BoolField("saved", True),
    SequenceField("steps", ("forward", "backward"), 3, default=("forward",)),
)


def test_round_trip_of_every_field():
    values = {"width": 17, "preset": "scalar", "saved": False, "steps": ("forward", "backward", "backward")}
    parsed, notices = read_query(FIELDS, encode_query(FIELDS, values))
    assert parsed == values and notices == []


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("width", "abc"),
        ("width", "0"),
        ("width", "65"),
        ("width", "4.5"),
        ("width", "1e3"),
        ("width", " "),
        ("width", "9" * 30),
        ("preset", "MLP"),
        ("preset", ""),
        ("saved", "yes please"),
        ("steps", "forward,delete"),
        ("steps", "forward,forward,forward,forward"),
    ],
)
def test_bad_values_become_notices_and_are_left_out(name, raw):
    parsed, notices = read_query(FIELDS, {name: raw})
    assert name not in parsed
    assert len(notices) == 1 and "using the default" in notices[0]


def test_over_long_values_are_refused_before_parsing():
    parsed, notices = read_query(FIELDS, {"steps": "forward," * 1000})
    assert parsed == {} and "too long" in notices[0]


def test_unknown_keys_are_summarised_not_listed_endlessly():
    parsed, notices = read_query(FIELDS, {f"k{i}": "x" for i in range(12)})
    assert parsed == {} and notices == ["Ignored unknown link settings: `k0`, `k1`, `k2`, `k3`, `k4` and 7 more."]


def test_quote_cannot_break_out_of_its_code_span():
    shown = quote("a`b\n<script>" + "x" * 100)
    assert shown.startswith("`") and shown.endswith("…`") and shown.count("`") == 2 and "\n" not in shown


def test_bool_accepts_common_spellings():
    field = BoolField("saved", False)
    assert [field.parse(v) for v in ("1", "true", "ON", "0", "false", "off")] == [True, True, True, False, False, False]


def test_a_field_sets_its_own_options_attribute_a_renamed_one_or_none():
    fields = (
        IntField("batch", 4, 1, 64, option="batch_size"),
        BoolField("saved", True),
        SequenceField("steps", ("forward",), 3, option=None),  # view state: no options attribute
    )
    assert [f.attribute for f in fields] == ["batch_size", "saved", None]
    values = {"batch": 8, "saved": False, "steps": ("forward",)}
    # only the attributes the options class has are set, under their attribute names
    assert options_values(fields, values, ["batch_size", "seed"]) == {"batch_size": 8}
    assert options_values(fields, values, ["batch_size", "saved"]) == {"batch_size": 8, "saved": False}
    assert named(fields, "batch_size").name == "batch"


def test_a_number_in_another_script_is_refused_as_every_non_ascii_digit_is():
    """The class-server probe: seed=١٢ (Arabic-Indic digits) was read as 12, while lines=١ was refused."""
    from ui.fields import FloatField, IntField, read_query

    seed, rate = IntField("seed", 0, 0, 99), FloatField("rate", 0.5, 0.0, 1.0)
    values, notices = read_query([seed, rate], {"seed": "١٢", "rate": "٠.٥"})
    assert values == {} and len(notices) == 2 and "whole number" in notices[0]
    assert read_query([seed], {"seed": "12"})[0] == {"seed": 12}
