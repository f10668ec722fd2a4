"""The tensor puzzles: small transformations an interviewer opens with, each graded on random inputs.

Each puzzle has a one-sentence task, named inputs with symbolic shapes whose sizes are drawn per
seed, a reference answer written in the tensor language itself (so the reference passes through
the same parser and interpreter as a learner's answer), the concept it trains and where it comes
from. Level 1 is one op, level 2 a pair of ops or an index, level 3 a small composition.

Where the puzzles come from:
- srush/Tensor-Puzzles (MIT): one-hot, the sequence (padding) mask, cumsum, bincount with
  scatter_add, triu, pad_to (here: shift right), outer products by broadcasting;
- PyTorch's docs: "Tensor Views" (view, reshape, contiguous, expand, unfold), "Broadcasting
  semantics" (the (N, 1) against (N,) blow-up), torch.gather, torch.scatter_add, torch.topk,
  torch.nn.functional.scaled_dot_product_attention (the causal mask, the 1/sqrt(D) scale);
- interview lists: karpathy/nanoGPT's attention (splitting and merging heads, the causal mask,
  the last token's state), Deep-ML's tensor questions (pairwise distances, cosine similarity,
  moving averages), and the view-after-permute error that PyTorch's own message explains.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

import explorers.tensors.language as language

LEVELS = {1: "one op", 2: "two ops or an index", 3: "a composition"}
REASON_WORDS = {  # a grading's verdicts, as a score describes the first one
    "right": "right",
    "refused": "not in the tensor language",
    "error": "PyTorch raised an error",
    "not_tensor": "not a tensor",
    "shape": "wrong shape",
    "dtype": "wrong dtype",
    "values": "wrong values",
    "copy": "a copy, not a view",
}
REASONS = tuple(REASON_WORDS)
MAX_HINTS = 2  # the concept, then the first op
KINDS = ("float", "positive", "probabilities", "int", "bool", "index", "lengths", "padding")


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple[str, ...]  # size names, or products of them ("H*D")
    # float, positive, probabilities (rows summing to 1), int, bool, index (ints in [0, `of`)), lengths (ints in
    # [1, `of`]), padding (a bool mask True after each row's length, drawn in [1, `of`])
    kind: str = "float"
    of: str = ""  # the size an index, a length or a padding is bounded by

    def __post_init__(self) -> None:
        assert self.kind in KINDS and bool(self.of) == (self.kind in ("index", "lengths", "padding")), self


@dataclass(frozen=True)
class Puzzle:
    name: str
    level: int
    task: str  # one sentence; the inputs' shapes and the output's are shown beside it
    inputs: tuple[Input, ...]
    output: str  # the expected shape, in the size names ("(B, H, T, D)")
    reference: str  # in the tensor language
    concept: str  # a key of lesson.CONCEPTS
    source: str
    sizes: Mapping[str, tuple[int | str, int | str]] = field(default_factory=dict)  # name -> (low, high), in order
    view: bool = False  # the answer must share its input's memory (no copy)
    also: tuple[str, ...] = ()  # other right answers a senior engineer would write, shown once solved

    @property
    def names(self) -> tuple[str, ...]:
        return (*(i.name for i in self.inputs), *self.sizes)

    @property
    def first_op(self) -> str:
        """The reference's first call or operator in evaluation order: the second hint."""
        expression = language.parse(self.reference, self.names)
        for node in _post_order(expression.tree):
            if isinstance(node, ast.Call):
                path = language.torch_path(node.func)
                return f"torch.{path}" if path else f".{node.func.attr}"
            if isinstance(node, ast.Subscript):
                return "indexing with [ ]"
            if isinstance(node, ast.BinOp | ast.Compare | ast.UnaryOp):
                op = node.ops[0] if isinstance(node, ast.Compare) else node.op
                symbol = {**language.BINARY, **language.COMPARE, **language.UNARY}[type(op)]
                return f"the operator {symbol}"
        return "one of the inputs"


def _post_order(node: ast.AST):
    for child in ast.iter_child_nodes(node):
        yield from _post_order(child)
    yield node


