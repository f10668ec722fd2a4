"""Serving lab: a model that trains well but fails in production, traced stage by stage with a golden set."""

import dataclasses

import streamlit as st

from explorers import units
from explorers.serving import actions, card, experiment, export, lesson
from explorers.serving import figures as charts
from explorers.serving.experiment import SEED_RANGE, SHIFT_RANGE, ServingOptions
from explorers.serving.pipeline import MISMATCHES
from ui import figures, runs
from ui.fields import BoolField, FloatField, IntField
from ui.frame import start_lab

DEFAULT = ServingOptions()
FIELDS = (
    *(
        BoolField(name, False, option=None, label=m.title, widget="checkbox", help=lesson.mismatch_help(m))
        for name, m in MISMATCHES.items()
    ),  # one box per mismatch; together they set `mismatches`
    FloatField(
        "shift", DEFAULT.shift, *SHIFT_RANGE, label="Live traffic shift (std)", step=0.25, help=lesson.SHIFT_HELP
    ),
    IntField("seed", DEFAULT.seed, *SEED_RANGE, label="Seed (data, training, traffic)", widget="number"),
)

page = start_lab("serving", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench:  # the mismatches and the shift stay in view when presenting: they are what the presenter clicks
    st.markdown("**Inject into serving**")
    for name in MISMATCHES:  # one per row: two columns clip the labels at 1280 px
        page.widget(name)
    page.widget("shift")
with bench, page.controls():
    page.widget("seed")
page.sync_url()

options = page.options(ServingOptions, mismatches=tuple(name for name in MISMATCHES if page.value(name)))
settings = {"mismatches": ", ".join(options.mismatches) or "none", "shift": options.shift, "seed": options.seed}


def show_stages(c: experiment.Comparison) -> None:
    """The main figure and its verdict: drawn as soon as the replay is in, while the retraining runs."""
    with stage:
        figures.plotly(
            charts.stage_figure(c),
            figures.caption("Golden set, stage by stage", settings, page.device),
            "serving-stages",
        )
        clean, verdict = lesson.golden_verdict(c)
        (st.success if clean else st.warning)(verdict)
        validation, recorded, served = st.columns(3)
        validation.metric("Validation", units.percent(c.validation_accuracy))
        recorded.metric("Recorded, live", units.percent(c.reference_accuracy))
        served.metric(
            "Serving, live",
            units.percent(c.serving_accuracy),
            delta=f"{100 * (c.serving_accuracy - c.reference_accuracy):+.1f} pts",
            delta_color="normal" if c.serving_accuracy != c.reference_accuracy else "off",
        )


replayed, retrained = runs.run_all(
    [(experiment.replay_run, options), (experiment.retrain_run, options)],
    label="Replaying the golden set and live traffic",
    on_result=lambda index, value, _: show_stages(value) if index == 0 else None,
)
c = dataclasses.replace(replayed, retrained_accuracy=retrained)

items = actions.checklist(c)
with st.container(border=True):
    st.subheader("Checklist: the next action")
    st.markdown("\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)))
if options.mismatches:
    with st.expander(f"What the serving code does differently ({len(options.mismatches)})"):
        for name in options.mismatches:
            st.markdown(lesson.mismatch_details(MISMATCHES[name]))

# One above the other: nine columns need the page's width (half of it cut the stage differences off at 1280 px).
st.subheader("Golden set, largest difference first")
figures.table(charts.golden_table(c), height=320)
figures.plotly(
    charts.drift_figure(c), figures.caption("Drift per feature (PSI)", settings, page.device), "serving-drift"
)

st.subheader("The input-to-output contract")
figures.table(charts.contract_table(c), prose=True)  # a grid cut the feature order, or scrolled it out of view
st.caption(lesson.TAKE_THE_CHECK)
csv, golden_json, pipeline_json, checkpoint = st.columns(4)
artefact = c.artefact
stem = f"serving-seed{artefact.seed}"
csv.download_button(
    "⬇ Golden set (.csv)", lambda: export.golden_csv(artefact), f"{stem}-golden.csv", "text/csv", on_click="ignore"
)
golden_json.download_button(
    "⬇ Golden set (.json)",
    lambda: export.golden_json(artefact),
    f"{stem}-golden.json",
    "application/json",
    on_click="ignore",
)
pipeline_json.download_button(
    "⬇ Pipeline (.json)",
    lambda: export.pipeline_json(artefact),
    f"{stem}-pipeline.json",
    "application/json",
    on_click="ignore",
)
checkpoint.download_button(
    "⬇ Checkpoint (.pt)", artefact.checkpoint, f"{stem}.pt", "application/octet-stream", on_click="ignore"
)

lines = lesson.explain(c)
figures.why_panel(lines)
figures.predict_then_reveal(
    key("predict"),
    lesson.PREDICT_QUESTION,
    list(lesson.PREDICT_CHOICES),
    lesson.PREDICT_ANSWER,
    lesson.predict_evidence(c),
)
figures.answer_card(card.answer_card(c))
figures.notes_download(
    "Serving lab",
    figures.caption("Serving lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Checklist": "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1)),
        "Accuracy": figures.markdown_table(charts.accuracy_rows(c)),
        "Golden set": figures.markdown_table(charts.golden_table(c).to_dict("records")),
        "Contract": figures.markdown_table(charts.contract_table(c).to_dict("records")),
        "Drift": figures.markdown_table(charts.drift_rows(c)),
    },
    "serving",
)
