"""The compile lab's parts: options, what explain and the recompile schedule read, and the isolation of the API."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo as dynamo

from explorers import compiled
from explorers.compiled import experiment, lesson, presets, recompiles
from explorers.compiled.experiment import CompileOptions, PayoffOptions
from explorers.compiled.timing import Payoff


def test_options_refuse_what_is_out_of_range():
    for bad in ({"preset": "nope"}, {"dynamic": "maybe"}, {"steps": 0}, {"recompile_limit": 99}, {"width": True}):
        with pytest.raises(ValueError):
            CompileOptions(**bad)
    with pytest.raises(ValueError):
        PayoffOptions(steps=10_000)


def test_the_branch_preset_breaks_at_its_branch_and_fullgraph_names_it():
    analysis = experiment.analyse(CompileOptions("branch", steps=2))
    assert analysis.breaks.graphs == 2 and analysis.breaks.break_count == 1
    found = analysis.breaks.breaks[0]
    assert found.line.startswith("if h.sum() > 0") and found.file.endswith("presets.py")
    assert analysis.fullgraph_error and "Data-dependent branching" in analysis.fullgraph_error
    assert f"Break at `{found.line}`" in " ".join(lesson.breaks_sentences(analysis.breaks))


@pytest.mark.parametrize(("dynamic", "graphs"), [("none", 2), ("true", 1)])
def test_a_new_shape_every_call_recompiles_once_or_never_with_dynamic_shapes(dynamic, graphs):
    r = experiment.analyse(CompileOptions("shapes", dynamic=dynamic, steps=6)).recompiles
    assert [s.batch_size for s in r.steps] == [16, 17, 18, 19, 20, 21]
    assert r.graphs == graphs and not r.eager_steps and r.limit_hit is None


def test_static_shapes_recompile_to_the_limit_then_run_eagerly():
    r = experiment.analyse(CompileOptions("shapes", dynamic="false", steps=6, recompile_limit=3)).recompiles
    assert [s.graphs_compiled for s in r.steps] == [1, 1, 1, 0, 0, 0]
    assert r.eager_steps == (4, 5, 6) and "recompile limit" in r.limit_hit.lower()
    assert "size mismatch at index 0. expected 16, actual 17" in r.steps[1].reasons[0]
    text = " ".join(lesson.recompile_sentences(r))
    assert "Calls 4 to 6 ran no compiled graph" in text and "limit of 3" in text


def test_the_global_counter_is_reset_so_every_run_reads_the_same_values():
    first, second = (experiment.analyse(CompileOptions("global", steps=3)).recompiles for _ in range(2))
    assert first == second and presets.forward_calls == 0
    assert "G['forward_calls'] == 0" in first.steps[1].reasons[0]


def test_the_recompile_log_is_captured_and_logging_put_back():
    logger = logging.getLogger(recompiles.RECOMPILES_LOGGER)
    before = (logger.level, logger.propagate, list(logger.handlers))
    with recompiles.recompile_log() as messages:
        f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
        f(torch.ones(2))
        f(torch.ones(3))
    dynamo.reset()
    assert messages and "size mismatch" in messages[0]
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_the_notebook_api_leaves_the_callers_compiled_functions_and_config_alone():
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph

    mine = torch.compile(lambda x: x.sin() + 1, backend=backend)
    mine(torch.ones(3))
    model = presets.PRESETS["branch"].build(16)
    limit, state = dynamo.config.recompile_limit, torch.get_rng_state()
    found = compiled.explain(model, presets.inputs("branch", 0))  # explain resets dynamo: in a child only
    assert found.graphs == 2
    mine(torch.ones(3))
    assert len(graphs) == 1  # still cached here: nothing recompiled
    assert dynamo.config.recompile_limit == limit and torch.equal(torch.get_rng_state(), state)
    dynamo.reset()


def test_the_notebook_api_refuses_bad_arguments_before_starting_anything():
    model = presets.PRESETS["clean"].build(16)
    with pytest.raises(ValueError):
        compiled.payoff(model, [], steps=3)
    with pytest.raises(ValueError):
        compiled.payoff(model, [torch.ones(2, presets.FEATURES)], steps=0)


def _payoff(first_s: float, eager: list[float], compiled_ms: list[float]) -> Payoff:
    return Payoff(first_s, 0.001, tuple(eager), tuple(compiled_ms), "inductor", "g++", 0, 0.0)


def test_break_even_is_the_compile_over_the_gain_and_none_within_noise():
    clear = _payoff(1.001, [3.0, 3.1, 2.9, 3.0], [1.0, 1.1, 0.9, 1.0])  # 1000 ms more, 2 ms a step back
    assert clear.gain[0] == pytest.approx(2.0) and clear.break_even == 501
    noisy = _payoff(1.0, [3.0, 1.0, 3.0, 1.0], [1.0, 3.0, 1.0, 3.0])
    assert noisy.break_even is None
    slower = _payoff(1.0, [1.0, 1.0, 1.1], [2.0, 2.1, 2.0])
    assert slower.break_even is None


@pytest.mark.parametrize(
    ("preset", "dynamic", "limit"), [("shapes", "false", 3), ("global", "none", 2), ("item", "none", 4)]
)
def test_a_shorter_schedule_is_the_longer_ones_prefix_limit_included(preset, dynamic, limit):
    options = CompileOptions(preset, dynamic=dynamic, steps=3, recompile_limit=limit)
    sliced = experiment.analyse(options).recompiles
    model = experiment._model(preset, options.width, options.seed)
    batches = [presets.inputs(preset, step, options.seed) for step in range(3)]
    dynamo.reset()
    presets.forward_calls = 0
    direct = recompiles.recompiles(model, batches, experiment.DYNAMIC[dynamic], limit)
    dynamo.reset()
    presets.forward_calls = 0
    assert sliced == direct


def test_the_schedule_and_explain_skip_dynamos_guard_timing_and_put_it_back(monkeypatch):
    """Dynamo times each new guard set for a log line (a cache flush, a third of the schedule); the lab reads
    no timing from these runs. The schedule above equals one run without the skip (the prefix test)."""
    timed = []
    real = torch._dynamo.guards.profile_guard_manager

    def spy(*args):
        timed.append(args)
        return real(*args)

    monkeypatch.setattr(torch._dynamo.guards, "profile_guard_manager", spy)
    plain = torch.compile(lambda x: x * 3, backend="eager")
    plain(torch.ones(2))
    dynamo.reset()
    assert timed  # dynamo does time a plain compile's guards: the skip is not moot
    timed.clear()
    options = CompileOptions("global", steps=3)
    trace_options, schedule_options = experiment.parts(options)
    assert experiment.schedule(schedule_options).graphs > 1
    assert experiment.trace(trace_options).breaks.graphs >= 1
    assert not timed
    assert torch._dynamo.guards.profile_guard_manager is spy


def test_a_break_even_is_said_to_two_figures_with_its_range_across_the_noise_margin():
    """The audit's finding: "paid back after 403258 steps" rested on a gain of 0.03 ± 0.01 ms."""
    from explorers.compiled import lesson
    from explorers.compiled.experiment import PayoffOptions, PayoffRun

    p = _payoff(13.0, [1.00, 1.04, 1.02, 1.05, 1.03, 1.01], [0.99, 1.00, 0.99, 1.01, 1.00, 0.98])
    gain, margin = p.gain
    assert 0 < margin < gain and p.break_even > 100_000
    low, high = p.break_even_range
    assert low < p.break_even < high
    words = " ".join(lesson.payoff_sentences(PayoffRun(PayoffOptions(), p, False, 1.0, torch.__version__)))
    assert f"{p.break_even} steps" not in words  # not six figures the noise does not support
    assert f"about {lesson.two_figures(p.break_even)} steps" in words
    assert f"{lesson.two_figures(low)} to {lesson.two_figures(high)}" in words
