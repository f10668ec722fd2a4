"""The shape trace as a figure: every tensor-valued sub-expression of one run, in the order it was computed.

A bar per sub-expression, as long as its element count (log axis), labelled with its shape and
coloured by what it is to its operands: an input, a view of one (or the same tensor), or a new
tensor. Strides, dtype and contiguity are in the bar's hover and in the table the page draws beside it.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from explorers import chartroom
from explorers.tensors.interpreter import Step

RELATIONS = {  # relation -> (legend name, colour)
    "input": ("input", "#7f7f7f"),
    "view": ("view", "#1f77b4"),  # shares its operand's memory
    "same": ("view", "#1f77b4"),  # the operand itself
    "new": ("new tensor", "#ff7f0e"),
}
LABEL_CHARS = 18  # a phone's third of the width


def step_label(number: int, step: Step) -> str:
    """The step's number and the end of its text, where its own op is (`….tril()`): the start is the step before's."""
    text = step.text if len(step.text) <= LABEL_CHARS else "…" + step.text[-(LABEL_CHARS - 1) :]
    return f"{number}. {text}"


def relation_words(step: Step) -> str:
    if step.relation == "input":
        return "input"
    if step.relation == "new":
        return "new tensor"
    return f"{'the operand itself:' if step.relation == 'same' else 'view of'} {step.of}"


def trace_figure(steps: list[Step] | tuple[Step, ...], title: str) -> go.Figure:
    figure = go.Figure()
    labels = [step_label(n, s) for n, s in enumerate(steps, 1)]
    shown: set[str] = set()
    for label, step in zip(labels, steps, strict=True):
        name, colour = RELATIONS[step.relation]
        elements = math.prod(step.shape)
        figure.add_trace(
            go.Bar(
                y=[label],
                x=[max(elements, 1)],
                orientation="h",
                name=name,
                legendgroup=name,
                showlegend=name not in shown,
                marker_color=colour,
                text=[str(tuple(step.shape))],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=(
                    f"{step.text}<br>shape {tuple(step.shape)}, {step.dtype}<br>strides {tuple(step.strides)}, "
                    f"{'contiguous' if step.contiguous else 'not contiguous'}<br>{relation_words(step)}<extra></extra>"
                ),
            )
        )
        shown.add(name)
    largest = max((math.prod(s.shape) for s in steps), default=1)
    chartroom.style(figure, title, height=160 + 34 * max(len(steps), 1))
    figure.update_layout(
        xaxis={
            "title": "elements, log scale (its shape beside each bar)",
            "type": "log",
            "showticklabels": False,  # on a phone's third of the width even 1, 10, 100 print over each other
            "range": [-0.2, math.log10(max(largest, 1)) + 0.9],
        },  # fmt: skip
        yaxis={"autorange": "reversed", "type": "category", "categoryorder": "array", "categoryarray": labels},
        bargap=0.3,
        showlegend=True,  # one kind of step still needs its colour named (and plotly's own rule counts traces)
    )
    return figure
