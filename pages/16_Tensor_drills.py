"""Tensor drills: a small tensor transformation typed as one expression, checked on five inputs and traced."""

import streamlit as st

from explorers.tensors import card, cases, grading, lesson
from explorers.tensors import figures as charts
from explorers.tensors.catalogue import DEFAULT_PUZZLE, LEVELS, MAX_HINTS, PUZZLES, label
from explorers.tensors.experiment import SEED_RANGE, CheckOptions, check_answer
from ui import figures, palette, practice, puzzles, runs
from ui.fields import ChoiceField, IntField
from ui.frame import start_lab

# The link holds the puzzle (named by its task), the seed and the expression typed, so a study group can look at
# one attempt; never the reference.
FIELDS = (
    ChoiceField("puzzle", DEFAULT_PUZZLE, tuple(PUZZLES), label="Puzzle", format=label),
    IntField("seed", 0, *SEED_RANGE, label="Seed", widget="number"),
    puzzles.ANSWER,
)
CHECKED_KEY = "_tensor_checked"  # (puzzle, seed) -> the expression this session last checked
PENDING_KEY = "_tensor_pending"  # a Check clicked and not yet recorded
LINKED_KEY = "_tensor_linked"  # (puzzle, seed, answer) this session opened from a link, shown and not scored

page = start_lab("tensors", FIELDS)


def open_puzzle(name: str, seed: int) -> None:
    page.set("puzzle", name)
    page.set("seed", seed)
    page.set("answer", "")


def start_set() -> None:
    timed = practice.start_set("puzzles")
    open_puzzle(timed.drills[0], timed.seed)


def check() -> None:
    st.session_state.setdefault(CHECKED_KEY, {})[(page.value("puzzle"), page.value("seed"))] = page.value("answer")
    st.session_state[PENDING_KEY] = True


puzzle = PUZZLES[page.value("puzzle")]
seed = page.value("seed")
bench, stage = page.workbench()
with bench, page.controls():
    page.widget("puzzle", on_change=lambda: page.set("answer", ""))
    page.widget("seed")
    timed = practice.set_start(start_set, "puzzles")
    with st.expander(lesson.LANGUAGE_TITLE, icon=":material/code:"):
        st.markdown(lesson.language_words())

puzzles.opened(puzzle.name, seed)
sizes = cases.shown_sizes(puzzle, seed)
if LINKED_KEY not in st.session_state:  # a link with an answer in it: its verdict, shown and not scored
    st.session_state[LINKED_KEY] = (puzzle.name, seed, page.value("answer")) if page.value("answer") else None
    if page.value("answer"):
        st.session_state.setdefault(CHECKED_KEY, {})[(puzzle.name, seed)] = page.value("answer")
with stage:  # the verdict under the Check button: on a phone the settings come after it
    if timed is not None:
        practice.set_running(timed, puzzle.name, seed, open_puzzle, page.presenting)
    with st.container(key="lab-task"):
        st.subheader(f"{label(puzzle.name)}: {LEVELS[puzzle.level]}")
        st.markdown(f"**{puzzle.task}**")
        st.markdown("\n".join(f"- {line}" for line in lesson.inputs_lines(puzzle.name, sizes)))
    page.widget("answer", placeholder=lesson.ANSWER_PLACEHOLDER)
    palette.palette(page.key("answer"), puzzle.names)
    hints = puzzles.hints(puzzle.name, seed)
    left, right = st.columns(2)
    left.button(
        "Check my answer", key="check", type="primary", on_click=check, disabled=not page.value("answer").strip()
    )
    right.button(
        lesson.HINT_BUTTON if hints < MAX_HINTS else lesson.NO_MORE_HINTS, key="hint", on_click=puzzles.show_hint,
        args=(puzzle.name, seed), disabled=hints >= MAX_HINTS, icon=":material/lightbulb:",
    )  # fmt: skip
    for hint in lesson.hints(puzzle.name)[:hints]:
        st.info(hint, icon=":material/lightbulb:")
    page.sync_url()
    checked = st.session_state.get(CHECKED_KEY, {}).get((puzzle.name, seed))
    settings = {"puzzle": puzzle.name, "seed": seed}
    if checked is None:
        st.caption(lesson.NOT_ANSWERED)
    else:
        pending = st.session_state.pop(PENDING_KEY, False)  # a check that fails to run is not kept as an answer
        verdict = grading.refusal(puzzle, checked, seed) or runs.run(
            check_answer, CheckOptions(puzzle.name, checked, seed), label="Checking your answer on five inputs",
            timeout_s=15,
        )  # fmt: skip
        if pending:
            puzzles.record(verdict)
            st.session_state[LINKED_KEY] = None
            if verdict.right and timed is not None:
                st.rerun()  # the set's buttons, drawn above, tick this puzzle
        from_link = st.session_state[LINKED_KEY] == (puzzle.name, seed, checked)
        st.subheader(lesson.VERDICT_TITLE)
        st.caption(lesson.checked_line(checked, puzzles.score(puzzle.name, seed), from_link))
        (st.success if verdict.right else st.error)(lesson.verdict(verdict))
        for line in lesson.values_lines(verdict) + ([lesson.first_copy(verdict)] if verdict.reason == "copy" else []):
            st.markdown(line)
        if verdict.steps:
            figures.plotly(
                charts.trace_figure(verdict.steps, lesson.trace_title(verdict)),
                figures.caption("Shape trace of the answer", settings, "cpu"),
                "tensor-trace",
            )
            figures.table(lesson.trace_rows(verdict.steps))
        if verdict.right:
            figures.why_panel([lesson.STATEMENTS[puzzle.concept].text, *lesson.reference_lines(puzzle.name)])
            figures.answer_card(card.answer_card(verdict))

figures.notes_download(
    "Tensor drills",
    figures.caption("Tensor drills", settings, "cpu"),
    {
        "The task": "\n".join([puzzle.task, *(f"- {line}" for line in lesson.inputs_lines(puzzle.name, sizes))]),
        "Your puzzles so far": "\n".join(f"- {s.describe()}" for s in puzzles.scores()) or "–",
    },
    "tensor-drills",
)
