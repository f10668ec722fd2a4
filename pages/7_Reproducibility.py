"""Reproducibility lab: the same job in fresh processes, compared bit for bit; resume from a checkpoint; manifests."""

import dataclasses

import streamlit as st

from explorers import uploads
from explorers.reproducibility import card, experiment, job, lesson, manifest
from explorers.reproducibility import figures as charts
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

DEFAULT = experiment.CompareOptions()
RESUME = experiment.ResumeOptions()
FIELDS = (
    BoolField("torch", DEFAULT.seed_torch, option="seed_torch", label="Seed torch"),
    BoolField("numpy", DEFAULT.seed_numpy, option="seed_numpy", label="Seed numpy"),
    BoolField("random", DEFAULT.seed_python, option="seed_python", label="Seed random"),
    BoolField("seed_workers", DEFAULT.seed_workers, label="Seed workers"),
    BoolField("deterministic", DEFAULT.deterministic, label="Deterministic"),
    IntField("runs", DEFAULT.runs, *experiment.RUNS_RANGE, label="Runs"),
    IntField("workers", DEFAULT.num_workers, *job.WORKERS_RANGE, option="num_workers", label="DataLoader workers"),
    IntField("steps", DEFAULT.steps, *job.STEPS_RANGE, label="Steps"),
    IntField("seed", DEFAULT.seed, *job.SEED_RANGE, label="Seed", widget="number"),
    ChoiceField(
        "augmentation",
        DEFAULT.augmentation,
        tuple(job.AUGMENTATIONS),
        label="Augmentation draws from",
        format=job.AUGMENTATIONS.get,
    ),
    IntField("trial", DEFAULT.trial, *experiment.TRIAL_RANGE),  # moved by "Run again"
    IntField(
        "checkpoint",
        RESUME.checkpoint_at,
        1,
        job.STEPS_RANGE[1] - 1,
        option="checkpoint_at",
        label=lesson.CHECKPOINT_LABEL,
    ),
    BoolField(
        "keep_optimizer", RESUME.keep_optimizer_state, option="keep_optimizer_state", label="Keep optimizer state"
    ),
    BoolField("keep_rng", RESUME.keep_rng_state, option="keep_rng_state", label="Keep RNG state"),
    BoolField("keep_sampler", RESUME.keep_sampler_state, option="keep_sampler_state", label="Keep sampler state"),
)
SOURCE_TOGGLES = [f.name for f in FIELDS if f.attribute in job.SOURCES]
KEEP_TOGGLES = [f.name for f in FIELDS if f.attribute in experiment.KEPT]

page = start_lab("reproducibility", FIELDS)
key = page.key


def run_again() -> None:
    page.set("trial", min(page.value("trial") + 1, experiment.TRIAL_RANGE[1]))


bench, stage = page.workbench()
with bench:  # the sources are what a presenter toggles
    st.markdown("**Seed each source of randomness?**")
    toggles = st.columns(1 if page.presenting else 2)  # presenting, two to a row cut their labels at 1280 px
    for index, name in enumerate(SOURCE_TOGGLES):
        page.widget(name, toggles[index % len(toggles)])
    toggles[-1].button("Run again", icon=":material/refresh:", on_click=run_again, help="New processes, same settings")
with bench, page.controls():
    left, right = st.columns(2)
    for name, column in (("runs", left), ("workers", right), ("steps", left), ("seed", right)):
        page.widget(name, column)
    page.widget("augmentation")
steps = page.value("steps")
if page.value("checkpoint") > steps - 1:  # the resume slider's range follows the steps
    page.set("checkpoint", steps - 1)

options = page.options(experiment.CompareOptions)
settings = charts.caption_settings(options)

comparison = runs.run(experiment.compare_runs, options, label="Running the job in fresh processes", long=True)
kind, text = lesson.badge(comparison)
with stage:
    {"equal": st.success, "differs": st.error}.get(kind, st.warning)(f"**{text}**")
    figures.plotly(
        charts.loss_figure(comparison), figures.caption("Loss per step", settings, "cpu"), "reproducibility-losses"
    )
if page.device != "cpu":
    st.info(lesson.CPU_ONLY)

figures.plotly(
    charts.difference_figure(comparison),
    figures.caption("Loss difference from run 1", settings, "cpu"),
    "reproducibility-differences",
)
# the tables take the page's width: beside the chart, their columns were cut off at 1280 px
st.subheader("Which source differed")
figures.table(charts.components_table(comparison))
figures.table(charts.runs_table(comparison))
if options.augmentation == "generator_in_init":
    st.caption(lesson.DRAWS_CAPTION)
    figures.table(charts.draws_table(comparison))

