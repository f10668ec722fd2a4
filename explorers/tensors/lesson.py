"""The tensor drills' sentences: each verdict built from a grading's fields, each concept a Statement.

A verdict sentence says what the grader saw on one input (explorers/tensors/grading.py): the
shapes, dtypes and values compared, PyTorch's error, the language's refusal. What each concept
*is* is said in a Statement, with its scope and source; tests/claims/test_tensors.py tries to
falsify each one. The concept is the first hint; the puzzle's first op is the second.
"""

from __future__ import annotations

import explorers.tensors.language as language
from explorers.progress.history import PuzzleScore
from explorers.statements import Statement
from explorers.tensors.cases import CASES, shape
from explorers.tensors.catalogue import PUZZLES
from explorers.tensors.figures import relation_words
from explorers.tensors.grading import Verdict
from explorers.tensors.interpreter import Step

DOCS = "https://pytorch.org/docs/stable"
STATEMENTS: dict[str, Statement] = {
    "broadcasting": Statement(
        text=(
            "Broadcasting lines two shapes up from their last dimension; a dimension of size 1, or one missing at "
            "the front, stretches to the other's size. So an (N,) tensor against an (N, 1) one gives (N, N), "
            "with no error."
        ),
        scope="out-of-place elementwise operators and functions (+, -, *, /, comparisons, torch.where); an in-place "
        "op (y.sub_(p)) does not grow its output and raises instead; matmul broadcasts its leading (batch) "
        "dimensions only",
        source=f"{DOCS}/notes/broadcasting.html",
    ),
    "keepdim": Statement(
        text=(
            "A reduction over a dimension (sum, mean, amax, norm, argmax) removes it; `keepdim=True` keeps it with "
            "size 1, so the result broadcasts back against its input along the right axis."
        ),
        scope="reductions given a dim; with no dim they reduce to a 0-d tensor (dim=None with keepdim=True keeps "
        "every dimension at size 1; sum and mean need dim=None written out for it)",
        source=f"{DOCS}/generated/torch.sum.html (keepdim)",
    ),
    "view_reshape": Statement(
        text=(
            "`view` never copies: it raises when the strides cannot express the new shape, as after a transpose "
            "or permute that is then merged. `reshape` returns a view when it can and a copy otherwise; "
            "`contiguous()` copies into row-major order when the tensor is not already in it."
        ),
        scope="strided CPU and CUDA tensors; which merges a view can express is in the Tensor Views notes",
        source=f"{DOCS}/tensor_view.html and {DOCS}/generated/torch.Tensor.view.html",
    ),
    "permute": Statement(
        text=(
            "`transpose` and `permute` reorder axes without copying: they return a view whose strides are "
            "reordered. Of a contiguous tensor, that view is not contiguous once two axes of size above 1 trade places."
        ),
        scope="non-empty strided tensors (an empty tensor counts as contiguous); a view that moves size-1 axes "
        "may still count as contiguous, and transposing a transposed tensor back can make it contiguous again",
        source=f"{DOCS}/generated/torch.permute.html and {DOCS}/tensor_view.html",
    ),
    "expand_repeat": Statement(
        text=(
            "`expand` returns a view whose stretched dimensions have stride 0: nothing is copied, and one element "
            "of memory stands at many positions (in-place arithmetic such as `add_` or `copy_` refuses to write into "
            "it). "
            "`repeat` copies the data as many times as asked."
        ),
        scope="expand stretches size-1 dimensions only (and adds new leading ones); fill_, zero_, masked_fill_ and "
        "item assignment do write into an expanded view, to every position that shares the element",
        source=f"{DOCS}/generated/torch.Tensor.expand.html and {DOCS}/generated/torch.Tensor.repeat.html",
    ),
    "gather": Statement(
        text=(
            "`x.gather(d, index)` picks, at every position of `index`, the element of `x` whose coordinate along "
            "d is the index there: the result has `index`'s shape. Indexing with two index tensors, "
            "`x[rows, cols]`, pairs them element by element (broadcast together first)."
        ),
        scope="index an int64 (or int32) tensor with as many dimensions as x, no larger than x along every "
        "dimension but d, each entry within x's size along d",
        source=f"{DOCS}/generated/torch.gather.html and numpy's advanced indexing, which PyTorch follows",
    ),
    "index_select": Statement(
        text="`x.index_select(d, ids)` takes whole slices of `x` along d, one per id, in the order of `ids`.",
        scope="ids a 1-D int64 tensor; repeats allowed",
        source=f"{DOCS}/generated/torch.index_select.html",
    ),
    "scatter_add": Statement(
        text=(
            "`t.scatter_add(d, index, src)` adds each value of `src` into `t` at the coordinate `index` names "
            "along d; values sent to the same place add up."
        ),
        scope="the out-of-place form; index and src of the same shape; scatter (without add) keeps one of the "
        "colliding values instead",
        source=f"{DOCS}/generated/torch.Tensor.scatter_add_.html",
    ),
    "masks": Statement(
        text=(
            "A mask is a bool tensor that broadcasts against what it masks. `masked_fill(mask, v)` writes v where "
            "the mask is True; `torch.where(c, a, b)` takes a where c is True and b elsewhere. `tril` keeps "
            "j <= i, `triu(diagonal=1)` keeps j > i."
        ),
        scope="row index i, column index j of the last two dimensions for tril and triu",
        source=f"{DOCS}/generated/torch.Tensor.masked_fill_.html, torch.where, torch.tril and torch.triu",
    ),
    "one_hot": Statement(
        text=(
            "`F.one_hot(y, C)` returns int64, with a new last dimension of size C; without `num_classes` it "
            "reads the size from the largest label, so a batch missing the top class comes out narrower."
        ),
        scope="torch.nn.functional.one_hot on int64 labels in [0, C)",
        source=f"{DOCS}/generated/torch.nn.functional.one_hot.html",
    ),
    "cat_stack": Statement(
        text=(
            "`torch.cat` joins tensors along a dimension they already have (their other sizes must match); "
            "`torch.stack` adds a new dimension (their shapes must match)."
        ),
        scope="tensors on one device; mixed dtypes are promoted (int64 with float32 gives float32); cat skips a "
        "1-D empty tensor of shape (0,) whatever the others' shapes",
        source=f"{DOCS}/generated/torch.cat.html and {DOCS}/generated/torch.stack.html",
    ),
    "matmul": Statement(
        text=(
            "`a @ b` multiplies the last two dimensions and broadcasts the leading ones; "
            "`torch.einsum` names every axis, and an axis named on the left but not on the right is summed."
        ),
        scope="tensors of two or more dimensions (1-D operands are promoted and the axis removed after)",
        source=f"{DOCS}/generated/torch.matmul.html and {DOCS}/generated/torch.einsum.html",
    ),
    "attention": Statement(
        text=(
            "Scaled dot-product attention divides q·kᵀ by sqrt(D), D the query's last size, then takes a softmax "
            "over the keys, the last dimension, so each query's weights sum to 1."
        ),
        scope="the default scale of torch.nn.functional.scaled_dot_product_attention (scale=None)",
        source=f"{DOCS}/generated/torch.nn.functional.scaled_dot_product_attention.html",
    ),
    "cumsum": Statement(
        text="`cumsum(d)` gives inclusive running sums: position i holds x[0] + ... + x[i].",
        scope="along dimension d; cumprod likewise with products",
        source=f"{DOCS}/generated/torch.cumsum.html",
    ),
    "topk": Statement(
        text=(
            "`topk(k, d)` returns the k largest values and their indices along d, largest first; `argsort` "
            "and `sort` are ascending unless told `descending=True`."
        ),
        scope="largest=True and sorted=True, topk's defaults; ties in any order",
        source=f"{DOCS}/generated/torch.topk.html and {DOCS}/generated/torch.argsort.html",
    ),
    "unfold": Statement(
        text=(
            "`x.unfold(d, size, step)` is a view of every window of `size` along d, each laid out along a new "
            "last dimension; there are (n - size) // step + 1 of them."
        ),
        scope="size no larger than x's size n along d",
        source=f"{DOCS}/generated/torch.Tensor.unfold.html",
    ),
}
CONCEPT_TITLES = {
    "broadcasting": "broadcasting",
    "keepdim": "keepdim and broadcasting back",
    "view_reshape": "view against reshape and contiguous",
    "permute": "permute and transpose",
    "expand_repeat": "expand against repeat",
    "gather": "gather and paired indexing",
    "index_select": "index_select",
    "scatter_add": "scatter_add",
    "masks": "masks: masked_fill, where, tril and triu",
    "one_hot": "one-hot",
    "cat_stack": "cat against stack",
    "matmul": "batched matmul against einsum",
    "attention": "attention scores",
    "cumsum": "cumsum",
    "topk": "top-k",
    "unfold": "sliding windows with unfold",
}
VERDICT_TITLE = "Your answer, checked"
LANGUAGE_TITLE = "The tensor language"
ANSWER_LABEL = "Your answer: one expression"
ANSWER_HELP = (
    f"Python's expression syntax, at most {language.MAX_CHARS} characters, read and checked by this lab, then run "
    "by its own interpreter (nothing you type is executed as Python). Names: the inputs and sizes listed, and "
    "torch. The tensor language panel lists the ops. Press Enter to keep it, then Check."
)
ANSWER_PLACEHOLDER = f"one expression over the names above, at most {language.MAX_CHARS} characters"
HINT_BUTTON, NO_MORE_HINTS = "Show a hint (it counts)", "No more hints: both are shown"
NOT_ANSWERED = "Type an expression, or build one with the palette, then Check."


