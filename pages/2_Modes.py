"""Modes lab: behaviour mode (train/eval) and grad mode (enable_grad/no_grad/inference_mode) are independent."""

import streamlit as st

from explorers import saved
from explorers.modes import card, lesson
from explorers.modes import experiment as modes
from explorers.modes import figures as charts
from explorers.modes.experiment import ModesOptions
from ui import figures, runs
from ui.fields import FloatField, IntField
from ui.frame import start_lab

DEFAULT = ModesOptions()
FIELDS = (
    FloatField("p", DEFAULT.dropout_p, *modes.P_RANGE),
    IntField("width", DEFAULT.width, *modes.WIDTH_RANGE),
    IntField("batch", DEFAULT.batch_size, *modes.BATCH_RANGE),
    FloatField("momentum", DEFAULT.momentum, *modes.MOMENTUM_RANGE),
    IntField("repeats", DEFAULT.repeats, *modes.REPEATS_RANGE),
    IntField("seed", DEFAULT.seed, *modes.SEED_RANGE),
)

page = start_lab("modes", FIELDS)
key = page.key
bench, stage = page.workbench(beside=False)  # the six-column grid needs the full width
with bench, page.controls():
    p, width, batch = st.columns(3)
    p.slider("Dropout p", *modes.P_RANGE, step=0.05, key=key("p"))
    width.slider("Width", *modes.WIDTH_RANGE, key=key("width"))
    batch.slider("Batch size", *modes.BATCH_RANGE, key=key("batch"))
    momentum, repeats, seed = st.columns(3)
    momentum.slider("BatchNorm momentum", *modes.MOMENTUM_RANGE, step=0.01, key=key("momentum"))
    repeats.slider("Validation repeats", *modes.REPEATS_RANGE, key=key("repeats"))
    seed.number_input("Seed", *modes.SEED_RANGE, key=key("seed"), step=1)
page.sync_url()

options = ModesOptions(
    dropout_p=page.value("p"),
    width=page.value("width"),
    batch_size=page.value("batch"),
    momentum=page.value("momentum"),
    repeats=page.value("repeats"),
    seed=page.value("seed"),
    device=page.device,
)
settings = {
    "model": modes.model_label(options),
    "dropout p": options.dropout_p,
    "width": options.width,
    "batch": options.batch_size,
    "BN momentum": options.momentum,
    "seed": options.seed,
}
# Both run at once on the engine's workers; the grid (the main figure) is started first.
grid, validation = runs.run_all(
    [(modes.lab_grid, modes.grid_options(options)), (modes.misleading_validation, options)],
    label="Running the modes",
)

with stage:
    st.subheader("Six combinations, one forward each")
    figures.plotly(charts.grid_figure(grid), figures.caption("Mode grid", settings, page.device), "modes-grid")
    st.caption(lesson.grid_caption(saved.DEFINITION))
    columns = st.columns(3)
    for index, cell in enumerate(grid):
        with columns[index % 3].expander(f"Evidence: {charts.cell_label(cell)}"):
            st.markdown(lesson.cell_evidence(cell))

memory, validation_column = st.columns(2, gap="large")
with memory:
    st.subheader("What each grad mode keeps for backward")
    st.caption(saved.DEFINITION)
    figures.plotly(
        charts.saved_bytes_figure(grid), figures.caption("Saved bytes", settings, page.device), "modes-saved"
    )
with validation_column:
    st.subheader("Misleading validation")
    figures.plotly(
        charts.validation_figure(validation),
        figures.caption("Validation accuracy", {**settings, "repeats": options.repeats}, page.device),
        "modes-validation",
    )

lines = lesson.explain(grid, validation)
figures.why_panel(lines)
cell = grid[("train", "no_grad")]
figures.predict_then_reveal(
    key("predict"),
    lesson.PREDICT_QUESTION,
    ["Yes", "No"],
    "Yes" if cell.bn_running_stats_changed else "No",
    lesson.predict_evidence(cell),
)
figures.answer_card(card.answer_card(grid, validation))
figures.notes_download(
    "Modes lab",
    figures.caption("Modes lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Grid": figures.markdown_table(charts.grid_rows(grid)),
        "Saved bytes": saved.DEFINITION,
    },
    "modes",
)