st.subheader("Resume from a checkpoint")
st.caption(lesson.resume_caption(steps, page.value("checkpoint")))
keeps, checkpoint = st.columns([2, 3], gap="large")
with keeps:
    for name in KEEP_TOGGLES:
        page.widget(name)
with checkpoint:
    if steps > 2:
        page.widget("checkpoint", high=steps - 1)
    else:
        st.caption(lesson.SHORT_RUN_CHECKPOINT)
resume_options = page.options(experiment.ResumeOptions, total_steps=steps)
page.sync_url()
resumed = runs.run(
    experiment.resume_study, resume_options, label="Resuming from a checkpoint in fresh processes", long=True
)
resume_settings = {"steps": steps, "checkpoint": resume_options.checkpoint_at, "seed": options.seed}
figures.plotly(  # full width: five curves need a legend on one row
    charts.resume_figure(resumed),
    figures.caption("Straight through vs resumed", resume_settings, "cpu"),
    "reproducibility-resume",
)
(st.success if resumed.equal else st.error)(lesson.resume_line(resumed, resumed.chosen))
figures.table(charts.resume_table(resumed))

st.subheader("Run manifest")
manifests = [run.manifest for run in comparison.runs]
st.download_button(
    "⬇ Manifest of run 1 (.json)",
    manifest.to_json(manifests[0]),
    "reproducibility-manifest.json",
    mime="application/json",
    on_click="ignore",
    key="reproducibility-manifest",
)
with st.expander("Run 1's manifest"):
    st.json(manifests[0], expanded=2)
st.markdown(lesson.COMPARE_MANIFESTS)
sides = []
for column, label, default in zip(st.columns(2), ("Left", "Right"), (manifests[0], manifests[-1]), strict=True):
    upload = column.file_uploader(
        f"{label} manifest (.json)",
        type=["json"],
        key=key(f"manifest_{label.lower()}"),
        max_upload_size=manifest.MAX_UPLOAD_MB,
    )
    if upload is None:
        sides.append(default)
        continue
    try:
        sides.append(manifest.parse(upload.getvalue()))
    except ValueError as error:
        column.error(f"**{label} manifest {uploads.code(upload.name)}:** {error}", icon=":material/error:")
        sides.append(None)
if None not in sides:
    found = manifest.differences(*sides)
    if found:
        st.markdown(lesson.fields_differ([d.field for d in found]))
        figures.table(charts.manifest_table(found))
    else:
        st.success(lesson.MANIFESTS_IDENTICAL)

lines = lesson.explain(comparison)
resume_sentences = lesson.resume_lines(resumed)
figures.why_panel(lines + resume_sentences)
predict_key = key("predict")
answer = evidence = ""  # the runs behind the answer start once the reader has committed to one
torch_only = experiment.CompareOptions(
    seed_numpy=False, seed_python=False, seed_workers=False, deterministic=False, steps=steps, seed=options.seed
)
if st.session_state.get(predict_key) is not None:
    with_workers, main_process = runs.run_all(
        [
            (experiment.compare_runs, torch_only),
            (experiment.compare_runs, dataclasses.replace(torch_only, num_workers=0)),
        ],
        label="Running the prediction's comparisons",
        long=True,
    )
    answer, evidence = lesson.predict_evidence(with_workers, main_process)
figures.predict_then_reveal(
    predict_key,
    lesson.predict_question(torch_only),
    lesson.PREDICT_CHOICES,
    answer,
    evidence,
)
figures.answer_card(card.answer_card(comparison, resumed))
figures.notes_download(
    "Reproducibility lab",
    figures.caption("Reproducibility lab", settings, "cpu"),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Resume": "\n".join(f"- {line}" for line in resume_sentences),
        "Sources": figures.markdown_table(charts.components_table(comparison).to_dict("records")),
        "Runs": figures.markdown_table(charts.runs_table(comparison).to_dict("records")),
        "Resumed runs": figures.markdown_table(charts.resume_table(resumed).to_dict("records")),
        "Manifest of run 1": figures.markdown_table(
            [{"field": field, "value": value} for field, value in manifest.flatten(manifests[0]).items()]
        ),
    },
    "reproducibility",
)
