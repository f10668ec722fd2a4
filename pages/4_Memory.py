"""Memory lab: slide the batch size and watch where the memory of a training step goes."""

import dataclasses

import streamlit as st

from explorers import memory, saved
from explorers.memory import card, lesson
from explorers.memory import experiment as lab
from explorers.memory import figures as charts
from explorers.memory.experiment import MemoryOptions
from explorers.units import format_bytes
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

DEFAULT = MemoryOptions()
FIELDS = (
    ChoiceField("preset", DEFAULT.preset, tuple(lab.PRESETS), label="Model", format=lab.PRESETS.get),
    IntField("width", DEFAULT.width, *lab.WIDTH_RANGE, label="Width", step=16, help=lesson.WIDTH_HELP),
    IntField("depth", DEFAULT.depth, *lab.DEPTH_RANGE, label="Depth (blocks)"),
    IntField("seq_len", DEFAULT.seq_len, *lab.SEQ_RANGE, label="Sequence length", step=8),
    ChoiceField("heads", DEFAULT.heads, lab.HEADS, label="Heads", widget="select_slider"),
    ChoiceField("batch_size", DEFAULT.batch_size, lab.BATCHES, label="Batch size (log scale)", widget="select_slider"),
    ChoiceField("optimizer", DEFAULT.optimizer, memory.OPTIMIZERS, label="Optimizer"),
    ChoiceField("precision", DEFAULT.precision, memory.PRECISIONS, label="Precision", help=lesson.PRECISION_HELP),
    BoolField("checkpointing", DEFAULT.checkpointing, label="Checkpointing", help=lesson.CHECKPOINTING_HELP),
    IntField("accumulation", DEFAULT.accumulation, *lab.ACCUMULATION_RANGE, label="Accumulation steps"),
    ChoiceField("budget_gb", DEFAULT.budget_gb, lab.BUDGETS_GB, label="Device memory", format="{} GiB".format),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE, label="Seed", widget="number"),
)
page = start_lab("memory", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench:  # the batch size is what a presenter slides: it stays in view
    page.widget("batch_size")
with bench, page.controls():
    page.widget("preset")
    transformer = page.value("preset") == "transformer"
    rows = (("width", "depth"), ("seq_len", "heads"), ("optimizer", "precision"), ("accumulation", "budget_gb"))
    for pair in rows:
        for name, column in zip(pair, st.columns(2), strict=True):
            off = name in ("seq_len", "heads") and not transformer
            page.widget(name, column, disabled=off, help=lesson.TRANSFORMER_ONLY if off else None)
    page.widget("checkpointing")  # a row of its own: beside the seed, its label was cut at 1280 px
    page.widget("seed", st.columns(2)[0])
page.sync_url()

try:
    options = page.options(MemoryOptions)
except ValueError as error:  # e.g. a width the heads do not divide
    st.warning(lesson.invalid_options_notice(error))
    options = dataclasses.replace(DEFAULT, device=page.device)
settings = {k: v for k, v in dataclasses.asdict(options).items() if k != "device"}

measured = lab.without_view_settings(options)
# The chosen batch first (its metrics, timeline and bar answer the slider), then the other sweep points.
batches = lab.sweep_batches(options)
order = [options.batch_size, *(b for b in batches if b != options.batch_size)]
sweep_slot = stage.empty()  # the main figure, beside the controls
metrics_slot = st.container()
timeline, retention = st.columns(2, gap="large")
remedies_slot = st.container()
arrived: dict[int, lab.Point] = {}


def show_metrics(point: lab.Point) -> None:
    result = point.result
    notice = lesson.estimate_notice(point, lab.MEASURE_LIMIT_BYTES)
    if notice:
        st.info(notice)
    shown = [name for name in lesson.METRICS if name != "weight copies" or result.weight_copies]
    with st.container(horizontal=True, gap="medium"):  # as wide as their numbers, wrapping: none is cut
        for name in shown:
            predicted = result.predicted.get(lesson.WHOLE_PARTS[name])
            st.metric(
                lesson.metric_label(options, name),
                format_bytes(getattr(result, lesson.WHOLE_PARTS[name])),
                delta=None if predicted is None else f"predicted {format_bytes(predicted)}",
                delta_color="off",
                delta_arrow="off",
                width="content",
            )
        st.metric(
            "peak, step 2 on",
            format_bytes(result.peak),
            delta=f"step 1: {format_bytes(result.first_step.peak)}",
            delta_color="off",
            delta_arrow="off",
            width="content",
        )
    st.caption(lesson.metrics_caption(options, point, saved.DEFINITION))


def show_point(index: int, point: lab.Point, settled: bool) -> None:
    arrived[point.batch] = point
    if settled:  # the main figure first: it is what the slider moves
        points_so_far = tuple(arrived[b] for b in batches if b in arrived)
        with sweep_slot.container():  # redrawn as each batch size arrives; the key settles once all are in
            figures.plotly(
                charts.sweep_figure(points_so_far, options),
                figures.caption("Memory by batch size", settings, page.device),
                "memory-sweep",
                key=f"memory-sweep-{len(points_so_far)}",
            )
    if index == 0:
        with metrics_slot:
            show_metrics(point)
        with timeline:
            st.subheader("Step 1, then a steady step")
            figures.plotly(
                charts.timeline_figure(point.result),
                figures.caption("Live memory through steps 1 and 2", settings, page.device),
                "memory-timeline",
            )


sweep = [(lab.batch_point, dataclasses.replace(measured, batch_size=b)) for b in order]
runs.run_all(sweep, label="Measuring batch sizes", on_result=show_point, long=True)
points = tuple(arrived[b] for b in batches)

with retention:
    st.subheader("Accidental retention")
    retention_options = dataclasses.replace(lab.RETENTION_OPTIONS, device=page.device)
    curves = runs.run(lab.retention, retention_options, label="Loops", long=True)
    st.caption(lesson.retention_caption(retention_options, lab.RETENTION_BATCH, len(next(iter(curves.values())))))
    retention_settings = {"MLP width": retention_options.width, "depth": retention_options.depth}
    figures.plotly(
        charts.retention_figure(curves),
        figures.caption("Accidental retention", {**retention_settings, "batch": lab.RETENTION_BATCH}, page.device),
        "memory-retention",
    )

lines = lesson.explain(options, arrived[options.batch_size], points) + lesson.retention_lines(curves)
figures.why_panel(lines)
evidence = lesson.doubling_evidence(points, options.batch_size)
if evidence:
    figures.predict_then_reveal(
        key("predict"),
        lesson.DOUBLING_QUESTION,
        ["parameters", "gradients", "optimizer state", "activations"],
        "activations",
        evidence,
    )
figures.answer_card(card.answer_card(arrived[options.batch_size], evidence))
figures.notes_download(
    "Memory lab",
    figures.caption("Memory lab", settings, page.device),
    {"What happened": "\n".join(f"- {line}" for line in lines)},
    "memory",
)

# Last, so everything above is on screen while it runs; once found, the table stays for these settings.
with remedies_slot:
    st.subheader(lesson.REMEDIES_HEADING)
    table = runs.cached(lab.remedies_table, options)
    if table is None and st.session_state.get(key("remedies_for")) == options:
        table = runs.run(lab.remedies_table, options, label="Trying remedies", long=True)
    if table is None:
        st.button(
            lesson.remedies_button(options.budget_gb),
            key="remedies",
            on_click=lambda: st.session_state.update({key("remedies_for"): options}),
        )
    else:
        figures.table(table)
        st.caption(figures.caption(f"Largest batch on a {options.budget_gb} GiB device", settings, page.device))
