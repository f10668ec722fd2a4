"""The GPU evidence lab's questions on the page: pick the evidence, pick the cause, check; the first answer kept.

An answer on a shipped trace is kept as a prediction record (ui/drill.py), keyed
`evidence.<trace>.<question>`, so the study plan's day 7, the notes export and the record export list
it beside the labs' other questions. An answer about an uploaded trace is graded and not kept: the
record holds nothing about a file a learner sent.
"""

from __future__ import annotations

import streamlit as st

from explorers.evidence import lesson, questions
from explorers.evidence.questions import Question
from explorers.evidence.reading import Reading
from ui import drill

PAGE = "pages/17_GPU_evidence.py"
CHECKED_KEY = "_evidence_checked"  # (trace or None, question key) -> (evidence, cause) checked this session


def record_key(trace: str, question: str) -> str:
    return f"evidence.{trace}.{question}"


def ask(question: Question, trace: str | None, presenting: bool) -> None:
    """The question with its two picks and a Check button; its grade once checked."""
    widget = f"evidence-{trace or 'upload'}-{question.key}"
    with st.container(border=True, key=f"{widget}-box"):
        st.markdown(f"**{question.prompt}**")
        left, right = st.columns(2) if not presenting else (st.container(), st.container())
        evidence = left.radio("The evidence", question.evidence, index=None, key=f"{widget}-evidence")
        cause = right.radio("The answer", question.causes, index=None, key=f"{widget}-cause")
        st.button(
            "Check", key=f"{widget}-check", on_click=_check, args=(question, trace, widget),
            disabled=evidence is None or cause is None,
        )  # fmt: skip
        checked = st.session_state.get(CHECKED_KEY, {}).get((trace, question.key))
        if checked is not None:
            grade = questions.grade(question, *checked)
            (st.success if grade.right else st.error)(lesson.graded_line(question, grade))
            if trace is not None and (kept := drill.answers().get(record_key(trace, question.key))) is not None:
                st.caption(f"Your first answer, the one kept: {'right' if kept.right else 'not right'}.")


def _check(question: Question, trace: str | None, widget: str) -> None:
    picked = (st.session_state.get(f"{widget}-evidence"), st.session_state.get(f"{widget}-cause"))
    st.session_state.setdefault(CHECKED_KEY, {})[(trace, question.key)] = picked
    if trace is not None:
        grade = questions.grade(question, *picked)
        drill.record(record_key(trace, question.key), f"GPU evidence, {trace}: {question.prompt}", grade.right)


def answered_all(reading: Reading, trace: str | None) -> bool:
    checked = st.session_state.get(CHECKED_KEY, {})
    return all((trace, q.key) in checked for q in questions.questions(reading))


def scores() -> list[str]:
    return [
        f"{p.question}: {'right' if p.right else 'not right'} first"
        for key, p in drill.answers().items()
        if key.startswith("evidence.")
    ]
