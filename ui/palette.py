"""A palette that builds a tensor-language expression by tapping, for a phone where typing code is clumsy.

Each button edits the same text the answer box holds, the way the parser will read it: a method goes
on the end (the whole expression in parentheses when it is an operator's result), a torch function
takes the expression as its first argument, an operator joins the expression (E) and the arguments (A)
in the order its label shows. Names and common arguments are tapped into the arguments once the
expression has begun, so `y - p[:, 0]` is taps only: p, [...] index with ":, 0", then "A - E" with y.
Undo steps back.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import streamlit as st

from explorers.tensors import language

METHODS = (
    "view", "reshape", "permute", "transpose", "contiguous", "unsqueeze", "squeeze", "expand", "repeat", "flatten",
    "unflatten", "sum", "mean", "amax", "argmax", "cumsum", "topk", "gather", "index_select", "masked_fill", "unfold",
    "norm", "sqrt", "float", "long",
)  # fmt: skip
FUNCTIONS = (
    "cat", "stack", "where", "einsum", "arange", "zeros", "ones", "tril", "triu", "softmax", "nn.functional.one_hot",
)  # fmt: skip
OPERATORS = ("+", "-", "*", "/", "@", "**", "==", ">=", ">", "<", "<=", "&", "|")
ORDERED = ("-", "/", "@", "**", ">=", ">", "<", "<=")  # offered both ways round: A - E as well as E - A
PARTS = (
    *(f".{m}(…)" for m in METHODS),
    *(f"torch.{f}(…)" for f in FUNCTIONS),
    "[…] index",
    *(f"E {o} A" for o in OPERATORS),
    *(f"A {o} E" for o in ORDERED),
    ".T",
    "~ (not)",
)
ARGUMENTS = (":, 0", ":, None", "None", "0", "1", "-1", ":, :-1", "dim=-1", "dim=1", "keepdim=True",
             "dtype=torch.bool", "-torch.inf")  # fmt: skip
OPEN = ("(", "[", " ", ",")  # text ending so takes a name next


def _undo_key(key: str) -> str:
    return f"{key}-undo"


def _set(key: str, text: str) -> None:
    if len(text) > language.MAX_CHARS:
        st.session_state[f"{key}-palette-note"] = (
            f"That would make {len(text)} characters; at most {language.MAX_CHARS}."
        )
        return
    st.session_state.setdefault(_undo_key(key), []).append(st.session_state.get(key, ""))
    del st.session_state.setdefault(_undo_key(key), [])[:-20]
    st.session_state[key] = text
    st.session_state.pop(f"{key}-palette-note", None)


def _operand(text: str) -> str:
    """The expression as one operand: in parentheses unless it is a name, a call, an index or an attribute."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    plain = (ast.Name, ast.Call, ast.Subscript, ast.Attribute, ast.Constant, ast.Tuple, ast.List)
    return text if isinstance(tree, plain) else f"({text})"


def built(text: str, part: str, argument: str) -> str:
    """`text` with one palette part added, `argument` typed for it."""
    text, argument = text.strip(), argument.strip()
    if part.startswith(".") and part.endswith("(…)"):
        return f"{_operand(text)}.{part[1:-3]}({argument})" if text else text
    if part.startswith("torch."):
        inside = ", ".join(p for p in (text, argument) if p)
        return f"{part[:-3]}({inside})"
    if part == "[…] index":
        return f"{_operand(text)}[{argument or ':'}]" if text else text
    if part == ".T":
        return f"{_operand(text)}.T" if text else text
    if part == "~ (not)":
        return f"~{_operand(text)}" if text else text
    first, operator, second = part.split(" ")
    if not text or not argument:
        return ""
    left, right = (_operand(text), _operand(argument)) if first == "E" else (_operand(argument), _operand(text))
    return f"{left} {operator} {right}"


def _add(key: str) -> None:
    text = st.session_state.get(key, "")
    part = st.session_state[f"{key}-part"]
    changed = built(text, part, st.session_state.get(f"{key}-argument", ""))
    if not changed:
        st.session_state[f"{key}-palette-note"] = (
            "An operator joins E, your expression, and A, its arguments: give both first."
            if part[0] in "EA" and part[1] == " "
            else "Start with a name: tap one above."
        )
        return
    _set(key, changed)
    st.session_state[f"{key}-argument"] = ""


def _name(key: str) -> None:
    """A name begins the expression, or goes into the arguments once the expression has begun."""
    chosen = st.session_state.get(f"{key}-name")
    if chosen:
        text = st.session_state.get(key, "")
        if not text or text.endswith(OPEN):
            _set(key, f"{text}{chosen}")
        else:
            _argument(key, chosen)
    st.session_state[f"{key}-name"] = None


def _argument(key: str, chosen: str | None = None) -> None:
    chosen = chosen or st.session_state.get(f"{key}-common")
    if chosen:
        typed = st.session_state.get(f"{key}-argument", "").strip()
        st.session_state[f"{key}-argument"] = (
            f"{typed}{chosen}" if not typed or typed.endswith(OPEN) else f"{typed}, {chosen}"
        )
    st.session_state[f"{key}-common"] = None


def _undo(key: str) -> None:
    earlier = st.session_state.get(_undo_key(key)) or [""]
    st.session_state[key] = earlier.pop()


def palette(key: str, names: Sequence[str]) -> None:
    """The palette for the text widget at `key`; `names` are the puzzle's inputs and sizes."""
    with st.expander("Palette: build the expression by tapping", icon=":material/touch_app:"):
        st.pills("Add a name", list(names), key=f"{key}-name", on_change=_name, args=(key,))
        left, right = st.columns(2)
        left.selectbox("Op", PARTS, key=f"{key}-part", help="E: your expression so far. A: its arguments.")
        right.text_input("Its arguments", key=f"{key}-argument", max_chars=60, placeholder="e.g. 1, 2 or dim=-1")
        st.pills("Add an argument", list(ARGUMENTS), key=f"{key}-common", on_change=_argument, args=(key,))
        buttons = st.columns(3)
        buttons[0].button("Add", key=f"{key}-add", on_click=_add, args=(key,), icon=":material/add:")
        buttons[1].button("Undo", key=f"{key}-undo-button", on_click=_undo, args=(key,), icon=":material/undo:")
        buttons[2].button("Clear", key=f"{key}-clear", on_click=_set, args=(key, ""), icon=":material/clear:")
        note = st.session_state.get(f"{key}-palette-note")
        if note:
            st.caption(note)
