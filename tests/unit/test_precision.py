"""The precision lab's parts: options, the four runs from one start, the counts they read, the notebook API."""

from __future__ import annotations

import math

import pytest
import torch

from explorers import precision
from explorers.precision import experiment, lesson
from explorers.precision.experiment import PrecisionOptions
from tests.zoo import ZOO


def test_options_refuse_what_is_out_of_range():
    for bad in ({"input_exp": 99}, {"loss_exp": 1}, {"scale_exp": -1}, {"steps": 1}, {"seed": "0"}):
        with pytest.raises(ValueError):
            PrecisionOptions(**bad)


def test_at_the_defaults_every_precision_trains_from_the_same_start_and_fp32_has_no_counts():
    result = experiment.run(PrecisionOptions(steps=6))
    firsts = {p: run.losses[0] for p, run in result.runs.items()}
    assert firsts["fp16"] == firsts["fp16 + GradScaler"]  # the same forward: same weights, batch and autocast
    assert math.isclose(firsts["fp32"], firsts["fp16"], rel_tol=1e-2) and firsts["fp32"] != firsts["bf16"]
    assert all(all(run.stepped) for run in result.runs.values())
    fp32 = result.run("fp32")
    assert all(c.inf == c.nan == c.grad_underflow == 0 for c in fp32.layers.values())
    assert {d for _, d in fp32.op_dtypes} == {"float32"}
    assert "addmm" in [op for op, d in result.run("bf16").op_dtypes if d == "bfloat16"]


def test_large_inputs_overflow_fp16_and_the_scaler_skips_every_step_and_the_scheduler_warns():
    result = experiment.run(PrecisionOptions(input_exp=5, steps=5))
    fp16, scaled, bf16 = result.run("fp16"), result.run("fp16 + GradScaler"), result.run("bf16")
    assert fp16.layers["fc1"].inf + fp16.layers["fc1"].nan > 0 and math.isnan(fp16.losses[-1])
    assert not any(scaled.stepped) and [a for _, a in scaled.scales] == [2.0**15 / 2**i for i in range(5)]
    assert any("lr_scheduler.step()" in w for w in scaled.warnings)
    assert all(bf16.stepped) and sum(c.inf + c.nan for c in bf16.layers.values()) == 0
    text = " ".join(lesson.scaler_sentences(scaled))
    assert "skipped the optimizer step at steps 1 to 5" in text and "Detected call of" in text


def test_a_tiny_loss_underflows_every_fp16_gradient_and_the_scaler_gets_most_back():
    result = experiment.run(PrecisionOptions(loss_exp=-8, steps=4))
    fp16, scaled = result.run("fp16"), result.run("fp16 + GradScaler")
    assert all(c.grad_underflow == c.grad_values for c in fp16.layers.values()) and not any(fp16.stepped)
    assert (
        sum(c.grad_underflow for c in scaled.layers.values()) < sum(c.grad_values for c in scaled.layers.values()) / 2
    )
    assert all(scaled.stepped)


def test_compare_leaves_the_model_rng_and_default_dtype_and_reports_what_the_cpu_cannot_run():
    model, batch = ZOO["lstm_dropout"].build(0)
    weights = [p.detach().clone() for p in model.parameters()]
    state = torch.get_rng_state()
    found = precision.compare(model, batch, lambda out: ZOO["lstm_dropout"].loss(out))
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters()) and torch.equal(torch.get_rng_state(), state)
    assert torch.get_default_dtype() == torch.float32
    assert found["fp32"].error is None
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        # Which LSTM kernels oneDNN has depends on the CPU (CI's earlier machine ran bf16; an AMD EPYC without
        # bf16 instructions raises), so the CPU itself is asked, with a bare LSTM under the same autocast.
        if _lstm_runs_under(dtype):
            assert found[name].error is None and math.isfinite(found[name].loss)
        else:
            assert found[name].error and math.isnan(found[name].loss) and found[name].op_dtypes == ()


def _lstm_runs_under(dtype: torch.dtype) -> bool:
    lstm = torch.nn.LSTM(4, 4, num_layers=2, dropout=0.5)
    try:
        with torch.autocast("cpu", dtype=dtype):
            lstm(torch.randn(3, 2, 4))[0].sum().backward()
    except RuntimeError:
        return False
    return True


def test_compare_uses_a_dict_models_own_loss_and_refuses_an_output_without_one():
    model, batch = ZOO["dict_model"].build(0)
    found = precision.compare(model, batch)
    assert abs(found["bf16"].loss - found["fp32"].loss) < 0.05
    plain, rows = ZOO["plain_mlp"].build(0)
    with pytest.raises(ValueError, match="must carry a loss"):
        precision.compare(plain, rows)


