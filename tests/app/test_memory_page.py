"""The Memory page: every control exercised, the sweep, remedies on demand. Hostile links: test_every_page."""

import json
import re

import pytest

from explorers import saved
from tests.app.conftest import open_page

PAGE = "pages/4_Memory.py"


def key(name):
    return f"memory.{name}"


def metrics(at):
    return {m.label: m.value for m in at.metric}


def sweep(at):
    return json.loads(at.get("plotly_chart")[0].proto.spec)


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_shows_every_category_with_its_prediction_and_the_sweep(lab):
    categories = {"parameters", "gradients", "optimizer state", "activations", "batch"}
    assert set(metrics(lab)) == categories | {"peak, step 2 on"}
    traces = [t["name"] for t in sweep(lab)["data"]]
    assert traces[:5] == ["parameters", "gradients", "optimizer state", "activations", "batch"]
    assert {"peak, step 2 on", "peak, step 1"} <= set(traces)
    assert len(sweep(lab)["data"][0]["x"]) == 8
    assert len(lab.get("plotly_chart")) == 3  # sweep, timeline, retention


def test_states_what_saved_for_backward_counts(lab):
    assert any(saved.DEFINITION in c.value for c in lab.caption)


def test_batch_size_moves_only_the_activations(lab):
    before = metrics(lab)
    lab.select_slider(key=key("batch_size")).set_value(256).run()
    after = metrics(lab)
    assert after["parameters"] == before["parameters"] and after["optimizer state"] == before["optimizer state"]
    assert after["activations"] != before["activations"]
    assert lab.query_params["batch_size"] == "256"


def test_optimizer_precision_checkpointing_and_accumulation(lab):
    lab.selectbox(key=key("optimizer")).set_value("sgd").run()
    assert metrics(lab)["optimizer state"] == "0 B"
    activations = metrics(lab)["activations"]
    lab.toggle(key=key("checkpointing")).set_value(True).run()
    assert metrics(lab)["activations"] != activations
    lab.selectbox(key=key("precision")).set_value("bf16").run()
    lab.slider(key=key("accumulation")).set_value(4).run()
    assert not lab.exception
    assert any("at a micro-batch of 16" in m.value for m in lab.markdown)
    assert {k: lab.query_params[k] for k in ("optimizer", "checkpointing", "precision", "accumulation")} == {
        "optimizer": "sgd",
        "checkpointing": "1",
        "precision": "bf16",
        "accumulation": "4",
    }


def test_model_knobs_and_the_transformer_only_knobs(lab):
    assert lab.slider(key=key("seq_len")).disabled
    lab.slider(key=key("width")).set_value(256).run()
    lab.slider(key=key("depth")).set_value(2).run()
    lab.selectbox(key=key("preset")).set_value("transformer").run()
    assert not lab.slider(key=key("seq_len")).disabled
    lab.slider(key=key("seq_len")).set_value(64).run()
    lab.select_slider(key=key("heads")).set_value(4).run()
    lab.number_input(key=key("seed")).set_value(3).run()
    assert not lab.exception
    assert lab.query_params["preset"] == "transformer" and lab.query_params["heads"] == "4"


def test_budget_and_remedies_on_demand(lab):
    lab.selectbox(key=key("budget_gb")).set_value(8).run()
    assert not lab.dataframe
    assert "8 GiB device" in lab.button(key="remedies").label
    lab.button(key="remedies").click().run()
    table = lab.dataframe[0].value
    assert list(table["remedy"])[0] == "as configured" and len(table) == 5


def test_bf16_shows_the_weight_copies_apart(lab):
    lab.selectbox(key=key("precision")).set_value("bf16").run()
    assert "weight copies" in metrics(lab)
    assert "weight copies" in [t["name"] for t in sweep(lab)["data"]]


def test_a_batch_too_large_to_allocate_is_labelled_estimated():
    at = open_page(PAGE, {"batch_size": "65536", "width": "4096", "depth": "8"})
    assert not at.exception
    assert "estimated on fake tensors" in at.info[0].value
    assert any("estimated on fake tensors)" in m.value for m in at.markdown)
    assert not any(re.search(r"\d,\d{3}\.\d+ MiB", value) for value in metrics(at).values())  # units scale


def why(at):
    return next(m.value for m in at.markdown if "Parameters **" in m.value)


def test_the_peak_breakdown_agrees_with_the_optimizer_state_metric(lab):
    state = metrics(lab)["optimizer state"]
    assert f"optimizer state {state}, optimizer step temporaries" in why(lab)


def test_checkpointing_formula_has_no_invented_gap(lab):
    lab.toggle(key=key("checkpointing")).set_value(True).run()
    assert "predicts exactly what was measured" in why(lab) and "norm statistics" not in why(lab)
    lab.selectbox(key=key("precision")).set_value("bf16").run()
    assert "predicts exactly what was measured" in why(lab) and "2-byte formula is off" not in why(lab)


def test_transformer_attention_is_described_as_recorded():
    at = open_page(PAGE, {"preset": "transformer", "width": "64", "depth": "1", "seq_len": "32", "heads": "4"})
    assert not at.exception
    assert "op by op (BmmBackward0, SafeSoftmaxBackward0), not fused" in why(at)
    assert "attention is fused" not in why(at)


def test_predict_then_reveal_quotes_the_doubling(lab):
    lab.radio(key=key("predict")).set_value("activations").run()
    assert "activations ×2.0" in lab.success[0].value


def test_a_copied_link_reopens_the_same_lab():
    at = open_page(PAGE)
    at.select_slider(key=key("batch_size")).set_value(16).run()
    at.selectbox(key=key("optimizer")).set_value("sgd_momentum").run()
    reopened = open_page(PAGE, dict(at.query_params))
    assert not reopened.warning and metrics(reopened) == metrics(at)


def test_an_inconsistent_combination_falls_back_to_defaults_with_a_message():
    at = open_page(PAGE, {"preset": "transformer", "width": "48", "heads": "32"})
    assert not at.exception
    assert any("divisible" in w.value for w in at.warning)


def test_the_transformer_only_sliders_say_why_they_are_disabled_for_the_other_presets():
    """Issue 31: a control that is disabled says why on the page."""
    from explorers.memory import lesson

    at = open_page(PAGE)
    for label in ("Sequence length", "Heads"):
        widget = next(w for w in [*at.slider, *at.select_slider] if w.label == label)
        assert widget.disabled and widget.help == lesson.TRANSFORMER_ONLY


def test_the_sweep_the_slider_moves_is_drawn_before_the_chosen_points_details(monkeypatch):
    """The main figure answers a notch first; the metrics and the timeline follow it."""
    from ui import figures

    drawn = []
    plotly = figures.plotly

    def recorded(figure, caption, stem, **options):
        drawn.append(stem)
        plotly(figure, caption, stem, **options)

    monkeypatch.setattr(figures, "plotly", recorded)
    at = open_page(PAGE, {"width": "528"})
    assert not at.exception
    assert drawn.index("memory-sweep") < drawn.index("memory-timeline")
