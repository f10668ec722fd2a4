"""The Gradients page with every scenario and knob exercised, its URL round trip. Hostile links: test_every_page."""

import pytest

from explorers.gradients.experiment import SCENARIOS
from tests.app.conftest import open_page

PAGE = "pages/5_Gradients.py"
VERDICT_STARTS = {
    "healthy": "healthy",
    "detached": "Broken graph",
    "unused": "Unused",
    "frozen": "Frozen",
    "inplace": "Backward failed",
    "dead_relu": "Dead",
    "vanishing": "Vanishing",
    "exploding": "Exploding",
    "argmax": "Broken graph",
}


def key(name):
    return f"gradients.{name}"


def verdict(at) -> str:
    shown = [e.value for e in (*at.success, *at.warning) if e.value.startswith("**Verdict:**")]
    assert len(shown) == 1, shown
    return shown[0].removeprefix("**Verdict:** ")


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_healthy_with_its_charts_and_graph(lab):
    assert verdict(lab) == "healthy"
    assert len(lab.get("plotly_chart")) == 4  # norms, sweep, clipping, training
    assert any("data:image/svg+xml" in h.proto.body for h in lab.get("html"))
    assert lab.query_params["scenario"] == "healthy"


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "healthy"])
def test_every_scenario_is_one_click_and_shows_its_own_verdict(lab, scenario):
    lab.radio(key=key("scenario")).set_value(scenario).run()
    assert not lab.exception
    assert lab.query_params["scenario"] == scenario
    for name, value in SCENARIOS[scenario].defaults.items():  # the knobs that show it best came with it
        assert lab.session_state[key({"init_scale": "scale"}.get(name, name))] == value
    if scenario == "no_zero_grad":
        assert any(s.value.endswith("batches without zero_grad") for s in lab.subheader)
    else:
        assert verdict(lab).startswith(VERDICT_STARTS[scenario])


def test_the_in_place_scenario_shows_pytorchs_own_error(lab):
    lab.radio(key=key("scenario")).set_value("inplace").run()
    text = " ".join(m.value for m in lab.markdown)
    assert "modified by an inplace operation" in text


def test_stack_knobs_change_the_run_and_the_link(lab):
    lab.radio(key=key("scenario")).set_value("vanishing").run()
    parameters_at_depth_8 = len(lab.dataframe[0].value)
    lab.slider(key=key("depth")).set_value(12).run()
    assert len(lab.dataframe[0].value) > parameters_at_depth_8  # more layers, more rows in the status table
    lab.slider(key=key("scale")).set_value(2.0).run()
    lab.selectbox(key=key("activation")).set_value("relu").run()
    assert not lab.exception
    assert (lab.query_params["depth"], lab.query_params["scale"], lab.query_params["activation"]) == ("12", "2", "relu")
    assert not verdict(lab).startswith("Vanishing")  # a large ReLU init no longer vanishes


def test_k_grows_the_accumulation_chart(lab):
    lab.radio(key=key("scenario")).set_value("no_zero_grad").run()
    lab.slider(key=key("k")).set_value(9).run()
    assert not lab.exception and lab.query_params["k"] == "9"
    assert any(s.value == "9 batches without zero_grad" for s in lab.subheader)


def test_knobs_a_scenario_does_not_have_are_disabled(lab):
    lab.radio(key=key("scenario")).set_value("detached").run()
    assert lab.slider(key=key("depth")).disabled and lab.selectbox(key=key("activation")).disabled
    assert lab.slider(key=key("k")).disabled and not lab.slider(key=key("scale")).disabled


def test_clipping_keeps_the_imbalance_and_the_prediction_quotes_it(lab):
    lab.radio(key=key("scenario")).set_value("vanishing").run()
    lab.select_slider(key=key("max_norm")).set_value(0.01).run()
    lab.select_slider(key=key("lr")).set_value(0.1).run()
    lab.number_input(key=key("seed")).set_value(3).run()
    assert not lab.exception and lab.query_params["max_norm"] == "0.01" and lab.query_params["seed"] == "3"
    lab.radio(key=key("predict")).set_value("It shrinks towards 1").run()
    reveal = lab.error[0].value
    assert "It stays the same" in reveal and "before" in reveal and "after" in reveal


def test_a_link_reopens_the_same_state():
    at = open_page(PAGE, {"scenario": "exploding", "depth": "6", "scale": "3", "activation": "relu"})
    assert not at.exception and verdict(at).startswith("Exploding")
    assert at.slider(key=key("depth")).value == 6


def test_the_scenario_code_follows_the_activation_in_the_link():
    """`?scenario=vanishing` with tanh used to show the sigmoid code written once for the preset."""
    at = open_page(PAGE, {"scenario": "vanishing", "activation": "tanh", "depth": "5"})
    assert not at.exception
    shown = "\n".join(c.value for c in at.code)
    assert "nn.Tanh()" in shown and "nn.Sigmoid()" not in shown and "range(5)" in shown
    assert any("tanh" in s.value and "5 Linear layers" in s.value for s in at.subheader)


def test_the_clipping_runs_start_before_the_figures_above_them_and_training_is_drawn_first(monkeypatch):
    """A learning-rate notch changes only the training figure: its run computes while the figures above it are
    drawn, and it is the first figure drawn once the clipping runs are in."""
    from ui import figures, runs

    events = []
    plotly, start = figures.plotly, runs.start

    def recorded_plotly(figure, caption, stem, **options):
        events.append(stem)
        plotly(figure, caption, stem, **options)

    def recorded_start(requests, **options):
        events.append("start " + " ".join(fn.__name__ for fn, _ in requests))
        return start(requests, **options)

    monkeypatch.setattr(figures, "plotly", recorded_plotly)
    monkeypatch.setattr(runs, "start", recorded_start)
    at = open_page(PAGE)
    assert not at.exception
    assert events.index("start clip_once clipped_training") < events.index("gradients-norms")
    assert events.index("gradients-training") < events.index("gradients-clipping")
