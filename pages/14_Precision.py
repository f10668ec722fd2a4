"""Precision lab: fp32, bf16 and fp16 autocast and GradScaler on one model, from the same weights and batches."""

import streamlit as st

from explorers.precision import card, lesson
from explorers.precision import experiment as lab
from explorers.precision import figures as charts
from explorers.precision.experiment import PrecisionOptions
from ui import figures, runs
from ui.fields import IntField
from ui.frame import start_lab

DEFAULT = PrecisionOptions()
FIELDS = (
    IntField("input_exp", DEFAULT.input_exp, *lab.INPUT_EXP_RANGE, label="Inputs × 10^k (overflow)"),
    IntField("loss_exp", DEFAULT.loss_exp, *lab.LOSS_EXP_RANGE, label="Loss × 10^k (underflow)"),
    IntField("scale_exp", DEFAULT.scale_exp, *lab.SCALE_EXP_RANGE, label="GradScaler init_scale 2^k"),
    IntField("steps", DEFAULT.steps, *lab.STEPS_RANGE, label="Steps"),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE, label="Seed", widget="number"),
)
page = start_lab("precision", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench, page.controls():
    page.widget("input_exp")
    page.widget("loss_exp")
    page.widget("scale_exp")
    for name, column in zip(("steps", "seed"), st.columns(2), strict=True):
        page.widget(name, column)
page.sync_url()

options = page.options(PrecisionOptions)
settings = {
    "inputs ×": f"1e{options.input_exp}",
    "loss ×": f"1e{options.loss_exp}",
    "init_scale": f"2^{options.scale_exp}",
    "steps": options.steps,
    "seed": options.seed,
}
result, memory_parts = runs.run_all(
    [(lab.run, options), (lab.memory_by_precision, lab.MemoryOptions(options.input_exp, options.seed))],
    label="Training in four precisions",
)
scaled = result.run("fp16 + GradScaler")

with stage:
    st.subheader("One model, four precisions")
    figures.plotly(
        charts.loss_figure(result), figures.caption("Loss per precision", settings, page.device), "precision-loss"
    )
    st.markdown("\n".join(f"- {line}" for line in [lesson.loss_sentence(result), lesson.bf16_sentence(result)]))

layers_column, scaler_column = st.columns(2, gap="large")
with layers_column:
    st.subheader("Overflow and underflow, per layer")
    figures.plotly(
        charts.layer_figure(result), figures.caption("Per layer at step 1", settings, page.device), "precision-layers"
    )
    lines = lesson.trouble_lines(result)
    st.markdown("\n".join(f"- {line}" for line in lines))
with scaler_column:
    st.subheader("GradScaler, step by step")
    figures.plotly(
        charts.scale_figure(result), figures.caption("GradScaler's scale", settings, page.device), "precision-scale"
    )
    st.markdown("\n".join(f"- {line}" for line in lesson.scaler_sentences(scaled)))

st.subheader("Memory per part, by precision")
figures.plotly(
    charts.memory_figure(memory_parts),
    figures.caption("Memory by precision", {k: settings[k] for k in ("inputs ×", "seed")}, page.device),
    "precision-memory",
)
st.markdown(f"- {lesson.memory_sentence(memory_parts)}")
st.page_link("pages/4_Memory.py", label="The Memory lab, for every part", icon=":material/memory:")

st.subheader("Which dtype each op produced (first forward)")
st.markdown("\n".join(f"- {lesson.dtype_sentence(result.run(p))}" for p in ("bf16", "fp16")))
with st.expander("Every op, in each precision"):
    figures.table(lesson.dtype_rows(result))
with st.expander("Per layer, in numbers"):
    figures.table(lesson.layer_rows(result))

why = lesson.explain(result)
figures.why_panel(why)


def the_other_inputs():
    other = runs.run(lab.run, lesson.what_if(options), label="Training at the other inputs")
    return lesson.predicted_answer(other), lesson.predicted_evidence(other)


figures.predict_then_run(key("predict"), lesson.predict_question(options), lesson.PREDICT_CHOICES, the_other_inputs)
figures.answer_card(card.answer_card(result))
figures.notes_download(
    "Precision lab",
    figures.caption("Precision lab", settings, page.device),
    {
        "Loss": lesson.loss_sentence(result),
        "Overflow and underflow": "\n".join(f"- {line}" for line in lines),
        "GradScaler": "\n".join(f"- {line}" for line in lesson.scaler_sentences(scaled)),
        "bf16 without a scaler": lesson.bf16_sentence(result),
        "Memory": lesson.memory_sentence(memory_parts),
        "Per layer": figures.markdown_table(lesson.layer_rows(result)),
    },
    "precision",
)
