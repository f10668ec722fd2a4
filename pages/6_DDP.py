"""DDP lab: real DistributedDataParallel processes, their shards, the all-reduce, and what uneven inputs do."""

import dataclasses
from pathlib import Path

import streamlit as st

from explorers import ddp, environment, uploads
from explorers.ddp import card, lesson, schema
from explorers.ddp import figures as charts
from explorers.ddp import options as knobs
from explorers.ddp.experiment import run_ddp
from explorers.ddp.results import MAX_FILE_BYTES, MAX_UPLOAD_MB, parameter_layout
from explorers.ddp.settings import RUN_TIMEOUT_S
from explorers.units import format_bytes
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

# The page opens on the predict question's case: 10 samples on 4 ranks, so the sampler pads.
DEFAULT = dataclasses.replace(ddp.DDPOptions(), world_size=4, per_rank_batch=2)
SAMPLE = Path(__file__).resolve().parents[1] / "assets" / "ddp" / "torchrun-2-nodes.json"
SHARDING_NAMES = {"sampler": "Sampler", "strided": "Own slice"}  # DistributedSampler, or rank::W without padding
LAUNCHER_NAMES = {"processes": "forkserver", "torchrun": "torchrun"}
ENGINE_TIMEOUT_S = RUN_TIMEOUT_S + 30  # the launcher's own limit ends a run first, with its records
GRADIENT_BYTES = 4 * sum(p["numel"] for p in parameter_layout())  # float32 gradients of the lab's model
# Field names are DDPOptions' own.
FIELDS = (
    IntField(
        "world_size", DEFAULT.world_size, *knobs.WORLD_SIZE_RANGE, label="World size", help=lesson.HELP["world_size"]
    ),
    IntField("dataset_size", DEFAULT.dataset_size, *knobs.DATASET_SIZE_RANGE, label="Dataset size"),
    IntField("per_rank_batch", DEFAULT.per_rank_batch, *knobs.PER_RANK_BATCH_RANGE, label="Per-rank batch"),
    IntField(
        "accumulation",
        DEFAULT.accumulation,
        *knobs.ACCUMULATION_RANGE,
        label="Accumulation (k)",
        help=lesson.HELP["accumulation"],
    ),
    IntField("epochs", DEFAULT.epochs, *knobs.EPOCHS_RANGE, label="Epochs"),
    IntField("steps", DEFAULT.steps, *knobs.STEPS_RANGE, label="Max steps", help=lesson.HELP["steps"]),
    ChoiceField(
        "sharding",
        DEFAULT.sharding,
        knobs.SHARDINGS,
        label="Sharding",
        format=SHARDING_NAMES.get,
        help=lesson.HELP["sharding"],
    ),
    ChoiceField(
        "bucket_cap_mb",
        DEFAULT.bucket_cap_mb,
        knobs.BUCKET_CAPS_MB,
        label="Bucket cap (MB)",
        widget="select_slider",
        format=knobs.bucket_label,
        help=lesson.bucket_help(GRADIENT_BYTES),
    ),
    BoolField("shuffle", DEFAULT.shuffle, label="Shuffle", help=lesson.NO_SAMPLER_HELP),
    BoolField("set_epoch", DEFAULT.set_epoch, label="set_epoch", help=lesson.NO_SAMPLER_HELP),
    BoolField("drop_last", DEFAULT.drop_last, label="drop_last", help=lesson.NO_SAMPLER_HELP),
    BoolField("join", DEFAULT.join, label="Join", help=lesson.HELP["join"]),
    ChoiceField(
        "launcher",
        DEFAULT.launcher,
        knobs.LAUNCHERS,
        label="Launcher",
        format=LAUNCHER_NAMES.get,
        help=lesson.HELP["launcher"],
    ),
    IntField("seed", DEFAULT.seed, *knobs.SEED_RANGE, label="Seed", widget="number"),
    # view only: which step's gradients are drawn, and the sample results file from torchrun
    IntField("grad_step", 0, 0, knobs.STEPS_RANGE[1] - 1, option=None, label="Step shown", widget="select_slider"),
    BoolField("sample", False, option=None, label=lesson.sample_label(SAMPLE.name)),
)
SAMPLER_ONLY = ("shuffle", "set_epoch", "drop_last")

page = start_lab("ddp", FIELDS)
key = page.key

bench, stage = page.workbench()
with bench:  # what a presenter changes: how many ranks, how much data
    for name, column in zip(("world_size", "dataset_size"), st.columns(2), strict=True):
        page.widget(name, column)
with bench, page.controls():
    sampler = page.value("sharding") == "sampler"
    rows = (
        ("per_rank_batch", "accumulation"),
        ("epochs", "steps"),
        ("sharding", "bucket_cap_mb"),
        ("shuffle", "set_epoch"),
        ("drop_last", "join"),
        ("launcher", "seed"),
    )
    for pair in rows:
        for name, column in zip(pair, st.columns(2, vertical_alignment="bottom"), strict=True):
            page.widget(name, column, disabled=name in SAMPLER_ONLY and not sampler)
page.sync_url()

device = "cpu"
if page.device == "cuda" and environment.cuda_devices() >= page.value("world_size"):
    device = "cuda"