def code_span(text: str) -> str:
    """Text shown as code, whatever it holds (a backtick would end the span)."""
    return "`" + text.replace("`", "'") + "`"


def language_words() -> str:
    """What an answer may use, from the language's own tables."""
    functions = ", ".join(f"`{name}`" for name in language.FUNCTIONS)
    methods = ", ".join(f"`{name}`" for name in language.METHODS)
    values = ", ".join(f"`{name}`" for name in language.TORCH_VALUES)
    attributes = ", ".join(f"`.{name}`" for name in language.VALUE_ATTRIBUTES)
    return (
        "One Python expression, read by this lab's parser and run by its own interpreter; nothing typed is executed "
        f"as Python. Names: the puzzle's inputs and sizes, and `torch`. At most {language.MAX_CHARS} characters and "
        f"{language.MAX_NODES} parts; numbers up to {language.MAX_LITERAL:,}. Every size is checked on the meta "
        "device before anything runs.\n\n"
        f"- **torch functions:** {functions}\n- **tensor methods:** {methods}\n"
        f"- **torch values:** {values}\n- **attributes:** {attributes}\n"
        "- **operators:** `+ - * / // % ** @`, comparisons, `& | ^ ~`, indexing and slicing with `None` and `...`"
    )


def hints(name: str) -> list[str]:
    """The hints in the order they are shown: the concept, then the first op."""
    return [concept_hint(name), op_hint(name)]


