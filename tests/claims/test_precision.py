"""The precision lab's claims, checked by torch code written here.

1. The lab's per-layer underflow count, recomputed with plain autocast and backward hooks of our own.
2. Every Statement at the edges of its scope and on the zoo (a custom Function, an LSTM, a dict
   model, tied weights, a Hugging Face model from a config).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from explorers.precision import experiment, lesson
from explorers.precision.experiment import PrecisionOptions
from tests.claims.falsify import falsifies
from tests.zoo import ZOO, call, tiny_bert

STATEMENTS = lesson.STATEMENTS


def test_the_underflow_count_matches_plain_autocast_and_hooks_of_our_own():
    options = PrecisionOptions(loss_exp=-6, steps=4)
    lab = experiment.run(options).run("fp16")
    torch.manual_seed(options.seed)
    model = experiment.build_model()
    x, y = experiment.make_batches(options)[0]
    grads = {}
    for precision in ("fp32", "fp16"):
        copy = __import__("copy").deepcopy(model)
        seen = {}

        def keep(module, grad_input, grad_output, seen=seen) -> None:
            seen.setdefault("g", grad_output[0].float())

        copy.fc2.register_full_backward_hook(keep)
        context = torch.autocast("cpu", dtype=torch.float16) if precision == "fp16" else torch.enable_grad()
        with context:
            loss = F.cross_entropy(copy(x), y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (loss * 1e-6).backward()
        grads[precision] = seen["g"]
    lost = (grads["fp16"] == 0) & (grads["fp32"] != 0)
    below = grads["fp32"].abs() < torch.finfo(torch.float16).tiny
    assert lab.layers["fc2"].grad_underflow == int((lost & below).sum()) > 0
    assert lab.layers["fc2"].grad_rounded_to_zero == int((lost & ~below).sum())


@falsifies(STATEMENTS["formats"])
def test_the_formats_ranges_are_torch_finfos():
    b, h, f = torch.finfo(torch.bfloat16), torch.finfo(torch.float16), torch.finfo(torch.float32)
    assert f"{b.max:.1e}" == f"{f.max:.1e}" == "3.4e+38" and f"{b.tiny:.1e}" == f"{f.tiny:.1e}" == "1.2e-38"
    assert h.max == 65504 and f"{h.tiny:.1e}" == "6.1e-05"
    assert float(torch.tensor(6e-8, dtype=torch.float16)) > 0 and float(torch.tensor(2e-8, dtype=torch.float16)) == 0
    assert torch.isinf(torch.tensor(70000.0).half()) and not torch.isinf(torch.tensor(1e38).bfloat16())
    assert b.bits == h.bits == 16 and b.resolution > h.resolution  # fewer mantissa bits in bf16


@falsifies(STATEMENTS["autocast"])
@pytest.mark.parametrize("name", ["custom_function", "dict_model", "tied_weights", "plain_mlp", "hf_bert"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_linear_low_keeps_parameters_and_their_grads_float32(name, dtype):
    if name == "hf_bert":
        pytest.importorskip("transformers")
        model, batch = tiny_bert()
        loss_of = lambda out: out.loss  # noqa: E731
    else:
        model, batch = ZOO[name].build(0)
        loss_of = ZOO[name].loss
    dtypes = experiment._Dtypes()
    with torch.autocast("cpu", dtype=dtype), dtypes:
        loss = loss_of(call(model, batch))
    loss.backward()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
    low = str(dtype).removeprefix("torch.")
    produced = {op: d for op, d in dtypes.ops}
    if "addmm" in produced or "mm" in produced:  # scope: a linear layer inside the region
        assert low in {d for op, d in dtypes.ops if op in ("addmm", "mm", "bmm")}
    if "_log_softmax" in produced:  # on the float32 list
        assert produced["_log_softmax"] == "float32"


@falsifies(STATEMENTS["autocast"])
def test_outside_the_region_nothing_is_cast_and_other_ops_follow_their_inputs():
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = nn.functional.linear(x, torch.randn(4, 4))
        followed = low.relu()
    assert low.dtype == followed.dtype == torch.bfloat16
    assert nn.functional.linear(x, torch.randn(4, 4)).dtype == torch.float32


def _scaled_steps(model, batches, scale, **kwargs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, **kwargs)
    seen = []
    for x in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        before = [p.detach().clone() for p in model.parameters()]
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        moved = any(
            not torch.equal(b.view(torch.int32), p.detach().view(torch.int32))
            for b, p in zip(before, model.parameters(), strict=True)
        )
        seen.append((moved, scaler.get_scale()))
    return seen


@falsifies(STATEMENTS["scaler"])
def test_the_scaler_skips_a_step_with_inf_halves_and_grows_after_its_interval():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    huge, fine = torch.full((2, 4), 1e4), torch.randn(2, 4)
    steps = _scaled_steps(model, [huge, fine, fine, fine], 2.0**16, growth_interval=2)
    assert steps[0] == (False, 2.0**15)  # inf found: skipped, × 0.5
    assert steps[1] == (True, 2.0**15) and steps[2] == (True, 2.0**16)  # two clean steps: × 2
    nan_model = nn.Linear(4, 4)
    with torch.no_grad():
        nan_model.weight[0, 0] = float("nan")
    assert _scaled_steps(nan_model, [fine], 8.0)[0] == (False, 4.0)  # nan is skipped the same way
    defaults = torch.amp.GradScaler("cpu")
    assert (defaults._backoff_factor, defaults._growth_factor, defaults._growth_interval) == (0.5, 2.0, 2000)


@falsifies(STATEMENTS["scheduler_order"])
@pytest.mark.parametrize("first_skipped", [True, False])
def test_the_order_warning_comes_only_when_the_optimizer_never_stepped_before_the_scheduler(first_skipped):
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    inputs = [torch.full((2, 4), 1e4) if first_skipped else torch.randn(2, 4), torch.full((2, 4), 1e4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in inputs:  # the second step is skipped in both cases
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
    warned = any("lr_scheduler.step()` before `optimizer.step()" in str(w.message) for w in caught)
    assert warned == first_skipped


@falsifies(STATEMENTS["formats"])
def test_a_bf16_zero_where_fp32_is_far_inside_bf16s_range_is_rounding_not_underflow():
    result = experiment.run(PrecisionOptions(input_exp=3, loss_exp=0, steps=4, seed=77))
    bf16 = result.run("bf16")
    assert sum(c.grad_underflow for c in bf16.layers.values()) == 0  # fp32's range: nothing below its tiny
    rounded = sum(c.grad_rounded_to_zero for c in bf16.layers.values())
    text = " ".join(lesson.run_sentences(bf16))
    assert (rounded > 0) == ("rounding, not underflow" in text) and "(underflow)" not in text


@falsifies(STATEMENTS["autocast"])
def test_float64_inputs_stay_float64_under_cpu_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = nn.functional.linear(torch.randn(2, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64))
    assert out.dtype == torch.float64 and "float64 inputs stay float64" in STATEMENTS["autocast"].scope


def test_weights_gone_nan_are_said_and_not_counted_as_unmoved_and_a_scaler_that_skipped_none_says_only_that():
    nan_run = experiment.run(PrecisionOptions(input_exp=6, loss_exp=0, steps=13, seed=1)).run("fp16")
    text = " ".join(lesson.run_sentences(nan_run))
    assert nan_run.nonfinite_from == 1 and "from step 1 on, some weights held inf or nan" in text
    assert "did not change" not in text
    silent = experiment.run(PrecisionOptions(input_exp=3, loss_exp=-10, scale_exp=0, steps=4, seed=77))
    scaled = silent.run("fp16 + GradScaler")
    assert not any(scaled.stepped)  # every gradient underflowed: nothing to skip, nothing moved
    words = " ".join(lesson.scaler_sentences(scaled))
    assert "skipped none" in words and "changed" not in words


@falsifies(STATEMENTS["fp16_loss_outside_autocast"])
@pytest.mark.parametrize(("seed", "loss_scale"), [(3, 1.0), (11, 1e-3), (42, 5.0)])
def test_a_float16_loss_outside_autocast_skips_the_first_step_at_the_default_scale_and_inside_it_does_not(
    seed, loss_scale
):
    """The audit's own loop: the loss outside autocast on float16 outputs, at GradScaler's default scale."""

    def first_step(inside: bool) -> tuple[torch.dtype, bool, float]:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        x, y = torch.randn(12, 8), torch.randint(0, 4, (12,))
        before = [p.detach().clone() for p in model.parameters()]
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, y) * loss_scale if inside else None
        if not inside:
            loss = F.cross_entropy(out, y) * loss_scale
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
        return loss.dtype, moved, scaler.get_scale()

    outside_dtype, outside_moved, outside_scale = first_step(inside=False)
    assert outside_dtype == torch.float16 and not outside_moved and outside_scale == 32768.0
    inside_dtype, inside_moved, inside_scale = first_step(inside=True)
    assert inside_dtype == torch.float32 and inside_moved and inside_scale == 65536.0
    assert torch.finfo(torch.float16).max == 65504 < 2.0**16 == torch.amp.GradScaler("cpu").get_scale()
