"""Profiler lab: break a real training step into data, copy, forward, backward and optimizer time."""

import dataclasses
from pathlib import Path

import streamlit as st

from explorers.profiler import card, lesson
from explorers.profiler import experiment as lab
from explorers.profiler import figures as charts
from explorers.profiler.experiment import ProfileOptions
from explorers.profiler.your_model import PHASES
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

DEFAULT = ProfileOptions()
BATCHES = (8, 16, 32, 64, 128, 256, 512, 1024)
# Field names are ProfileOptions' own: an experiment's options move the controls directly.
KNOBS = (
    ChoiceField("width", DEFAULT.width, lab.WIDTHS, label="Model width", widget="select_slider"),
    IntField("depth", DEFAULT.depth, *lab.DEPTH_RANGE, label="Depth (layers)"),
    ChoiceField("batch_size", DEFAULT.batch_size, BATCHES, label="Batch size", widget="select_slider"),
    ChoiceField("optimizer", DEFAULT.optimizer, lab.OPTIMIZERS, label="Optimizer"),
    IntField(
        "data_cost_ms",
        DEFAULT.data_cost_ms,
        *lab.DATA_COST_RANGE,
        label="Data cost (ms/batch)",
        help=lesson.DATA_COST_HELP,
    ),
    IntField("num_workers", DEFAULT.num_workers, *lab.WORKERS_RANGE, label="DataLoader workers"),
    IntField("threads", DEFAULT.threads, *lab.THREADS_RANGE, label="CPU threads"),
    IntField("warmup", DEFAULT.warmup, *lab.WARMUP_RANGE, label="Warm-up steps"),
    IntField("active", DEFAULT.active, *lab.ACTIVE_RANGE, label="Active steps", help=lesson.active_help(lab.ROUNDS)),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE, label="Seed", widget="number"),
    BoolField("pin_memory", DEFAULT.pin_memory, label="pin_memory", help=lesson.PIN_MEMORY_HELP),
    BoolField("synchronize", DEFAULT.synchronize, label="sync per phase", help=lesson.SYNC_HELP),
)
CUDA_ONLY = ("pin_memory", "synchronize")  # they act on copies to and waits for a CUDA device
# The comparison an experiment starts (the knob it changed, and its old value) is kept in the link too.
FIELDS = (*KNOBS, ChoiceField("before", lesson.NO_COMPARISON, lesson.comparison_tokens(), option=None))
page = start_lab("profiler", FIELDS)
key = page.key
cuda = page.device == "cuda"

bench, stage = page.workbench()
with bench, page.controls():
    sliders = [field.name for field in KNOBS if field.name not in CUDA_ONLY]
    for pair in zip(sliders[::2], sliders[1::2], strict=True):  # two per row, in the table's order
        for name, column in zip(pair, st.columns(2), strict=True):
            page.widget(name, column)
    for name in CUDA_ONLY:  # a row each: half a row cut their labels to "pin_me…" at 1280 px
        page.widget(name, disabled=not cuda)


def options_now() -> ProfileOptions:
    return page.options(ProfileOptions, repeat=st.session_state.get(key("repeat"), 0))


def compared_with(options: ProfileOptions) -> ProfileOptions | None:
    """The settings before the experiment, from the link; moving its knob back by hand ends the comparison."""
    before = lesson.before_options(options, page.value("before"))
    if before is None:
        page.set("before", lesson.NO_COMPARISON)
    return before


options = options_now()
before = compared_with(options)
page.sync_url()


# The widest, deepest model at the largest batch takes ~1 s a step here, and three rounds take up to ~70 steps.
TIME_LIMIT_S = runs.longer_limit(2.5)


def profile(options: ProfileOptions) -> lab.ProfileResult:
    """One measured run per option set, shared by every session (and redone on "profile again")."""
    return runs.run(lab.profile, options, label="Profiling", timeout_s=TIME_LIMIT_S)


