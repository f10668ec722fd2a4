"""The DDP lab's figures, drawn from a run's records (no torch, no processes here).

- `topology_dot`: the processes, their replicas and shards (a * marks an index the sampler repeated), and
  the all-reduce between them;
- `sampler_figure`: dataset index × (epoch, rank), when each sample was trained on, repeats marked;
- `gradients_figure`: a few gradient entries, each rank's local value against the averaged one;
- `loss_figure`: DDP's loss per step against one process on the combined batches;
- `timeline_figure`: the whole run per rank (launch, init, training), and `steps_figure`, the training zoomed in.
"""

from __future__ import annotations

import graphviz
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import explorers.ddp.analysis as analysis
from explorers import graphs
from explorers.ddp.results import DDPRun

FONT_SIZE = 16
TITLE_SIZE = 19
RANK_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PHASE_COLOURS = {
    "launch": "#c7c7c7",
    "init": "#9edae5",
    "data": "#bcbd22",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "all-reduce": "#d62728",
    "shadow all-reduce": "#f7b6d2",
    "training": "#dbdb8d",
}
SHOWN_GRADIENT = "2.weight"  # the head's 16 weights: its first entries stand for the rest
SHOWN_ENTRIES = 8
MAX_RANKS_DRAWN = 8  # a cluster file can hold more; the diagram stays readable


def _style(figure: go.Figure, title: str, height: int = 420) -> go.Figure:
    """Title at the top, the legend in one or two rows under it: the caption below the axis needs the bottom."""
    figure.update_layout(
        title={"text": title, "font": {"size": TITLE_SIZE}, "y": 0.99, "yref": "container", "yanchor": "top"},
        font={"size": FONT_SIZE},
        height=height,
        margin={"t": 120, "l": 90, "r": 20, "b": 60},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "font": {"size": 14}},
    )
    return figure


def rank_colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


# --- The topology ------------------------------------------------------------------------------


def _shard_text(shard: tuple[int, ...], repeats: dict) -> str:
    """A shard in at most ~14 characters; an index the sampler repeated carries a *."""
    marked = [f"{i}*" if i in repeats else str(i) for i in shard]
    text = "[" + ", ".join(marked) + "]"
    if len(text) <= 12:
        return text
    return "[" + ", ".join(marked[:2]) + f" …] {len(shard)}"


def topology_dot(run: DDPRun) -> str:
    """Data -> one box per rank (its replica and shard) <-> the all-reduce. Narrow: it sits beside the controls."""
    epochs = analysis.sampler_epochs(run)
    comm = analysis.communication(run)
    options = run.options
    dot = graphviz.Digraph("ddp", graph_attr={"rankdir": "LR", "nodesep": "0.2", "ranksep": "0.3"})
    dot.attr("node", shape="box", style="rounded,filled", fillcolor="#f5f5f5", color="#888", margin="0.08,0.04")
    first = epochs[0] if epochs else None
    extra = ""
    if first is not None and first.padding:
        extra = f"\\npads {first.padding} (*)"
    elif first is not None and first.dropped:
        extra = f"\\ndrops {len(first.dropped)}"
    elif first is not None and len({len(o) for o in first.orders}) > 1:
        extra = "\\nuneven"
    split = "sampler" if options.uses_sampler else "slices"
    dot.node("data", f"{options.dataset_size} samples\\n{split}{extra}", fillcolor="#fff7d6")
    buckets = "/".join(map(str, sorted(set(comm.buckets)))) or "0"
    every = f"every {options.accumulation} mb" if options.accumulation > 1 else "every step"
    dot.node(
        "allreduce",
        f"all-reduce\\n{run.backend}\\n{buckets} bucket\\n{every}",
        fillcolor="#fde0dd",
        color="#d62728",
        penwidth="2",
    )
    nodes = {rank.node: rank.host for rank in run.ranks[:MAX_RANKS_DRAWN]}
    holders = {n: dot for n in nodes}
    if len(nodes) > 1:  # torchrun --nnodes N: one box per node around its ranks
        holders = {}
        for node, host in nodes.items():
            holders[node] = graphviz.Digraph(f"cluster_node{node}")
            holders[node].attr(label=f"node {node} · {host[:10]}", style="dashed", color="#888")
    repeats = first.repeats if first is not None else {}
    for rank in run.ranks[:MAX_RANKS_DRAWN]:
        shard = rank.sampler_orders[0] if rank.sampler_orders else ()
        lines = [f"rank {rank.rank}", _shard_text(shard, repeats)]
        if analysis.shadowed(rank):
            lines.append(f"joined: {analysis.shadowed(rank)} zeros")
        if rank.outcome != "finished":
            lines.append(f"{rank.outcome.upper()} ({rank.phase})")
        colour = "#d62728" if rank.outcome != "finished" else rank_colour(rank.rank)
        holders[rank.node].node(f"rank{rank.rank}", "\\n".join(lines), color=colour, penwidth="2.5")
        dot.edge("data", f"rank{rank.rank}", color="#888")
        dot.edge(f"rank{rank.rank}", "allreduce", dir="both", color="#d62728", penwidth="1.8")
    if len(nodes) > 1:
        for holder in holders.values():
            dot.subgraph(holder)
    if run.world_size > MAX_RANKS_DRAWN:
        dot.node("more", f"… {run.world_size - MAX_RANKS_DRAWN} more", shape="plaintext")
    return graphs.with_font(dot).source


