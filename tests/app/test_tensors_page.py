"""The Tensor drills page, every control exercised: puzzle, seed, answer, check, hints, palette, timed set, links."""

from __future__ import annotations

import json

import pytest

from explorers.tensors import cases, lesson
from explorers.tensors.catalogue import DEFAULT_PUZZLE, MAX_HINTS, PUZZLES
from tests.app.conftest import open_page
from tests.claims.test_tensors import MISTAKES

PAGE = "pages/16_Tensor_drills.py"


def key(name: str) -> str:
    return f"tensors.{name}"


def check(at, expression: str):
    at.text_input(key=key("answer")).set_value(expression).run()
    return at.button(key="check").click().run()


def shown(at) -> str:
    return " ".join(m.value for m in at.markdown)


def puzzle_scores(at):
    """The learner's puzzle scores, from the records this session holds (as the store has them)."""
    from explorers.progress.history import History
    from ui import progress

    return list(History(at.session_state[progress.RECORDS_KEY]).puzzle_scores().values())


def trace_names(at) -> list[str]:
    return [bar["y"][0] for bar in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_on_the_first_puzzle_with_its_task_and_shapes_and_nothing_checked(lab):
    puzzle = PUZZLES[DEFAULT_PUZZLE]
    sizes = cases.shown_sizes(puzzle, 0)
    assert puzzle.task in shown(lab)
    assert f"= {cases.shape(puzzle.inputs[0].shape, sizes)}" in shown(lab)
    assert lab.button(key="check").disabled and not lab.get("plotly_chart")
    assert lesson.NOT_ANSWERED in [c.value for c in lab.caption]
    assert puzzle.reference not in shown(lab)


@pytest.mark.parametrize("name", PUZZLES)
def test_every_puzzle_opens_from_its_link_fails_a_common_mistake_with_a_trace_and_passes_its_reference(name):
    puzzle = PUZZLES[name]
    at = open_page(PAGE, {"puzzle": name, "seed": "3"})
    assert not at.exception and not at.warning
    assert puzzle.task in shown(at) and puzzle.reference not in shown(at)
    wrong, reason = MISTAKES[name][0]
    check(at, wrong)
    assert not at.exception and at.error and not at.success
    if reason != "refused":
        assert trace_names(at), "a wrong answer that ran shows its shape trace"
    check(at, puzzle.reference)
    assert at.success and at.success[0].value.startswith("Right on all 5 inputs")
    assert any(puzzle.reference in m.value for m in at.markdown)  # revealed once right, in the why panel
    assert "Checked: " in " ".join(c.value for c in at.caption)
    # the link holds the puzzle, the seed and the learner's expression, as a study group would share it
    assert {k: v for k, v in at.query_params.items() if k not in ("device", "present")} == {
        "puzzle": name,
        "seed": "3",
        "answer": puzzle.reference,
    }


def test_a_wrong_shape_names_both_shapes_and_the_input_and_the_trace_shows_every_step(lab):
    check(lab, "y - p")
    message = lab.error[0].value
    assert "On the drawn input" in message and "where (" in message and "is expected" in message
    assert trace_names(lab) == ["1. y", "2. p", "3. y - p"]
    assert lab.dataframe[0].value["memory"].tolist() == ["input", "input", "new tensor"]


def test_a_copy_where_a_view_is_asked_is_named_with_the_step_that_copied():
    at = open_page(PAGE, {"puzzle": "stretch_without_copy"})
    check(at, "x.repeat(1, T, 1)")
    assert "a view that shares the input's memory" in at.error[0].value
    assert any("`x.repeat(1, T, 1)` made a new tensor" in m.value for m in at.markdown)
    check(at, "x.expand(-1, T, -1)")
    assert at.success


def test_a_refused_expression_is_answered_at_once_without_a_trace(lab):
    check(lab, "__import__('os').system('id')")
    assert lab.error[0].value.startswith("Not run: ") and "is not one of the listed" in lab.error[0].value
    assert not lab.get("plotly_chart")


def test_hints_come_in_order_count_in_the_score_and_stop_at_two(lab):
    lab.button(key="hint").click().run()
    assert len(lab.info) == 1 and "The concept" in lab.info[0].value
    lab.button(key="hint").click().run()
    assert len(lab.info) == 2 and "The first op" in lab.info[1].value
    assert lab.button(key="hint").disabled
    check(lab, PUZZLES[DEFAULT_PUZZLE].reference)
    assert f"solved in 1 check, {MAX_HINTS} hints" in " ".join(c.value for c in lab.caption)
    assert lab.button(key="hint").label == lesson.NO_MORE_HINTS


def test_the_palette_builds_a_right_answer_by_taps_alone_and_undo_steps_back(lab):
    answer = key("answer")
    lab.pills(key=f"{answer}-name").set_value("p").run()  # the expression begins
    lab.selectbox(key=f"{answer}-part").set_value("[…] index").run()
    lab.pills(key=f"{answer}-common").set_value(":, 0").run()  # an argument, tapped
    assert lab.text_input(key=f"{answer}-argument").value == ":, 0"
    lab.button(key=f"{answer}-add").click().run()
    assert lab.text_input(key=answer).value == "p[:, 0]"
    lab.pills(key=f"{answer}-name").set_value("y").run()  # once begun, a name goes into the arguments
    assert lab.text_input(key=f"{answer}-argument").value == "y"
    lab.selectbox(key=f"{answer}-part").set_value("A - E").run()
    lab.button(key=f"{answer}-add").click().run()
    assert lab.text_input(key=answer).value == "y - p[:, 0]"
    lab.selectbox(key=f"{answer}-part").set_value(".sum(…)").run()
    lab.button(key=f"{answer}-add").click().run()
    assert lab.text_input(key=answer).value == "(y - p[:, 0]).sum()"
    lab.button(key=f"{answer}-undo-button").click().run()
    assert lab.text_input(key=answer).value == "y - p[:, 0]"
    lab.button(key="check").click().run()
    assert lab.success  # built by taps alone, and right
    lab.button(key=f"{answer}-clear").click().run()
    assert lab.text_input(key=answer).value == ""
    lab.selectbox(key=f"{answer}-part").set_value("E - A").run()
    lab.button(key=f"{answer}-add").click().run()
    assert "give both first" in " ".join(c.value for c in lab.caption)


def test_the_puzzle_and_the_seed_reach_the_task_and_the_link_and_a_new_puzzle_clears_the_answer(lab):
    lab.text_input(key=key("answer")).set_value("y").run()
    lab.number_input(key=key("seed")).set_value(11).run()
    sizes = cases.shown_sizes(PUZZLES[DEFAULT_PUZZLE], 11)
    assert f"`N` = {sizes['N']}" in shown(lab) and lab.query_params["seed"] == "11"
    lab.selectbox(key=key("puzzle")).set_value("causal_mask").run()
    assert PUZZLES["causal_mask"].task in shown(lab)
    assert lab.text_input(key=key("answer")).value == "" and lab.query_params["puzzle"] == "causal_mask"


@pytest.mark.parametrize(
    "raw",
    ["__import__('os')", "x" * 300, "<script>alert(1)</script>", "1e309", "x.__class__", "\uff58 + 1"],
)
def test_a_hostile_expression_in_the_link_gets_a_notice_and_an_empty_answer(raw):
    at = open_page(PAGE, {"answer": raw})
    assert not at.exception
    assert any("answer" in w.value and "using the default" in w.value for w in at.warning)
    assert at.text_input(key=key("answer")).value == ""


def test_a_link_with_an_expression_shows_it_as_text_with_its_verdict_and_scores_it_only_when_checked():
    at = open_page(PAGE, {"puzzle": "residuals", "answer": "y - p[:, 0]"})
    assert at.text_input(key=key("answer")).value == "y - p[:, 0]" and at.success  # a study group sees the verdict
    assert "opened from a link: not scored" in " ".join(c.value for c in at.caption)
    assert not puzzle_scores(at)
    at.button(key="check").click().run()
    assert at.success and "solved in 1 check, 0 hints" in " ".join(c.value for c in at.caption)
    assert [(s.puzzle, s.solved) for s in puzzle_scores(at)] == [("residuals", True)]


def test_a_timed_set_of_five_puzzles_opens_each_by_number_and_its_result_is_kept(lab):
    lab.button(key="set-start").click().run()
    assert not lab.exception
    assert "Timed set: 0 of 5 solved" in " ".join(c.value for c in lab.caption)
    first = lab.session_state[key("puzzle")]
    check(lab, PUZZLES[first].reference)
    assert "Timed set: 1 of 5 solved" in " ".join(c.value for c in lab.caption)
    lab.button(key="set-2").click().run()
    assert lab.session_state[key("puzzle")] != first
    lab.button(key="set-end").click().run()
    assert any("1 of 5 solved" in i.value for i in lab.info)
    reopened = open_page("pages/12_Fix_the_loop.py")
    assert not any("of 5 solved" in i.value for i in reopened.info)  # a puzzle set is not a loop set


def test_presenting_keeps_the_task_and_the_answer_and_shows_plain_tables():
    at = open_page(PAGE, {"present": "1", "puzzle": "residuals"})
    check(at, "y - p")
    assert not at.dataframe and at.table and PUZZLES["residuals"].task in shown(at)
