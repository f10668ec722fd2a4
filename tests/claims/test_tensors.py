"""The tensor drills' claims, checked with torch code written here.

1. Every reference passes its own grader on 100 inputs (20 seeds the lab's tests do not use, 5 cases each),
   and agrees with an implementation of the task written here in plain torch.
2. Every puzzle's common mistakes fail, each with the reason the lab names.
3. The trace's "view or new tensor" agrees with `untyped_storage().data_ptr()` on a zoo of expressions and inputs.
4. Every Statement at the edges of its scope.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from explorers import tensors
from explorers.tensors import cases, interpreter, language, lesson
from explorers.tensors.catalogue import PUZZLES
from tests.claims.falsify import falsifies

STATEMENTS = lesson.STATEMENTS
SEEDS = range(1000, 1020)


def _attention(q, k, v, D, T):
    mask = torch.ones(T, T).tril().bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


PLAIN = {  # the task, written here in plain torch: (inputs and sizes) -> expected
    "residuals": lambda y, p, **_: y - p.squeeze(1),
    "swap_last_axes": lambda x, **_: x.permute(0, 2, 1),
    "channel_axis_last": lambda x, **_: x.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1),
    "flatten_per_sample": lambda x, B, **_: x.reshape(B, -1),
    "row_sums_to_one": lambda x, **_: F.normalize(x, p=1, dim=1),
    "row_argmax": lambda x, **_: x.max(dim=1).indices,
    "one_hot": lambda y, C, **_: torch.eye(C)[y],
    "causal_mask": lambda T, **_: torch.arange(T)[None, :] <= torch.arange(T)[:, None],
    "pair_up": lambda a, b, **_: torch.cat([a[:, None], b[:, None]], dim=1),
    "join_features": lambda a, b, **_: torch.hstack([a, b]),
    "mask_padded_scores": lambda s, pad, **_: torch.where(pad, float("-inf"), s),
    "real_lengths": lambda pad, **_: pad.logical_not().long().sum(-1),
    "split_heads": lambda x, B, T, H, D, **_: x.unflatten(-1, (H, D)).permute(0, 2, 1, 3),
    "merge_heads": lambda y, B, T, **_: y.permute(0, 2, 1, 3).flatten(2),
    "channel_major_rows": lambda x, **_: x.permute(0, 2, 1).flatten(1),
    "split_first_axis": lambda x, B, T, C, **_: x.view(B, T, C),
    "stretch_without_copy": lambda x, T, **_: torch.broadcast_to(x, (x.shape[0], T, x.shape[2])),
    "attention_scores": lambda q, k, D, **_: torch.einsum("bhqd,bhkd->bhqk", q, k) / D**0.5,
    "batched_matmul": lambda a, b, **_: torch.bmm(a, b),
    "pairwise_distances": lambda a, b, **_: torch.cdist(a[None], b[None])[0],
    "relative_positions": lambda T, **_: torch.stack([torch.arange(T) - i for i in range(T)]),
    "label_probability": lambda p, y, N, **_: p[torch.arange(N), y],
    "embedding_lookup": lambda e, ids, **_: F.embedding(ids, e),
    "bin_sums": lambda v, idx, K, **_: torch.stack([v[idx == k].sum() for k in range(K)]),
    "padding_mask": lambda n, T, **_: ~(torch.arange(T)[None] < n[:, None]),
    "start_offsets": lambda n, **_: torch.cat([n.new_zeros(1), n.cumsum(0)[:-1]]),
    "running_mean": lambda x, N, **_: torch.stack([x[: i + 1].mean() for i in range(N)]),
    "top_k_indices": lambda x, K, **_: x.sort(dim=1, descending=True).indices[:, :K],
    "sliding_windows": lambda x, N, W, **_: torch.stack([x[i : i + W] for i in range(N - W + 1)]),
    "shift_right": lambda t, **_: F.pad(t, (1, 0))[:, :-1],
    "moving_average": lambda x, W, **_: F.avg_pool1d(x[:, None], W, stride=1)[:, 0],
    "causal_scores": lambda s, T, **_: s + torch.full((T, T), float("-inf")).triu(1),
    "masked_mean": lambda x, n, **_: torch.stack([x[b, : n[b]].mean(0) for b in range(len(n))]),
    "last_real_token": lambda h, n, **_: torch.stack([h[b, n[b] - 1] for b in range(len(n))]),
    "keep_top_k": lambda x, K, **_: torch.zeros_like(x).scatter(1, x.topk(K, dim=1).indices, x.topk(K, dim=1).values),
    "cosine_similarity": lambda a, b, **_: F.cosine_similarity(a[:, None], b[None], dim=-1),
    "causal_attention": lambda q, k, v, D, T, **_: _attention(q, k, v, D, T),
}

MISTAKES = {  # puzzle -> the common wrong answers, each with the reason the lab gives
    "residuals": [("y - p", "shape"), ("y - p.T", "shape"), ("(y - p).sum(1)", "values")],
    "swap_last_axes": [("x.view(B, C, T)", "values"), ("x.T", "shape"), ("x.transpose(0, 1)", "shape")],
    "channel_axis_last": [("x.view(B, H, W, C)", "values"), ("x.permute(0, 3, 1, 2)", "shape")],
    "flatten_per_sample": [("x.view(B, -1)", "error"), ("x.flatten()", "shape")],
    "row_sums_to_one": [("x / x.sum(dim=1)", "error"), ("x / x.sum(dim=0)", "values"), ("x / x.sum()", "values")],
    "row_argmax": [("x.argmax()", "shape"), ("x.argmax(dim=0)", "shape"), ("x.max(dim=1).values", "dtype")],
    "one_hot": [
        ("torch.nn.functional.one_hot(y, C)", "dtype"),
        ("(y[None] == torch.arange(C)[:, None]).float()", "shape"),
        ("torch.nn.functional.one_hot(y).float()", "refused"),
    ],
    "causal_mask": [
        ("torch.triu(torch.ones(T, T, dtype=torch.bool))", "values"),
        ("torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)", "values"),
        ("torch.tril(torch.ones(T, T))", "dtype"),
    ],
    "pair_up": [("torch.cat([a, b], dim=1)", "shape"), ("torch.stack([a, b])", "shape")],
    "join_features": [("torch.stack([a, b], dim=1)", "error"), ("torch.cat([a, b])", "error")],
    "mask_padded_scores": [("s.masked_fill(~pad, -torch.inf)", "values"), ("s * ~pad", "values")],
    "real_lengths": [("pad.sum(dim=1)", "values"), ("(~pad).sum(dim=0)", "shape"), ("(~pad).float().sum(1)", "dtype")],
    "split_heads": [("x.view(B, H, T, D)", "values"), ("x.reshape(B, T, H, D)", "shape")],
    "merge_heads": [("y.transpose(1, 2).view(B, T, H * D)", "error"), ("y.reshape(B, T, H * D)", "values")],
    "channel_major_rows": [("x.reshape(B, C * T)", "values"), ("x.transpose(1, 2).view(B, C * T)", "error")],
    "split_first_axis": [("x.view(T, B, C)", "shape"), ("x.reshape(B, T, C).clone()", "copy")],
    "stretch_without_copy": [
        ("x.repeat(1, T, 1)", "copy"),
        ("x.expand(B, T)", "error"),
        ("x.repeat(T, 1, 1)", "shape"),
    ],
    "attention_scores": [
        ("q @ k.transpose(-2, -1)", "values"),
        ("q.transpose(-2, -1) @ k / D ** 0.5", "error"),
        ("k @ q.transpose(-2, -1) / D ** 0.5", "shape"),
    ],
    "batched_matmul": [
        ('torch.einsum("bnk,bkm->bmn", a, b)', "shape"),
        ("a * b", "error"),
        ('torch.einsum("bnk,bkm->nm", a, b)', "shape"),
    ],
    "pairwise_distances": [
        ("((a - b) ** 2).sum(-1).sqrt()", "error"),
        ("((a[:, None] - b[None]) ** 2).sum(-1)", "values"),
        ("((a[None] - b[:, None]) ** 2).sum(-1).sqrt()", "shape"),
    ],
    "relative_positions": [
        ("torch.arange(T)[:, None] - torch.arange(T)", "values"),
        ("torch.arange(T) - torch.arange(T)", "shape"),
    ],
    "label_probability": [
        ("p[:, y]", "shape"),
        ("p.gather(1, y)", "error"),
        ("p.gather(1, y[:, None])", "shape"),
    ],
    "embedding_lookup": [("e.index_select(0, ids).T", "shape"), ("e.gather(0, ids[:, None])", "shape")],
    "bin_sums": [
        ("torch.zeros(N).scatter_add(0, idx, v)", "shape"),
        ("torch.zeros(K).scatter_add(0, v, idx)", "error"),
    ],
    "padding_mask": [
        ("torch.arange(T) > n[:, None]", "values"),
        ("torch.arange(T)[:, None] >= n", "shape"),
        ("torch.arange(T) < n[:, None]", "values"),
    ],
    "start_offsets": [("n.cumsum(0)", "values"), ("n.cumsum(0)[:-1]", "shape")],
    "running_mean": [("x.cumsum(0) / N", "values"), ("x.cumsum(0) / torch.arange(N)", "values")],
    "top_k_indices": [
        ("x.argsort(dim=1)[:, :K]", "values"),
        ("x.topk(K, dim=1).values", "dtype"),
        ("x.topk(K, dim=1, largest=False).indices", "values"),
    ],
    "sliding_windows": [("x.unfold(0, W, W)", "shape"), ("x.view(-1, W)", "error")],
    "shift_right": [
        ("torch.cat([torch.zeros(B, 1, dtype=torch.long), t], dim=1)", "shape"),
        ("t.roll(1, dims=1)", "values"),
        ("torch.cat([torch.zeros(B, 1), t[:, :-1]], dim=1)", "dtype"),
    ],
    "moving_average": [("x.unfold(1, W, 1).mean(1)", "shape"), ("x.unfold(1, W, 1).sum(-1)", "values")],
    "causal_scores": [
        ("s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool)), -torch.inf)", "values"),
        ("s.masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool), -1), -torch.inf)", "values"),
    ],
    "masked_mean": [
        ("x.mean(1)", "values"),
        ("(x * (torch.arange(T) < n[:, None])[..., None]).mean(1)", "values"),
        ("(x * (torch.arange(T) <= n[:, None])[..., None]).sum(1) / n[:, None]", "values"),
    ],
    "last_real_token": [("h[:, n - 1]", "shape"), ("h[torch.arange(B), n]", "error"), ("h[:, -1]", "values")],
    "keep_top_k": [
        ("torch.where(x > x.topk(K, dim=1).values[:, -1:], x, 0.0)", "values"),
        ("x.topk(K, dim=1).values", "shape"),
        ("torch.where(x >= x.topk(K, dim=1).values[:, -1], x, 0.0)", "error"),
    ],
    "cosine_similarity": [
        ("(a / a.norm(dim=1)) @ (b / b.norm(dim=1)).T", "error"),
        ("a @ b.T", "values"),
        ("(a / a.norm(dim=0, keepdim=True)) @ (b / b.norm(dim=0, keepdim=True)).T", "values"),
    ],
    "causal_attention": [
        (
            "torch.softmax((q @ k.transpose(1, 2) / D ** 0.5).masked_fill("
            "torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -torch.inf), dim=1) @ v",
            "values",
        ),
        ("torch.softmax(q @ k.transpose(1, 2) / D ** 0.5, dim=-1) @ v", "values"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", PUZZLES)
def test_every_reference_passes_its_grader_on_100_inputs_and_agrees_with_plain_torch(name):
    puzzle = PUZZLES[name]
    for seed in SEEDS:
        verdict = tensors.check(name, puzzle.reference, seed)
        assert verdict.right, (seed, verdict)
        for case in cases.cases(puzzle, seed):
            expected = PLAIN[name](**case.names)
            got, _ = interpreter.run(language.parse(puzzle.reference, puzzle.names), case.names)
            assert got.shape == expected.shape, (seed, case.kind)
            if expected.is_floating_point():
                torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-4, atol=1e-5, equal_nan=True)
            else:
                assert torch.equal(got, expected.to(got.dtype)), (seed, case.kind)


@pytest.mark.parametrize("name", [n for n, p in PUZZLES.items() if p.also])
def test_every_other_right_answer_the_lab_shows_passes_its_grader(name):
    for expression in PUZZLES[name].also:
        for seed in (0, 5, 999):
            assert tensors.check(name, expression, seed).right, (expression, seed)


def test_every_puzzle_has_two_or_more_common_mistakes_in_this_file():
    assert set(MISTAKES) == set(PUZZLES)
    assert all(len(wrong) >= 2 for wrong in MISTAKES.values())


@pytest.mark.parametrize("name", PUZZLES)
def test_each_common_mistake_fails_with_the_reason_the_lab_names(name):
    for expression, reason in MISTAKES[name]:
        for seed in (0, 7, 4242):
            verdict = tensors.check(name, expression, seed)
            assert verdict.reason == reason, (expression, seed, verdict.reason, verdict.message)
            assert verdict.case or reason == "refused"


VIEW_ZOO = [  # expressions over x (and i), each traced on contiguous and non-contiguous inputs
    "x.view(-1)", "x.reshape(-1)", "x.transpose(0, 1)", "x.permute(2, 0, 1)", "x.contiguous()",
    "x.transpose(0, 1).contiguous()", "x.transpose(0, 1).reshape(-1)", "x[0]", "x[:, None]", "x[..., 1:]",
    "x[i]", "x[:, i]", "x.unsqueeze(0).expand(3, -1, -1, -1)", "x.repeat(2, 1, 1)", "x.flatten()", "x.flatten(1)",
    "x.unflatten(2, (2, 2))", "x.unfold(2, 2, 1)", "x.chunk(2, dim=2)[1]", "x.split(1, dim=0)[0]", "x.narrow(1, 1, 2)",
    "x.select(0, 1)", "x.T", "x.mT", "x.float()", "x.to(torch.float64)", "x.clone()", "x + 0", "x.squeeze()",
    "x.sum(0)", "x.topk(1, dim=0).values", "x.sort(dim=0).values", "x.diff(dim=0)", "x.flip(0)", "x.roll(1, 0)",
    "x.expand_as(x)", "x.view_as(x)", "x.reshape_as(x)", "x.type_as(x)", "x.tril()", "-x", "x > 0", "x @ x.mT",
    "x.clone().view(-1)", "(x + 1).transpose(0, 1)", "torch.stack([x, x])[1]", "torch.where(x > 0, x, 0.0)",
]  # fmt: skip


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_the_traces_view_or_copy_agrees_with_the_storage_pointer_on_a_zoo():
    """Each traced step's claim, against the storage pointers of the very tensors the run made: a view (or the same
    tensor) shares its named operand's storage; a new tensor shares none of its operands'."""
    checked = {"input": 0, "same": 0, "view": 0, "new": 0}
    for x in (torch.randn(2, 3, 4), torch.randn(2, 4, 3).transpose(1, 2), torch.randn(4, 3, 2).permute(2, 1, 0)):
        for text in VIEW_ZOO:
            expression = language.parse(text, ("x", "i"))
            evaluator = interpreter._Evaluator(expression, {"x": x, "i": torch.tensor([1, 0])}, x.device)
            try:
                evaluator.evaluate()
            except interpreter.Failed:  # a view PyTorch refuses on these strides (x.view(-1) after a transpose)
                continue
            assert len(evaluator.steps) == len(evaluator.witnesses)
            for step, (value, operands) in zip(evaluator.steps, evaluator.witnesses, strict=True):
                shares = [_shares(value, operand) for operand in operands]
                if step.relation == "new":
                    assert not any(shares), (text, x.stride(), step)
                else:
                    assert any(shares), (text, x.stride(), step)
                checked[step.relation] += 1
    assert min(checked.values()) >= 9, checked


# --- the Statements --------------------------------------------------------------------------------------


@falsifies(STATEMENTS["broadcasting"])
def test_broadcasting_lines_shapes_from_the_right_and_n_against_n_by_1_gives_n_by_n():
    for n in (1, 2, 7):
        assert (torch.ones(n) - torch.ones(n, 1)).shape == (n, n)
    assert (torch.ones(3, 1, 5) * torch.ones(4, 1)).shape == (3, 4, 5)
    assert torch.where(torch.ones(4, 1, dtype=torch.bool), torch.ones(4), 0.0).shape == (4, 4)
    with pytest.raises(RuntimeError):
        torch.ones(3) + torch.ones(2)
    assert (torch.ones(2, 3, 4) @ torch.ones(4, 5)).shape == (2, 3, 5)  # matmul: leading dims only
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(4).sub_(torch.ones(4, 1))  # in-place: out of the scope, and it raises


@falsifies(STATEMENTS["keepdim"])
def test_a_reduction_removes_its_dim_and_keepdim_keeps_it_as_size_1():
    x = torch.rand(3, 4, 5) + 0.1
    for reduce in (
        torch.sum,
        torch.mean,
        torch.amax,
        torch.argmax,
        lambda t, dim, keepdim=False: t.norm(dim=dim, keepdim=keepdim),
    ):
        for dim in range(3):
            assert reduce(x, dim=dim).dim() == 2
            kept = reduce(x, dim=dim, keepdim=True)
            assert kept.shape[dim] == 1 and kept.dim() == 3
    assert torch.allclose((x / x.sum(1, keepdim=True)).sum(1), torch.ones(3, 5))
    assert x.sum().dim() == 0
    assert x.sum(dim=None, keepdim=True).shape == (1, 1, 1) and x.argmax(keepdim=True).shape == (1, 1, 1)


@falsifies(STATEMENTS["view_reshape"])
def test_view_never_copies_and_raises_where_reshape_copies():
    x = torch.randn(2, 3, 4)
    t = x.transpose(1, 2)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(2, 12)
    copied = t.reshape(2, 12)
    assert not _shares(copied, x)
    assert _shares(x.reshape(6, 4), x) and _shares(x.view(6, 4), x) and _shares(t.view(2, 4, 3), x)
    assert t.contiguous().is_contiguous() and not _shares(t.contiguous(), x)
    assert x.contiguous() is x


@falsifies(STATEMENTS["permute"])
def test_transpose_and_permute_are_views_not_contiguous_once_two_large_axes_trade():
    x = torch.randn(2, 3, 4)
    for y in (x.transpose(0, 2), x.permute(1, 2, 0), x.transpose(1, 2)):
        assert _shares(y, x) and not y.is_contiguous()
    assert torch.randn(1, 3).transpose(0, 1).is_contiguous()  # a size-1 axis: the scope says so
    assert torch.randn(3, 4).T.contiguous().T.is_contiguous() is False
    assert torch.randn(3, 4).T.T.is_contiguous()  # transposed back: contiguous again, as the scope says
    assert torch.randn(0, 2, 3).permute(0, 2, 1).is_contiguous()  # empty: out of the scope, as it says


@falsifies(STATEMENTS["expand_repeat"])
def test_expand_has_stride_0_and_shares_memory_while_repeat_copies():
    x = torch.randn(3, 1)
    e = x.expand(3, 5)
    assert e.stride() == (1, 0) and _shares(e, x)
    assert x[None].expand(4, 3, 5).stride()[0] == 0
    r = x.repeat(1, 5)
    assert not _shares(r, x) and r.untyped_storage().nbytes() == 15 * 4
    with pytest.raises(RuntimeError):
        torch.randn(3, 2).expand(3, 4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        e.add_(1)
    with pytest.raises(RuntimeError, match="more than one element"):
        e.copy_(torch.randn(3, 5))
    e.fill_(3.0)  # the scope's writes that run
    assert x.flatten().tolist() == [3.0] * 3
    e[0, 0] = 7.0  # a write that does run shows at every position sharing the element
    assert e[0].tolist() == [7.0] * 5


@falsifies(STATEMENTS["gather"])
def test_gather_follows_its_index_shape_and_two_index_tensors_pair_up():
    x = torch.randn(4, 5)
    index = torch.randint(0, 5, (4, 3))
    g = x.gather(1, index)
    assert g.shape == index.shape
    assert all(g[i, j] == x[i, index[i, j]] for i in range(4) for j in range(3))
    with pytest.raises(RuntimeError, match="no larger than self"):
        x.gather(1, torch.zeros(5, 1, dtype=torch.long))  # index larger than x along dim 0: the scope says so
    rows, cols = torch.tensor([0, 2, 3]), torch.tensor([4, 1, 0])
    assert torch.equal(x[rows, cols], torch.stack([x[r, c] for r, c in zip(rows, cols, strict=True)]))
    assert x[rows[:2, None], cols].shape == (2, 3)  # broadcast together first
    assert torch.equal(x.gather(1, index.int()), g)  # int32 indexes too
    with pytest.raises(RuntimeError, match="int32"):
        x.gather(1, index.to(torch.int16))


@falsifies(STATEMENTS["index_select"])
def test_index_select_takes_whole_slices_in_the_order_of_ids():
    e = torch.randn(5, 3)
    ids = torch.tensor([4, 0, 4, 2])
    assert torch.equal(e.index_select(0, ids), torch.stack([e[i] for i in ids]))
    assert torch.equal(e.index_select(1, torch.tensor([2, 2])), e[:, [2, 2]])


@falsifies(STATEMENTS["scatter_add"])
def test_scatter_add_adds_colliding_values():
    v = torch.tensor([1.0, 2.0, 4.0, 8.0])
    idx = torch.tensor([1, 1, 0, 1])
    assert torch.equal(torch.zeros(3).scatter_add(0, idx, v), torch.tensor([4.0, 11.0, 0.0]))
    kept = torch.zeros(3).scatter(0, idx, v)[1].item()
    assert kept in (1.0, 2.0, 8.0)  # scatter keeps one of the colliding values


@falsifies(STATEMENTS["masks"])
def test_masked_fill_and_where_take_the_true_side_and_tril_triu_bound_the_diagonal():
    s = torch.randn(2, 4, 4)
    mask = torch.randn(4, 4) > 0
    filled = s.masked_fill(mask, -1.0)
    assert torch.equal(filled[:, mask], torch.full_like(filled[:, mask], -1.0))
    assert torch.equal(filled[:, ~mask], s[:, ~mask])
    assert torch.equal(torch.where(mask, s, 0.0), s * mask)
    i, j = torch.arange(4)[:, None], torch.arange(4)
    ones = torch.ones(4, 4, dtype=torch.bool)
    assert torch.equal(ones.tril(), j <= i) and torch.equal(ones.triu(diagonal=1), j > i)


@falsifies(STATEMENTS["one_hot"])
def test_one_hot_is_int64_and_without_num_classes_reads_the_largest_label():
    y = torch.tensor([0, 2, 1])
    assert F.one_hot(y, 5).dtype == torch.int64 and F.one_hot(y, 5).shape == (3, 5)
    assert F.one_hot(y).shape == (3, 3)
    assert F.one_hot(torch.tensor([0, 1])).shape == (2, 2)  # a batch missing class 2 comes out narrower


@falsifies(STATEMENTS["cat_stack"])
def test_cat_joins_an_existing_dim_and_stack_adds_one():
    a, b = torch.randn(3, 4), torch.randn(3, 2)
    assert torch.cat([a, b], dim=1).shape == (3, 6)
    with pytest.raises(RuntimeError):
        torch.cat([a, b], dim=0)
    with pytest.raises(RuntimeError):
        torch.stack([a, b])
    assert torch.stack([a, a], dim=1).shape == (3, 2, 4)
    assert torch.cat([torch.zeros(3, 1, dtype=torch.long), a], dim=1).dtype == torch.float32  # promoted
    assert torch.cat([a, torch.zeros(0)]).shape == a.shape  # the 1-D empty tensor the scope names, skipped


@falsifies(STATEMENTS["matmul"])
def test_matmul_broadcasts_leading_dims_and_einsum_sums_letters_missing_on_the_right():
    a, b = torch.randn(2, 1, 3, 4), torch.randn(5, 4, 6)
    assert (a @ b).shape == (2, 5, 3, 6)
    x, y = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    torch.testing.assert_close(torch.einsum("bnk,bkm->bnm", x, y), x @ y)
    torch.testing.assert_close(torch.einsum("bnk,bkm->nm", x, y), (x @ y).sum(0))
    assert (torch.randn(4) @ torch.randn(4, 5)).shape == (5,)  # a 1-D operand's axis removed after


@falsifies(STATEMENTS["attention"])
def test_sdpa_scales_by_sqrt_of_the_query_size_and_normalises_over_keys():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v), weights @ v, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


@falsifies(STATEMENTS["cumsum"])
def test_cumsum_is_inclusive():
    x = torch.randint(-5, 5, (3, 6))
    c = x.cumsum(1)
    assert all(c[r, i] == x[r, : i + 1].sum() for r in range(3) for i in range(6))
    assert torch.equal(x.cumprod(1)[:, 0], x[:, 0])


@falsifies(STATEMENTS["topk"])
def test_topk_is_largest_first_and_argsort_ascending_by_default():
    x = torch.randn(4, 9)
    top = x.topk(3, dim=1)
    assert torch.equal(top.values, x.sort(dim=1, descending=True).values[:, :3])
    assert (top.values[:, :-1] >= top.values[:, 1:]).all()
    order = x.argsort(dim=1)
    assert (x.gather(1, order)[:, :-1] <= x.gather(1, order)[:, 1:]).all()
    assert (x.sort(dim=1).values.diff(dim=1) >= 0).all()


@falsifies(STATEMENTS["unfold"])
def test_unfold_is_a_view_of_every_window_on_a_new_last_dim():
    for n, size, step in ((9, 3, 1), (9, 3, 2), (10, 4, 3), (5, 5, 1), (6, 1, 1)):
        x = torch.arange(float(n))
        w = x.unfold(0, size, step)
        assert w.shape == ((n - size) // step + 1, size) and _shares(w, x)
        assert torch.equal(w[-1], x[(len(w) - 1) * step : (len(w) - 1) * step + size])
    y = torch.randn(2, 7)
    assert y.unfold(1, 3, 1).shape == (2, 5, 3)
