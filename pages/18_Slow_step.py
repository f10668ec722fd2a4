"""Slow step: a training loop slowed by one planted bug; point at the evidence, pick a fix, and measure it."""

import re

import streamlit as st

from explorers.slowstep import card, lesson
from explorers.slowstep import figures as charts
from explorers.slowstep.catalogue import BY_LINK_ID, DEFAULT_DRILL, DRILLS, FIXES, NAMES, label
from explorers.slowstep.experiment import SEED_RANGE, FixOptions, SlowStepOptions, evidence, try_fix
from explorers.slowstep.measure import PHASES
from ui import figures, practice, runs, slowstep_practice
from ui.fields import ChoiceField, IntField, TextField
from ui.frame import start_lab

NO_FIX = "none"
PRACTICE = "slowstep"  # its timed set (ui/practice.py)
EVIDENCE_PATTERN = re.compile(rf"phase:({'|'.join(PHASES)})|op:[ -~]{{1,190}}")


def _evidence_format(raw: str) -> None:
    if not EVIDENCE_PATTERN.fullmatch(raw):
        raise ValueError("it names no phase bar or operator row")


# The link holds the drill by an opaque id, the seed and the picks until they are checked; never whether one is right.
FIELDS = (
    ChoiceField("drill", DRILLS[DEFAULT_DRILL].link_id, tuple(DRILLS[NAMES[n]].link_id for n in sorted(NAMES)),
                listed=False, label="Drill",
                format=lambda link_id: label(BY_LINK_ID[link_id].name)),
    IntField("seed", 0, *SEED_RANGE, label="Seed", widget="number"),
    TextField("evidence", "", _evidence_format, option=None),
    ChoiceField("fix", NO_FIX, (NO_FIX, *FIXES), option=None),
)  # fmt: skip
CHECKED_KEY = "_slowstep_checked"  # (drill, seed, repeat) -> (evidence, fix) checked this session
RUN_LIMIT_S = runs.longer_limit(2)

page = start_lab("slowstep", FIELDS)
repeat_key = page.key("repeat")
st.session_state.setdefault(repeat_key, 0)


def clear_answer() -> None:
    page.set("evidence", "")
    page.set("fix", NO_FIX)


def open_drill(name: str, seed: int) -> None:
    page.set("drill", DRILLS[name].link_id)
    page.set("seed", seed)
    clear_answer()


def start_set() -> None:
    timed = practice.start_set(PRACTICE)
    open_drill(timed.drills[0], timed.seed)


def measure_again() -> None:
    st.session_state[repeat_key] += 1  # the picks stay: a new run keeps the phase picked, and its own rows


drill = BY_LINK_ID[page.value("drill")]
seed = page.value("seed")
bench, stage = page.workbench()
with bench, page.controls():
    page.widget("drill", on_change=clear_answer)
    page.widget("seed", on_change=clear_answer)
    st.button("Measure again", icon=":material/refresh:", key="measure-again", on_click=measure_again,
              help=lesson.AGAIN_HELP)  # fmt: skip
    timed = practice.set_start(start_set, PRACTICE)
    st.caption(lesson.LOOP_PARTS)

options = SlowStepOptions(drill.name, seed, st.session_state[repeat_key])
run = runs.run(evidence, options, label="Measuring the loop", timeout_s=RUN_LIMIT_S)
choices = lesson.evidence_choices(run)
shown_fixes = drill.options_shown(seed)
if page.value("evidence") and page.value("evidence") not in choices:
    st.warning(lesson.UNKNOWN_EVIDENCE, icon=":material/link_off:")
    page.set("evidence", "")
if page.value("fix") != NO_FIX and page.value("fix") not in shown_fixes:
    st.warning(lesson.UNKNOWN_FIX, icon=":material/link_off:")
    page.set("fix", NO_FIX)

settings = {"drill": label(drill.name), "seed": seed}
checked = st.session_state.setdefault(CHECKED_KEY, {}).get((drill.name, seed, options.repeat))
with stage:
    if timed is not None:
        practice.set_running(timed, drill.name, seed, open_drill, page.presenting)
    st.subheader(label(drill.name))
    figures.plotly(
        charts.phases_figure(run.evidence), figures.caption("Phases, timed without the profiler", settings, "cpu"),
        "slowstep-phases",
    )  # fmt: skip
    if not run.shown:
        st.info(lesson.NOT_SHOWN, icon=":material/info:")
        st.button("Measure again", key="measure-again-stage", on_click=measure_again, icon=":material/refresh:")

