"""The Serving lab's figures and tables, drawn from a comparison (no torch runs here).

The stage view is a row of three boxes, preprocess to postprocess, each coloured by what the
golden replay found: green matches, red differs on its own, orange only inherits an earlier
difference, grey never ran. Drift is on a log axis: PSI runs from about 0.001 (sampling noise)
to several units.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from explorers.serving.actions import number
from explorers.serving.drift import PSI_FLAG, PSI_MODERATE
from explorers.serving.experiment import Comparison, StageReport
from explorers.serving.pipeline import STAGES

TITLE_SIZE = 19
STATUS_FILL = {"matches": "#c7e9c0", "differs here": "#f4a3a3", "inherited": "#ffd8a8", "not reached": "#e0e0e0"}
STATUS_LINE = {"matches": "#2ca02c", "differs here": "#d62728", "inherited": "#ff9f1c", "not reached": "#888888"}
BOX_TEXT_SIZE = 14
BOX_WIDTH = 0.88  # of a stage's width: on a phone (a stage about 115 px) a box holds a 14-character line


def _layout(title: str, height: int, bottom: int, side: int = 20, **parts) -> dict:
    """The whole layout as one dict: plotly validates a figure once at construction, not per update call.

    `bottom` is the room under the plot for what the figure draws there (legend, ticks, axis
    title); ui.figures puts the caption below it.
    """
    return {
        "title": {"text": title, "font": {"size": TITLE_SIZE}},
        "height": height,
        "margin": {"t": 60, "l": side, "r": side, "b": bottom},
        "legend": {"orientation": "h", "y": -0.05, "x": 0},
        **parts,
    }


def _flips(count: int) -> str:
    return f"{count} label{'' if count == 1 else 's'} flip"


def _stage_text(report: StageReport, input_differs: bool) -> str:
    """The box's lines: what the stage gave in the pipeline and, when its input differed, fed the recorded input."""
    lines = [f"<b>{report.stage}</b>", report.status]
    if report.error:
        lines.append(f"raised {report.error.split(':')[0]}")
    elif report.reached:
        lines.append(f"max |Δ| {number(report.largest)}")
    if report.stage == "postprocess" and report.reached:
        lines.append(_flips(report.flipped))
    if input_differs and not report.matches:  # a line each: on a phone a box holds about 14 characters
        lines += ["alone:", "raised" if report.isolated_error else number(report.isolated)]
        if report.stage == "postprocess":
            lines.append(_flips(report.isolated_flipped))
    return "<br>".join(lines)


def stage_figure(c: Comparison) -> go.Figure:
    """preprocess → model → postprocess for the golden requests, each stage box coloured by its status.

    The boxes' text is BOX_TEXT_SIZE (ui.figures grows it with the page when presenting). Shapes and annotations
    go in as one layout dict, so plotly validates the figure once rather than once per add_* call.
    """
    boxes = []
    for i, stage in enumerate(STAGES):
        report = c.reports[stage]
        input_differs = any(not c.reports[earlier].matches for earlier in STAGES[:i])
        boxes.append((_stage_text(report, input_differs), STATUS_FILL[report.status], STATUS_LINE[report.status]))
    shapes, annotations = [], []
    for x, (text, fill, line) in enumerate(boxes):
        width = 4 if line == STATUS_LINE["differs here"] else 2
        shapes.append(
            {
                "type": "rect",
                "x0": x - BOX_WIDTH / 2,
                "x1": x + BOX_WIDTH / 2,
                "y0": 0.08,
                "y1": 0.92,
                "fillcolor": fill,
                "line": {"color": line, "width": width},
            }
        )
        annotations.append({"x": x, "y": 0.5, "text": text, "showarrow": False, "font": {"size": BOX_TEXT_SIZE}})
        if x:
            annotations.append(
                {
                    "x": x - BOX_WIDTH / 2,
                    "y": 0.5,
                    "ax": x - 1 + BOX_WIDTH / 2,
                    "ay": 0.5,
                    "axref": "x",
                    "ayref": "y",
                    "text": "",
                    "showarrow": True,
                    "arrowhead": 2,
                    "arrowsize": 1.2,
                    "arrowwidth": 2,
                    "arrowcolor": "#555",
                }
            )
    legend = [  # one entry per colour on screen
        {
            "type": "scatter",
            "x": [None],
            "y": [None],
            "mode": "markers",
            "name": status,
            "marker": {
                "symbol": "square",
                "size": 14,
                "color": STATUS_FILL[status],
                "line": {"color": STATUS_LINE[status], "width": 2},
            },
        }
        for status in dict.fromkeys(c.reports[s].status for s in STAGES)
    ]
    first = c.first_divergent_stage
    where = "every stage matches" if first is None else f"first difference at {first}"
    title = f"{c.golden_size} golden requests: {where}"
    return go.Figure(
        data=legend,
        layout=_layout(
            title,
            300,
            50,  # the legend
            side=4,  # no axes beside the boxes: their room goes to the boxes
            shapes=shapes,
            annotations=annotations,
            xaxis={"visible": False, "range": [-0.5, len(boxes) - 0.5]},
            yaxis={"visible": False, "range": [0, 1]},
        ),
    )