def test_the_default_shows_fp16_underflow_costing_training_and_the_scaler_winning_it_back():
    result = experiment.run(PrecisionOptions())
    fp32, fp16, scaled = (result.run(p).losses[-1] for p in ("fp32", "fp16", "fp16 + GradScaler"))
    assert fp16 > 1.3 * fp32 and scaled == pytest.approx(fp32, rel=0.02)
    assert sum(c.grad_underflow for c in result.run("fp16").layers.values()) > 0


def test_the_card_says_which_overflowed_when_the_scale_falls_the_forward_at_large_inputs():
    """The audit's finding: at inputs x1e5 the scale fell to 9.5e-7 with every step skipped, and the card blamed
    the gradients; the forward's inf at step 1 was on the page."""
    from explorers.precision import card
    from explorers.precision.experiment import PrecisionOptions, run

    result = run(PrecisionOptions(input_exp=5, steps=6, seed=7))
    scaled = result.run("fp16 + GradScaler")
    assert scaled.scales[-1][1] < scaled.scales[0][0] and not any(scaled.stepped)
    first_bad = next(layer for layer, c in scaled.layers.items() if c.inf or c.nan)
    recovery = card.answer_card(result).recovery
    assert f"it was the forward: `{first_bad}`" in recovery and "it was the gradients" not in recovery


def test_curves_that_coincide_say_so_and_nan_steps_are_marked_without_a_made_up_loss():
    """The newcomer's finding: at the defaults three of four curves coincide unseen, and at inputs x1e4 both fp16
    curves vanished ("40 nan or inf, not drawn")."""
    from explorers.precision import figures as charts
    from explorers.precision.experiment import PrecisionOptions, run

    plain = charts.loss_figure(run(PrecisionOptions(seed=12)))
    on_a_line = [t.name for t in plain.data if " apart)" in t.name and "(≈ " in t.name]
    assert on_a_line and all(t.yaxis in (None, "y") for t in plain.data)
    large = run(PrecisionOptions(input_exp=4, steps=5, seed=12))
    figure = charts.loss_figure(large)
    marks = [t for t in figure.data if t.name.endswith(": nan or inf")]
    assert {t.name for t in marks} == {"fp16 autocast: nan or inf", "fp16 + GradScaler: nan or inf"}
    assert all(t.yaxis == "y2" and list(t.x) == [1, 2, 3, 4, 5] for t in marks)  # on an axis of their own
    assert len({t.y[0] for t in marks}) == 2 and "marked × along the top" in figure.layout.title.text


def test_a_step_that_turned_the_weights_into_nan_is_not_counted_as_moving_them():
    """The audit's finding: at inputs x1e6, loss x1e-12, scale 2^24, fp16 "moved the weights at 3 of 40 steps"
    where none of the three was a training update."""
    from explorers.precision import lesson
    from explorers.precision.experiment import PrecisionOptions, run

    result = run(PrecisionOptions(input_exp=6, loss_exp=-12, scale_exp=24, steps=12, seed=9001))
    fp16 = result.run("fp16")
    assert fp16.nonfinite_from is not None and sum(fp16.stepped) > sum(fp16.updates)
    assert len(fp16.updates) == fp16.nonfinite_from - 1
    assert f"fp16 at {sum(fp16.updates)}." in lesson.bf16_sentence(result)
    assert lesson.predicted_answer(result) == "No"


def test_the_scale_chart_counts_skipped_steps_not_steps_whose_gradients_underflowed_to_zero():
    """The re-audit's finding: "20 of 20 steps skipped" where the scaler skipped none (the weights did not move
    because every gradient underflowed to zero, and the scale stayed 65536)."""
    from explorers.precision import figures as charts
    from explorers.precision import lesson
    from explorers.precision.experiment import PrecisionOptions, run

    result = run(PrecisionOptions(loss_exp=-12, steps=8, seed=3))
    scaled = result.run("fp16 + GradScaler")
    assert not any(scaled.stepped) and scaled.scales[-1][1] == scaled.scales[0][0]
    assert scaled.skipped_steps == [] and "0 of 8 steps skipped" in charts.scale_figure(result).layout.title.text
    assert "It cut its scale at no step" in " ".join(lesson.scaler_sentences(scaled))


def test_a_scale_that_settles_is_not_said_to_overflow_at_every_scale():
    from explorers.precision import lesson
    from explorers.precision.experiment import PrecisionOptions, run

    scaled = run(PrecisionOptions(loss_exp=0, scale_exp=24, steps=12, seed=5)).run("fp16 + GradScaler")
    words = lesson.falling_scale_sentence(scaled)
    cut = [i for i, (before, after) in enumerate(scaled.scales, 1) if after < before]
    assert 0 < len(cut) < len(scaled.scales) and "at every scale" not in words and "not at the lower" in words
