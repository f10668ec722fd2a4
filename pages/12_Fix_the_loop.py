"""Fix the loop: a training loop with one bug, run for real; find its lines and its fix from the symptoms."""

import streamlit as st

from explorers import drills
from explorers.drills import card, lesson
from explorers.drills import figures as charts
from explorers.drills.catalogue import BY_LINK_ID, NUMBERS, label
from explorers.drills.experiment import SEED_RANGE, DrillOptions, fixed_source, run_loop
from ui import code, figures, mock, practice, runs
from ui.fields import ChoiceField, IntField
from ui.frame import start_lab

NO_FIX = "none"
# The link holds the drill by an opaque id and the seed, never the lines or the fix chosen: a link copied after
# solving would hand the answer to whoever opens it.
FIELDS = (
    ChoiceField(
        "drill",
        drills.DRILLS[drills.DEFAULT_DRILL].link_id,
        tuple(BY_LINK_ID),
        listed=False,
        label="Drill",
        format=lambda link_id: label(BY_LINK_ID[link_id].name),
    ),
    IntField("seed", 0, *SEED_RANGE, label="Seed", widget="number"),
)
CHECKED_KEY = "_loop_checked"  # (drill, seed) -> this session's last Check; never in the link

page = start_lab("drills", FIELDS)
st.session_state.setdefault(page.key("lines"), [])  # the answer: this session's widgets, not link fields
st.session_state.setdefault(page.key("fix"), NO_FIX)


def clear_answer() -> None:
    page.set("lines", [])
    page.set("fix", NO_FIX)


def open_drill(name: str, seed: int) -> None:
    page.set("drill", drills.DRILLS[name].link_id)
    page.set("seed", seed)
    clear_answer()


def start_set() -> None:
    timed = practice.start_set()
    open_drill(timed.drills[0], timed.seed)


drill = BY_LINK_ID[page.value("drill")]
seed = page.value("seed")
bench, stage = page.workbench()
with bench, page.controls():
    page.widget("drill", on_change=clear_answer)
    page.widget("seed", on_change=clear_answer)
    timed = practice.set_start(start_set)
page.sync_url()

options = DrillOptions(drill.name, seed)
practice.opened(drill.name, seed)
buggy, correct = runs.run_all(
    [(run_loop, options), (run_loop, options.correct)], label="Running the loop and the correct one"
)
comparison = drills.compare(buggy.recording, correct.recording)
checked = st.session_state.setdefault(CHECKED_KEY, {}).get((drill.name, seed))
solved = checked is not None and checked.right
settings = {"drill": NUMBERS[drill.name], "seed": seed}
with stage:
    if timed is not None:
        practice.set_running(timed, drill.name, seed, open_drill, page.presenting)
    st.subheader(lesson.stage_title(drill.title))
    shown = [("buggy loop", buggy), *([("correct loop", correct)] if solved else [])]
    figures.plotly(charts.loss_figure(shown), figures.caption("Logged loss", settings, page.device), "loop-loss")
    raised = comparison.finding("error")
    if raised:  # PyTorch's own error is the first thing an engineer reads
        st.error(lesson.symptom(raised), icon=":material/error:")
    if not comparison.findings:
        st.info(lesson.NOT_SHOWN)
        st.button("Try the next seed", key="next-seed", on_click=open_drill, args=(drill.name, seed + 1))

readings = (
    (charts.gradient_figure, "Gradient per layer", "loop-gradients"),
    (charts.memory_figure, "Memory", "loop-memory"),
    (charts.accuracy_figure, "Accuracy", "loop-accuracy"),
)
columns = [*st.columns(2, gap="large"), *st.columns(2, gap="large")]  # two to a row: a third of a laptop is too narrow
for column, (draw, what, stem) in zip(columns, readings, strict=False):
    with column:
        figures.plotly(draw(buggy.recording), figures.caption(what, settings, page.device), stem)
with columns[3], st.expander(lesson.READINGS_TITLE, icon=":material/monitoring:"):
    st.markdown("\n".join(f"- {line}" for line in lesson.symptoms(comparison)))

st.subheader(lesson.CODE_TITLE)
code.python_block(drill.source, lesson.CODE_LABEL)
st.pills(
    lesson.QUESTION_LINES,
    [str(n) for n in range(1, len(drill.lines) + 1)],
    selection_mode="multi",
    key=page.key("lines"),
)
fix_choices = (NO_FIX, *drill.options_shown(seed))
st.radio(lesson.QUESTION_FIX, fix_choices, key=page.key("fix"), format_func=lambda k: lesson.fix_label(k, NO_FIX))
answer_ready = bool(page.value("lines")) and page.value("fix") != NO_FIX


def check_answer() -> None:
    result = drills.check(drill.name, [int(n) for n in page.value("lines")], page.value("fix"))
    st.session_state[CHECKED_KEY][(drill.name, seed)] = result
    practice.record(result, seed)


st.button("Check my answer", key="check", type="primary", disabled=not answer_ready, on_click=check_answer)
if not answer_ready and checked is None:
    st.caption(lesson.ANSWER_FIRST)

if checked is not None:
    score = practice.score(drill.name, seed)
    (st.success if checked.right else st.error)(lesson.check_verdict(checked, score.attempts))
    fixed = runs.run(run_loop, DrillOptions(drill.name, seed, checked.fix), label="Running your fix")
    fix_comparison = drills.compare(fixed.recording, correct.recording, buggy.recording)
    st.markdown(lesson.fix_verdict(checked.fix, fix_comparison))
    beside = ("correct loop", correct) if solved else ("buggy loop", buggy)  # the correct curve once right only
    figures.plotly(
        charts.loss_figure([beside, ("your fix", fixed)]),  # the fix dotted, on top
        figures.caption(
            f"Your fix against the {beside[0]}", {**settings, "fix": lesson.plain(checked.fix)}, page.device
        ),
        "loop-fix",
    )
    if solved:
        figures.why_panel(lesson.explanation(drill.name))
        code.python_block(fixed_source(drill, drill.fix), lesson.FIXED_CODE_LABEL)
        if timed is not None and drill.name in timed.drills:
            st.markdown("\n".join(f"- {depth}" for depth in mock.DEPTHS))
        figures.answer_card(card.answer_card(drill.name, comparison, seed))

figures.notes_download(
    "Fix the loop",
    figures.caption("Fix the loop", settings, page.device),
    {
        "What the bench measured": "\n".join(f"- {line}" for line in lesson.symptoms(comparison)),
        "The loop": f"```\n{charts.numbered_source(drill.source)}\n```",
        "Your drills so far": "\n".join(f"- {s.describe()}" for s in practice.scores()) or "–",
    },
    "fix-the-loop",
)
