"""The tensor language: one Python expression, read with `ast.parse(..., mode="eval")` and checked node by node.

The text never reaches `eval`, `exec` or `compile`: `parse` returns the checked tree, and
explorers/tensors/interpreter.py walks it, calling the torch functions and tensor methods listed
here by name. Everything else is refused before anything runs, with a message naming the part:

- names: the puzzle's inputs and sizes, and `torch`;
- literals: int, float and bool within `MAX_LITERAL`, `None`, `...`, a short einsum-style string,
  tuples and lists of them;
- operators: arithmetic, comparison (one at a time), bitwise `& | ^ ~`, `@`, unary `-` and `+`;
- subscripts and slices; `*` unpacking in a call's arguments;
- calls: `torch.<fn>(...)` and `<tensor>.<method>(...)` from `FUNCTIONS` and `METHODS`, each with its
  listed keyword arguments; attributes: the dtypes and constants in `TORCH_VALUES`, and `VALUE_ATTRIBUTES`.

No lambda, comprehension, f-string, boolean `and`/`or`/`not`, conditional, walrus or dunder. This module
imports no torch, so a server can refuse an expression without loading it.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

MAX_CHARS = 200  # a link's value is at most this long too (ui/fields.py)
MAX_NODES = 80
MAX_LITERAL = 10**6  # the largest int or float written in an expression
MAX_STRING = 40
STRING = re.compile(r"[a-zA-Z ,.\->]*")  # an einsum equation
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

_DIM = ("dim",)
_REDUCE = ("dim", "keepdim")
_DTYPE = ("dtype",)
# torch.<name> -> the keyword arguments it may be given (positional arguments are free)
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "arange": ("start", "end", "step", "dtype"),
    "zeros": _DTYPE,
    "ones": _DTYPE,
    "full": _DTYPE,
    "eye": _DTYPE,
    "tensor": _DTYPE,
    "zeros_like": _DTYPE,
    "ones_like": _DTYPE,
    "full_like": _DTYPE,
    "tril": ("diagonal",),
    "triu": ("diagonal",),
    "cat": _DIM,
    "concat": _DIM,
    "stack": _DIM,
    "where": (),
    "einsum": (),
    "matmul": (),
    "bmm": (),
    "cdist": ("p",),
    "gather": _DIM,
    "scatter_add": _DIM,
    "index_select": _DIM,
    "masked_fill": (),
    "cumsum": ("dim", "dtype"),
    "cumprod": _DIM,
    "sum": ("dim", "keepdim", "dtype"),
    "mean": _REDUCE,
    "amax": _REDUCE,
    "amin": _REDUCE,
    "argmax": _REDUCE,
    "argmin": _REDUCE,
    "topk": ("k", "dim", "largest", "sorted"),
    "sort": ("dim", "descending"),
    "argsort": ("dim", "descending"),
    "softmax": ("dim", "dtype"),
    "log_softmax": ("dim",),
    "sqrt": (),
    "exp": (),
    "log": (),
    "abs": (),
    "clamp": ("min", "max"),
    "maximum": (),
    "minimum": (),
    "flip": ("dims",),
    "roll": ("shifts", "dims"),
    "diff": _DIM,
    "permute": ("dims",),
    "transpose": (),
    "reshape": ("shape",),
    "flatten": ("start_dim", "end_dim"),
    "unflatten": ("dim", "sizes"),
    "squeeze": _DIM,
    "unsqueeze": _DIM,
    "broadcast_to": ("size",),
    "repeat_interleave": ("repeats", "dim", "output_size"),
    "chunk": _DIM,
    "split": _DIM,
    "logical_and": (),
    "logical_or": (),
    "logical_not": (),
    "nn.functional.one_hot": ("num_classes",),
    "nn.functional.pad": ("pad", "value"),
    "nn.functional.softmax": ("dim",),
    "nn.functional.normalize": ("p", "dim"),
    "nn.functional.scaled_dot_product_attention": ("attn_mask", "is_causal", "scale"),
}
# <tensor>.<name> -> the keyword arguments it may be given
METHODS: dict[str, tuple[str, ...]] = {
    "view": (),
    "view_as": (),
    "reshape": (),
    "reshape_as": (),
    "contiguous": (),
    "permute": ("dims",),
    "transpose": (),
    "t": (),
    "unsqueeze": _DIM,
    "squeeze": _DIM,
    "expand": (),
    "expand_as": (),
    "repeat": (),
    "repeat_interleave": ("repeats", "dim", "output_size"),
    "flatten": ("start_dim", "end_dim"),
    "unflatten": ("dim", "sizes"),
    "unfold": ("dimension", "size", "step"),
    "narrow": ("dim", "start", "length"),
    "select": ("dim", "index"),
    "chunk": _DIM,
    "split": _DIM,
    "gather": ("dim", "index"),
    "scatter_add": ("dim", "index", "src"),
    "index_select": ("dim", "index"),
    "masked_fill": ("mask", "value"),
    "where": ("condition", "other"),
    "sum": ("dim", "keepdim", "dtype"),
    "mean": _REDUCE,
    "amax": _REDUCE,
    "amin": _REDUCE,
    "max": _REDUCE,
    "min": _REDUCE,
    "argmax": _REDUCE,
    "argmin": _REDUCE,
    "any": _REDUCE,
    "all": _REDUCE,
    "cumsum": ("dim", "dtype"),
    "cumprod": _DIM,
    "topk": ("k", "dim", "largest", "sorted"),
    "sort": ("dim", "descending"),
    "argsort": ("dim", "descending"),
    "softmax": ("dim",),
    "log_softmax": ("dim",),
    "matmul": (),
    "bmm": (),
    "sqrt": (),
    "exp": (),
    "log": (),
    "abs": (),
    "pow": (),
    "norm": ("p", "dim", "keepdim"),
    "clamp": ("min", "max"),
    "tril": ("diagonal",),
    "triu": ("diagonal",),
    "flip": ("dims",),
    "roll": ("shifts", "dims"),
    "diff": _DIM,
    "eq": (),
    "ne": (),
    "lt": (),
    "le": (),
    "gt": (),
    "ge": (),
    "logical_not": (),
    "logical_and": (),
    "logical_or": (),
    "float": (),
    "double": (),
    "long": (),
    "int": (),
    "bool": (),
    "to": _DTYPE,
    "type_as": (),
    "clone": (),
    "new_zeros": _DTYPE,
    "new_ones": _DTYPE,
    "new_full": _DTYPE,
    "size": _DIM,
    "dim": (),
    "numel": (),
}
# torch.<name> read as a value, not called
TORCH_VALUES = (
    "float32", "float64", "float16", "bfloat16", "float", "double", "int64", "int32", "int8", "uint8", "long",
    "int", "bool", "inf", "pi",
)  # fmt: skip
# <value>.<name> read as a value: a tensor's shape and transposes, a topk/sort/max result's parts
VALUE_ATTRIBUTES = ("shape", "ndim", "T", "mT", "dtype", "values", "indices")

BINARY = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
}  # fmt: skip
UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}
COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
REFUSED_WORDS = {  # what a refused node is called in its message
    ast.Lambda: "a lambda",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator",
    ast.JoinedStr: "an f-string",
    ast.BoolOp: "`and` / `or` (use & and | on bool tensors)",
    ast.IfExp: "a conditional expression",
    ast.NamedExpr: "the walrus operator",
    ast.Dict: "a dict",
    ast.Set: "a set",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Starred: "`*` outside a call's arguments",
}


class Refused(ValueError):
    """The expression is not in the tensor language; the message names the part refused."""


@dataclass(frozen=True)
class Expression:
    """A checked expression: its text, its tree (walked by the interpreter) and how many nodes it has."""

    text: str
    tree: ast.expr
    nodes: int

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""


def parse(text: str, names: Iterable[str] = ()) -> Expression:
    """`text` read as one expression in the tensor language over `names` (the puzzle's inputs and sizes).

    Raises Refused, naming the part, for anything else. Nothing in `text` is run."""
    if not isinstance(text, str):
        raise Refused("an expression is text")
    if len(text) > MAX_CHARS:
        raise Refused(f"the expression has {len(text):,} characters; at most {MAX_CHARS}")
    stray = next((c for c in text if not (c.isascii() and (c.isprintable() or c == " "))), None)
    if stray is not None:
        shown = stray if stray.isprintable() else f"U+{ord(stray):04X}"
        raise Refused(f"the character {shown!r} is not plain ASCII: type names and operators with ASCII keys")
    if not text.strip():
        raise Refused("the expression is empty")
    try:
        with warnings.catch_warnings(action="ignore"):  # a SyntaxWarning about typed text is not the server's news
            tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        where = f" (column {error.offset})" if error.offset else ""
        raise Refused(f"not one Python expression: {error.msg}{where}") from None
    except (RecursionError, MemoryError, ValueError):
        raise Refused("the expression is nested too deeply") from None
    nodes = sum(1 for _ in ast.walk(tree)) - 1
    if nodes > MAX_NODES:
        raise Refused(f"the expression has {nodes} parts; at most {MAX_NODES}")
    checked = Expression(text.strip(), tree.body, nodes)
    _Checker(checked, frozenset(names)).visit(tree.body)
    return checked


def torch_path(node: ast.expr) -> str | None:
    """`torch.a.b` as "a.b"; None for anything that is not a chain of names rooted at `torch`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "torch" and parts:
        return ".".join(reversed(parts))
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, expression: Expression, names: frozenset[str]) -> None:
        self.expression, self.names = expression, names

    def refuse(self, node: ast.AST, why: str) -> None:
        part = self.expression.segment(node).replace("`", "'")  # shown in a code span
        shown = f"`{part[:40]}{'…' if len(part) > 40 else ''}`: " if part else ""
        raise Refused(f"{shown}{why}")

    def generic_visit(self, node: ast.AST) -> None:
        what = REFUSED_WORDS.get(type(node), f"a {type(node).__name__}")
        self.refuse(node, f"{what} is not in the tensor language")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "torch":
            self.refuse(node, "torch is used through one of its listed functions, such as torch.arange(...)")
        if node.id not in self.names:
            listed = ", ".join(sorted(self.names)) or "none"
            self.refuse(node, f"`{node.id}` is not a name here; the names are this puzzle's: {listed}, and torch")

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if value is None or value is Ellipsis or isinstance(value, bool):
            return
        if isinstance(value, int | float):
            if not math.isfinite(value) or abs(value) > MAX_LITERAL:
                self.refuse(node, f"a number larger than {MAX_LITERAL:,} is not in the tensor language")
            return
        if isinstance(value, str) and len(value) <= MAX_STRING and STRING.fullmatch(value):
            return
        if isinstance(value, str):
            self.refuse(node, f"a string is an einsum equation here: letters, ',', '->', '...', at most {MAX_STRING}")
        self.refuse(node, f"a {type(value).__name__} literal is not in the tensor language")

    def visit_Tuple(self, node: ast.Tuple) -> None:
        for element in node.elts:
            self.visit(element)

    visit_List = visit_Tuple

    def visit_Slice(self, node: ast.Slice) -> None:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.visit(part)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        self.visit(node.slice)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in BINARY:
            self.refuse(node, f"the operator {type(node.op).__name__} is not in the tensor language")
        self.visit(node.left)
        self.visit(node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if type(node.op) not in UNARY:
            self.refuse(node, "`not` is not in the tensor language (use ~ on a bool tensor)")
        self.visit(node.operand)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) != 1 or type(node.ops[0]) not in COMPARE:
            self.refuse(node, "one comparison at a time: ==, !=, <, <=, > or >= (no chains, `in` or `is`)")
        self.visit(node.left)
        self.visit(node.comparators[0])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.refuse(node, "a name starting with _ is not in the tensor language")
        path = torch_path(node)
        if path is not None:
            if path not in TORCH_VALUES:
                self.refuse(node, f"torch.{path} is not one of the listed dtypes and constants")
            return
        if node.attr not in VALUE_ATTRIBUTES:
            if node.attr in METHODS:
                self.refuse(node, f".{node.attr} is a method: call it, as .{node.attr}(...)")
            self.refuse(node, f".{node.attr} is not one of the listed attributes ({', '.join(VALUE_ATTRIBUTES)})")
        self.visit(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Attribute):
            instead = " (infinity is written torch.inf)" if getattr(node.func, "id", "") == "float" else ""
            self.refuse(node.func, f"a call is torch.<function>(...) or <tensor>.<method>(...){instead}")
        if node.func.attr.startswith("_"):
            self.refuse(node.func, "a name starting with _ is not in the tensor language")
        path = torch_path(node.func)
        if path is not None:
            if path not in FUNCTIONS:
                self.refuse(node.func, f"torch.{path} is not one of the listed torch functions")
            allowed = FUNCTIONS[path]
        else:
            name = node.func.attr
            if name not in METHODS:
                instead = f": use .{name[:-1]}" if name[:-1] in METHODS else ""
                hint = f" (in-place methods, ending in _, are not in the language{instead})" if name[-1] == "_" else ""
                self.refuse(node.func, f".{name}(...) is not one of the listed tensor methods{hint}")
            allowed = METHODS[name]
            self.visit(node.func.value)
        for argument in node.args:
            self.visit(argument.value if isinstance(argument, ast.Starred) else argument)
        for keyword in node.keywords:
            if keyword.arg is None:
                self.refuse(keyword, "`**` is not in the tensor language")
            if keyword.arg not in allowed:
                offered = ", ".join(allowed) or "none"
                self.refuse(keyword, f"`{keyword.arg}=` is not a listed keyword here (listed: {offered})")
            self.visit(keyword.value)
