"""Gradients lab: why a gradient is None, zero, vanishing or exploding, and what clipping does about it."""

import dataclasses

import streamlit as st

from explorers.gradients import KINDS, card, clipping, lesson
from explorers.gradients import experiment as lab
from explorers.gradients import figures as charts
from explorers.gradients.experiment import SCENARIOS, GradientsOptions, model_options, training_options
from ui import figures, runs
from ui.fields import ChoiceField, FloatField, IntField
from ui.frame import start_lab

DEFAULT = GradientsOptions()
LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)  # log steps: a linear slider wastes its range
MAX_NORMS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 100.0)
FIELDS = (
    ChoiceField(
        "scenario",
        DEFAULT.scenario,
        tuple(SCENARIOS),
        label="Scenario",
        widget="radio",
        format=lambda s: SCENARIOS[s].label,
    ),
    IntField("depth", DEFAULT.depth, *lab.DEPTH_RANGE, label="Depth"),
    FloatField(
        "scale", DEFAULT.init_scale, *lab.INIT_SCALE_RANGE, option="init_scale", label="Initial scale", step=0.05
    ),
    ChoiceField("activation", DEFAULT.activation, tuple(lab.ACTIVATIONS), label="Activation"),
    ChoiceField(
        "lr",
        DEFAULT.learning_rate,
        LEARNING_RATES,
        option="learning_rate",
        label="Learning rate (training)",
        widget="select_slider",
    ),
    IntField("k", DEFAULT.k, *lab.K_RANGE, label="Batches without zero_grad (k)"),
    ChoiceField("max_norm", DEFAULT.max_norm, MAX_NORMS, label="clip_grad_norm_ max_norm", widget="select_slider"),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE, label="Seed", widget="number"),
)

page = start_lab("gradients", FIELDS)
key = page.key


def apply_scenario_defaults() -> None:
    """Picking a scenario loads the knob values that show its pathology best (still adjustable)."""
    for attribute, value in SCENARIOS[page.value("scenario")].defaults.items():
        page.set_option(attribute, value)


bench, stage = page.workbench()
with bench:  # the scenario stays in view when presenting: it is what the presenter clicks
    page.widget("scenario", on_change=apply_scenario_defaults)
with bench, page.controls():
    knobs = SCENARIOS[page.value("scenario")].knobs
    for pair in (("depth", "scale"), ("activation", "k")):
        for name, column in zip(pair, st.columns(2), strict=True):
            unused = name in ("depth", "activation", "k") and name not in knobs  # every model has a scale
            page.widget(name, column, disabled=unused, help=lesson.KNOB_NOT_IN_MODEL if unused else None)
    ignored = lesson.knobs_not_in_model(page.value("scenario"))
    if ignored:
        st.caption(ignored)
    for name, column in zip(("lr", "seed"), st.columns(2), strict=True):
        page.widget(name, column)
page.sync_url()

options = page.options(GradientsOptions)
text = lesson.scenario_text(options)
model = model_options(options)
settings = {"scenario": options.scenario, **{knob: getattr(options, knob) for knob in knobs}, "seed": options.seed}

# The diagnosis first (the main figure), then the sweep. The clipping runs start once those are in (beside the
# main figure's run they would share its cores), and compute while the figures above them are drawn.
run, sweep = runs.run_all(
    [(lab.scenario_run, model), (lab.scale_sweep, model)], label="Running backward on the scenario"
)
clip_options = dataclasses.replace(model, max_norm=options.max_norm)
clip_runs = runs.start([(clipping.clip_once, clip_options), (clipping.clipped_training, training_options(options))])
diagnosis = run.diagnosis
with stage:
    st.subheader(text.title)
    st.markdown(text.pathology)
    figures.plotly(
        charts.layer_norms_figure(diagnosis),
        figures.caption("Gradient norm per layer", settings, page.device),
        "gradients-norms",
    )
    (st.success if diagnosis.verdict == "healthy" else st.warning)(f"**Verdict:** {diagnosis.verdict}")
    st.code(text.code, language="python")  # below the figure, so the figure is on the first screen

findings, graph = st.columns([2, 3], gap="large")
with findings:
    st.subheader("Findings")
    if not diagnosis.findings:
        st.write(lesson.NO_FINDINGS)
    for finding in diagnosis.findings:
        st.markdown(f"**{KINDS.get(finding.kind, finding.kind)}**: {finding.observation}")
with graph:
    st.subheader("The graph backward walks")
    st.caption(run.graph_note)
    if run.graph_source:
        figures.graph(
            run.graph_source, figures.caption("Autograd graph (torchviz)", settings, page.device), "gradients"
        )
figures.table(charts.status_table(diagnosis))  # the page's width: in the findings column its columns were cut off

st.subheader("Same model, other scales: what moves, and what does not")
figures.plotly(charts.sweep_figure(sweep), figures.caption("Scale sweep", settings, page.device), "gradients-sweep")
if run.accumulation is not None:
    st.subheader(f"{run.accumulation.k} batches without zero_grad")
    figures.plotly(
        charts.accumulation_figure(run.accumulation),
        figures.caption("Accumulated gradient", settings, page.device),
        "gradients-accumulation",
    )

st.subheader("Clipping contains the symptom")
page.widget("max_norm")  # its value was read at the top, where the clipping runs started
clipping, training = clip_runs.results(label="Clipping and training the exploding case")
before_after, trained = st.columns(2, gap="large")
with trained:  # drawn first: the learning rate changes this figure alone
    figures.plotly(
        charts.training_figure(training),
        figures.caption(
            "Exploding case trained", {"lr": training.learning_rate, "max_norm": training.max_norm}, page.device
        ),
        "gradients-training",
    )
with before_after:
    if clipping.note:
        st.info(clipping.note)
    if clipping.layer_names:
        figures.plotly(
            charts.clipping_figure(clipping),
            figures.caption(
                "Before and after clip_grad_norm_", {**settings, "max_norm": options.max_norm}, page.device
            ),
            "gradients-clipping",
        )

lines = lesson.explain(run, sweep=sweep, clipping=clipping, training=training)
figures.why_panel(lines)
if lesson.balance_kept(clipping):  # the answer is the one this run measured
    figures.predict_then_reveal(
        key("predict"),
        lesson.predict_question(options.max_norm),
        ["It shrinks towards 1", "It stays the same", "It grows"],
        "It stays the same",
        lesson.predict_reveal(clipping),
    )
figures.answer_card(card.answer_card(run, sweep=sweep, clipping=clipping))
figures.notes_download(
    "Gradients lab",
    figures.caption("Gradients lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Parameters": figures.markdown_table(charts.status_table(diagnosis).to_dict("records")),
        "Layers": figures.markdown_table(charts.layer_table(diagnosis).to_dict("records")),
    },
    "gradients",
)
