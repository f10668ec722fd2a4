"""The Autograd page with every control exercised, its URL round trip. Hostile links: test_every_page."""

import base64

import pytest

from explorers.autograd import experiment as autograd
from tests.app.conftest import open_page

PAGE = "pages/1_Autograd.py"


def key(name):
    return f"autograd.{name}"


def table(at):
    return at.dataframe[0].value.set_index("tensor")


def graph_source(at):
    """The graph as drawn: SVG laid out on the server, inlined as an image."""
    images = [h.proto.body for h in at.get("html") if "data:image/svg+xml;base64," in h.proto.body]
    return base64.b64decode(images[0].split("base64,")[1].split('"')[0]).decode() if images else None


def click(at, action):
    return at.button(key=f"do-{action}").click().run()


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_with_a_forward_already_run_and_its_graph_drawn(lab):
    assert "AccumulateGrad" in graph_source(lab)
    assert lab.query_params["steps"] == "forward"
    assert table(lab).loc["loss", "grad_fn"] == "MseLossBackward0"


def test_model_knobs_change_the_model_and_the_link(lab):
    lab.slider(key=key("width")).set_value(8).run()
    assert table(lab).loc["block1.fc.weight", "shape"] == "(8, 3)"
    lab.slider(key=key("depth")).set_value(3).run()
    assert "block3.fc.weight" in table(lab).index
    lab.selectbox(key=key("activation")).set_value("relu").run()
    assert table(lab).loc["block1 out", "grad_fn"] == "ReluBackward0"
    lab.slider(key=key("batch")).set_value(5).run()
    assert table(lab).loc["x", "shape"] == "(5, 3)"
    lab.selectbox(key=key("preset")).set_value("residual").run()
    assert "block1.fc2.weight" in table(lab).index
    assert not lab.exception
    assert {k: lab.query_params[k] for k in ("width", "depth", "activation", "batch", "preset")} == {
        "width": "8",
        "depth": "3",
        "activation": "relu",
        "batch": "5",
        "preset": "residual",
    }


def test_scalar_preset_disables_the_layer_knobs(lab):
    lab.selectbox(key=key("preset")).set_value("scalar").run()
    assert lab.slider(key=key("width")).disabled and lab.slider(key=key("depth")).disabled
    assert {"w", "b", "w·x + b"} <= set(table(lab).index)


def test_input_grad_and_saved_tensor_toggles(lab):
    lab.toggle(key=key("x_grad")).set_value(True).run()
    assert bool(table(lab).loc["x", "requires_grad"])
    assert ">x</text>" in graph_source(lab)
    assert 'fill="orange"' not in graph_source(lab)
    lab.toggle(key=key("saved")).set_value(True).run()
    assert 'fill="orange"' in graph_source(lab)
    assert lab.query_params["saved"] == "1"
    lab.toggle(key=key("saved")).set_value(False).run()
    assert 'fill="orange"' not in graph_source(lab)
    assert lab.query_params["x_grad"] == "1" and lab.query_params["saved"] == "0"


def test_seed_changes_the_numbers(lab):
    click(lab, "backward")
    first = table(lab).loc["head.weight", "‖grad‖"]
    lab.number_input(key=key("seed")).set_value(3).run()
    assert table(lab).loc["head.weight", "‖grad‖"] != first
    assert lab.query_params["seed"] == "3"


def test_two_retained_backwards_double_the_gradient_in_the_table(lab):
    click(lab, "backward_retain")
    click(lab, "backward_retain")
    ratios = table(lab)[autograd.RATIO_LABEL].dropna()
    assert len(ratios) >= 6 and (ratios.round(6) == 2.0).all()
    assert "backward_retain,backward_retain" in lab.query_params["steps"]


def test_second_plain_backward_shows_pytorchs_error(lab):
    click(lab, "backward")
    assert lab.metric[0].value == "0 B"
    click(lab, "backward")
    assert any("PyTorch raised on `backward()`" in e.value for e in lab.error)
    assert any("backward through the graph a second time" in c.value for c in lab.code)  # wrapped, hint visible
    assert not lab.exception


def test_no_grad_forward_draws_no_graph(lab):
    click(lab, "forward_no_grad")
    assert graph_source(lab) is None
    assert table(lab).loc["loss", "grad_fn"] == "None"
    assert any("no_grad" in c.value for c in lab.caption)


def test_zero_grad_buttons_and_optimizer_step(lab):
    click(lab, "backward")
    version = table(lab).loc["head.weight", "version"]
    click(lab, "sgd_step")
    assert table(lab).loc["head.weight", "version"] == version + 1
    click(lab, "zero_grad_zeros")
    assert set(table(lab).query("role == 'parameter'")[".grad"]) == {"zeros"}
    click(lab, "zero_grad_none")
    assert set(table(lab).query("role == 'parameter'")[".grad"]) == {"None"}
    click(lab, "sgd_step")  # SGD skips parameters whose .grad is None: no in-place update, no version bump
    assert table(lab).loc["head.weight", "version"] == version + 1


def test_reset_clears_the_steps(lab):
    click(lab, "backward")
    click(lab, "reset")
    assert graph_source(lab) is None
    assert lab.query_params["steps"] == ""


def test_step_limit_disables_the_buttons(lab):
    for _ in range(autograd.MAX_STEPS - 1):
        click(lab, "forward")
    assert lab.button(key="do-forward").disabled and lab.button(key="do-backward").disabled
    assert not lab.button(key="do-reset").disabled


def test_predict_then_reveal_uses_the_live_ratio(lab):
    lab.radio(key=key("predict")).set_value("Twice one pass").run()
    assert "‖latest pass‖ = 2.000" in lab.success[0].value
    lab.radio(key=key("predict")).set_value("An error").run()
    assert "Twice one pass" in lab.error[0].value


def test_device_choice_is_in_the_link_and_the_captions(lab):
    lab.selectbox(key=key("device")).set_value("cpu").run()
    assert lab.query_params["device"] == "cpu"
    assert any("cpu · torch" in c.value for c in lab.caption)


def test_a_copied_link_reopens_the_same_lab():
    at = open_page(PAGE)
    at.selectbox(key=key("preset")).set_value("mlp_bn_dropout").run()
    at.slider(key=key("width")).set_value(6).run()
    at.number_input(key=key("seed")).set_value(42).run()
    click(at, "backward_retain")
    click(at, "sgd_step")
    link = dict(at.query_params)
    reopened = open_page(PAGE, link)
    assert not reopened.exception and not reopened.warning
    assert graph_source(reopened) == graph_source(at)
    assert table(reopened).equals(table(at))


def test_unknown_link_settings_are_named_and_ignored():
    query = {f"junk{i}": "1" for i in range(20)}
    at = open_page(PAGE, query)
    assert not at.exception
    assert "Ignored unknown link settings" in at.warning[0].value and "15 more" in at.warning[0].value
    assert not any(name.startswith("junk") for name in at.query_params)


def test_a_dead_relu_gets_an_honest_note_instead_of_a_quiz():
    """Scalar neuron, ReLU, seed 0: the unit is dead for its input, so no gradient can double."""
    at = open_page(PAGE, {"preset": "scalar", "activation": "relu", "seed": "0"})
    assert not at.exception
    assert any("every gradient measured exactly zero" in i.value for i in at.info)
    assert not at.radio  # no question whose answer the run cannot show
