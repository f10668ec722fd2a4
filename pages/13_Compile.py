"""Compile lab: where torch.compile breaks the graph, recompiles and pays back, read from dynamo and a stopwatch."""

import streamlit as st

from explorers.compiled import card, lesson, presets
from explorers.compiled import experiment as lab
from explorers.compiled import figures as charts
from explorers.compiled.experiment import CompileOptions, PayoffOptions
from ui import figures, runs
from ui.fields import ChoiceField, IntField
from ui.frame import start_lab

DEFAULT = CompileOptions()
FIELDS = (
    ChoiceField(
        "preset", DEFAULT.preset, tuple(presets.PRESETS), label="Model", format=lambda k: presets.PRESETS[k].label
    ),
    ChoiceField(
        "dynamic", DEFAULT.dynamic, tuple(lab.DYNAMIC), label="dynamic=", widget="segmented_control", format=str.title
    ),
    IntField("steps", DEFAULT.steps, *lab.STEPS_RANGE, label="Calls"),
    IntField("recompile_limit", DEFAULT.recompile_limit, *lab.LIMIT_RANGE, label="recompile_limit"),
    IntField("width", DEFAULT.width, *lab.WIDTH_RANGE, label="Width", step=16),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE, label="Seed", widget="number"),
)
page = start_lab("compile", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench, page.controls():
    page.widget("preset")
    st.caption(f"The line that differs: `{presets.PRESETS[page.value('preset')].line}`")
    page.widget("dynamic")
    for pair in (("steps", "recompile_limit"), ("width", "seed")):
        for name, column in zip(pair, st.columns(2), strict=True):
            page.widget(name, column)
page.sync_url()

options = page.options(CompileOptions)
settings = {
    "model": presets.PRESETS[options.preset].label,
    "dynamic": lab.DYNAMIC[options.dynamic],
    "calls": options.steps,
    "recompile_limit": options.recompile_limit,
    "width": options.width,
    "seed": options.seed,
}


def draw_recompiles(index: int, calls, settled: bool) -> None:
    """The main figure as soon as the schedule arrives (explain and fullgraph start once it is in)."""
    if index:
        return
    recompiles = calls.first(options.steps)
    with stage:
        st.subheader("What dynamo compiled at each call")
        figures.plotly(
            charts.recompile_figure(recompiles),
            figures.caption("Compiles per call", settings, page.device),
            "compile-recompiles",
        )
        st.markdown("\n".join(f"- {line}" for line in lesson.recompile_sentences(recompiles)))


trace_options, schedule_options = lab.parts(options)
calls, traced = runs.run_all(
    [(lab.schedule, schedule_options), (lab.trace, trace_options)],
    label="Tracing with dynamo",
    on_result=draw_recompiles,
)
analysis = lab.combine(options, traced, calls)

breaks_column, fullgraph_column = st.columns(2, gap="large")
with breaks_column:
    st.subheader("Graph breaks (`torch._dynamo.explain`)")
    st.markdown("\n".join(f"- {line}" for line in lesson.breaks_sentences(analysis.breaks)))
    for found in analysis.breaks.breaks:
        if found.detail:
            with st.expander(f"Dynamo's explanation for line {found.line_number}"):
                st.code(found.detail, language=None, wrap_lines=True)
with fullgraph_column:
    st.subheader("`fullgraph=True`")
    sentence = lesson.fullgraph_sentence(analysis)
    (st.error if analysis.fullgraph_error else st.info)(sentence)
    if analysis.fullgraph_error:
        with st.expander("PyTorch's whole message"):
            st.code(analysis.fullgraph_error, language=None, wrap_lines=True)

with st.expander("Each call: batch size, graphs, the guard that failed"):
    figures.table(charts.recompile_rows(analysis.recompiles))

st.subheader("Cost against payoff: inductor, one training step")
payoff_options = PayoffOptions(options.preset, options.width, seed=options.seed)
payoff = runs.cached(lab.measure, payoff_options)
CANCELLED_KEY = key("payoff-cancelled")


def cancel_payoff() -> None:
    st.session_state[CANCELLED_KEY] = runs.cancel_kept(lab.measure, payoff_options)


if payoff is None:
    running = runs.kept(lab.measure, payoff_options)  # started here earlier, still compiling
    offer = st.empty()  # the offer goes once the run starts: the figure takes its place
    with offer.container():
        if st.session_state.pop(CANCELLED_KEY, False):
            st.info(lesson.PAYOFF_CANCELLED, icon=":material/cancel:")
        st.caption(lesson.PAYOFF_COLD)
        clicked = not running and st.button("Compile and time it", icon=":material/bolt:", key=key("payoff"))
    if clicked or running:
        offer.empty()
        stop = st.empty()
        with stop.container():
            st.caption(lesson.PAYOFF_GOES_ON)
            st.button("Cancel the compile", icon=":material/cancel:", key=key("payoff-cancel"), on_click=cancel_payoff)
        payoff = runs.run(
            lab.measure,
            payoff_options,
            label="Compiling with inductor, then timing",
            timeout_s=runs.longer_limit(2),
            long=True,
            keep=True,
        )
        stop.empty()
if payoff is not None:
    figures.plotly(
        charts.payoff_figure(payoff),
        figures.caption("Compile payoff", {**settings, "steps timed": len(payoff.payoff.eager_ms)}, page.device),
        "compile-payoff",
    )
    st.markdown("\n".join(f"- {line}" for line in lesson.payoff_sentences(payoff)))

lines = lesson.explain(analysis)
figures.why_panel(lines)


def the_other_setting():
    other = runs.run(lab.schedule, lab.parts(lesson.what_if(options))[1], label="Tracing the other setting")
    recompiles = other.first(options.steps)
    return lesson.predicted_answer(recompiles), " ".join(lesson.recompile_sentences(recompiles))


figures.predict_then_run(key("predict"), lesson.predict_question(options), lesson.PREDICT_CHOICES, the_other_setting)
figures.answer_card(card.answer_card(analysis, payoff))
figures.notes_download(
    "Compile lab",
    figures.caption("Compile lab", settings, page.device),
    {
        "Compiles per call": "\n".join(f"- {line}" for line in lesson.recompile_sentences(analysis.recompiles)),
        "Graph breaks": "\n".join(f"- {line}" for line in lesson.breaks_sentences(analysis.breaks)),
        "fullgraph=True": lesson.fullgraph_sentence(analysis),
        "Payoff": "\n".join(f"- {line}" for line in lesson.payoff_sentences(payoff)) if payoff else lesson.PAYOFF_COLD,
        "Calls": figures.markdown_table(charts.recompile_rows(analysis.recompiles)),
    },
    "compile",
)
