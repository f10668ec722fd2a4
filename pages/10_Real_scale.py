"""Real-scale lab: will fine-tuning a published model fit on my GPU? One real step of its code, on fake tensors."""

import streamlit as st

from explorers.scale import card, lesson, models
from explorers.scale import figures as charts
from explorers.scale.experiment import (
    BATCH_RANGE,
    BUDGETS_GIB,
    OPTIMIZERS,
    PRECISIONS,
    TRAINABLE,
    PlanOptions,
    measure_plan,
)
from explorers.scale.formulas import measure_formulas
from explorers.scale.remedies import measure as measure_remedies
from explorers.scale.search import Question, limits
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

SEQ_CHOICES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
GPU_CHOICES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT = PlanOptions()
FIELDS = (
    ChoiceField("model", DEFAULT.model, models.KEYS, label="Model", format=models.NAMES.get),
    ChoiceField("seq", DEFAULT.seq_len, SEQ_CHOICES, option="seq_len", label="Sequence length", widget="select_slider"),
    IntField("batch", DEFAULT.batch_size, *BATCH_RANGE, option="batch_size", label="Micro-batch", widget="number"),
    ChoiceField(
        "precision", DEFAULT.precision, PRECISIONS, label="Precision", widget="radio", format=lesson.PRECISION_NAMES.get
    ),
    ChoiceField(
        "budget", 80, BUDGETS_GIB, option=None, label="GPU memory", widget="segmented_control", format="{} GiB".format
    ),
    ChoiceField("optimizer", DEFAULT.optimizer, OPTIMIZERS, label="Optimizer", format=lesson.OPTIMIZER_NAMES.get),
    BoolField("foreach", DEFAULT.foreach, label="AdamW steps all parameters at once (foreach, CUDA's default)"),
    BoolField("checkpointing", DEFAULT.checkpointing, label="Activation checkpointing"),
    ChoiceField("trainable", DEFAULT.trainable, TRAINABLE, label="What trains", format=lesson.TRAINABLE_NAMES.get),
    IntField("blocks", DEFAULT.trainable_blocks, 1, 128, option="trainable_blocks", label="N (last blocks that train)"),
    ChoiceField(
        "gpus", DEFAULT.world_size, GPU_CHOICES, option="world_size", label="Data-parallel GPUs", widget="select_slider"
    ),
    ChoiceField(
        "zero",
        DEFAULT.zero_stage,
        (0, 1, 2, 3),
        option="zero_stage",
        label="Sharding",
        format=lesson.SHARDING_NAMES.get,
    ),
)
# The widest searches measure about ten steps of an 8B model, several seconds each here.
TIME_LIMIT_S = runs.longer_limit(5)

page = start_lab("scale", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench:
    for name in ("model", "seq", "batch", "precision", "budget"):
        page.widget(name)
with bench, page.controls():
    page.widget("optimizer")
    if page.value("optimizer") == "adamw":
        page.widget("foreach")
    page.widget("checkpointing")
    page.widget("trainable")
    if page.value("trainable") == "last":
        most = models.block_count(page.value("model"))
        if page.value("blocks") > most:  # a link's N, or one set for a deeper model
            page.set("blocks", most)
        page.widget("blocks", high=most)
    page.widget("gpus")
    page.widget("zero")
page.sync_url()

model = page.value("model")
limit = models.position_limit(model)
seq = page.value("seq")
if seq > limit:
    st.info(lesson.POSITION_NOTE.format(name=models.NAMES[model], limit=limit), icon=":material/info:")
    seq = limit
options = page.options(
    PlanOptions,
    batch_size=page.value("batch") or 1,  # an emptied number box counts as its smallest value
    seq_len=seq,
    foreach=page.value("foreach") and page.value("optimizer") == "adamw",
)
budget = page.value("budget") or 80
text_size = 20 if page.presenting else 14
settings = {"on": "fake tensors", "setting": lesson.setting_words(options)}
plan = runs.run(measure_plan, options, label="Measuring one training step on fake tensors", timeout_s=TIME_LIMIT_S)

with stage:
    figures.plotly(
        charts.peak_figure(plan, BUDGETS_GIB, budget, text_size=text_size),
        figures.caption("Memory per GPU at the step's peak", settings, "cpu"),
        "scale-peak",
    )
    fits, words = lesson.verdict(plan, budget)
    (st.success if fits else st.error)(words)
    figures.table(lesson.budget_rows(plan, BUDGETS_GIB))

parts = lesson.metric_parts(plan)
for column, (name, nbytes) in zip(st.columns(len(parts)), parts, strict=True):
    column.metric(name, lesson.gib(nbytes))
st.caption(lesson.provenance(plan))
for note in (lesson.sharding_words(plan), lesson.unsharded_words(plan), lesson.head_words(plan)):
    if note:
        st.info(note, icon=":material/info:")

question = Question(options, budget)
found, fixes, formulas = runs.run_all(
    [(limits, question), (measure_remedies, question), (measure_formulas, options)],
    label="Searching the limits and measuring the remedies",
    timeout_s=TIME_LIMIT_S,
    priority=1,
)
for measured in (*found.batch.plans, *found.seq.plans):  # fake steps are deterministic: they answer the next move
    runs.remember(measure_plan, measured.options, measured)
st.subheader("What fits")
st.markdown(f"- {lesson.limit_words(found.batch, budget)}\n- {lesson.limit_words(found.seq, budget)}")
st.subheader("Remedies")
figures.plotly(
    charts.remedies_figure(fixes, budget, text_size=text_size),
    figures.caption("Peak per GPU after each change", settings, "cpu"),
    "scale-remedies",
)
figures.table(lesson.remedy_rows(fixes, budget))

st.subheader("The usual formulas, beside the measurement")
st.markdown("\n".join(f"- {line}" for line in lesson.formula_lines(formulas)))

figures.predict_then_reveal(
    key("predict"),
    lesson.PREDICT_QUESTION,
    list(lesson.PREDICT_CHOICES),
    lesson.predict_answers(plan),
    lesson.predict_evidence(plan),
)
figures.answer_card(card.answer_card(plan, budget, found, fixes))
figures.notes_download(
    "Real-scale lab",
    figures.caption("Real-scale lab", settings, "cpu"),
    {
        "Verdict": words,
        "Budgets": figures.markdown_table(lesson.budget_rows(plan, BUDGETS_GIB)),
        "What fits": "\n".join(f"- {lesson.limit_words(x, budget)}" for x in (found.batch, found.seq)),
        "Remedies": figures.markdown_table(lesson.remedy_rows(fixes, budget)),
        "Formulas": "\n".join(f"- {line}" for line in lesson.formula_lines(formulas)),
    },
    "scale",
)
