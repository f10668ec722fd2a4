"""The Compile page with every control exercised: model, dynamic, calls, recompile limit, width, seed, payoff."""

from __future__ import annotations

import json

import pytest

from explorers.compiled import experiment
from explorers.compiled.experiment import PayoffOptions
from tests.app.conftest import open_page
from ui import runs

PAGE = "pages/13_Compile.py"


def key(name: str) -> str:
    return f"compile.{name}"


def main_chart(at) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def bars(at) -> list[int]:
    return main_chart(at)["data"][0]["y"]


def text(at) -> str:
    return " ".join(m.value for m in at.markdown)


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_on_the_branch_with_its_break_and_fullgraph_error(lab):
    assert "Break at `if h.sum() > 0:" in text(lab)
    assert any("Data-dependent branching" in e.value for e in lab.error)
    assert sum(bars(lab)) == 3 and len(bars(lab)) == 12  # two graphs at call 1, the other branch's at call 5


def test_the_model_and_dynamic_reach_the_run_and_the_link(lab):
    lab.selectbox(key=key("preset")).set_value("shapes").run()
    assert sum(bars(lab)) == 2  # automatic dynamic: one static graph, one with a symbolic size
    lab.segmented_control(key=key("dynamic")).set_value("false").run()
    assert bars(lab)[:5] == [1, 1, 1, 1, 0] and "ran no compiled graph" in text(lab)
    lab.segmented_control(key=key("dynamic")).set_value("true").run()
    assert sum(bars(lab)) == 1
    assert not lab.exception and lab.query_params["preset"] == "shapes" and lab.query_params["dynamic"] == "true"


def test_calls_limit_width_and_seed_reach_the_run_and_the_link(lab):
    lab.selectbox(key=key("preset")).set_value("global").run()
    lab.slider(key=key("steps")).set_value(6).run()
    lab.slider(key=key("recompile_limit")).set_value(2).run()
    assert bars(lab) == [1, 1, 0, 0, 0, 0] and "limit of 2" in text(lab)
    lab.slider(key=key("width")).set_value(32).run()
    lab.number_input(key=key("seed")).set_value(5).run()
    assert not lab.exception
    assert {k: lab.query_params[k] for k in ("steps", "recompile_limit", "width", "seed")} == {
        "steps": "6",
        "recompile_limit": "2",
        "width": "32",
        "seed": "5",
    }


def test_predict_then_reveal_is_scored_from_the_run(lab):
    lab.radio(key=key("predict")).set_value("More than 2").run()
    assert lab.success[0].value.startswith("Right") and "3 graphs" in lab.success[0].value
    lab.radio(key=key("predict")).set_value("1").run()
    assert lab.error[-1].value.startswith("Not quite")


def test_the_payoff_waits_for_its_button_and_a_cached_one_is_shown_at_once(lab):
    assert [b.label for b in lab.button] == ["Compile and time it"]
    assert "Not measured yet" in " ".join(c.value for c in lab.caption)
    assert len(lab.get("plotly_chart")) == 1


@pytest.mark.slow
def test_the_payoff_button_compiles_times_and_draws_cost_against_payoff():
    at = open_page(PAGE, {"preset": "clean", "width": "16"})
    at.button(key=key("payoff")).click().run(timeout=240)
    assert not at.exception
    payoff = runs.cached(experiment.measure, PayoffOptions("clean", 16))
    assert payoff is not None and payoff.payoff.first_compiled_s > payoff.payoff.first_eager_s
    assert len(at.get("plotly_chart")) == 2 and "The first compiled step took" in text(at)
    again = open_page(PAGE, {"preset": "clean", "width": "16"})  # another visit: the cached result, no button
    assert len(again.get("plotly_chart")) == 2 and key("payoff") not in [b.key for b in again.button]


def test_bad_link_values_get_notices_and_defaults():
    at = open_page(PAGE, {"preset": "rm -rf", "dynamic": "maybe", "steps": "9999", "width": "abc"})
    assert not at.exception and len(at.warning) >= 4
    assert sum(bars(at)) == 3


def test_the_prediction_asks_about_the_other_dynamic_mode_and_traces_it_once_answered():
    """The newcomer's finding: it asked how many graphs under a chart titled "3 compiled"."""
    from explorers.compiled import experiment as lab
    from explorers.compiled import lesson
    from explorers.compiled.experiment import CompileOptions

    at = open_page(PAGE, {"dynamic": "false", "preset": "shapes", "steps": "6"})
    question = at.radio(key="compile.predict")
    assert "switch to `dynamic=None`" in question.label
    other = lab.schedule(lab.parts(CompileOptions(preset="shapes", dynamic="none", steps=6))[1]).first(6)
    expected = lesson.predicted_answer(other)
    question.set_value(expected).run()
    assert not at.exception and at.success and "`dynamic=None`" in at.success[0].value


def test_every_call_whose_guard_failed_is_named_not_only_the_first():
    """The audit's finding: with a new shape every call and dynamic=False the text named call 2 only, while the
    table showed guard failures at calls 3 and 4 too."""
    from explorers.compiled import experiment as lab
    from explorers.compiled import lesson
    from explorers.compiled.experiment import CompileOptions

    recompiles = lab.schedule(lab.parts(CompileOptions(preset="shapes", dynamic="false", steps=5))[1]).first(5)
    failed = [i for i, s in enumerate(recompiles.steps, 1) if s.reasons]
    assert len(failed) >= 3
    text = " ".join(lesson.recompile_sentences(recompiles))
    for call in failed[1:]:
        assert f" {call}" in text.split("Guards failed again at", 1)[-1] or f"At call {call}" in text
