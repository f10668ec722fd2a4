"""Tensor drills without a browser: the five inputs, the grader's verdicts and messages, the trace, the palette's
edits, and puzzle checks and timed sets kept as progress beside the Fix-the-loop drills."""

from __future__ import annotations

import time

import pytest
import torch

from explorers import tensors
from explorers.drills import DRILLS
from explorers.progress.history import History, PuzzleScore, new_set
from explorers.progress.records import Invalid, Record, parse
from explorers.tensors import cases, interpreter, language, lesson
from explorers.tensors.catalogue import MAX_HINTS, PUZZLES
from ui.palette import built

NOW = time.time() - 3600


def test_the_catalogue_has_thirty_or_more_puzzles_in_three_levels_with_distinct_names_from_the_drills():
    assert len(PUZZLES) >= 30
    assert {p.level for p in PUZZLES.values()} == {1, 2, 3}
    assert all(sum(p.level == level for p in PUZZLES.values()) >= 5 for level in (1, 2, 3))
    assert not set(PUZZLES) & set(DRILLS)  # a timed set's items say which practice it is
    for puzzle in PUZZLES.values():
        assert puzzle.task.endswith(".") and puzzle.task.count(". ") == 0, puzzle.name  # one sentence
        assert puzzle.concept in lesson.STATEMENTS and puzzle.source
        assert puzzle.reference not in puzzle.task


@pytest.mark.parametrize("name", ["split_heads", "keep_top_k", "sliding_windows", "residuals"])
def test_the_five_inputs_are_drawn_smallest_largest_non_contiguous_and_drawn_again(name):
    puzzle = PUZZLES[name]
    made = cases.cases(puzzle, seed=5)
    assert [c.kind for c in made] == list(cases.CASES)
    drawn, smallest, largest, strided, again = made
    for size, (low, high) in puzzle.sizes.items():
        low = smallest.sizes[low] if isinstance(low, str) else low
        assert smallest.sizes[size] == low
        assert largest.sizes[size] == (largest.sizes[high] if isinstance(high, str) else high)
    assert all(t.is_contiguous() for t in drawn.inputs.values())
    swapped = [t for t in strided.inputs.values() if sum(size > 1 for size in t.shape[-2:]) == 2]
    assert all(not t.is_contiguous() for t in swapped) and (swapped or name in ("residuals", "sliding_windows"))
    assert cases.cases(puzzle, 5)[0].sizes == drawn.sizes and cases.shown_sizes(puzzle, 5) == drawn.sizes
    assert any(a.sizes != drawn.sizes for a in (again, *cases.cases(puzzle, 6)[:1]))


def test_drawn_sizes_are_two_or_more_and_distinct_where_the_ranges_allow():
    for seed in range(30):
        sizes = cases.shown_sizes(PUZZLES["split_heads"], seed)  # B 1-4, T 1-7, H 1-4, D 1-4
        assert min(sizes.values()) >= 2 and len(set(sizes.values())) == len(sizes), sizes


def test_indices_and_lengths_stay_in_their_ranges():
    for seed in range(20):
        for case in cases.cases(PUZZLES["masked_mean"], seed) + cases.cases(PUZZLES["label_probability"], seed):
            if "n" in case.inputs:
                assert case.inputs["n"].min() >= 1 and case.inputs["n"].max() <= case.sizes["T"]
            if "y" in case.inputs:
                assert case.inputs["y"].min() >= 0 and case.inputs["y"].max() < case.sizes["C"]


