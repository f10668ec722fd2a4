"""The compile lab's claims, checked by torch code written here (its own backends and counters).

1. What the lab reads for a run, recomputed: a counting backend of this file's own gives the
   same graphs per call, and the break's line is where this file's own dynamo.explain finds it.
2. Every Statement, tried on the zoo (a break inside a submodule, an LSTM, a custom Function, a
   dict model, a Hugging Face model built from a config) and at the edges of its scope.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from torch import nn

from explorers.compiled import experiment, lesson
from explorers.compiled.experiment import CompileOptions
from tests.claims.falsify import falsifies
from tests.zoo import ZOO, call, tiny_bert

STATEMENTS = lesson.STATEMENTS


class Counter:
    """A backend that counts the graphs it is given and the calls of each."""

    def __init__(self) -> None:
        self.graphs = 0
        self.calls = 0

    def __call__(self, graph, example_inputs):
        self.graphs += 1

        def run(*args):
            self.calls += 1
            return graph(*args)

        return run


@pytest.fixture(autouse=True)
def fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def _hf_model():
    pytest.importorskip("transformers")
    model, batch = tiny_bert()
    return model.eval(), batch


# --- 1. The lab's readings, recomputed ---------------------------------------------------------


@pytest.mark.parametrize(("preset", "dynamic"), [("shapes", "false"), ("shapes", "none"), ("global", "true")])
def test_graphs_per_call_match_a_counting_backend_of_our_own(preset, dynamic):
    options = CompileOptions(preset, dynamic=dynamic, steps=6, recompile_limit=3)
    lab = experiment.analyse(options).recompiles
    from explorers.compiled import presets

    model = experiment._model(preset, options.width, options.seed)
    counter, per_call = Counter(), []
    presets.forward_calls = 0
    compiled = torch.compile(model, backend=counter, dynamic=experiment.DYNAMIC[dynamic])
    with dynamo.config.patch(recompile_limit=3):
        for step in range(6):
            before = counter.graphs, counter.calls
            out = compiled(presets.inputs(preset, step))
            per_call.append((counter.graphs - before[0], counter.calls - before[1]))
            assert out.shape == (presets.inputs(preset, step).shape[0], presets.CLASSES)
    presets.forward_calls = 0
    assert [(s.graphs_compiled, s.graph_calls) for s in lab.steps] == per_call


# --- 2. The statements ------------------------------------------------------------------------


def _explain(model, batch):
    return dynamo.explain(lambda b: call(model, b))(batch)


@falsifies(STATEMENTS["break_splits"])
def test_a_break_inside_a_submodule_splits_the_graph_and_both_sides_still_compile():
    model, batch = ZOO["branch_in_submodule"].build(0)
    report = _explain(model, batch)
    assert report.graph_count >= 2 and report.graph_break_count >= 1
    assert any("x.mean() > 0" in (f.line or "") for r in report.break_reasons for f in r.user_stack)
    dynamo.reset()
    counter = Counter()
    compiled = torch.compile(model, backend=counter)
    torch.testing.assert_close(compiled(batch), model(batch))
    assert counter.graphs >= 2 and counter.calls >= 2  # the part before and the part after the break
    dynamo.reset()
    with pytest.raises(Exception, match="(?i)data-dependent"):  # scope: fullgraph=True raises instead
        torch.compile(model, backend="eager", fullgraph=True)(batch)


@falsifies(STATEMENTS["break_splits"], STATEMENTS["first_call"])
@pytest.mark.parametrize("name", ["custom_function", "lstm_dropout", "dict_model", "tied_weights", "hf_bert"])
def test_compiled_models_compute_what_eager_does_and_calls_that_pass_the_guards_compile_nothing(name):
    if name == "hf_bert":
        model, batch = _hf_model()
    else:
        model, batch = ZOO[name].build(0)
        model.eval()
    counter = Counter()
    compiled = torch.compile(model, backend=counter)
    graphs = []
    with torch.no_grad():
        outputs = []
        for _ in range(3):
            outputs.append(call(compiled, batch))
            graphs.append(counter.graphs)
        expected = call(model, batch)
    assert graphs[2] == graphs[1]  # a call that passes the guards compiles nothing
    if name == "lstm_dropout":  # scope: dynamo does not trace nn.LSTM by default; it runs eagerly
        assert graphs == [0, 0, 0]
        dynamo.reset()
        with dynamo.config.patch(allow_rnn=True), torch.no_grad():
            torch.compile(model, backend=counter)(batch)
        assert counter.graphs >= 1
    elif name == "hf_bert":  # scope: the first call set config.problem_type, which the graph guards on
        assert graphs[0] >= 1 and graphs[1] == graphs[0] + 1 and model.config.problem_type is not None
        assert "problem_type" in STATEMENTS["first_call"].scope
    else:
        assert graphs[0] >= 1 and graphs[1] == graphs[0]
    want = [t for t in torch.utils._pytree.tree_leaves(expected) if torch.is_tensor(t)]
    for output in outputs:
        got = [t for t in torch.utils._pytree.tree_leaves(output) if torch.is_tensor(t)]
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


@falsifies(STATEMENTS["guards"])
def test_a_global_read_in_forward_is_guarded_and_past_the_limit_the_frame_runs_eagerly():
    class ReadsAGlobal(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            return self.linear(x) * GLOBALS["step"]

    GLOBALS["step"] = 0
    model, counter = ReadsAGlobal(), Counter()
    compiled = torch.compile(model, backend=counter, dynamic=False)
    seen = []
    with dynamo.config.patch(recompile_limit=2):
        for step in range(5):
            GLOBALS["step"] = step
            before = counter.graphs, counter.calls
            out = compiled(torch.ones(2, 4))
            torch.testing.assert_close(out, model(torch.ones(2, 4)))
            seen.append((counter.graphs - before[0], counter.calls - before[1]))
    assert seen == [(1, 1), (1, 1), (0, 0), (0, 0), (0, 0)], seen  # limit 2: then eager, still right
    assert "8 by default" in STATEMENTS["guards"].text and dynamo.config.recompile_limit == 8


GLOBALS: dict[str, int] = {}


@falsifies(STATEMENTS["dynamic"])
@pytest.mark.parametrize(("dynamic", "expected"), [(False, 4), (True, 1), (None, 2)])
def test_dynamic_modes_compile_as_said_for_sizes_above_one(dynamic, expected):
    model, counter = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), Counter()
    compiled = torch.compile(model, backend=counter, dynamic=dynamic)
    for n in (2, 3, 4, 5):
        compiled(torch.randn(n, 4))
    assert counter.graphs == expected


@falsifies(STATEMENTS["dynamic"])
def test_sizes_zero_and_one_are_specialised_even_with_dynamic_true():
    model, counter = nn.Linear(4, 2), Counter()
    compiled = torch.compile(model, backend=counter, dynamic=True)
    compiled(torch.randn(3, 4))
    compiled(torch.randn(5, 4))
    assert counter.graphs == 1
    compiled(torch.randn(1, 4))  # scope: a size of 1 is its own graph
    assert counter.graphs == 2


@falsifies(STATEMENTS["first_call"])
def test_a_new_guard_failure_pays_the_compile_again():
    counter = Counter()
    compiled = torch.compile(nn.Linear(4, 2), backend=counter, dynamic=False)
    compiled(torch.randn(3, 4))
    compiled(torch.randn(3, 4))
    assert counter.graphs == 1
    compiled(torch.randn(3, 4, dtype=torch.float64).float().double().float())  # same size and dtype: reused
    assert counter.graphs == 1
    compiled(torch.randn(6, 4))
    assert counter.graphs == 2


@falsifies(STATEMENTS["break_splits"])
@pytest.mark.parametrize("where", ["loop", "context_manager"])
def test_a_break_inside_a_loop_or_a_user_context_manager_skips_the_whole_function(where):
    import contextlib

    @contextlib.contextmanager
    def nothing():
        yield

    class Looping(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            if where == "loop":
                for _ in range(2):
                    x = self.linear(x)
                    print(end="")  # a break inside the loop
                return x
            with nothing():
                x = self.linear(x)
                print(end="")
            return x

    counter = Counter()
    out = torch.compile(Looping(), backend=counter)(torch.randn(2, 4))
    assert out.shape == (2, 4) and counter.graphs == 0  # nothing of forward was compiled
    assert "for or while loop or a user context manager" in STATEMENTS["break_splits"].scope


def test_a_guard_that_fails_at_the_limit_is_said_without_calling_it_a_recompile():
    r = experiment.analyse(CompileOptions("shapes", dynamic="false", steps=3, recompile_limit=1)).recompiles
    assert [s.graphs_compiled for s in r.steps] == [1, 0, 0] and r.steps[1].reasons
    text = " ".join(lesson.recompile_sentences(r))
    assert "recompiled" not in text and "At call 2 a guard failed" in text and "compiled nothing new" in text
    assert "7 recompiles" in STATEMENTS["guards"].text


@falsifies(STATEMENTS["guards"])
def test_past_the_limit_a_call_that_passes_a_cached_graphs_guards_still_runs_it_and_only_new_ones_run_eagerly():
    """The audit's sequence at recompile_limit=3: sizes 16, 17, 18 fill the cache; 19, 20 and 21 run eagerly;
    16, 17 and 18, asked again past the limit, still run their compiled graphs."""
    model, counter = nn.Linear(4, 4), Counter()
    compiled = torch.compile(model, backend=counter, dynamic=False)
    ran = []
    with dynamo.config.patch(recompile_limit=3):
        for size in (16, 17, 18, 19, 20, 16, 17, 21, 18):
            before = counter.calls
            torch.testing.assert_close(compiled(torch.ones(size, 4)), model(torch.ones(size, 4)))
            ran.append(counter.calls - before)
    assert counter.graphs == 3
    assert ran == [1, 1, 1, 0, 0, 1, 1, 0, 1], ran
    assert "still runs that graph" in STATEMENTS["guards"].text


def test_ops_per_graph_are_explains_own_count():
    """The audit's finding: the lab once credited explain with 14 ops where explain's own count was 13."""
    from explorers.compiled import presets
    from explorers.compiled.breaks import explain

    torch.manual_seed(0)
    model, batch = presets.PRESETS["branch"].build(64), presets.inputs("branch", 0)
    report = dynamo.explain(model)(batch)
    dynamo.reset()
    assert explain(model, batch).ops_per_graph == tuple(len(ops) for ops in report.ops_per_graph)
