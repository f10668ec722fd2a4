"""The GPU evidence lab's figures: the time split with its idle split, and one step's timeline (no HTA here)."""

from __future__ import annotations

import plotly.graph_objects as go

from explorers import chartroom
from explorers.evidence.reading import Reading

KIND_COLOURS = {  # timeline span kind -> colour
    "cpu op": "#7f7f7f",
    "runtime": "#bcbd22",
    "blocking": "#d62728",
    "computation": "#1f77b4",
    "memory": "#8c564b",
    "communication": "#ff7f0e",
}
SPLIT_COLOURS = ("#1f77b4", "#ff7f0e", "#c7c7c7")
IDLE_COLOURS = ("#d62728", "#9467bd", "#e7e7e7")
ROW_CHARS = 22
SHORT = {
    "GPU computing": "computing",
    "GPU copying, setting or communicating": "copies, comms",
    "GPU idle": "idle",
    "Host wait": "host wait",
    "Kernel wait (launch overhead)": "kernel wait",
    "Other (held back on the GPU)": "other",
}


def split_rows(reading: Reading) -> list[tuple[str, str, float, float]]:
    """(group, bar, milliseconds, percent of its whole): the time split over HTA's window, then the idle split."""
    window = reading.window_us or 1.0
    split = [
        ("Time split", "GPU computing", reading.compute_us),
        ("Time split", "GPU copying, setting or communicating", reading.non_compute_us),
        ("Time split", "GPU idle", reading.idle_us),
    ]
    idle_total = reading.host_wait_us + reading.kernel_wait_us + reading.other_wait_us or 1.0
    idle = [
        ("Idle split", "Host wait", reading.host_wait_us),
        ("Idle split", "Kernel wait (launch overhead)", reading.kernel_wait_us),
        ("Idle split", "Other (held back on the GPU)", reading.other_wait_us),
    ]
    return [(g, b, us / 1000, 100 * us / window) for g, b, us in split] + [
        (g, b, us / 1000, 100 * us / idle_total) for g, b, us in idle
    ]


def split_figure(reading: Reading, title: str) -> go.Figure:
    """Two stacked horizontal bars of percentages: where the GPU's window went, and why its busiest stream sat idle."""
    figure = go.Figure()
    rows = split_rows(reading)
    stream = f"Stream {reading.idle_stream} idle" if reading.idle_stream is not None else "Idle"
    for (group, bar, ms, percent), colour in zip(rows, SPLIT_COLOURS + IDLE_COLOURS, strict=True):
        figure.add_bar(
            y=["GPU window" if group == "Time split" else stream],
            x=[percent],
            name=SHORT[bar],
            orientation="h",
            marker_color=colour,
            text=[f"{percent:.0f}%" if percent >= 10 else ""],
            textposition="inside",
            textangle=0,
            insidetextanchor="middle",
            hovertemplate=f"{bar}: {ms:,.2f} ms ({percent:.1f}%)<extra></extra>",
        )
    # a part too narrow for its number shows none (plotly would shrink or turn it); the legend names every colour
    figure.update_layout(barmode="stack", showlegend=True, uniformtext={"minsize": 12, "mode": "hide"})
    figure.update_xaxes(title_text="% of each bar's whole", range=[0, 100])
    figure.update_yaxes(autorange="reversed")
    return chartroom.style(figure, title, height=230)


def timeline_figure(reading: Reading, title: str) -> go.Figure:
    """One step: a row per CPU thread's ops and runtime calls and per GPU stream, a bar per span, by kind."""
    figure = go.Figure()
    rows = sorted({s.row for s in reading.timeline}, key=lambda r: (r.startswith("GPU"), r))  # threads, then streams
    for kind, colour in KIND_COLOURS.items():
        spans = [s for s in reading.timeline if s.kind == kind]
        if not spans:
            continue
        figure.add_bar(
            y=[_row(s.row) for s in spans],
            x=[max(s.dur_us, reading.timeline_us / 2000) / 1000 for s in spans],  # a span too short to see shows
            base=[s.start_us / 1000 for s in spans],
            orientation="h",
            name=kind,
            marker_color=colour,
            customdata=[[s.name[:80], s.dur_us / 1000] for s in spans],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:.3f} ms<extra></extra>",
        )
    figure.update_layout(barmode="overlay", showlegend=True)
    figure.update_xaxes(title_text="ms from the timeline's start", range=[0, reading.timeline_us / 1000])
    figure.update_yaxes(categoryorder="array", categoryarray=[_row(r) for r in reversed(rows)])
    return chartroom.style(figure, title, height=max(300, 40 + 34 * len(rows)))


def _row(row: str) -> str:
    return row if len(row) <= ROW_CHARS else row[: ROW_CHARS - 1] + "…"


def labels_figure(labels: tuple[tuple[str, float], ...], title: str) -> go.Figure:
    """A trace with no GPU work: each record_function label's milliseconds per step, longest first."""
    shown = labels[:12]
    figure = go.Figure(
        go.Bar(
            y=[_row(name) for name, _ in shown],
            x=[ms for _, ms in shown],
            orientation="h",
            marker_color="#7f7f7f",
            customdata=[name[:80] for name, _ in shown],
            hovertemplate="%{customdata}: %{x:.3f} ms<extra></extra>",
        )
    )
    figure.update_layout(showlegend=False)
    figure.update_xaxes(title_text="ms per step")
    figure.update_yaxes(autorange="reversed")
    return chartroom.style(figure, title, height=max(260, 60 + 30 * len(shown)))
