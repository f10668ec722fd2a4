"""The tensor language's interpreter: walks a checked tree (explorers/tensors/language.py), sizes first.

`run(expression, inputs)` first evaluates the tree on the meta device, on tensors with the inputs'
shapes, dtypes and strides and no data: every intermediate tensor's element count is checked there
(`MAX_ELEMENTS` each, `MAX_TOTAL` together), and a matmul's or einsum's work against `MAX_PRODUCTS`,
before any memory is touched. Only then does it evaluate on the real inputs, and with the same
shapes the real run makes the same sizes. The meta run cannot tell a size that depends on values
(`nonzero`, a one-hot without its class count), and says so.

The real run records a `Step` per tensor-valued sub-expression: shape, dtype, strides, contiguity, and
whether it is the same tensor as an operand, a view of one (autograd's view tracking, `Tensor._base`),
or a new tensor. PyTorch's own errors become `Failed` with its message.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from explorers.tensors.language import BINARY, COMPARE, FUNCTIONS, METHODS, Expression, Refused, torch_path

MAX_ELEMENTS = 2**20  # one intermediate tensor
MAX_TOTAL = 2**23  # all intermediates of one evaluation together
MAX_PRODUCTS = 2**26  # multiply-adds in one matmul, einsum or cdist
MAX_NUMBER = 2**40  # a Python int made by arithmetic on sizes and literals
MAX_SEQUENCE = 64  # a tuple, list or string made by arithmetic (`(1,) * n`)
CREATION = ("arange", "zeros", "ones", "full", "eye", "tensor")  # made on the inputs' device
_OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "@": operator.matmul, "&": operator.and_, "|": operator.or_,
    "^": operator.xor, "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


class Failed(Exception):
    """PyTorch (or Python arithmetic) raised while evaluating; the message is PyTorch's own, shortened, and `steps`
    the trace of what ran before it (the operands of the op that raised)."""

    def __init__(self, message: str, steps: list[Step] | None = None) -> None:
        super().__init__(message)
        self.steps = steps or []


@dataclass(frozen=True)
class Step:
    """One tensor-valued sub-expression of a real run."""

    text: str
    depth: int  # 0 for the whole expression
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]
    contiguous: bool
    relation: str  # "input", "same", "view" or "new"
    of: str  # the operand it is the same tensor as or a view of ("" for input and new)
    stretched: bool = False  # an elementwise op whose result broadcasting made larger than each of its operands

    def describe(self) -> str:
        how = {"input": "an input", "same": f"`{self.of}` itself", "view": f"a view of `{self.of}`"}
        return (
            f"shape {tuple(self.shape)}, {self.dtype}, strides {tuple(self.strides)}, "
            f"{'contiguous' if self.contiguous else 'not contiguous'}, {how.get(self.relation, 'a new tensor')}"
        )


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run(expression: Expression, inputs: Mapping[str, Any]) -> tuple[Any, list[Step]]:
    """The expression's value on `inputs` (tensors and int sizes), after its meta run found every size in bounds."""
    meta = {
        name: torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") if _is_tensor(v) else v
        for name, v in inputs.items()
    }
    sizing = _Evaluator(expression, meta, "meta")
    device = next((v.device for v in inputs.values() if _is_tensor(v)), torch.device("cpu"))
    evaluator = _Evaluator(expression, inputs, device)
    try:
        sizing.evaluate()
    except Failed as failed:
        # PyTorch refused an op on the meta run (a shape error): every size before it was checked, so the real
        # run goes as far, no further, to trace what the op was given
        evaluator.limit, evaluator.limit_message = sizing.visits, str(failed)
    return evaluator.evaluate(), evaluator.steps