ROWS = {"N": (1, 7), "D": (1, 6)}
SEQ = {"B": (1, 4), "T": (1, 7)}


def _puzzles() -> tuple[Puzzle, ...]:
    x_btc = (Input("x", ("B", "T", "C")),)
    return (
        # --- level 1: one op -------------------------------------------------------------------
        Puzzle(
            "residuals", 1, "Subtract the predictions p from the targets y: one error per sample.",
            (Input("y", ("N",)), Input("p", ("N", "1"))), "(N,)", "y - p[:, 0]", "broadcasting",
            "PyTorch docs, Broadcasting semantics; a classic regression-loss bug", {"N": (1, 9)},
        ),
        Puzzle(
            "swap_last_axes", 1, "Swap the last two axes of x.", x_btc, "(B, C, T)", "x.transpose(1, 2)",
            "permute", "PyTorch docs, torch.transpose", {**SEQ, "C": (1, 6)},
        ),
        Puzzle(
            "channel_axis_last", 1, "Move the channel axis of the images x to the end.",
            (Input("x", ("B", "C", "H", "W")),), "(B, H, W, C)", "x.permute(0, 2, 3, 1)", "permute",
            "PyTorch docs, torch.permute (not the channels_last memory format, which keeps the shape)",
            {"B": (1, 3), "C": (1, 4), "H": (1, 5), "W": (1, 5)},
        ),
        Puzzle(
            "flatten_per_sample", 1, "Flatten each sample of x into one row of features.",
            (Input("x", ("B", "C", "H", "W")),), "(B, C*H*W)", "x.flatten(1)", "view_reshape",
            "PyTorch docs, torch.flatten (the input of a classifier's linear layer)",
            {"B": (1, 3), "C": (1, 4), "H": (1, 4), "W": (1, 4)},
        ),
        Puzzle(
            "row_sums_to_one", 1, "Scale each row of the positive x so that it sums to 1.",
            (Input("x", ("N", "D"), "positive"),), "(N, D)", "x / x.sum(dim=1, keepdim=True)", "keepdim",
            "PyTorch docs, Broadcasting semantics and torch.sum's keepdim", {"N": (1, 7), "D": (1, 7)},
        ),
        Puzzle(
            "row_argmax", 1, "The column of each row's largest value.", (Input("x", ("N", "C")),), "(N,)",
            "x.argmax(dim=1)", "keepdim", "PyTorch docs, torch.argmax (a classifier's prediction)",
            {"N": (1, 7), "C": (1, 7)},
        ),
        Puzzle(
            "one_hot", 1, "One-hot encode the labels y over C classes, as float32.",
            (Input("y", ("N",), "index", "C"),), "(N, C)", "torch.nn.functional.one_hot(y, C).float()",
            "one_hot", "srush/Tensor-Puzzles, one_hot; PyTorch docs, torch.nn.functional.one_hot",
            {"N": (1, 8), "C": (1, 6)},
        ),
        Puzzle(
            "causal_mask", 1, "A bool mask, row i for query i and column j for key j, True where j <= i.", (),
            "(T, T)", "torch.tril(torch.ones(T, T, dtype=torch.bool))", "masks",
            "PyTorch docs, scaled_dot_product_attention (is_causal); karpathy/nanoGPT", {"T": (1, 9)},
        ),
        Puzzle(
            "pair_up", 1, "Put a and b side by side as pairs: row n holds a[n] and b[n].",
            (Input("a", ("N", "D")), Input("b", ("N", "D"))), "(N, 2, D)", "torch.stack([a, b], dim=1)",
            "cat_stack", "PyTorch docs, torch.stack against torch.cat", ROWS,
        ),
        Puzzle(
            "join_features", 1, "Join the features a and b of the same samples into one row each.",
            (Input("a", ("N", "D")), Input("b", ("N", "E"))), "(N, D+E)", "torch.cat([a, b], dim=1)",
            "cat_stack", "PyTorch docs, torch.cat", {"N": (1, 6), "D": (1, 5), "E": (1, 5)},
        ),
        Puzzle(
            "mask_padded_scores", 1, "Set the scores s to -inf wherever pad is True.",
            (Input("s", ("B", "T")), Input("pad", ("B", "T"), "padding", "T")), "(B, T)",
            "s.masked_fill(pad, -torch.inf)", "masks",
            "PyTorch docs, Tensor.masked_fill (attention's key padding mask)", SEQ,
        ),
        Puzzle(
            "real_lengths", 1,
            "Count, as int64, the real (not padded) positions in each row, given pad True at padding.",
            (Input("pad", ("B", "T"), "padding", "T"),), "(B,)", "(~pad).sum(dim=1)", "keepdim",
            "srush/Tensor-Puzzles, sequence_mask in reverse", SEQ,
        ),
        # --- level 2: two ops or an index ------------------------------------------------------
        Puzzle(
            "split_heads", 2, "Split the channels of x into H heads of D, heads before time.",
            (Input("x", ("B", "T", "H*D")),), "(B, H, T, D)", "x.reshape(B, T, H, D).transpose(1, 2)",
            "view_reshape", "karpathy/nanoGPT, CausalSelfAttention", {**SEQ, "H": (1, 4), "D": (1, 4)},
        ),
        Puzzle(
            "merge_heads", 2, "Merge the heads of y back into the channels, time before heads.",
            (Input("y", ("B", "H", "T", "D")),), "(B, T, H*D)", "y.transpose(1, 2).reshape(B, T, H * D)",
            "view_reshape", "karpathy/nanoGPT, CausalSelfAttention", {**SEQ, "H": (1, 4), "D": (1, 4)},
        ),
        Puzzle(
            "channel_major_rows", 2, "One row per sample holding channel 0's T values, then channel 1's, and so on.",
            x_btc, "(B, C*T)", "x.transpose(1, 2).reshape(B, C * T)", "view_reshape",
            "PyTorch docs, Tensor Views; the error view() gives after a permute", {**SEQ, "C": (1, 6)},
        ),
        Puzzle(
            "split_first_axis", 2, "Split the first axis of x into B and T, sharing x's memory (no copy).",
            (Input("x", ("B*T", "C")),), "(B, T, C)", "x.unflatten(0, (B, T))", "view_reshape",
            "PyTorch docs, Tensor Views and torch.unflatten", {**SEQ, "C": (1, 5)}, view=True,
        ),
        Puzzle(
            "stretch_without_copy", 2, "Make x's single row T rows, sharing x's memory (no copy).",
            (Input("x", ("B", "1", "D")),), "(B, T, D)", "x.expand(-1, T, -1)", "expand_repeat",
            "PyTorch docs, Tensor.expand against Tensor.repeat", {**SEQ, "D": (1, 6)}, view=True,
            also=("torch.broadcast_to(x, (B, T, D))", "x.expand(B, T, D)"),
        ),
        Puzzle(
            "attention_scores", 2,
            "Scaled dot-product scores, row t for query q[..., t, :] and column s for key k[..., s, :], over sqrt(D).",
            (Input("q", ("B", "H", "T", "D")), Input("k", ("B", "H", "S", "D"))), "(B, H, T, S)",
            "q @ k.transpose(-2, -1) / D ** 0.5", "attention",
            "PyTorch docs, scaled_dot_product_attention; karpathy/nanoGPT",
            {"B": (1, 3), "H": (1, 3), "T": (1, 6), "S": (1, 6), "D": (1, 5)},
            also=("torch.einsum('bhtd,bhsd->bhts', q, k) / D ** 0.5",),
        ),
        Puzzle(
            "batched_matmul", 1, "Multiply each matrix a[i] by b[i].",
            (Input("a", ("B", "N", "K")), Input("b", ("B", "K", "M"))), "(B, N, M)",
            "a @ b", "matmul", "PyTorch docs, torch.bmm and torch.einsum",
            {"B": (1, 4), "N": (1, 5), "K": (1, 5), "M": (1, 5)},
            also=("torch.bmm(a, b)", 'torch.einsum("bnk,bkm->bnm", a, b)'),
        ),
        Puzzle(
            "pairwise_distances", 2, "The Euclidean distance from every row of a to every row of b.",
            (Input("a", ("N", "D")), Input("b", ("M", "D"))), "(N, M)",
            "((a[:, None] - b[None]) ** 2).sum(-1).sqrt()", "broadcasting",
            "Deep-ML, pairwise distances; PyTorch docs, torch.cdist", {"N": (1, 6), "M": (1, 6), "D": (1, 5)},
            also=("torch.cdist(a, b)",),
        ),
        Puzzle(
            "relative_positions", 2, "Row i (a query), column j (a key): the offset j - i as int64, for every pair.",
            (), "(T, T)", "torch.arange(T) - torch.arange(T)[:, None]", "broadcasting",
            "srush/Tensor-Puzzles, outer; relative position biases (T5)", {"T": (1, 9)},
        ),
        Puzzle(
            "label_probability", 2, "Each row's probability at its own label y.",
            (Input("p", ("N", "C"), "probabilities"), Input("y", ("N",), "index", "C")), "(N,)",
            "p.gather(1, y[:, None])[:, 0]", "gather", "PyTorch docs, torch.gather (the likelihood in a loss)",
            {"N": (1, 7), "C": (1, 7)}, also=("p[torch.arange(N), y]",),
        ),
        Puzzle(
            "embedding_lookup", 1, "The rows of the table e named by ids, in the order of ids.",
            (Input("e", ("V", "D")), Input("ids", ("N",), "index", "V")), "(N, D)", "e.index_select(0, ids)",
            "index_select", "PyTorch docs, torch.index_select and nn.Embedding",
            {"V": (1, 7), "D": (1, 5), "N": (1, 7)}, also=("e[ids]",),
        ),
        Puzzle(
            "bin_sums", 2, "Sum the values v into K bins, value n going to bin idx[n].",
            (Input("v", ("N",)), Input("idx", ("N",), "index", "K")), "(K,)",
            "torch.zeros(K).scatter_add(0, idx, v)", "scatter_add",
            "srush/Tensor-Puzzles, bincount; PyTorch docs, Tensor.scatter_add_", {"N": (1, 9), "K": (1, 6)},
        ),
        Puzzle(
            "padding_mask", 2, "A bool mask, True at the padded positions t >= n[b] of each sequence.",
            (Input("n", ("B",), "lengths", "T"),), "(B, T)", "torch.arange(T) >= n[:, None]", "masks",
            "srush/Tensor-Puzzles, sequence_mask", SEQ,
        ),
        Puzzle(
            "start_offsets", 2, "Where each sequence starts, as int64, packed end to end (the first at 0).",
            (Input("n", ("B",), "lengths", "T"),), "(B,)", "n.cumsum(0) - n", "cumsum",
            "srush/Tensor-Puzzles, cumsum; packed sequences' offsets", {"B": (1, 8), "T": (1, 9)},
        ),
        Puzzle(
            "running_mean", 2, "The mean of x[0], ..., x[i] at every position i.",
            (Input("x", ("N",)),), "(N,)", "x.cumsum(0) / torch.arange(1, N + 1)", "cumsum",
            "srush/Tensor-Puzzles, cumsum", {"N": (1, 9)},
        ),
        Puzzle(
            "top_k_indices", 1,
            "The columns of each row's K largest values, largest first (a row's values are distinct).",
            (Input("x", ("N", "C")),), "(N, K)", "x.topk(K, dim=1).indices", "topk",
            "PyTorch docs, torch.topk (top-k sampling, recall@k)", {"N": (1, 6), "C": (1, 7), "K": (1, "C")},
        ),
        Puzzle(
            "sliding_windows", 1, "Every window of W consecutive values of x, one window per row.",
            (Input("x", ("N",)),), "(N-W+1, W)", "x.unfold(0, W, 1)", "unfold",
            "PyTorch docs, Tensor.unfold", {"N": (1, 9), "W": (1, "N")},
        ),
        Puzzle(
            "shift_right", 2, "Shift the int64 tokens t right by one, 0 entering first and the last token dropped.",
            (Input("t", ("B", "T"), "index", "V"),), "(B, T)",
            "torch.cat([torch.zeros(B, 1, dtype=torch.long), t[:, :-1]], dim=1)", "cat_stack",
            "srush/Tensor-Puzzles, pad_to; a decoder's teacher-forcing inputs", {**SEQ, "V": (2, 9)},
            also=("torch.nn.functional.pad(t, (1, 0))[:, :-1]",),
        ),
        # --- level 3: a composition ------------------------------------------------------------
        Puzzle(
            "moving_average", 3, "The mean of every window of W consecutive values along each row of x.",
            (Input("x", ("B", "N")),), "(B, N-W+1)", "x.unfold(1, W, 1).mean(-1)", "unfold",
            "Deep-ML, moving average; PyTorch docs, Tensor.unfold", {"B": (1, 4), "N": (1, 9), "W": (1, "N")},
        ),
        Puzzle(
            "causal_scores", 3, "Set the scores s (row i a query, column j a key) to -inf where j > i.",
            (Input("s", ("B", "T", "T")),), "(B, T, T)",
            "s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), -torch.inf)",
            "masks", "karpathy/nanoGPT, CausalSelfAttention's masked_fill", SEQ,
        ),
        Puzzle(
            "masked_mean", 3, "The mean of x over each sequence's first n[b] positions (the real ones).",
            (Input("x", ("B", "T", "C")), Input("n", ("B",), "lengths", "T")), "(B, C)",
            "(x * (torch.arange(T) < n[:, None])[..., None]).sum(1) / n[:, None]", "masks",
            "mean pooling over a padded batch (sentence embeddings)", {**SEQ, "C": (1, 5)},
        ),
        Puzzle(
            "last_real_token", 3, "Each sequence's state h at its last real position n[b] - 1.",
            (Input("h", ("B", "T", "C")), Input("n", ("B",), "lengths", "T")), "(B, C)",
            "h[torch.arange(B), n - 1]", "gather", "pooling a decoder's last token (GPT-style classifiers)",
            {**SEQ, "C": (1, 5)}, also=("h.gather(1, (n - 1)[:, None, None].expand(-1, 1, C))[:, 0]",),
        ),
        Puzzle(
            "keep_top_k", 3,
            "Keep the values of each row of x at or above its K-th largest (counting repeats); set the rest to 0.",
            (Input("x", ("N", "C")),), "(N, C)", "torch.where(x >= x.topk(K, dim=1).values[:, -1:], x, 0.0)",
            "topk", "top-k sampling's filter (Hugging Face's TopKLogitsWarper, which fills with -inf, not 0)",
            {"N": (1, 6), "C": (1, 7), "K": (1, "C")},
        ),
        Puzzle(
            "cosine_similarity", 3, "The cosine similarity of every row of a with every row of b.",
            (Input("a", ("N", "D")), Input("b", ("M", "D"))), "(N, M)",
            "torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T", "matmul",
            "Deep-ML, cosine similarity; CLIP's logits", {"N": (1, 6), "M": (1, 6), "D": (2, 5)},
            also=("(a / a.norm(dim=1, keepdim=True)) @ (b / b.norm(dim=1, keepdim=True)).T",),
        ),
        Puzzle(
            "causal_attention", 3,
            "Causal attention: softmax over keys of q k^T / sqrt(D), keys j > query i masked, times v.",
            (Input("q", ("B", "T", "D")), Input("k", ("B", "T", "D")), Input("v", ("B", "T", "D"))), "(B, T, D)",
            "torch.softmax((q @ k.transpose(1, 2) / D ** 0.5).masked_fill("
            "torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -torch.inf), dim=-1) @ v",
            "attention", "PyTorch docs, scaled_dot_product_attention's reference code",
            {"B": (1, 3), "T": (1, 6), "D": (1, 5)},
            also=("torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)",),
        ),
    )  # fmt: skip


PUZZLES: dict[str, Puzzle] = {p.name: p for p in _puzzles()}
DEFAULT_PUZZLE = "residuals"


def label(name: str) -> str:
    puzzle = PUZZLES[name]
    return f"{name.replace('_', ' ').capitalize()} (level {puzzle.level})"