# --- The sampler -------------------------------------------------------------------------------


def sampler_figure(run: DDPRun) -> go.Figure:
    """Rows (epoch, rank), columns dataset index; the colour is the batch that trained on the sample.

    Read off the batches that ran (each rank's micro-steps), not the sampler's list: an index the
    sampler listed but no batch reached before the run's step limit is marked, not coloured.
    """
    epochs = analysis.sampler_epochs(run)
    size = run.options.dataset_size
    rows, z, text = [], [], []
    for e in epochs:
        for rank, order in zip(run.ranks, e.orders, strict=True):
            rows.append(f"epoch {e.epoch} · rank {rank.rank}")
            cells: list[float | None] = [None] * size
            labels = [""] * size
            for index in order:
                labels[index] = "·"  # listed for this rank; replaced below if a batch trained on it
            batches = [m for m in rank.micro_steps if m.epoch == e.epoch]
            for number, entry in enumerate(batches):
                for index in entry.indices:
                    cells[index] = number
                    labels[index] = "2×" if index in e.trained_twice else "✓"  # twice: on two ranks or batches
            for index in e.dropped:
                labels[index] = "–"
            z.append(cells)
            text.append(labels)
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(size)),
            y=rows,
            text=text,
            texttemplate="%{text}",
            colorscale=[[0.0, "#c6dbef"], [1.0, "#08306b"]],
            # each label under its tick: the top one ("1") would meet the bar's title
            colorbar={"title": "batch", "dtick": 1, "ticklabelposition": "outside bottom"},
            hoverongaps=False,
            xgap=2,
            ygap=2,
        )
    )
    figure.update_xaxes(
        title="dataset index (2×: trained twice · ·: listed, not reached)", dtick=1 if size <= 32 else 4
    )
    figure.update_yaxes(autorange="reversed", tickmode="array", tickvals=rows, ticktext=rows)  # every row named
    _style(figure, "Which rank trained on which sample", height=max(300, 130 + 30 * len(rows)))
    return figure.update_layout(margin={"t": 70})  # no legend above


# --- Gradients and loss ------------------------------------------------------------------------


def shown_slice(run: DDPRun) -> tuple[int, int]:
    """Where SHOWN_GRADIENT's first entries sit in the flattened gradient."""
    offset = 0
    for name, numel in run.parameters:
        if name == SHOWN_GRADIENT:
            return offset, offset + min(SHOWN_ENTRIES, numel)
        offset += numel
    return 0, SHOWN_ENTRIES


def gradients_figure(run: DDPRun, step: int) -> go.Figure:
    """For one step: each rank's local gradient entries (bars) and the all-reduced value every rank holds (◆)."""
    start, end = shown_slice(run)
    labels = [f"[{i - start}]" for i in range(start, end)]
    figure = go.Figure()
    synced = None
    for rank in run.ranks[:MAX_RANKS_DRAWN]:
        entry = next((s for s in rank.steps if s.step == step), None)
        if entry is None:
            continue
        figure.add_trace(
            go.Bar(
                x=labels,
                y=list(entry.local[start:end]),
                name=f"rank {rank.rank}",
                marker_color=rank_colour(rank.rank),
            )
        )
        synced = entry.synced[start:end]
    if synced is not None:
        figure.add_trace(
            go.Scatter(
                x=labels,
                y=list(synced),
                mode="markers",
                name="all-reduced",
                marker={"symbol": "diamond", "size": 16, "color": "#222", "line": {"width": 2, "color": "#fff"}},
            )
        )
    figure.update_layout(barmode="group")
    figure.update_xaxes(title=f"{SHOWN_GRADIENT} entry", type="category")
    figure.update_yaxes(title="gradient", zeroline=True)
    return _style(figure, f"Local vs averaged gradient, step {step}")