def trace(expression: Expression, inputs: Mapping[str, Any]) -> list[Step]:
    return run(expression, inputs)[1]


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _root(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._base if tensor._base is not None else tensor


def _tensors(value: Any) -> list[torch.Tensor]:
    if _is_tensor(value):
        return [value]
    if isinstance(value, tuple | list):
        return [t for item in value for t in _tensors(item)]
    return []


class _Evaluator:
    def __init__(self, expression: Expression, env: Mapping[str, Any], device: Any) -> None:
        self.expression, self.env, self.device = expression, env, device
        self.meta = device == "meta"
        self.total = 0
        self.visits, self.limit, self.limit_message = 0, None, ""  # a real run stops where its meta run failed
        self.steps: list[Step] = []
        self.witnesses: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # per step: its value and tensor operands

    def evaluate(self) -> Any:
        try:
            with torch.no_grad():
                return self.visit(self.expression.tree, 0)
        except Refused:
            raise
        except Failed as failed:
            raise Failed(str(failed), self.steps) from None
        except RecursionError:
            raise Refused("the expression is nested too deeply") from None
        except Exception as error:  # PyTorch's own message (an index out of range, mismatched shapes)
            raise self.failed(error) from None

    def part(self, node: ast.AST) -> str:
        """A sub-expression's text, short enough for a message."""
        text = self.expression.segment(node).replace("`", "'")  # shown in a code span
        return text if len(text) <= 40 else text[:39] + "…"

    def failed(self, error: Exception) -> Exception:
        message = " ".join(str(error).split())[:300] or type(error).__name__
        unsized = isinstance(error, NotImplementedError) or any(w in message for w in ("item()", "data-dependent"))
        if self.meta and unsized:
            return Refused(
                "its size depends on the tensor's values, which the size check runs without "
                f"(pass the size, e.g. num_classes=; PyTorch: {message[:160]})"
            )
        return Failed(message, self.steps)

    # --- nodes ----------------------------------------------------------------------------------

    def visit(self, node: ast.expr, depth: int) -> Any:
        self.visits += 1
        if self.limit is not None and self.visits > self.limit:
            raise Failed(self.limit_message)
        value = getattr(self, f"visit_{type(node).__name__}")(node, depth)
        self.check(node, value)
        return value

    def check(self, node: ast.expr, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise Refused(f"`{self.part(node)}` makes a number beyond {MAX_NUMBER:,}")
        if isinstance(value, tuple | list | str) and len(value) > MAX_SEQUENCE:
            raise Refused(f"`{self.part(node)}` makes a sequence of {len(value):,}; at most {MAX_SEQUENCE}")
        for tensor in _tensors(value):
            if tensor.numel() > MAX_ELEMENTS:
                raise Refused(
                    f"`{self.part(node)}` would make {tensor.numel():,} elements "
                    f"(shape {tuple(tensor.shape)}); at most {MAX_ELEMENTS:,}"
                )
            self.total += tensor.numel()
        if self.total > MAX_TOTAL:
            raise Refused(
                f"the expression's tensors would hold {self.total:,} elements together; at most {MAX_TOTAL:,}"
            )

    def record(
        self, node: ast.expr, depth: int, value: Any, operands: list[tuple[str, Any]], elementwise: bool = False
    ) -> Any:
        if self.meta or not _is_tensor(value):
            return value
        sizes = [t.numel() for _, operand in operands for t in _tensors(operand)]
        stretched = elementwise and len(sizes) >= 2 and value.numel() > max(sizes)
        relation, of = "new", ""
        self.witnesses.append((value, [t for _, operand in operands for t in _tensors(operand)]))
        for text, operand in operands:
            for tensor in _tensors(operand):
                if value is tensor:
                    relation, of = "same", text
                elif value._base is not None and value._base is _root(tensor):
                    relation, of = "view", text
                if relation != "new":
                    break
            if relation != "new":
                break
        self.steps.append(
            Step(
                self.expression.segment(node),
                depth,
                tuple(value.shape),
                dtype_name(value.dtype),
                tuple(value.stride()),
                value.is_contiguous(),
                relation,
                of,
                stretched,
            )
        )
        return value

    def operands(self, *pairs: tuple[ast.expr, Any]) -> list[tuple[str, Any]]:
        return [(self.expression.segment(node), value) for node, value in pairs]

    def visit_Name(self, node: ast.Name, depth: int) -> Any:
        value = self.env[node.id]
        if _is_tensor(value) and not self.meta:
            self.witnesses.append((value, [value]))
            self.steps.append(
                Step(
                    node.id,
                    depth,
                    tuple(value.shape),
                    dtype_name(value.dtype),
                    tuple(value.stride()),
                    value.is_contiguous(),
                    "input",
                    "",
                )  # fmt: skip
            )
        return value

    def visit_Constant(self, node: ast.Constant, depth: int) -> Any:
        return node.value

    def visit_Tuple(self, node: ast.Tuple, depth: int) -> tuple:
        return tuple(self.visit(e, depth + 1) for e in node.elts)

    def visit_List(self, node: ast.List, depth: int) -> list:
        return [self.visit(e, depth + 1) for e in node.elts]

    def visit_Slice(self, node: ast.Slice, depth: int) -> slice:
        parts = [None if p is None else self.visit(p, depth + 1) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def visit_Subscript(self, node: ast.Subscript, depth: int) -> Any:
        value = self.visit(node.value, depth + 1)
        index = self.visit(node.slice, depth + 1)
        if self.meta and any(t.dtype == torch.bool for t in _tensors(index)):
            raise Refused("indexing with a bool mask makes a size that depends on the values; use torch.where")
        if not _is_tensor(value) and not isinstance(value, tuple | list | torch.Size):
            raise Failed(f"`{self.expression.segment(node.value)[:40]}` is not a tensor, tuple or shape to index")
        result = value[index]
        return self.record(node, depth, result, [(self.expression.segment(node.value), value)])

    def visit_UnaryOp(self, node: ast.UnaryOp, depth: int) -> Any:
        operand = self.visit(node.operand, depth + 1)
        return self.record(
            node, depth, _UNARY[type(node.op)](operand), [(self.expression.segment(node.operand), operand)]
        )

    def visit_BinOp(self, node: ast.BinOp, depth: int) -> Any:
        left = self.visit(node.left, depth + 1)
        right = self.visit(node.right, depth + 1)
        symbol = BINARY[type(node.op)]
        numbers = all(isinstance(v, int | float) for v in (left, right))
        if symbol == "**" and numbers and abs(right) * math.log2(max(abs(left), 2)) > 64:
            raise Refused(f"`{self.part(node)}` would be too large a number")
        if symbol == "*" and any(isinstance(v, tuple | list | str) for v in (left, right)):
            sequence, times = (left, right) if isinstance(left, tuple | list | str) else (right, left)
            if isinstance(times, int) and len(sequence) * times > MAX_SEQUENCE:
                raise Refused(f"`{self.part(node)}` makes a sequence longer than {MAX_SEQUENCE}")
        if symbol == "@" and _is_tensor(left) and _is_tensor(right):
            self.check_matmul(node, left, right)
        operands = self.operands((node.left, left), (node.right, right))
        return self.record(node, depth, _OPERATORS[symbol](left, right), operands, elementwise=symbol != "@")

    def visit_Compare(self, node: ast.Compare, depth: int) -> Any:
        left = self.visit(node.left, depth + 1)
        right = self.visit(node.comparators[0], depth + 1)
        result = _OPERATORS[COMPARE[type(node.ops[0])]](left, right)
        operands = self.operands((node.left, left), (node.comparators[0], right))
        return self.record(node, depth, result, operands, elementwise=True)

    def visit_Attribute(self, node: ast.Attribute, depth: int) -> Any:
        path = torch_path(node)
        if path is not None:
            return getattr(torch, path)  # a listed dtype or constant (language.TORCH_VALUES)
        value = self.visit(node.value, depth + 1)
        if node.attr in ("values", "indices"):
            if not hasattr(value, "indices") or _is_tensor(value):
                raise Failed(f"`.{node.attr}` belongs to the result of topk, sort, max or min along a dim")
        elif not _is_tensor(value):
            raise Failed(f"`.{node.attr}` belongs to a tensor")
        part = [] if node.attr in ("values", "indices") else [(self.expression.segment(node.value), value)]
        return self.record(node, depth, getattr(value, node.attr), part)  # topk's values: a part of a new result

    def visit_Call(self, node: ast.Call, depth: int) -> Any:
        path = torch_path(node.func)
        operands: list[tuple[str, Any]] = []
        if path is None:
            receiver = self.visit(node.func.value, depth + 1)
            if not _is_tensor(receiver):
                raise Failed(f"`.{node.func.attr}(...)` is called on a tensor")
            operands.append((self.expression.segment(node.func.value), receiver))
            function, name = getattr(receiver, node.func.attr), node.func.attr
        else:
            function, name = _torch_function(path), path
        args: list[Any] = []
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                spread = self.visit(argument.value, depth + 1)
                if not isinstance(spread, tuple | list | torch.Size):
                    raise Failed("`*` spreads a shape, tuple or list")
                args.extend(spread)
            else:
                args.append(value := self.visit(argument, depth + 1))
                operands.append((self.expression.segment(argument), value))
        kwargs = {k.arg: self.visit(k.value, depth + 1) for k in node.keywords}
        operands += [(self.expression.segment(k.value), kwargs[k.arg]) for k in node.keywords]
        if path in CREATION:
            kwargs["device"] = self.device
        self.check_work(node, name, args)
        elementwise = name in ("where", "maximum", "minimum", "logical_and", "logical_or", "masked_fill")
        return self.record(node, depth, function(*args, **kwargs), operands, elementwise=elementwise)

    # --- bounds on work ---------------------------------------------------------------------------

    def check_matmul(self, node: ast.expr, left: torch.Tensor, right: torch.Tensor) -> None:
        if left.dim() and right.dim():
            out = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2]) if min(left.dim(), right.dim()) > 1 else ()
            rows = left.shape[-2] if left.dim() > 1 else 1
            cols = right.shape[-1] if right.dim() > 1 else 1
            self.check_products(node, math.prod(out) * rows * cols * left.shape[-1])

    def check_products(self, node: ast.expr, products: int) -> None:
        if products > MAX_PRODUCTS:
            raise Refused(f"`{self.part(node)}` would take {products:,} multiply-adds; at most {MAX_PRODUCTS:,}")

    def check_work(self, node: ast.expr, name: str, args: list[Any]) -> None:
        tensors = [a for a in args if _is_tensor(a)]
        if name in ("matmul", "bmm") and len(tensors) >= 2:
            self.check_matmul(node, tensors[0], tensors[1])
        elif name.endswith("scaled_dot_product_attention") and len(tensors) >= 2 and min(t.dim() for t in tensors) >= 2:
            self.check_products(node, tensors[0].numel() * tensors[1].shape[-2])
        elif name == "cdist" and len(tensors) >= 2 and min(t.dim() for t in tensors) >= 2:
            a, b = tensors[:2]
            self.check_products(node, a.numel() // max(a.shape[-1], 1) * b.shape[-2] * a.shape[-1])
        elif name == "einsum" and args and isinstance(args[0], str):
            sizes: dict[str, int] = {}
            spread = 1
            for term, tensor in zip(args[0].split("->")[0].split(","), tensors, strict=False):
                letters = term.strip().replace("...", "")
                named = tensor.shape[len(tensor.shape) - len(letters) :] if letters else ()
                spread = max(spread, math.prod(tensor.shape[: len(tensor.shape) - len(letters)]))
                sizes.update(zip(letters, named, strict=False))
            self.check_products(node, math.prod(sizes.values()) * spread)


def _torch_function(path: str) -> Any:
    assert path in FUNCTIONS, path  # language.parse refused every other name
    value: Any = torch
    for part in path.split("."):
        value = getattr(value, part)
    return value


assert set(METHODS) <= set(dir(torch.Tensor)), set(METHODS) - set(dir(torch.Tensor))
