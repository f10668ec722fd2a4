"""The tensor language against hostile input: sandbox escapes, huge numbers, deep nesting, look-alike names and
10,000 generated expressions. Each is refused with a message naming the part, or computed within its bounds;
nothing runs beyond the listed ops, no text reaches eval, exec or compile to code, and memory stays flat."""

from __future__ import annotations

import ast
import builtins
import pathlib
import random
import resource
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode

from explorers.tensors import interpreter, language
from explorers.tensors.interpreter import Failed
from explorers.tensors.language import Refused

NAMES = ("x", "y", "i", "B", "T", "C")
REFUSE_WITHIN_S = 0.05


def inputs() -> dict[str, object]:
    x = torch.randn(2, 3, 4)
    return {"x": x, "y": torch.randn(4, 3).T, "i": torch.tensor([0, 2, 1]), "B": 2, "T": 3, "C": 4}


ESCAPES = {  # expression -> a fragment its refusal must name
    "x.__class__": "x.__class__",
    "x.__class__.__mro__[1].__subclasses__()": "__subclasses__",
    "().__class__.__bases__[0].__subclasses__()": "__subclasses__",
    "x.shape.__class__.__init__.__globals__": "__globals__",
    "torch.load('model.pt')": "torch.load",
    "torch.ops.aten.add(x, x)": "torch.ops.aten.add",
    "torch._C._get_tracing_state()": "_get_tracing_state",
    "torch._C": "torch._C",
    "getattr(x, 'shape')": "getattr",
    "__import__('os').system('id')": "__import__",
    "eval('1')": "eval",
    "exec('1')": "exec",
    "open('/etc/passwd').read()": "read",
    "torch.hub.load('a', 'b')": "torch.hub.load",
    "torch.from_file('/etc/passwd')": "torch.from_file",
    "torch.save(x, 'f')": "torch.save",
    "x.numpy()": "x.numpy",
    "x.data_ptr()": "x.data_ptr",
    "x.untyped_storage()": "untyped_storage",
    "x.item()": "x.item",
    "x.tolist()": "x.tolist",
    "x.add_(1)": "in-place",
    "x.masked_fill_(x > 0, 1)": "in-place",
    "x.register_hook(print)": "register_hook",
    "torch.nn.Module()": "torch.nn.Module",
    "torch.set_num_threads(1)": "torch.set_num_threads",
    "torch.manual_seed(0)": "torch.manual_seed",
    "(lambda: 1)()": "lambda",
    "[v for v in (1, 2)]": "comprehension",
    "f'{x}'": "f-string",
    "x if B else y": "conditional",
    "x and y": "`and`",
    "not x": "`not`",
    "(z := x)": "walrus",
    "{'a': x}": "dict",
    "print(x)": "print",
    "x.sum(out=x)": "`out=`",
    "torch.zeros(3, device='cuda')": "`device=`",
    "x.view(**{'a': 1})": "`**`",
    "x << 2": "LShift",
    "x in y": "`in`",
    "B < T < C": "no chains",
    "10**10**10": "too large",
    "9" * 30: "larger than",
    "1e309": "larger than",
    "torch.ones(10**9)": "elements",
    "x[None].expand(10**9, -1, -1, -1)": "elements",
    "torch.arange(0, 10**6, 1e-6)": "elements",
    "x.repeat(1000, 1000, 1)": "elements",
    "torch.ones(1000, 1000) @ torch.ones(1000, 1000)": "multiply-adds",
    "torch.einsum('ij,jk->ik', torch.ones(1000, 1000), torch.ones(1000, 1000))": "multiply-adds",
    "(1,) * 10**6": "sequence",
    "x.shape * 1000": "sequence",
    "'abc' * 1000": "sequence",
    "x[x > 0]": "bool mask",
    "torch.nn.functional.one_hot(i)": "depends on the tensor's values",
    "ｘ + 1": "not plain ASCII",
    "x\u200b + 1": "not plain ASCII",
    "x.ѕum()": "not plain ASCII",  # a Cyrillic s
    "x + 'a\\x00'": "einsum equation",
    "x" + "[0]" * 60: "parts",
    "[" * 99 + "x" + "]" * 99: "parts",
    "-" * 150 + "x": "parts",
    "(" * 50_000 + "x" + ")" * 50_000: "characters",
    "-" * 500 + "x": "characters",
    "x" * 100_000: "characters",
    "x;y": "one Python expression",
    "import os": "one Python expression",
    "": "empty",
    "z + 1": "`z` is not a name here",
    "torch": "torch is used through",
    "x.weird_attribute": "not one of the listed attributes",
    "x.sum": "is a method",
}