def test_a_verdict_names_the_input_the_shapes_and_the_first_difference():
    wrong = tensors.check("split_heads", "x.view(B, H, T, D)", seed=3)
    assert wrong.reason == "values" and wrong.case.startswith("the drawn input")
    words = lesson.verdict(wrong)
    assert words.startswith("On the drawn input") and "The first difference: index [" in words
    blowup = tensors.check("residuals", "y - p")
    n = cases.shown_sizes(PUZZLES["residuals"], 0)["N"]
    assert (blowup.actual_shape, blowup.expected_shape) == ((n, n), (n,))
    assert f"Broadcasting made `y - p` {(n, n)}." in lesson.verdict(blowup)
    assert "Broadcasting" not in lesson.verdict(tensors.check("residuals", "torch.ones(10) * 2"))  # none here
    assert lesson.values_lines(tensors.check("residuals", "y * 0 + 1.035"))[1].count("1.035") == n  # as written
    dtype = tensors.check("causal_mask", "torch.tril(torch.ones(T, T))")
    assert "dtype float32, where bool is expected" in lesson.verdict(dtype)
    right = tensors.check("residuals", "y - p.squeeze(1)")
    assert right.right and right.passed == 5 and lesson.verdict(right).startswith("Right on all 5 inputs")


def test_an_error_keeps_pytorchs_message_and_the_trace_up_to_the_op_it_refused():
    verdict = tensors.check("merge_heads", "y.transpose(1, 2).view(B, T, H * D).sum()")
    assert verdict.reason == "error" and "view size is not compatible" in verdict.message
    assert [s.text for s in verdict.steps] == ["y", "y.transpose(1, 2)"]  # not the .sum() after it
    assert not verdict.steps[-1].contiguous and verdict.steps[-1].relation == "view"


def test_a_value_dependent_size_is_refused_with_why_and_a_shape_error_is_not():
    assert "depends on the tensor's values" in tensors.check("one_hot", "torch.nn.functional.one_hot(y)").message
    shape_error = tensors.check("stretch_without_copy", "x.expand(B, T)")
    assert shape_error.reason == "error" and "depends" not in shape_error.message


def test_the_notebook_trace_reads_views_copies_strides_and_contiguity():
    steps = tensors.trace("x.permute(1, 0).reshape(-1)", x=torch.ones(2, 3))
    assert [(s.shape, s.strides, s.contiguous, s.relation) for s in steps] == [
        ((2, 3), (3, 1), True, "input"),
        ((3, 2), (1, 3), False, "view"),
        ((6,), (1,), True, "new"),
    ]
    assert steps[1].of == "x" and "a view of `x`" in steps[1].describe()
    with pytest.raises(language.Refused):
        tensors.trace("x.numpy()", x=torch.ones(2))
    with pytest.raises(interpreter.Failed):
        tensors.trace("x.view(5)", x=torch.ones(2))


def test_hints_are_the_concept_then_the_first_op_of_the_reference():
    first, second = lesson.hints("merge_heads")
    assert "view against reshape" in first and lesson.STATEMENTS["view_reshape"].text in first
    assert second == "**The first op:** start with `.transpose`."
    assert PUZZLES["residuals"].first_op == "indexing with [ ]" and PUZZLES["real_lengths"].first_op == "the operator ~"
    assert len(lesson.hints("residuals")) == MAX_HINTS


@pytest.mark.parametrize(
    ("text", "part", "argument", "expected"),
    [
        ("x", ".view(…)", "B, -1", "x.view(B, -1)"),
        ("x + y", ".sum(…)", "", "(x + y).sum()"),
        ("x", "torch.cat(…)", "dim=1", "torch.cat(x, dim=1)"),
        ("", "torch.arange(…)", "T", "torch.arange(T)"),
        ("x", "[…] index", "", "x[:]"),
        ("x.sum(1)", "E / A", "N", "x.sum(1) / N"),
        ("p[:, 0]", "A - E", "y", "y - p[:, 0]"),
        ("a + b", "E * A", "c - d", "(a + b) * (c - d)"),
        ("x", "E - A", "", ""),
        ("a > b", "~ (not)", "", "~(a > b)"),
        ("x", ".T", "", "x.T"),
        ("", ".view(…)", "1", ""),
    ],
)
def test_the_palette_adds_a_part_as_the_parser_will_read_it(text, part, argument, expected):
    assert built(text, part, argument) == expected


# --- progress -------------------------------------------------------------------------------------------


