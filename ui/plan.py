"""The seven-day study plan: what to do each day, and the labs and questions that serve it."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from explorers.progress.history import MOCK_POINTS, Weak
from ui import mock, practice, progress, puzzles, slowstep_practice
from ui.catalogue import LABS

PAGE = "pages/9_Study_plan.py"
QUESTION = "Seven days to answer the eight questions out loud, with evidence."
NO_ANSWERS_YET = "Answer a lab's predict-then-reveal question and it appears here; wrong first answers come first."
ANSWERS_SHOWN = 20


def more_answers(hidden: int) -> str:
    return f"And {hidden} more: export your record to see them all."


NO_WEAK_YET = (
    "Score a mock interview answer, check a Fix-the-loop answer or a tensor puzzle, or answer a lab's prediction, "
    "and your weakest answers appear here."
)


@dataclass(frozen=True)
class Day:
    number: int
    task: str
    how: str
    labs: tuple[str, ...]  # lab slugs, in the order to open them


DAYS = (
    Day(
        1,
        "Frame the topic in one paragraph",
        "Open one lab, read its question and its answer card, and write "
        "the four parts (requirement, mechanism, evidence, recovery) in your own words.",
        ("autograd",),
    ),
    Day(
        2,
        "Draw the core system with its owners and one invariant",
        "Sketch the autograd graph (leaves, "
        "grad_fn nodes, saved tensors) and say who owns each piece of state in a training step.",
        ("autograd", "modes"),
    ),
    Day(
        3,
        "Questions 1 to 4, each with a failure case and a trade-off",
        "For each lab, predict before you "
        "reveal, then break it on purpose: a second backward, eval() without no_grad, a detached branch.",
        ("autograd", "gradients", "modes", "memory"),
    ),
    Day(
        4,
        "Questions 5 to 8, each with a metric or trace that could prove you wrong",
        "Quote the number on "
        "screen that would change your answer: a phase time, a peak, a divergent step, a first failing stage.",
        ("profiler", "ddp", "reproducibility", "serving", "compile", "precision", "evidence", "slowstep"),
    ),
    Day(
        5,
        "A project story with evidence",
        "Tell one story from your own work in the four-part frame; use a "
        "lab's figure as the evidence you wish you had kept.",
        ("profiler", "memory", "scale"),
    ),
    Day(
        6,
        "A timed mock interview",
        "Open the mock interview: three questions, each answered aloud at 30 seconds, 2 minutes and a "
        "10-minute whiteboard pass (draw the flow, name who validates, add an invariant), then the "
        "interviewer's challenge and your own score against the four-part frame. Then its two coding questions "
        "and its GPU trace, or a timed set of five Fix-the-loop drills or five tensor puzzles.",
        ("drills", "tensors"),
    ),
    Day(
        7,
        "Review your five weakest answers",
        "Redo your five weakest answers below, drawn from your mock interview scores, your drills, your tensor "
        "puzzles, your GPU trace and slow-step answers and your predictions, the weakest first, at 30 seconds, "
        "2 minutes and 10 minutes.",
        (),
    ),
)


def weak_link(weak: Weak) -> None:
    """One of Day 7's weakest answers, as a link back to where it is redone."""
    item = weak.item
    if weak.kind == "drill":
        st.page_link(practice.PAGE, label=f"Fix the loop, {item.describe()}", query_params=practice.link(item))
        return
    if weak.kind == "puzzle":
        st.page_link(puzzles.PAGE, label=f"Tensor drills, {item.describe()}", query_params=puzzles.link(item))
        return
    slug = item.lab if weak.kind == "mock" else item.key.split(".", 1)[0]
    entry = next((e for e in LABS if e.slug == slug), None)
    if weak.kind == "mock":
        words = f"Mock interview, {item.points} of {MOCK_POINTS}: {entry.question if entry else slug}"
        target = mock.PAGE
    else:
        words = f"Prediction, wrong first answer: {progress.plain(item.question)}"
        target = entry.page if entry and entry.page else None
    if target and weak.kind == "prediction" and slug == "slowstep":  # a slow-step answer: back to its drill and seed
        st.page_link(target, label=words, icon=":material/replay:", query_params=slowstep_practice.link(item.key))
    elif target and weak.kind == "prediction" and slug == "evidence":  # a trace's question: back to that trace
        st.page_link(target, label=words, icon=":material/replay:", query_params={"trace": item.key.split(".")[1]})
    elif target:
        st.page_link(target, label=words, icon=":material/replay:")
    else:
        st.markdown(f"- {words}")
