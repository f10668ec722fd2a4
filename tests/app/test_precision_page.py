"""The Precision page with every control exercised: input and loss scale, GradScaler's init scale, steps, seed."""

from __future__ import annotations

import json

import pytest

from tests.app.conftest import open_page

PAGE = "pages/14_Precision.py"


def key(name: str) -> str:
    return f"precision.{name}"


def chart(at, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def text(at) -> str:
    return " ".join(m.value for m in at.markdown)


@pytest.fixture()
def lab():
    at = open_page(PAGE)
    assert not at.exception
    return at


def test_opens_with_four_loss_curves_and_no_skipped_step(lab):
    names = [t["name"].replace("<br>", " ").split(" (≈ ")[0] for t in chart(lab, 0)["data"]]
    assert names == ["fp32", "bf16 autocast", "fp16 autocast", "fp16 + GradScaler"]
    assert "(≈ fp32" in chart(lab, 0)["data"][1]["name"].replace("<br>", " ")  # bf16 lies on fp32's line here
    assert "it skipped none" in text(lab) and "produced bfloat16" in text(lab)


def test_large_inputs_overflow_fp16_and_the_scaler_skips_and_warns(lab):
    lab.slider(key=key("input_exp")).set_value(5).run()
    assert "fp16 autocast: at step 1, `fc1`'s output held" in text(lab)
    assert "skipped the optimizer step" in text(lab) and "Detected call of" in text(lab)
    assert chart(lab, 2)["layout"]["title"]["text"].replace("<br>", " ").startswith("GradScaler's scale: 20 of 20")
    assert lab.query_params["input_exp"] == "5"


def test_a_tiny_loss_underflows_and_a_larger_init_scale_gets_more_back(lab):
    lab.slider(key=key("loss_exp")).set_value(-8).run()
    assert "fp16 autocast: the weights did not change at steps 1 to 20" in text(lab)
    at_16 = sum(chart(lab, 1)["data"][4]["y"])  # fp16 + GradScaler: underflowed grads per layer
    lab.slider(key=key("scale_exp")).set_value(24).run()
    assert sum(chart(lab, 1)["data"][4]["y"]) < at_16


def test_steps_and_seed_reach_the_run_and_the_link(lab):
    lab.slider(key=key("steps")).set_value(6).run()
    assert len(chart(lab, 0)["data"][0]["y"]) == 6
    lab.number_input(key=key("seed")).set_value(3).run()
    assert not lab.exception and lab.query_params["steps"] == "6" and lab.query_params["seed"] == "3"


def test_predict_then_reveal_is_scored_from_the_run(lab):
    lab.slider(key=key("loss_exp")).set_value(-8).run()
    lab.radio(key=key("predict")).set_value("No").run()
    assert lab.success[0].value.startswith("Right")


def test_bad_link_values_get_notices_and_defaults():
    at = open_page(PAGE, {"input_exp": "1e9", "loss_exp": "x", "scale_exp": "-3", "steps": "<script>"})
    assert not at.exception and len(at.warning) >= 4
    assert len(chart(at, 0)["data"][0]["y"]) == 20


def test_the_prediction_asks_about_a_setting_not_on_screen_and_runs_it_once_answered():
    """The newcomer's finding: it asked what the chart above it already showed."""
    from explorers.precision import lesson
    from explorers.precision.experiment import PrecisionOptions, run

    at = open_page(PAGE, {"input_exp": "3", "seed": "21"})
    question = at.radio(key="precision.predict")
    assert "× 1e5 instead of × 1e3" in question.label
    assert not [e for e in list(at.success) + list(at.error) if "left them finite, at" in e.value]  # not yet shown
    expected = lesson.predicted_answer(run(PrecisionOptions(input_exp=5, seed=21)))
    question.set_value("Yes").run()
    shown = [e.value for e in list(at.success) + list(at.error) if "left them finite, at" in e.value]
    assert shown and shown[0].startswith("Right." if expected == "Yes" else "Not quite")
    assert "At inputs × 1e5, fp16 autocast moved the weights, and left them finite, at 0 of" in shown[0]