def puzzle_record(name: str, seed: int, right: bool, hints: int = 0, reason: str = "shape", at: float = NOW):
    data = {"seed": seed, "right": right, "reason": "right" if right else reason, "hints": hints}
    data["seconds"] = 30.0 if right else None
    return parse({"kind": "puzzle", "key": name, "at": at, "data": data})


def test_a_puzzle_record_is_checked_like_every_record():
    assert puzzle_record("causal_mask", 1, True).data["reason"] == "right"
    for bad in (
        {"kind": "puzzle", "key": "forgot_zero_grad", "at": NOW, "data": {}},
        {"kind": "puzzle", "key": "causal_mask", "at": NOW,
         "data": {"seed": 1, "right": True, "reason": "lucky", "hints": 0, "seconds": None}},
        {"kind": "puzzle", "key": "causal_mask", "at": NOW,
         "data": {"seed": 1, "right": True, "reason": "right", "hints": 3, "seconds": None}},
        {"kind": "puzzle", "key": "causal_mask", "at": NOW,
         "data": {"seed": 1, "right": True, "reason": "right", "hints": 0, "seconds": None, "expression": "x"}},
    ):  # fmt: skip
        with pytest.raises(Invalid):
            parse(bad)
    with pytest.raises(Invalid):  # a set mixing drills and puzzles
        parse({"kind": "set", "key": "s1", "at": NOW,
               "data": {"drills": ["causal_mask", "forgot_zero_grad"], "seed": 1, "started": NOW}})  # fmt: skip


def test_a_puzzle_score_counts_checks_until_right_and_the_most_hints_shown():
    history = History(
        [
            puzzle_record("causal_mask", 2, False, reason="values"),
            puzzle_record("causal_mask", 2, False, hints=1, reason="dtype"),
            puzzle_record("causal_mask", 2, True, hints=1),
            puzzle_record("causal_mask", 2, False, hints=2),  # after solving: not counted
        ]
    )
    score = history.puzzle_scores()[("causal_mask", 2)]
    assert (score.attempts, score.hints, score.first_reason, score.solved, score.seconds) == (3, 1, "values", True, 30)
    assert score.points == pytest.approx(1 - 0.25 - 0.2)
    assert "first: wrong values, 3 checks, 1 hint, solved in 30 s" in score.describe()
    assert history.solved("causal_mask", 2) and not history.solved("causal_mask", 3)


def test_day_7_lists_an_unsolved_puzzle_and_the_day_counts_checks():
    history = History([puzzle_record("one_hot", 4, False), puzzle_record("pair_up", 4, True)])
    weak = history.weakest()
    assert [(w.kind, w.item.puzzle) for w in weak] == [("puzzle", "one_hot")]
    assert isinstance(weak[0].item, PuzzleScore)
    (day,) = history.days()
    assert (day.checks, day.right_checks) == (2, 1)
    assert "2 tensor puzzle checks, 1 right" in day.words({})


def test_a_puzzle_set_and_a_drill_set_run_side_by_side_and_end_apart():
    puzzles = new_set(PUZZLES, NOW)
    drills = new_set(DRILLS, NOW + 1)
    assert puzzles.practice == "puzzles" and drills.practice == "drills"
    history = History([puzzles.start_record(), drills.start_record()])
    assert history.running_set(NOW + 60, "puzzles").id == puzzles.id
    assert history.running_set(NOW + 60, "drills").id == drills.id
    ended = History([*history.records, Record.now("set_end", puzzles.id, {"solved": [False] * 5, "seconds": 60.0,
                                                                       "time_up": False})])  # fmt: skip
    assert ended.running_set(NOW + 60, "puzzles") is None and ended.running_set(NOW + 60, "drills")
    unsolved = {s.puzzle for s in ended.puzzle_scores().values() if not s.attempts}
    assert unsolved == set(puzzles.drills) and not ended.drill_scores()
    assert all(label in ended.set_results()[0].words() for label in ("level", "Not solved"))
