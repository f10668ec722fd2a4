"""The compile lab's sentences: each about this run built from a result field, each general one a Statement.

A sentence about the run reads dynamo's and inductor's own reports held in the result (the graphs
and breaks `explain` returned, the graphs the backend was handed and called per step, dynamo's
recompile log, the stopwatch); with no witness there is no sentence. What compilation *is* is
said by the Statements below, each with its scope and source, tried by tests/claims/test_compiled.py.
"""

from __future__ import annotations

import os
from dataclasses import replace

from explorers.compiled.breaks import GraphBreaks
from explorers.compiled.experiment import DYNAMIC, Analysis, CompileOptions, PayoffRun
from explorers.compiled.recompiles import Recompiles
from explorers.statements import Statement
from explorers.wording import count, series, two_figures

GRAPH_BREAKS_DOC = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html"
RECOMPILATION_DOC = "https://docs.pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html"
STATEMENTS: dict[str, Statement] = {
    "break_splits": Statement(
        text=(
            "A graph break in straight-line code does not stop compilation: dynamo ends the graph before the "
            "line it cannot trace, runs that line in Python, and compiles what follows as another graph."
        ),
        scope="torch.compile with fullgraph=False (the default; fullgraph=True raises instead); a break inside a "
        "for or while loop or a user context manager makes dynamo skip that whole function, and a module dynamo "
        "does not trace (nn.LSTM) runs eagerly, so less than the rest is compiled",
        source=f"{GRAPH_BREAKS_DOC} and torch/_dynamo/symbolic_convert.py",
    ),
    "guards": Statement(
        text=(
            "Each compiled graph carries guards on what it assumed (input sizes and dtypes, Python values it "
            "read, such as a global or a float from `.item()`). A call that fails every cached graph's guards "
            "is compiled again, until one frame holds `torch._dynamo.config.recompile_limit` graphs (8 by "
            "default, so 7 recompiles). After that dynamo compiles nothing more for it: a call that passes a "
            "cached graph's guards still runs that graph, and a call that fails them all runs eagerly."
        ),
        scope="per code object (a function or a resumed part after a break); the limit counts graphs kept "
        "for it, not calls",
        source=f"{RECOMPILATION_DOC} and torch/_dynamo/guards.py, convert_frame.py",
    ),
    "dynamic": Statement(
        text=(
            "`dynamic=False` compiles a graph for each new input size; `dynamic=True` compiles sizes as "
            "symbols from the first call; `dynamic=None` (the default) starts static and, when a size "
            "changes, recompiles once with that size as a symbol (automatic dynamic)."
        ),
        scope="sizes other than 0 and 1, which dynamo specialises in every mode; torch.compile's inputs",
        source=f"{RECOMPILATION_DOC}",
    ),
    "first_call": Statement(
        text=(
            "`torch.compile` compiles lazily: a call whose inputs and state pass no cached graph's guards is "
            "traced and compiled then, so the first call pays the compile and later calls that pass the "
            "guards reuse what it built."
        ),
        scope="a forward that changes Python state it reads fails its guards on the next call and compiles "
        "again (a Hugging Face BERT classifier sets config.problem_type on its first call with labels); a module "
        "dynamo does not trace (nn.LSTM unless torch._dynamo.config.allow_rnn) runs eagerly with nothing compiled",
        source="https://docs.pytorch.org/docs/stable/generated/torch.compile.html and torch/_dynamo/config.py",
    ),
}

PREDICT_CHOICES = ["0", "1", "2", "More than 2"]  # not "None": it reads as a `dynamic=` value
PAYOFF_GOES_ON = (
    "The first step waits for inductor to compile, which takes tens of seconds on a CPU. The run goes on if you leave "
    "this page, and its result is kept: come back and it is here."
)
PAYOFF_CANCELLED = "The compile was cancelled: nothing was measured. Start it again when you like."
PAYOFF_COLD = (
    "Not measured yet for this model and width. Compiling with inductor takes tens of seconds on this "
    "machine the first time; the result is then kept for every visitor to the same setting."
)


OTHER_DYNAMIC = {"false": "none", "none": "true", "true": "false"}  # the mode the prediction asks about


def what_if(options: CompileOptions) -> CompileOptions:
    """The setting the prediction asks about: the same model and calls under the next `dynamic` mode, whose
    schedule is not on screen until the prediction is made."""
    return replace(options, dynamic=OTHER_DYNAMIC[options.dynamic])


def predict_question(options: CompileOptions) -> str:
    other = what_if(options)
    return (
        f"Now switch to `dynamic={DYNAMIC_NAMES[other.dynamic]}`, with the same {options.steps} calls and "
        f"`recompile_limit={options.recompile_limit}`: how many graphs will dynamo hand the backend to compile?"
    )


def predicted_answer(recompiles: Recompiles) -> str:
    return PREDICT_CHOICES[min(recompiles.graphs, 3)]


def explain(analysis: Analysis) -> list[str]:
    """The Statements this run bears on, chosen by what it witnessed."""
    keys = ["first_call"]
    if analysis.breaks.breaks:
        keys.append("break_splits")
    if any(s.reasons for s in analysis.recompiles.steps) or analysis.recompiles.limit_hit:
        keys.append("guards")
    if len({s.batch_size for s in analysis.recompiles.steps}) > 1:
        keys.append("dynamic")
    return [STATEMENTS[k].text for k in keys]