def drift_figure(c: Comparison) -> go.Figure:
    """PSI per feature, log axis, with the moderate (0.1) and flag (0.25) lines; flagged features in red."""
    drift = list(c.drift.values())
    floor = 1e-4
    top = max(max(d.psi for d in drift), PSI_FLAG)
    lines = [(PSI_MODERATE, "dot", "moderate"), (PSI_FLAG, "dash", "flag")]
    return go.Figure(
        data=[
            {
                "type": "bar",
                "y": [d.feature for d in drift],
                "x": [max(d.psi, floor) for d in drift],
                "orientation": "h",
                "marker": {"color": ["#d62728" if d.flagged else "#1f77b4" for d in drift]},
                "text": [f"{d.psi:.3f}" for d in drift],
                "textposition": "outside",
                "showlegend": False,
            }
        ],
        layout=_layout(
            "Input drift per feature (PSI)",
            380,
            85,  # tick labels and the axis title
            shapes=[
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": value,
                    "x1": value,
                    "y0": 0,
                    "y1": 1,
                    "line": {"dash": dash, "color": "#555"},
                }
                for value, dash, _ in lines
            ],
            annotations=[  # annotations on a log axis take log10 of the position; shapes take the value
                {
                    "xref": "x",
                    "yref": "paper",
                    "x": math.log10(value),
                    "y": 1,
                    "yanchor": "bottom",
                    "xanchor": "right" if value < PSI_FLAG else "left",  # the two lines sit close on a log axis
                    "text": f"{label} {value:g}",
                    "showarrow": False,
                }
                for value, _, label in lines
            ],
            xaxis={
                "type": "log",
                "title": {"text": "PSI, live vs training (log)"},
                "range": [-3.3, math.log10(top) + 0.6],
                "dtick": 1,  # decades only: the 2s and 5s between them ran into each other on a narrow chart
            },
            yaxis={"autorange": "reversed"},
        ),
    )


ANSWERS = {0: "stays", 1: "churns", None: "no answer"}


def golden_table(c: Comparison) -> pd.DataFrame:
    """One row per golden request, largest difference first; inf where serving gave no output."""
    return pd.DataFrame(
        [
            {
                "#": e.position + 1,
                "validation row": e.validation_index,
                "churned": bool(e.label),
                "near threshold": e.near_threshold,
                "training says": ANSWERS[e.reference_prediction],
                "serving says": ANSWERS[e.serving_prediction],
                **{f"Δ {stage}": e.differences[stage] for stage in STAGES},
            }
            for e in c.examples
        ]
    )


def contract_table(c: Comparison) -> pd.DataFrame:
    """The input-to-output contract, as training recorded it and as serving ran it."""
    recorded, serving = c.recorded, c.serving

    def normalisation(contract) -> str:
        return "none" if contract.means is None else "(x - mean) / std, training statistics"

    def load(contract) -> str:
        return f"strict={contract.strict}, last layer {contract.head}"  # a plain table: backticks would show

    rows = [
        ("feature order", ", ".join(recorded.features), ", ".join(serving.features)),
        ("normalisation", normalisation(recorded), normalisation(serving)),
        ("dtype", recorded.dtype, serving.dtype),
        ("mode", recorded.mode, serving.mode),
        ("requests per forward", str(recorded.requests_per_forward), str(serving.requests_per_forward)),
        ("checkpoint load", load(recorded), load(serving)),
        ("missing / unexpected keys", "none", ", ".join((*c.missing_keys, *c.unexpected_keys)) or "none"),
        ("postprocess", recorded.postprocess, serving.postprocess),
        ("threshold", f"{recorded.threshold:g}", f"{serving.threshold:g}"),
    ]
    return pd.DataFrame([{"link": name, "training": a, "serving": b, "same": a == b} for name, a, b in rows])


def accuracy_rows(c: Comparison) -> list[dict]:
    return [
        {"pipeline": "training, on validation", "accuracy": c.validation_accuracy},
        {"pipeline": "recorded pipeline, live traffic", "accuracy": c.reference_accuracy},
        {"pipeline": "serving pipeline, live traffic", "accuracy": c.serving_accuracy},
    ]


def drift_rows(c: Comparison) -> list[dict]:
    return [
        {
            "feature": d.feature,
            "PSI": d.psi,
            "flagged": d.flagged,
            "training mean": d.training_mean,
            "live mean": d.live_mean,
        }
        for d in c.drift.values()
    ]