elif page.device != "cpu":
    st.info(lesson.cpu_fallback_line(environment.cuda_devices(), page.value("world_size")), icon=":material/info:")
options = page.options(ddp.DDPOptions, device=device)
settings = {
    "ranks": options.world_size,
    "samples": options.dataset_size,
    "batch": options.per_rank_batch,
    "k": options.accumulation,
    "sharding": options.sharding,
    "join": options.join,
    "seed": options.seed,
}
run = runs.run(run_ddp, options, label="Starting the ranks and training", timeout_s=ENGINE_TIMEOUT_S)


def show_run(shown: ddp.DDPRun, stem: str, where: str, described: dict) -> None:
    """The topology, and a banner saying how the run ended."""
    finished, text = lesson.banner(shown, where)
    if finished:
        st.success(text, icon=":material/check:")
    else:
        st.error(text, icon=":material/error:")
    figures.graph(
        charts.topology_dot(shown),
        figures.caption(lesson.TOPOLOGY_CAPTION, described, page.device),
        stem,
    )


with stage:
    st.subheader("Processes, shards and the all-reduce")
    show_run(run, "ddp-topology", lesson.STARTED_BY.get(run.launch_method, "from a results file"), settings)

sampler_column, batch_column = st.columns([3, 2], gap="large")
with sampler_column:
    figures.plotly(
        charts.sampler_figure(run), figures.caption("Sampler: index × rank", settings, page.device), "ddp-sampler"
    )
with batch_column:
    st.subheader("Effective batch")
    st.metric(
        f"{options.per_rank_batch} per rank × {run.world_size} ranks × {options.accumulation} (k)",
        f"{options.effective_batch} samples / step",
    )
    st.markdown(lesson.effective_batch_line(run))
    for line in lesson.sampler_lines(run):
        st.markdown(line)

steps = [s.step for s in run.ranks[0].steps] if run.ranks[0].steps else []
gradient_column, loss_column = st.columns(2, gap="large")
with gradient_column:
    if steps:
        if page.value("grad_step") not in steps:
            page.set("grad_step", min(steps, key=lambda s: abs(s - page.value("grad_step"))))
        if len(steps) > 1:
            page.widget("grad_step", choices=steps)
        figures.plotly(
            charts.gradients_figure(run, page.value("grad_step")),
            figures.caption("Local vs averaged gradient", {**settings, "step": page.value("grad_step")}, page.device),
            "ddp-gradients",
        )
    else:
        st.info(lesson.NO_GRADIENTS)
with loss_column:
    figures.plotly(charts.loss_figure(run), figures.caption("Loss per step", settings, page.device), "ddp-loss")

figures.plotly(charts.timeline_figure(run), figures.caption("Per-rank timeline", settings, page.device), "ddp-timeline")

st.subheader("DataParallel or DistributedDataParallel")
comparison = card.comparison_rows(run)
st.markdown(figures.markdown_table(comparison))
st.caption(card.COMPARISON_CAPTION)

st.subheader("Beyond one machine")
st.markdown(lesson.CLUSTER_INTRO)
st.code(lesson.CLUSTER_COMMAND, language="bash")
st.download_button(
    "⬇ This run's results file (.json)",
    run.results_json,
    "ddp-results.json",
    mime="application/json",
    on_click="ignore",
    key="ddp-results-download",
)


def show_loaded(loaded: ddp.DDPRun) -> None:
    nodes = f"{loaded.nodes} torchrun nodes, " if loaded.nodes > 1 else ""
    name = uploads.code(loaded.source)  # the uploader's file name: shown literally, never as markdown
    show_run(loaded, "ddp-loaded-topology", f"{nodes}from {name}", {"file": name})
    figures.plotly(
        charts.timeline_figure(loaded),
        figures.caption("Loaded run: per-rank timeline", {"file": name}, page.device),
        "ddp-loaded-timeline",
    )
    st.markdown("\n".join(f"- {line}" for line in lesson.explain(loaded)))


uploaded = st.file_uploader(
    lesson.upload_label(format_bytes(MAX_FILE_BYTES)), type=["json"], key=key("upload"), max_upload_size=MAX_UPLOAD_MB
)
page.widget("sample")
if uploaded is not None:
    try:
        if uploaded.size > MAX_FILE_BYTES:
            raise schema.ResultsFileError(f"it is {format_bytes(uploaded.size)}, over {format_bytes(MAX_FILE_BYTES)}")
        loaded = schema.parse(uploaded.getvalue(), uploaded.name)
    except schema.ResultsFileError as error:
        st.error(lesson.not_a_results_file(uploads.code(uploaded.name)), icon=":material/error:")
        st.code(str(error), language=None, wrap_lines=True)
    else:
        show_loaded(loaded)
elif page.value("sample"):
    show_loaded(schema.parse(SAMPLE.read_bytes(), SAMPLE.name))

lines = lesson.explain(run)
figures.why_panel(lines)
prediction = card.padding_prediction(run)
if prediction is not None:
    figures.predict_then_reveal(
        key("predict"), prediction.question, prediction.choices, prediction.answer, prediction.evidence
    )
figures.answer_card(card.answer_card(run))
figures.notes_download(
    "DDP lab",
    figures.caption("DDP lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "DataParallel or DDP": figures.markdown_table(comparison),
    },
    "ddp",
)