@pytest.mark.parametrize("text", list(ESCAPES), ids=lambda t: repr(t[:30]))
def test_a_sandbox_escape_or_a_bomb_is_refused_in_time_with_the_part_named(text):
    started = time.perf_counter()
    with pytest.raises(Refused) as refused:
        expression = language.parse(text, NAMES)
        interpreter.run(expression, inputs())
    assert time.perf_counter() - started < REFUSE_WITHIN_S * (20 if "**" in text or "einsum" in text else 1)
    assert ESCAPES[text] in str(refused.value), str(refused.value)


def test_the_tables_name_only_what_torch_has_and_nothing_private_or_in_place():
    for path in language.FUNCTIONS:
        value = torch
        for part in path.split("."):
            value = getattr(value, part)
        assert callable(value), path
    for name in (*language.FUNCTIONS, *language.METHODS, *language.TORCH_VALUES, *language.VALUE_ATTRIBUTES):
        assert not name.startswith("_") and not name.endswith("_"), name
        assert name not in ("load", "save", "from_file", "data_ptr", "numpy", "item", "tolist", "storage"), name


# --- 10,000 generated expressions -------------------------------------------------------------------------

ATOMS = (*NAMES, "0", "1", "2", "-1", "0.5", "None", "...", "torch.float", "torch.long", "torch.inf", "10**6", "99999")
BAD_ATOMS = ("zz", "__x", "torch._C", "x.__dict__", "1e400", "'; rm'", "torch.load", "print")


