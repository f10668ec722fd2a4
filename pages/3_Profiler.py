"""Profiler lab: break a real training step into data, copy, forward, backward and optimizer time."""

import dataclasses
from pathlib import Path

import streamlit as st

from explorers.profiler import experiment as lab
from explorers.profiler import figures as charts
from explorers.profiler import lesson
from explorers.profiler.experiment import ProfileOptions
from ui import figures, runs
from ui.fields import BoolField, ChoiceField, IntField
from ui.frame import start_lab

DEFAULT = ProfileOptions()
WIDTHS = (32, 64, 128, 256, 512, 1024, 2048)
BATCHES = (8, 16, 32, 64, 128, 256, 512, 1024)
# Field names are ProfileOptions' own, so the controls' values build the options directly.
FIELDS = (
    ChoiceField("width", DEFAULT.width, WIDTHS),
    IntField("depth", DEFAULT.depth, *lab.DEPTH_RANGE),
    ChoiceField("batch_size", DEFAULT.batch_size, BATCHES),
    IntField("data_cost_ms", DEFAULT.data_cost_ms, *lab.DATA_COST_RANGE),
    IntField("num_workers", DEFAULT.num_workers, *lab.WORKERS_RANGE),
    BoolField("pin_memory", DEFAULT.pin_memory),
    ChoiceField("optimizer", DEFAULT.optimizer, lab.OPTIMIZERS),
    IntField("threads", DEFAULT.threads, *lab.THREADS_RANGE),
    IntField("warmup", DEFAULT.warmup, *lab.WARMUP_RANGE),
    IntField("active", DEFAULT.active, *lab.ACTIVE_RANGE),
    BoolField("synchronize", DEFAULT.synchronize),
    IntField("seed", DEFAULT.seed, *lab.SEED_RANGE),
)
page = start_lab("profiler", FIELDS)
key = page.key
cuda = page.device == "cuda"

with page.controls():
    row = st.columns(6)
    row[0].select_slider("Model width", WIDTHS, key=key("width"))
    row[1].slider("Depth (layers)", *lab.DEPTH_RANGE, key=key("depth"))
    row[2].select_slider("Batch size", BATCHES, key=key("batch_size"))
    row[3].slider(
        "Data cost per batch (ms)",
        *lab.DATA_COST_RANGE,
        key=key("data_cost_ms"),
        help="Simulated augmentation: the collate function sleeps this long per batch.",
    )
    row[4].slider("DataLoader workers", *lab.WORKERS_RANGE, key=key("num_workers"))
    row[5].selectbox("Optimizer", lab.OPTIMIZERS, key=key("optimizer"))
    row = st.columns(6)
    row[0].slider("CPU threads", *lab.THREADS_RANGE, key=key("threads"))
    row[1].slider("Warm-up steps", *lab.WARMUP_RANGE, key=key("warmup"))
    row[2].slider("Active steps", *lab.ACTIVE_RANGE, key=key("active"))
    row[3].toggle(
        "pin_memory", key=key("pin_memory"), disabled=not cuda, help="Pinned memory only matters for GPU copies."
    )
    row[4].toggle(
        "synchronize per phase",
        key=key("synchronize"),
        disabled=not cuda,
        help="On CUDA, without synchronize, GPU time is charged to whichever phase waits for it.",
    )
    row[5].number_input("Seed", *lab.SEED_RANGE, key=key("seed"), step=1)
page.sync_url()


def options_now() -> ProfileOptions:
    return ProfileOptions(**page.values(), repeat=st.session_state.get(key("repeat"), 0))


def profile(options: ProfileOptions) -> lab.ProfileResult:
    """One measured run per option set, shared by every session (and redone on "profile again")."""
    return runs.run(lab.profile, options, label="Profiling")


def apply(change: ProfileOptions) -> None:
    """Remember the settings before the change, then move the controls to the changed ones."""
    st.session_state[key("before")] = options_now()
    for field in FIELDS:
        page.set(field.name, getattr(change, field.name))


options = options_now()
result = profile(options)


def shown(options: ProfileOptions) -> dict:
    """The settings a caption states (the device has its own line; the rest are GPU-only or bookkeeping)."""
    hidden = ("device", "pin_memory", "synchronize", "repeat")
    return {k: v for k, v in dataclasses.asdict(options).items() if k not in hidden}


settings = shown(options)

verdict, change = st.columns([3, 2])
verdict.markdown(f"### Verdict: {result.verdict}\n{result.evidence}")
suggested = lesson.suggestion(options, result)
if suggested:
    change.markdown("**One change to try**")
    change.button(f"Apply: {suggested[0]}", key="apply", on_click=apply, args=(suggested[1],), type="primary")
change.button(
    "Profile again",
    key="again",
    icon=":material/refresh:",
    on_click=lambda: st.session_state.update({key("repeat"): options.repeat + 1}),
)

before = st.session_state.get(key("before"))
if before is not None and before != options:
    left, right = st.columns(2)
    before_result = profile(before)
    with left:
        figures.plotly(
            charts.phases_figure(before_result, "Before the change"),
            figures.caption("Before", shown(before), page.device),
            "profiler-before",
        )
    with right:
        figures.plotly(
            charts.phases_figure(result, "After the change"),
            figures.caption("After", settings, page.device),
            "profiler-after",
        )
    st.success(
        f"Mean step: {before_result.mean_wall_ms:.1f} ms before, {result.mean_wall_ms:.1f} ms after "
        f"({before_result.mean_wall_ms / result.mean_wall_ms:.2f}× as fast)."
    )
else:
    figures.plotly(
        charts.phases_figure(result), figures.caption("Phases per step", settings, page.device), "profiler-phases"
    )
figures.plotly(
    charts.timeline_figure(result), figures.caption("Phase timeline", settings, page.device), "profiler-timeline"
)

ops, naive = st.columns([3, 2], gap="large")
with ops:
    st.subheader("Top operators (self time)")
    st.dataframe(
        charts.top_ops_table(result),
        hide_index=True,
        column_config={
            "self ms": st.column_config.NumberColumn(format="%.2f"),
            "total ms": st.column_config.NumberColumn(format="%.2f"),
        },
    )
with naive:
    st.subheader("Profiler versus a stopwatch")
    st.dataframe(charts.timing_table(result), hide_index=True)
    st.caption(f"The profiler made these steps {result.overhead_ratio:.2f}× as long as the same steps without it.")
    trace = Path(result.trace_path)
    st.download_button(
        "⬇ Chrome trace (open in Perfetto)",
        lambda: trace.read_bytes(),
        trace.name,
        mime="application/json",
        on_click="ignore",
        key="trace",
        disabled=not trace.exists(),
    )

lines = lesson.explain(options, result)
figures.why_panel(lines)
choice_key = key("predict")
figures.predict_then_reveal(
    choice_key,
    "Add a data cost of 20 ms per batch (no workers). Which bar grows?",
    ["forward", "backward", "optimizer", "data"],
    "data",
    ""
    if st.session_state.get(choice_key) is None
    else lesson.data_cost_evidence(
        profile(dataclasses.replace(options, data_cost_ms=20, num_workers=0)), options, result
    ),
)
figures.notes_download(
    "Profiler lab",
    figures.caption("Profiler lab", settings, page.device),
    {
        "What happened": "\n".join(f"- {line}" for line in lines),
        "Top operators": figures.markdown_table(charts.top_ops_table(result).round(3).to_dict("records")),
    },
    "profiler",
)