def loss_figure(run: DDPRun) -> go.Figure:
    """Per step: each rank's loss, their mean (what DDP optimises), and one process on the combined batches."""
    figure = go.Figure()
    steps: dict[int, list[float]] = {}
    for rank in run.ranks[:MAX_RANKS_DRAWN]:
        per_step: dict[int, list[float]] = {}
        for m in rank.micro_steps:
            per_step.setdefault(m.step, []).append(m.loss)
        xs = sorted(per_step)
        ys = [sum(per_step[s]) / len(per_step[s]) for s in xs]
        for s, y in zip(xs, ys, strict=True):
            steps.setdefault(s, []).append(y)
        figure.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines", name="each rank's own", legendgroup="ranks", showlegend=rank.rank == 0,
                line={"width": 1.5, "color": rank_colour(rank.rank)}, opacity=0.6,
            )
        )  # fmt: skip
    xs = sorted(steps)
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[sum(steps[s]) / len(steps[s]) for s in xs],
            mode="lines+markers",
            name="DDP: mean of ranks",
            line={"width": 4, "color": "#222"},
            marker={"size": 10},
        )
    )
    if run.single_process is not None:
        figure.add_trace(
            go.Scatter(
                x=list(range(len(run.single_process.losses))),
                y=list(run.single_process.losses),
                mode="lines+markers",
                name="one process",
                line={"width": 2, "dash": "dash", "color": "#d62728"},
                marker={"size": 7, "symbol": "x"},
            )
        )
    figure.update_xaxes(title="optimizer step", dtick=1)
    figure.update_yaxes(title="MSE loss")
    return _style(figure, "DDP vs one process: loss per step")


# --- Time ----------------------------------------------------------------------------------------

THIN = ("all-reduce", "shadow all-reduce")  # drawn narrower, over the backward they overlap


def _segments(run: DDPRun) -> dict[tuple[int, str], list[tuple[int, float, float]]]:
    """(row, phase) -> (rank, start, end) in wall-clock seconds; row 1 the whole run, row 2 the training."""
    found: dict[tuple[int, str], list[tuple[int, float, float]]] = {}
    for rank in run.ranks[:MAX_RANKS_DRAWN]:
        marks = (rank.launched_at, rank.ready_at, rank.init_done_at, rank.finished_at)
        for phase, start, end in zip(("launch", "init", "training"), marks, marks[1:], strict=False):
            if start is not None and end is not None:
                found.setdefault((1, phase), []).append((rank.rank, start, end))
        for m in rank.micro_steps:
            for phase in ("data", "forward", "backward", "optimizer"):
                span = getattr(m, phase)
                if span is not None:
                    found.setdefault((2, phase), []).append((rank.rank, *span))
        for c in rank.collectives:
            end = c.end if c.end is not None else (rank.finished_at or c.start)
            found.setdefault((2, "shadow all-reduce" if c.shadow else "all-reduce"), []).append(
                (rank.rank, c.start, end)
            )
    return found


def timeline_figure(run: DDPRun) -> go.Figure:
    """Top: the whole run per rank, in seconds. Bottom: the training steps, in milliseconds from the first batch."""
    ranks = run.ranks[:MAX_RANKS_DRAWN]
    figure = make_subplots(rows=2, cols=1, vertical_spacing=0.25)
    segments = _segments(run)
    firsts = [start for _, start, _ in segments.get((2, "data"), [])]
    zeros = {1: run.started_at, 2: min(firsts, default=run.started_at)}
    scales = {1: 1.0, 2: 1000.0}
    shown: set[str] = set()
    for phase in PHASE_COLOURS:
        for row in (1, 2):
            spans = segments.get((row, phase))
            if not spans:
                continue
            figure.add_trace(
                go.Bar(
                    y=[f"rank {r}" for r, _, _ in spans],
                    x=[max((b - a) * scales[row], 1e-6) for _, a, b in spans],
                    base=[(a - zeros[row]) * scales[row] for _, a, _ in spans],
                    orientation="h",
                    width=0.35 if phase in THIN else 0.8,
                    marker_color=PHASE_COLOURS[phase],
                    name=phase,
                    legendgroup=phase,
                    showlegend=phase not in shown,
                    hovertemplate=f"{phase}: %{{x:.3f}}<extra>%{{y}}</extra>",
                ),
                row=row,
                col=1,
            )
            shown.add(phase)
    ended = [r for r in ranks if r.outcome != "finished" and r.finished_at is not None]
    if ended:
        figure.add_trace(
            go.Scatter(
                x=[r.finished_at - zeros[1] for r in ended],
                y=[f"rank {r.rank}" for r in ended],
                mode="markers+text",
                text=[r.outcome for r in ended],
                textposition="middle left",
                marker={"symbol": "x", "size": 16, "color": "#d62728"},
                showlegend=False,
            ),
            row=1,
            col=1,
        )
    figure.update_layout(barmode="overlay")
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(title="whole run: seconds since launch", row=1, col=1)
    figure.update_xaxes(title="training steps: ms since the first batch", row=2, col=1)
    _style(figure, "Per-rank timeline", height=340 + 80 * len(ranks))
    return figure.update_layout(margin={"t": 150})