def generate(rng: random.Random, depth: int = 0) -> str:
    """A random expression, mostly in the language, sometimes not."""
    if depth > 4 or rng.random() < 0.25:
        return rng.choice(BAD_ATOMS) if rng.random() < 0.03 else rng.choice(ATOMS)
    kind = rng.random()
    sub = lambda: generate(rng, depth + 1)  # noqa: E731
    if kind < 0.35:
        method = rng.choice([*language.METHODS, "foo", "add_", "__len__"])
        return f"{sub()}.{method}({', '.join(sub() for _ in range(rng.randint(0, 3)))})"
    if kind < 0.55:
        function = rng.choice([*language.FUNCTIONS, "load", "ops.aten.add"])
        return f"torch.{function}({', '.join(sub() for _ in range(rng.randint(0, 3)))})"
    if kind < 0.75:
        operator = rng.choice(["+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "==", "<", ">=", "<<"])
        return f"({sub()} {operator} {sub()})"
    if kind < 0.9:
        return f"{sub()}[{rng.choice([':', '0', '-1', 'None', '...', ':, None', sub()])}]"
    return rng.choice([f"-{sub()}", f"~{sub()}", f"({sub()}, {sub()})", f"[{sub()}]", f"{sub()}.T", f"{sub()}.shape"])


class Called(TorchFunctionMode):
    """Every torch function and method called, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


ALLOWED_INTERNALS = {  # what operators, indexing and attributes call, besides the listed names
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
    "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__eq__", "__ne__", "__lt__", "__le__",
    "__gt__", "__ge__", "__neg__", "__pos__", "__invert__", "__getitem__", "__get__", "__len__", "__iter__",
    "__bool__", "__index__", "__int__", "__float__", "__hash__", "__format__", "__repr__", "numel", "dim", "size",
    "stride", "is_contiguous", "is_floating_point", "empty_strided", "__torch_function__", "__rdiv__", "__div__",
    "__rlshift__", "__lshift__", "__nonzero__", "__setstate__", "__reduce_ex__", "untyped_storage", "_base",
    "__contains__", "abs", "neg", "pos", "positive", "ndim", "shape", "dtype", "device", "T", "mT", "values",
    "indices", "__array__", "tolist", "item", "add", "sub", "mul", "div", "remainder", "bitwise_and", "bitwise_or",
    "bitwise_xor", "_set_grad_enabled",
}  # fmt: skip


@pytest.mark.slow
def test_ten_thousand_generated_expressions_are_refused_or_computed_within_bounds_with_no_other_error():
    rng = random.Random(48)
    listed = {n.rsplit(".", 1)[-1] for n in language.FUNCTIONS} | set(language.METHODS)
    outcomes = {"refused": 0, "failed": 0, "computed": 0}
    slowest_refusal = 0.0
    called = Called()
    for _ in range(10_000):
        text, given = generate(rng), inputs()
        started = time.perf_counter()
        try:
            with called:
                value, _ = interpreter.run(language.parse(text, NAMES), given)
        except Refused:
            outcomes["refused"] += 1
            slowest_refusal = max(slowest_refusal, time.perf_counter() - started)
            continue
        except Failed:
            outcomes["failed"] += 1
            continue
        outcomes["computed"] += 1
        for tensor in interpreter._tensors(value):
            assert tensor.numel() <= interpreter.MAX_ELEMENTS, text
    assert slowest_refusal < REFUSE_WITHIN_S * 4, slowest_refusal  # a refusal after the meta run, on a busy CI
    assert min(outcomes.values()) > 500, outcomes  # the generator reaches every outcome
    beyond = {name for name in called.names if name not in listed | ALLOWED_INTERNALS}
    # item and tolist are called by torch itself (a size given as a 0-d tensor), never by a name typed
    assert not beyond, " ".join(sorted(beyond))


@pytest.mark.slow
def test_two_thousand_generated_expressions_from_the_link_are_taken_or_refused_with_a_notice_in_time():
    from ui.fields import read_query
    from ui.puzzles import ANSWER

    rng = random.Random(4848)
    texts = [generate(rng) for _ in range(2_000)] + list(ESCAPES)
    taken = 0
    for text in texts:
        started = time.perf_counter()
        values, notices = read_query([ANSWER], {"answer": text})
        assert time.perf_counter() - started < REFUSE_WITHIN_S, text
        assert ("answer" in values) != bool(notices), text  # taken, or refused with one notice, never both
        if notices:
            assert "using the default" in notices[0] and "`answer`" in notices[0]
        taken += "answer" in values
    assert 200 < taken < len(texts) - 200  # the generator reaches both


def test_no_text_typed_reaches_eval_exec_or_compile_to_code(monkeypatch):
    """ast.parse compiles to a tree (PyCF_ONLY_AST); any other compile, and every eval and exec, fails the test. The
    lab's modules, and what torch imports on first use, are imported first (a check of every reference, as a
    worker's first runs would): importing a module compiles its source, which is not text a learner typed."""
    from explorers import tensors

    for name, puzzle in tensors.PUZZLES.items():
        tensors.check(name, puzzle.reference)
    seen = []
    real_compile = builtins.compile

    def only_to_a_tree(source, filename, mode, flags=0, *args, **kwargs):
        seen.append(flags)
        assert flags & ast.PyCF_ONLY_AST, f"compiled to code: {source!r}"
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError(f"eval or exec called with {args!r}")

    monkeypatch.setattr(builtins, "compile", only_to_a_tree)
    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    for name, puzzle in tensors.PUZZLES.items():
        assert tensors.check(name, puzzle.reference).right
    assert tensors.check("residuals", "__import__('os')").reason == "refused"
    assert seen  # ast.parse went through compile, as a tree


def test_the_package_source_calls_no_eval_exec_compile_or_getattr_on_typed_names():
    package = pathlib.Path(language.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile", "__import__"), f"{path.name}: {node.func.id}"


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


@pytest.mark.slow
def test_memory_stays_flat_over_thousands_of_hostile_checks():
    from explorers import tensors

    hostile = [*ESCAPES, "torch.ones(1024, 1024)", "x[None].expand(4096, -1, -1, -1).sum()"]
    for text in hostile:  # warm: first calls load kernels
        tensors.check("residuals", text[:200])
    before = rss_kib()
    for round_ in range(30):
        for text in hostile:
            verdict = tensors.check("residuals", text[: language.MAX_CHARS])
            assert verdict.reason != "right"
        assert round_ < 5 or rss_kib() - before < 40 * 1024, rss_kib() - before
    assert rss_kib() - before < 40 * 1024, f"RSS grew {(rss_kib() - before) / 1024:.0f} MiB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 * 1024 * 1024  # never near a bomb's gigabytes


@pytest.mark.parametrize(
    "text",
    [
        "torch.arange(3)",
        "torch.zeros(2, 3)",
        "torch.ones(2)",
        "torch.full((2,), 1.0)",
        "torch.eye(3)",
        "torch.tensor([1, 2])",
        "torch.zeros_like(x)",
        "x.new_zeros(2)",
    ],
)
def test_a_tensor_made_on_the_meta_run_is_made_on_the_meta_device(text):
    """A CPU tensor beside meta ones can return garbage with no error (scatter_add into CPU zeros does): every
    tensor the size check makes must be on the meta device."""
    made = []
    evaluator = interpreter._Evaluator(language.parse(text, NAMES), {"x": torch.empty(2, 3, device="meta")}, "meta")
    original = evaluator.check
    evaluator.check = lambda node, value: (made.append(value), original(node, value))
    evaluator.evaluate()
    assert all(t.device.type == "meta" for t in made if isinstance(t, torch.Tensor)), text
