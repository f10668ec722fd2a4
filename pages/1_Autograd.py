"""Autograd lab: build a tiny model, step through its lifecycle, watch the graph and the gradients."""

import streamlit as st

from explorers.autograd import card, lesson
from explorers.autograd import experiment as autograd
from explorers.autograd import figures as charts
from explorers.autograd.experiment import ACTIONS, AutogradOptions, Replay
from explorers.saved import DEFINITION as SAVED_DEFINITION
from explorers.units import format_bytes
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField, SequenceField
from ui.frame import start_lab

DEFAULT = AutogradOptions()
FIELDS = (
    ChoiceField("preset", DEFAULT.preset, tuple(autograd.PRESETS), label="Model", format=autograd.PRESETS.get),
    IntField("depth", DEFAULT.depth, *autograd.DEPTH_RANGE, label="Depth (blocks)"),
    IntField("width", DEFAULT.width, *autograd.WIDTH_RANGE, label="Width"),
    ChoiceField("activation", DEFAULT.activation, tuple(autograd.ACTIVATIONS), label="Activation"),
    IntField("batch", DEFAULT.batch_size, *autograd.BATCH_RANGE, option="batch_size", label="Batch size"),
    BoolField(
        "x_grad",
        DEFAULT.input_requires_grad,
        option="input_requires_grad",
        label="Input x requires grad",
        help=lesson.X_REQUIRES_GRAD_HELP,
    ),
    BoolField("saved", DEFAULT.show_saved, option="show_saved", label="Show tensors saved for backward"),
    IntField("seed", DEFAULT.seed, *autograd.SEED_RANGE, label="Seed", widget="number"),
    SequenceField("steps", tuple(ACTIONS), autograd.MAX_STEPS, default=("forward",), option=None),  # the buttons
)

page = start_lab("autograd", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench, page.controls():
    page.widget("preset")
    scalar = page.value("preset") == "scalar"
    off = {"disabled": scalar, "help": lesson.SCALAR_HAS_NO_LAYERS if scalar else None}
    depth, width = st.columns(2)
    page.widget("depth", depth, **off)
    page.widget("width", width, **off)
    activation, batch = st.columns(2)
    page.widget("activation", activation)
    page.widget("batch", batch, **off)
    for name in ("seed", "x_grad", "saved"):
        page.widget(name)


def add_step(action: str) -> None:
    page.set("steps", (*page.value("steps"), action))


steps = page.value("steps")
BUTTON_GROUPS = {
    "Build a graph": ("forward", "forward_no_grad"),
    "Backward": ("backward", "backward_retain"),
    "Clear gradients": ("zero_grad_none", "zero_grad_zeros"),
    "Update": ("sgd_step",),
}
with bench:
    st.markdown(lesson.STEP_THROUGH)
    for actions in BUTTON_GROUPS.values():
        for action in actions:  # one full-width button per row: the long zero_grad labels are never cut
            st.button(
                ACTIONS[action],
                key=f"do-{action}",
                on_click=add_step,
                args=(action,),
                width="stretch",
                disabled=len(steps) >= autograd.MAX_STEPS,
                type="primary" if action == "forward" else "secondary",
            )  # no tooltip: after a click it would cover the next button
    st.button(
        "Reset", icon=":material/restart_alt:", key="do-reset", on_click=page.set, args=("steps", ()), width="stretch"
    )
page.sync_url()

options = page.options(AutogradOptions)
result, two_passes = runs.run_all(
    [(autograd.replay, Replay(options, tuple(steps))), (autograd.replay, Replay(options, lesson.TWO_PASSES))],
    label="Replaying the steps",
)
trail = lesson.trail(result)
with bench:
    st.markdown(
        f"Steps so far: **{trail}**" + ("  (step limit reached: reset)" if len(steps) >= autograd.MAX_STEPS else "")
    )
    for note in result.notes:
        st.info(note)
settings = lesson.caption_settings(result)
stem = f"autograd-{options.preset}"

with stage:
    if result.final.error:
        st.error(lesson.error_heading(result.final))
        st.code(result.final.error, language=None, wrap_lines=True)
    st.subheader("The autograd graph")
    st.caption(result.graph_note)
    if result.graph_source:
        figures.graph(result.graph_source, figures.caption("Autograd graph (torchviz)", settings, page.device), stem)
st.subheader("Held for backward")
held, history = st.columns([1, 2], gap="large")
with held:
    before = result.snapshots[-2].saved_bytes if len(result.snapshots) > 1 else 0
    st.metric(
        "Saved tensors held now",
        format_bytes(result.final.saved_bytes),
        delta=f"{result.final.saved_bytes - before:+,} B since the previous step",
        delta_color="off",
        delta_arrow="off",
        help=SAVED_DEFINITION,
    )
    st.caption(SAVED_DEFINITION)
with history:
    chart = charts.saved_bytes_figure(result)
    figures.plotly(chart, figures.caption("Saved-for-backward bytes", settings, page.device), f"{stem}-saved")

st.subheader("Every tensor in play")
table = charts.tensor_table(result.final)
figures.table(
    table,
    height=36 * (len(table) + 1) + 4,
    column_config={
        "‖grad‖": st.column_config.NumberColumn(format="%.4g"),
        lesson.ratio_label(): st.column_config.NumberColumn(format="%.3f"),
    },
)
st.caption(figures.caption("Tensor table", settings, page.device))
saved_heading, saved_records, saved_caption = lesson.saved_rows(result)
saved_rows = [vars(s) for s in saved_records]
with st.expander(saved_heading):
    figures.table(saved_rows)
    st.caption(saved_caption)

lines = lesson.explain(result)
figures.why_panel(lines)
leaf = lesson.two_passes_leaf(two_passes)
if leaf is None:  # e.g. a dead ReLU: every gradient is exactly zero, and twice zero teaches nothing
    st.subheader("Predict, then reveal")
    st.info(lesson.no_ratio_note())
else:
    figures.predict_then_reveal(
        key("predict"),
        lesson.two_passes_question(leaf),
        ["The same as after one pass", "Twice one pass", "Zero", "An error"],
        "Twice one pass",
        lesson.two_passes_reveal(leaf),
    )
figures.answer_card(card.answer_card(result, two_passes))
figures.notes_download(
    "Autograd lab",
    figures.caption("Autograd lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Tensors": figures.markdown_table(table.to_dict("records")),
        "Saved for backward": figures.markdown_table(saved_rows),
    },
    stem,
)