def checked_line(expression: str, score: PuzzleScore | None, from_link: bool = False) -> str:
    """The expression checked and the puzzle's tally on this seed."""
    if from_link:
        return f"Checked: {code_span(expression)} (opened from a link: not scored as your answer)"
    tally = ""
    if score is not None:
        checks = f"{score.attempts} check{'s' * (score.attempts != 1)}, {score.hints} hint{'s' * (score.hints != 1)}"
        tally = f" (solved in {checks}; checks after that are not scored)" if score.solved else f" ({checks} so far)"
    return f"Checked: {code_span(expression)}{tally}"


def trace_title(result: Verdict) -> str:
    if result.reason == "error":
        return f"Shape trace: {len(result.steps)} steps, up to PyTorch's error"
    where = "first input" if result.right else "failing input"
    return f"Shape trace: {len(result.steps)} steps, {where}"


def trace_rows(steps: tuple[Step, ...]) -> list[dict[str, object]]:
    """The trace as a table, what a phone shows first leftmost: the step, its shape and its memory."""
    return [
        {
            "step": number,
            "expression": step.text,
            "shape": str(tuple(step.shape)),
            "memory": relation_words(step),
            "contiguous": "yes" if step.contiguous else "no",
            "strides": str(tuple(step.strides)),
            "dtype": step.dtype,
        }
        for number, step in enumerate(steps, 1)
    ]


