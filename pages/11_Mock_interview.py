"""Mock interview: three questions from the labs, timed at three depths, challenged, self-scored."""

import streamlit as st

from explorers.drills import DRILLS
from explorers.drills.catalogue import label
from explorers.evidence.shipped import SHIPPED
from explorers.slowstep.catalogue import DRILLS as SLOW_DRILLS
from explorers.slowstep.catalogue import label as slow_label
from explorers.tensors.catalogue import label as puzzle_label
from ui import drill, evidence_practice, mock, plan, practice, progress, puzzles, slowstep_practice
from ui.frame import presenting, start_page

start_page("Mock interview", ":material/record_voice_over:")
st.title(":material/record_voice_over: Mock interview")
st.markdown(f"<p class='question'>{mock.QUESTION}</p>", unsafe_allow_html=True)
st.button("New set of questions", icon=":material/shuffle:", on_click=mock.new_set)

for number, asked in enumerate(mock.current_set(), 1):
    with st.container(border=True, key=f"mock-question-{number}"):
        st.markdown(f"**Question {number}. {asked.lab.question}**")
        if asked.lab.follows:
            st.caption(asked.lab.follows)
        st.page_link(asked.lab.page, label=f"The evidence: the {asked.lab.title} lab", icon=asked.lab.icon)
        st.markdown("\n".join(f"- {depth}" for depth in mock.DEPTHS))
        drill.timer(presenting())
        st.markdown(f"**The interviewer:** {asked.challenge}")
        st.markdown("**Score yourself:** what did your answer have?")
        ticked = [st.checkbox(item, key=f"mock-{asked.lab.slug}-{i}") for i, item in enumerate(mock.RUBRIC)]
        saved = mock.scores().get(asked.lab.slug)
        if st.button("Save my score", key=f"mock-save-{asked.lab.slug}"):
            mock.record(asked, sum(ticked))
            saved = mock.scores()[asked.lab.slug]
        if saved:
            st.caption(mock.saved_words(saved))


def practice_question(key: str, heading: str, page: str, label: str, icon: str, query: dict[str, str]) -> None:
    """A set's coding question: what the interviewer asks, the drill that practises it at its seed, a timer."""
    with st.container(border=True, key=key):
        st.markdown(heading)
        st.page_link(page, label=label, icon=icon, query_params=query)
        drill.timer(presenting())


drill_name, drill_seed = mock.current_coding_question()
practice_question(
    "mock-coding", f"**Coding question.** {mock.CODING_QUESTION}", practice.PAGE,
    f"Fix the loop: {label(drill_name)} (seed {drill_seed})", ":material/build:",
    {"drill": DRILLS[drill_name].link_id, "seed": str(drill_seed)},
)  # fmt: skip
puzzle_name, puzzle_seed = mock.current_tensor_question()
practice_question(
    "mock-tensor", f"**Tensor transformation.** {mock.TENSOR_QUESTION}", puzzles.PAGE,
    f"Tensor drills: {puzzle_label(puzzle_name)} (seed {puzzle_seed})", ":material/view_in_ar:",
    {"puzzle": puzzle_name, "seed": str(puzzle_seed)},
)  # fmt: skip
slow_name, slow_seed = mock.current_slow_step_question()
practice_question(
    "mock-slow-step", f"**Slow step.** {mock.SLOW_STEP_QUESTION}", slowstep_practice.PAGE,
    f"Slow step: {slow_label(slow_name)} (seed {slow_seed})", ":material/speed:",
    {"drill": SLOW_DRILLS[slow_name].link_id, "seed": str(slow_seed)},
)  # fmt: skip
trace = mock.current_trace_question()
practice_question(
    "mock-trace", f"**Profiling evidence.** {mock.TRACE_QUESTION}", evidence_practice.PAGE,
    f"GPU evidence: {SHIPPED[trace].title}", ":material/memory:", {"trace": trace},
)  # fmt: skip

st.page_link(plan.PAGE, label="Day 7 of the study plan: your weakest answers", icon=":material/event_note:")
st.caption(progress.where_line())