def try_experiment(experiment: lesson.Experiment) -> None:
    """Keep the knob's old value in the link, then move the controls to the experiment's settings."""
    page.set("before", lesson.token_for(options_now(), experiment.options))
    for field in KNOBS:
        page.set(field.name, getattr(experiment.options, field.name))


result = profile(options)


def shown(options: ProfileOptions) -> dict:
    """The settings a caption states (the device has its own line; the rest are GPU-only or bookkeeping)."""
    hidden = ("device", "pin_memory", "synchronize", "repeat")
    return {k: v for k, v in dataclasses.asdict(options).items() if k not in hidden}


settings = shown(options)
with bench:
    st.caption(lesson.LIVE_NUMBERS)
    experiment = lesson.suggestion(options, result)
    if experiment:
        st.markdown(lesson.experiment_offer(experiment))
        st.button("Try it", key="apply", on_click=try_experiment, args=(experiment,), type="primary")
    st.button(
        "Profile again",
        key="again",
        icon=":material/refresh:",
        on_click=lambda: st.session_state.update({key("repeat"): options.repeat + 1}),
    )

compared = ""
with stage:
    st.markdown(f"### Verdict: {result.verdict}\n{result.evidence}")
    if before is not None:
        before_result = profile(before)
        top = charts.axis_top(before_result, result)
        left, right = st.columns(2)
        with left:
            figures.plotly(
                charts.phases_figure(before_result, "Before the change", top),
                figures.caption("Before", shown(before), page.device),
                "profiler-before",
            )
        with right:
            figures.plotly(
                charts.phases_figure(result, "After the change", top),
                figures.caption("After", settings, page.device),
                "profiler-after",
            )
        kind, compared = lesson.outcome(
            lesson.describe_change(before, options), before_result.unprofiled_ms, result.unprofiled_ms
        )
        {"faster": st.success, "slower": st.warning, "same": st.info}[kind](compared)
        st.button("End the comparison", key="end", on_click=page.set, args=("before", lesson.NO_COMPARISON))
    else:
        figures.plotly(
            charts.phases_figure(result), figures.caption("Phases per step", settings, page.device), "profiler-phases"
        )
figures.plotly(
    charts.timeline_figure(result), figures.caption("Phase timeline", settings, page.device), "profiler-timeline"
)

# One above the other: side by side at 1280 px, the stopwatch table's last column was cut off.
st.subheader("Top operators (self time)")
figures.table(
    charts.top_ops_table(result),
    column_config={
        "self ms": st.column_config.NumberColumn(format="%.2f"),
        "total ms": st.column_config.NumberColumn(format="%.2f"),
    },
)
st.caption(lesson.top_ops_caption(result))
st.subheader("Profiler versus a stopwatch")
figures.table(charts.timing_table(result))
st.caption(lesson.overhead(result))
trace = Path(result.trace_path)
st.download_button(
    "⬇ Chrome trace of the last round (open in Perfetto)",
    lambda: trace.read_bytes(),
    trace.name,
    mime="application/json",
    on_click="ignore",
    key="trace",
    disabled=not trace.exists(),
)

lines = lesson.explain(options, result)
figures.why_panel(lines)
choice_key = key("predict")
answer, evidence = "data", ""
if st.session_state.get(choice_key) is not None:
    pair = [(lab.profile, o) for o in lesson.data_cost_pair(options)]
    measured = runs.run_all(pair, label="Profiling the data cost", timeout_s=TIME_LIMIT_S)
    answer, evidence = lesson.data_cost_evidence(*measured)
figures.predict_then_reveal(
    choice_key,
    lesson.data_cost_question(),
    list(PHASES),
    answer,
    evidence,
)
figures.answer_card(card.answer_card(result))
figures.notes_download(
    "Profiler lab",
    figures.caption("Profiler lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in (*lines, *([compared] if compared else []))),
        "Top operators": figures.markdown_table(charts.top_ops_table(result).round(3).to_dict("records")),
    },
    "profiler",
)