def reference_lines(name: str) -> list[str]:
    """The lab's reference answer, and the other right answers a senior engineer would write."""
    puzzle = PUZZLES[name]
    also = ", ".join(code_span(a) for a in puzzle.also)
    return [f"The lab's reference answer: {code_span(puzzle.reference)}", *([f"Also right: {also}"] if also else [])]


def concept_hint(name: str) -> str:
    puzzle = PUZZLES[name]
    return f"**The concept: {CONCEPT_TITLES[puzzle.concept]}.** {STATEMENTS[puzzle.concept].text}"


def op_hint(name: str) -> str:
    return f"**The first op:** start with `{PUZZLES[name].first_op}`."


KIND_WORDS = {
    "float": "float32",
    "positive": "float32, > 0",
    "probabilities": "float32, each row summing to 1",
    "int": "int64",
    "bool": "bool",
    "index": "int64 in [0, {of})",
    "lengths": "int64 in [1, {of}]",
    "padding": "bool, True after each row's length (in [1, {of}])",
}


def symbols(shape: tuple[str, ...]) -> str:
    """A symbolic shape as Python writes a tuple: (N,) and (B, T, C)."""
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(shape)})"


def inputs_lines(name: str, sizes: dict[str, int]) -> list[str]:
    """The puzzle's inputs with their symbolic and this seed's shapes, e.g. "x: (B, T, C) = (2, 5, 3)", its sizes
    and the shape asked for."""
    puzzle = PUZZLES[name]
    shapes = {spec.name: shape(spec.shape, sizes) for spec in puzzle.inputs}
    parts = []
    for spec in puzzle.inputs:
        kind = KIND_WORDS[spec.kind].format(of=spec.of)
        parts.append(f"`{spec.name}`: {symbols(spec.shape)} = {shapes[spec.name]}, {kind}")
    sized = ", ".join(f"`{k}` = {v}" for k, v in sizes.items())
    return [*parts, *([f"sizes: {sized}"] if sized else []), f"wanted: a tensor of shape {puzzle.output}"]


def verdict(result: Verdict) -> str:
    """What the grader saw, from its fields, as one or two sentences."""
    said = _verdict(result)
    return said[0].upper() + said[1:]


def _verdict(result: Verdict) -> str:
    if result.right:
        return (
            f"Right on all {result.passed} inputs: " + ", ".join(CASES) + ". Each matched the reference's shape, "
            "dtype and values" + (", and shares the input's memory." if PUZZLES[result.puzzle].view else ".")
        )
    passed = f" (it passed {result.passed} before)" if result.passed else ""
    where = f"On {result.case}{passed}: " if result.case else ""
    if result.reason == "refused":
        return f"{where}not run: {result.message}."
    if result.reason == "error":
        return f"{where}PyTorch raised an error: {code_span(result.message)}"
    if result.reason == "not_tensor":
        return f"{where}the answer is {code_span(result.message)}, not a tensor of shape {result.expected_shape}."
    if result.reason == "shape":
        stretched = next((s for s in result.steps if s.stretched), None)
        more = f" Broadcasting made {code_span(stretched.text)} {stretched.shape}." if stretched else ""
        return f"{where}shape {result.actual_shape}, where {result.expected_shape} is expected.{more}"
    if result.reason == "dtype":
        return f"{where}dtype {result.actual_dtype}, where {result.expected_dtype} is expected; the shape is right."
    if result.reason == "copy":
        return (
            f"{where}the right values, in a new tensor: this puzzle asks for a view that shares the input's memory. "
            "The trace marks where the copy was made."
        )
    return f"{where}the right shape and dtype, different values. The first difference: index {result.difference}."


def values_lines(result: Verdict) -> list[str]:
    if result.expected_values is None or result.actual_values is None or result.reason in ("right", "refused"):
        return []
    return [f"Expected: {code_span(str(result.expected_values))}", f"Yours: {code_span(str(result.actual_values))}"]


def first_copy(result: Verdict) -> str:
    """The sub-expression where the answer's path left the input's memory, for a 'copy' verdict."""
    new = [s for s in result.steps if s.relation == "new"]
    return f"{code_span(new[-1].text)} made a new tensor." if new else ""