st.markdown(lesson.breakdown(run))
figures.plotly(
    charts.timeline_figure(run.evidence),
    figures.caption(lesson.timeline_what(run.evidence.hidden_spans), settings, "cpu"),
    "slowstep-timeline",
)  # fmt: skip
st.caption(lesson.OPS_CAPTION)  # the whole width: beside the timeline, a third of a laptop showed one column
figures.table(charts.ops_table(run.evidence))
st.download_button(
    lesson.TRACE_DOWNLOAD, run.evidence.trace_gz, file_name=f"slow-step-{drill.link_id}-seed{seed}.json.gz",
    mime="application/gzip", icon=":material/download:", help=lesson.TRACE_HELP,
)  # fmt: skip

if run.shown:
    st.subheader(lesson.QUESTIONS_TITLE)
    evidence_index = choices.index(page.value("evidence")) if page.value("evidence") else None
    widget = f"slowstep-{drill.link_id}-{seed}-{options.repeat}"  # a new run starts with the link's picks
    picked_evidence = st.radio(lesson.QUESTION_EVIDENCE, choices, index=evidence_index, key=f"{widget}-evidence",
                               format_func=lambda item: lesson.evidence_label(run, item))  # fmt: skip
    fix_index = shown_fixes.index(page.value("fix")) if page.value("fix") != NO_FIX else None
    picked_fix = st.radio(lesson.QUESTION_FIX, shown_fixes, index=fix_index, key=f"{widget}-fix",
                          format_func=lambda k: FIXES[k].label)  # fmt: skip
    page.set("evidence", picked_evidence or "")
    page.set("fix", picked_fix or NO_FIX)

    def check_answer() -> None:
        """Grade the picks the radios hold now (each new check is graded and its fix run; the first one is kept)."""
        picks = (st.session_state[f"{widget}-evidence"], st.session_state[f"{widget}-fix"])
        st.session_state[CHECKED_KEY][(drill.name, seed, options.repeat)] = picks
        slowstep_practice.record(drill.name, seed, picks[0] in run.answers and picks[1] == drill.fix)

    ready = picked_evidence is not None and picked_fix is not None
    st.button(lesson.CHECK, key="check", type="primary", disabled=not ready, on_click=check_answer)
    if checked is None and not ready:
        st.caption(lesson.ANSWER_FIRST)
    elif checked is not None and checked != (picked_evidence, picked_fix):
        st.caption(lesson.CHANGED_PICKS)

if checked is not None and run.shown:
    clear_answer()  # once checked, the link holds the drill and the seed: a copied link passes on no answer
page.sync_url()  # after the picks: the link holds what the radios hold now

if checked is not None and run.shown:
    picked_evidence, picked_fix = checked
    right_evidence = picked_evidence in run.answers
    (st.success if right_evidence else st.error)(lesson.evidence_grade(run, picked_evidence))
    fixed = runs.run(try_fix, FixOptions(drill.name, seed, picked_fix, options.repeat), label="Running your fix",
                     timeout_s=RUN_LIMIT_S)  # fmt: skip
    (st.success if picked_fix == drill.fix else st.error)(lesson.answer_line(drill.name, picked_fix, right_evidence))
    st.markdown(lesson.fix_line(fixed))
    if picked_fix == "log_less":
        st.page_link(slowstep_practice.GPU_PAGE, label=lesson.GPU_LINK_WORDS, icon=":material/arrow_forward:")
    figures.plotly(charts.fix_figure(fixed), figures.caption("Your fix, timed", {**settings, "fix": picked_fix}, "cpu"),
                   "slowstep-fix")  # fmt: skip
    kept = slowstep_practice.first_answer(drill.name, seed)
    if kept is not None:
        st.caption(lesson.kept_line(kept.right))
    st.subheader(lesson.REVEAL_TITLE)
    st.markdown(lesson.planted(drill.name))
    figures.plotly(charts.correct_figure(run), figures.caption("Against the correct loop", settings, "cpu"),
                   "slowstep-correct")  # fmt: skip
    figures.why_panel([lesson.why(drill.name)])
    figures.answer_card(card.answer_card(run))

figures.notes_download(
    "Slow step",
    figures.caption("Slow step", settings, "cpu"),
    {
        "What the run measured": lesson.breakdown(run),
        "Your answers so far": "\n".join(f"- {s}" for s in slowstep_practice.scores()) or "–",
    },
    "slow-step",
)
