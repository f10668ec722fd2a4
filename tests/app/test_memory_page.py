"""The Memory page: every control exercised, the sweep, remedies on demand, hostile links."""

import json

import pytest

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
    assert set(metrics(lab)) == {"parameters", "gradients", "optimizer state", "activations", "peak"}
    traces = [t["name"] for t in sweep(lab)["data"]]
    assert traces[:4] == ["parameters", "gradients", "optimizer state", "activations"] and "peak" in traces
    assert len(sweep(lab)["data"][0]["x"]) == 8
    assert len(lab.get("plotly_chart")) == 3  # sweep, timeline, retention


def test_batch_size_moves_only_the_activations(lab):
    before = metrics(lab)
    lab.select_slider(key=key("batch_size")).set_value(256).run()
    after = metrics(lab)
    assert after["parameters"] == before["parameters"] and after["optimizer state"] == before["optimizer state"]
    assert after["activations"] != before["activations"]
    assert lab.query_params["batch_size"] == "256"


def test_optimizer_precision_checkpointing_and_accumulation(lab):
    lab.selectbox(key=key("optimizer")).set_value("sgd").run()
    assert metrics(lab)["optimizer state"] == "0.00 MiB"
    activations = metrics(lab)["activations"]
    lab.toggle(key=key("checkpointing")).set_value(True).run()
    assert metrics(lab)["activations"] != activations
    lab.selectbox(key=key("precision")).set_value("bf16").run()
    lab.slider(key=key("accumulation")).set_value(4).run()
    assert not lab.exception
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
    lab.button(key="remedies").click().run()
    table = lab.dataframe[0].value
    assert list(table["remedy"])[0] == "as configured" and len(table) == 5


def test_predict_then_reveal_quotes_the_doubling(lab):
    lab.radio(key=key("predict")).set_value("activations").run()
    assert "activations ×2.0" in lab.success[0].value


def test_a_copied_link_reopens_the_same_lab():
    at = open_page(PAGE)
    at.select_slider(key=key("batch_size")).set_value(16).run()
    at.selectbox(key=key("optimizer")).set_value("sgd_momentum").run()
    reopened = open_page(PAGE, dict(at.query_params))
    assert not reopened.warning and metrics(reopened) == metrics(at)


@pytest.mark.parametrize(
    "query",
    [
        {"batch_size": "100"},
        {"heads": "3"},
        {"width": "999999"},
        {"precision": "fp8"},
        {"budget_gb": "1e12"},
        {"accumulation": "-4"},
    ],
)
def test_hostile_link_values_get_a_notice_and_the_default(query):
    at = open_page(PAGE, query)
    assert not at.exception and "using the default" in at.warning[0].value


def test_an_inconsistent_combination_falls_back_to_defaults_with_a_message():
    at = open_page(PAGE, {"preset": "transformer", "width": "48", "heads": "32"})
    assert not at.exception
    assert any("divisible" in w.value for w in at.warning)
