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
    FloatField("p", DEFAULT.dropout_p, *modes.P_RANGE, option="dropout_p", label="Dropout p", step=0.05),
    IntField("width", DEFAULT.width, *modes.WIDTH_RANGE, label="Width"),
    IntField("batch", DEFAULT.batch_size, *modes.BATCH_RANGE, option="batch_size", label="Batch size"),
    FloatField("momentum", DEFAULT.momentum, *modes.MOMENTUM_RANGE, label="BatchNorm momentum", step=0.01),
    IntField("repeats", DEFAULT.repeats, *modes.REPEATS_RANGE, label="Validation repeats"),
    IntField("seed", DEFAULT.seed, *modes.SEED_RANGE, label="Seed", widget="number"),
)

page = start_lab("modes", FIELDS)
key = page.key
bench, stage = page.workbench(beside=False)  # the six-column grid needs the full width
with bench, page.controls():
    for row in (("p", "width", "batch"), ("momentum", "repeats", "seed")):
        for name, column in zip(row, st.columns(3), strict=True):
            page.widget(name, column)
page.sync_url()

options = page.options(ModesOptions)
settings = {
    "model": modes.model_label(options),
    "dropout p": options.dropout_p,
    "width": options.width,
    "batch": options.batch_size,
    "BN momentum": options.momentum,
    "seed": options.seed,
}


def draw_grid(index: int, grid, settled: bool) -> None:
    """The main figure as soon as its run arrives: the validation run is still going on the other worker."""
    if index:
        return
    with stage:
        st.subheader("Six combinations, one forward each")
        figures.plotly(charts.grid_figure(grid), figures.caption("Mode grid", settings, page.device), "modes-grid")
        st.caption(lesson.grid_caption(saved.DEFINITION))
        columns = st.columns(3)
        for number, cell in enumerate(grid):
            with columns[number % 3].expander(f"Evidence: {charts.cell_label(cell)}"):
                st.markdown(lesson.cell_evidence(cell))


# Both run at once on the engine's workers; the grid (the main figure) is started first.
grid, validation = runs.run_all(
    [(modes.lab_grid, modes.grid_options(options)), (modes.misleading_validation, options)],
    label="Running the modes",
    on_result=draw_grid,
)

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
