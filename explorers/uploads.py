"""Uploaded files and the text in them, read and shown without trusting them.

An upload can be built to hurt a shared server: JSON nested deep enough to exhaust Python's
recursion (in `json.loads`, in `repr`, in any recursive walk), strings that are not valid
Unicode (a lone surrogate such as ``"\\ud800"`` cannot be encoded to send to the browser), and
names or keys holding markdown or HTML that every viewer's page would render (an image from an
address of the uploader's choice). So:

- `json_depth` measures how deeply JSON text nests, on the raw text, without recursion, so a
  reader can refuse text too deep before `json.loads` sees it;
- `short_repr` quotes a value in a message, cut to a few levels and characters whatever its size;
- `code` shows any text as a markdown code span that displays it literally: never a link, an
  image, emphasis or HTML; characters that could end the span or are not printable are escaped.
"""

from __future__ import annotations

import itertools
import re
import reprlib

MAX_DEPTH = 64  # nesting a reader refuses beyond; far below what exhausts Python's recursion (about 1,000)
MEBIBYTE = 2**20  # Streamlit's maxUploadSize "megabytes" are 1024 * 1024 bytes
SHOWN_CHARS = 60

# A JSON string from its opening quote: escapes skipped, ending at its closing quote or, in text that
# is not JSON, at the end. Every match attempt succeeds, so the scan stays linear on any input.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_ESCAPED = frozenset("`<>")  # could end the code span, or start a tag where the text is read as HTML (plotly)


def json_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects (`{"a": [1]}` is 2, a bare number 0), without recursion.

    Brackets inside strings do not count. On text that is not JSON the count is still at least
    the depth `json.loads` reaches before it finds the error, so refusing on it is safe.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def upload_megabytes(limit_bytes: int) -> int:
    """The smallest whole number of Streamlit upload megabytes (at least 1) that holds `limit_bytes`."""
    return max(1, -(-limit_bytes // MEBIBYTE))


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = SHOWN_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def short_repr(value: object, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` cut to 3 levels and about `limit` characters: safe on any depth or size of value."""
    try:
        shown = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail: e.g. an int too long to print
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def escaped(text: str, limit: int = SHOWN_CHARS) -> str:
    """Text shown in at most `limit` characters (then "…"), with `<>` and what is not printable escaped.

    The result is printable and encodes as UTF-8: ``"a\\nb"`` becomes ``a\\nb``, a lone surrogate
    ``\\ud800``, a backtick ``\\x60``.
    """
    pieces, length = [], 0
    for char in str(text):
        piece = _escape(char)
        if length + len(piece) > limit:
            return "".join(pieces) + "…"
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)


def _escape(char: str) -> str:
    if char in _ESCAPED:
        return f"\\x{ord(char):02x}"
    return char if char.isprintable() else ascii(char)[1:-1]


def code(text: str, limit: int = SHOWN_CHARS) -> str:
    """Uploaded text (a file name, a key) as a markdown code span that shows it literally, cut to `limit`."""
    return f"`{escaped(text, limit)}`"
