"""The table of a lab's controls: each knob declared once, for the URL, the widget and the options.

One list of fields drives every direction (as in tensorflow/playground): a field
parses a query-string value strictly and encodes a value back; it names the widget
that draws it (`ui.frame.LabPage.widget`) and the options attribute its value sets
(`LabPage.options`). Ranges and choices come from the lab's explorer, whose options
dataclass validates the same constants. Nothing here imports streamlit, so the
parsing rules are unit-tested on their own. A bad value never raises out of
`read_query`: it becomes a notice, and the field keeps its default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_RAW_LENGTH = 200  # longer values are refused before any parsing
MAX_NOTICES = 5


@dataclass(frozen=True, kw_only=True)
class Knob:
    """How a field is drawn and where its value goes; each field type below adds how it is parsed."""

    label: str = ""  # the widget's label
    widget: str = ""  # "" draws the type's usual widget (see ui.frame.WIDGETS)
    option: str | None = ""  # the options attribute it sets: "" its own name, None none (view state)
    step: float | None = None
    help: str | None = None
    format: Callable[[Any], str] | None = None  # how a choice reads in its widget

    @property
    def attribute(self) -> str | None:
        return self.name if self.option == "" else self.option


@dataclass(frozen=True)
class IntField(Knob):
    name: str
    default: int
    low: int
    high: int

    def parse(self, raw: str) -> int:
        if not re.fullmatch(r"-?[0-9]{1,12}", raw.strip()):  # ASCII digits: int() would also read ١٢ as 12
            raise ValueError(f"`{self.name}` must be a whole number")
        value = int(raw)
        if not self.low <= value <= self.high:
            raise ValueError(f"`{self.name}` must be between {self.low} and {self.high}")
        return value

    def encode(self, value: int) -> str:
        return str(value)


@dataclass(frozen=True)
class FloatField(Knob):
    name: str
    default: float
    low: float
    high: float

    def parse(self, raw: str) -> float:
        if not re.fullmatch(r"-?[0-9]{1,6}(\.[0-9]{1,6})?", raw.strip()):
            raise ValueError(f"`{self.name}` must be a decimal number")
        value = float(raw)
        if not self.low <= value <= self.high:
            raise ValueError(f"`{self.name}` must be between {self.low:g} and {self.high:g}")
        return value

    def encode(self, value: float) -> str:
        return f"{value:g}"


@dataclass(frozen=True)
class ChoiceField(Knob):
    """One of a fixed set of values (strings, or numbers such as the powers of two a select_slider offers)."""

    name: str
    default: str | int
    choices: tuple[str | int, ...]
    listed: bool = True  # False: a bad value's notice does not list the choices (a drill's, whose list is answers)

    def parse(self, raw: str) -> str | int:
        for choice in self.choices:
            if str(choice) == raw:
                return choice
        if not self.listed:
            raise ValueError(f"`{self.name}` names none of this lab's {self.name}s")
        raise ValueError(f"`{self.name}` must be one of {', '.join(map(str, self.choices))}")

    def encode(self, value: str | int) -> str:
        return str(value)


@dataclass(frozen=True)
class BoolField(Knob):
    name: str
    default: bool

    def parse(self, raw: str) -> bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "on", "yes"):
            return True
        if lowered in ("0", "false", "off", "no"):
            return False
        raise ValueError(f"`{self.name}` must be 1 or 0")

    def encode(self, value: bool) -> str:
        return "1" if value else "0"


@dataclass(frozen=True)
class SequenceField(Knob):
    """An ordered list of known tokens, such as the lifecycle steps a lab replays."""

    name: str
    allowed: tuple[str, ...]
    max_length: int
    default: tuple[str, ...] = ()

    def parse(self, raw: str) -> tuple[str, ...]:
        tokens = tuple(t for t in raw.split(",") if t)
        unknown = [t for t in tokens if t not in self.allowed]
        if unknown:
            raise ValueError(f"`{self.name}` has an unknown step {quote(unknown[0])}")
        if len(tokens) > self.max_length:
            raise ValueError(f"`{self.name}` may hold at most {self.max_length} steps")
        return tokens

    def encode(self, value: Sequence[str]) -> str:
        return ",".join(value)


@dataclass(frozen=True)
class TextField(Knob):
    """Text the lab reads itself (a tensor drill's expression): at most MAX_RAW_LENGTH characters, and refused
    when `check` raises ValueError (its message says why). A widget shows it as text, never as markup."""

    name: str
    default: str
    check: Callable[[str], Any]

    def parse(self, raw: str) -> str:
        if raw:
            try:
                self.check(raw)
            except ValueError as refused:
                raise ValueError(f"`{self.name}` is refused: {refused}") from None
        return raw

    def encode(self, value: str) -> str:
        return value


Field = IntField | FloatField | ChoiceField | BoolField | SequenceField | TextField


def quote(text: str, limit: int = 40) -> str:
    """A user-supplied string, made safe to show inside markdown: printable, short, in a code span."""
    shown = "".join(c if c.isprintable() and c != "`" else "?" for c in text[:limit])
    return f"`{shown}{'…' if len(text) > limit else ''}`"


def read_query(fields: Sequence[Field], query: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Parse the query string into field values; return (values found valid, notices for the rest)."""
    by_name = {f.name: f for f in fields}
    values: dict[str, Any] = {}
    notices: list[str] = []
    unknown = [key for key in query if key not in by_name]
    for key, raw in query.items():
        field = by_name.get(key)
        if field is None:
            continue
        encoded = field.encode(field.default)
        default = f"`{encoded}`" if encoded else ("`none`" if isinstance(field, SequenceField) else "(empty)")
        if len(raw) > MAX_RAW_LENGTH:
            notices.append(f"`{key}` in the link is too long ({len(raw):,} characters); using the default {default}.")
            continue
        try:
            values[key] = field.parse(raw)
        except ValueError as error:
            notices.append(f"{error}, not {quote(raw)}; using the default {default}.")
    if unknown:
        named = ", ".join(quote(k) for k in unknown[:MAX_NOTICES])
        more = f" and {len(unknown) - MAX_NOTICES} more" if len(unknown) > MAX_NOTICES else ""
        notices.append(f"Ignored unknown link settings: {named}{more}.")
    return values, notices


def options_values(fields: Sequence[Field], values: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The values that set one options class: keyed by option name, for the attributes in `names`."""
    return {f.attribute: values[f.name] for f in fields if f.attribute in names}


def named(fields: Sequence[Field], attribute: str) -> Field:
    """The field that sets an options attribute."""
    return next(f for f in fields if f.attribute == attribute)


def encode_query(fields: Sequence[Field], values: Mapping[str, Any]) -> dict[str, str]:
    return {f.name: f.encode(values[f.name]) for f in fields}