DYNAMIC_NAMES = {name: str(value) for name, value in DYNAMIC.items()}


def _where(file: str, line_number: int) -> str:
    return f"{os.path.basename(file)}:{line_number}" if file else "an unknown line"


def breaks_sentences(found: GraphBreaks) -> list[str]:
    if not found.graphs:
        return [
            "`torch._dynamo.explain` captured no graph: nothing of this forward was compiled"
            + (f" ({count(found.break_count, 'break')} reported)." if found.breaks else ".")
        ]
    if not found.breaks:
        return [f"`torch._dynamo.explain` captured the forward as {count(found.graphs, 'graph')}, with no break."]
    lines = [
        f"`torch._dynamo.explain` captured {count(found.graphs, 'graph')} and reported "
        f"{count(found.break_count, 'break')}; ops per graph, as it counts them (function calls): "
        + ", ".join(map(str, found.ops_per_graph))
        + "."
    ]
    for b in found.breaks:
        lines.append(f"Break at `{b.line}` ({_where(b.file, b.line_number)}): dynamo says *{b.reason}*.")
    return lines


def fullgraph_sentence(analysis: Analysis) -> str:
    error, breaks = analysis.fullgraph_error, analysis.breaks.break_count
    if error:
        return f"With `fullgraph=True`, PyTorch raised *{error.splitlines()[0]}*"
    if breaks:
        return (
            f"With `fullgraph=True` this forward compiled without an error, although `explain` reported "
            f"{breaks} break{'s' * (breaks != 1)} with the default settings."
        )
    return "With `fullgraph=True` this forward compiled as one graph, without an error."


def recompile_sentences(r: Recompiles) -> list[str]:
    compiled_at = [i for i, s in enumerate(r.steps, 1) if s.graphs_compiled]
    lines = [
        f"Over {len(r.steps)} calls with {f'`dynamic={r.dynamic}`'}, dynamo handed the backend {r.graphs} "
        f"graph{'s' * (r.graphs != 1)} to compile, at {series('call', compiled_at)}."
    ]
    reasons = [(i, s) for i, s in enumerate(r.steps, 1) if s.reasons]
    if reasons:
        step, seen = reasons[0]
        guard = " ".join(seen.reasons[0].split())
        if seen.graphs_compiled:
            lines.append(f"Call {step} recompiled because a guard failed: `{guard}`.")
        else:
            lines.append(f"At call {step} a guard failed (`{guard}`), and dynamo compiled nothing new.")
        recompiled = [i for i, s in reasons[1:] if s.graphs_compiled]
        failed_only = [i for i, s in reasons[1:] if not s.graphs_compiled]
        if recompiled:
            lines.append(f"Guards failed again at {series('call', recompiled)}, each recompiling (the table has why).")
        if failed_only:
            lines.append(f"At {series('call', failed_only)} a guard failed and dynamo compiled nothing new.")
    most = max((s.graph_calls for s in r.steps), default=0)
    fewer = [i for i, s in enumerate(r.steps, 1) if s.graph_calls < most]
    if r.limit_hit:
        lines.append(f"Dynamo stopped recompiling at its limit of {r.recompile_limit}: *{r.limit_hit}*.")
    if fewer and most:
        eager = set(r.eager_steps)
        part = "no compiled graph: the whole forward ran eagerly" if set(fewer) <= eager else "fewer compiled graphs"
        lines.append(
            f"{series('call', fewer).capitalize()} ran {part} (other calls ran up to {count(most, 'compiled graph')})."
        )
    return lines


def _ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 100 else f"{value:.0f} ms"


def payoff_sentences(run: PayoffRun) -> list[str]:
    p = run.payoff
    gain, margin = p.gain
    lines = [
        f"The first compiled step took {p.first_compiled_s:.1f} s (the compile and one step; {p.backend}, C++ by "
        f"{p.compiler}, {p.cache_hits} inductor cache hit{'s' * (p.cache_hits != 1)}"
        + ("; the first inductor compile in this worker process" if run.first_in_process else "")
        + f"), against {_ms(p.first_eager_s * 1e3)} for the first eager step.",
        f"After warm-up, over {len(p.eager_ms)} alternating steps on {p.threads} "
        f"thread{'s' * (p.threads != 1)}, a step took {_ms(p.compiled_mean_ms)} compiled against "
        f"{_ms(p.eager_mean_ms)} eager (difference {gain:+.2f} ms ± {margin:.2f}).",
    ]
    if p.break_even is not None:
        low, high = p.break_even_range
        lines.append(
            f"At that gain the compile is paid back after about {two_figures(p.break_even)} steps "
            f"({two_figures(low)} to {two_figures(high)} across the gain's noise margin)."
        )
    elif gain > 0 or abs(gain) <= margin:
        lines.append("The difference is within its noise margin: this run shows no break-even.")
    else:
        lines.append(
            "Compiled steps were slower than eager ones, beyond the noise: at these step times compiling "
            "costs more than it saves."
        )
    if p.loss_gap > 0:
        lines.append(f"The last step's loss differed by {p.loss_gap:.2g} between eager and compiled.")
    return lines
