"""Every sentence the Gradients lab shows, checked by torch code written here, not by the lab's helpers.

The lab's models are rebuilt by hand as plain tensors and functions, from the recipe its
experiment module documents: one generator seeded with the seed draws every parameter in
order (a matrix from N(0, scale²/fan_in), a vector as zeros), then w_true (8 x 1), then x
(32 x 8); y = tanh(x @ w_true / sqrt(8)); the loss is the mean squared error.
"""

import contextlib
import math
import re

import pandas as pd
import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from explorers import gradients
from explorers.gradients import card as gradients_card
from explorers.gradients import figures as gradient_figures
from explorers.gradients import lesson
from explorers.gradients.experiment import GradientsOptions
from explorers.gradients.lesson import STATEMENTS
from tests.claims.falsify import falsifies
from tests.zoo import ZOO, call

SEED = 0


def draw(shapes, scale=1.0, seed=SEED):
    """Parameters (leaf tensors) for `shapes` in order, then the batch, all from one generator."""
    generator = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        if len(shape) >= 2:
            params.append((torch.randn(shape, generator=generator) * scale / math.sqrt(shape[1])).requires_grad_())
        else:
            params.append(torch.zeros(shape, requires_grad=True))
    w_true = torch.randn(8, 1, generator=generator)
    x = torch.randn(32, 8, generator=generator)
    return params, w_true, x, torch.tanh(x @ w_true / math.sqrt(8))


def mse(output, target):
    return ((output - target) ** 2).mean()


def stack_shapes(depth):
    shapes = []
    for i in range(depth):
        fan_in, fan_out = (8 if i == 0 else 16), (1 if i == depth - 1 else 16)
        shapes += [(fan_out, fan_in), (fan_out,)]
    return shapes


def stack_forward(params, x, activation):
    h = x
    pairs = list(zip(params[::2], params[1::2], strict=True))
    for i, (w, b) in enumerate(pairs):
        h = h @ w.T + b
        if i < len(pairs) - 1:
            h = activation(h)
    return h


def grad_norm(*tensors):
    return math.sqrt(sum(float(t.grad.double().norm()) ** 2 for t in tensors))


def number(text):
    return float(text.replace("**", ""))


def sentence(lines, pattern):
    found = [line for line in lines if re.search(pattern, line)]
    assert len(found) == 1, f"expected one sentence matching {pattern!r}, got {found}"
    return found[0]


def lab(scenario, **changes):
    options = GradientsOptions.for_scenario(scenario, **changes)
    run = gradients.scenario_run(options)
    return options, run


# --- The claims -----------------------------------------------------------------------------------


def test_detached_branch_gets_none_and_the_cut_is_named():
    _, run = lab("detached")
    lines = lesson.explain(run)
    status = sentence(lines, r"^Of \d+ trainable")
    broken = sentence(lines, r"read by the forward pass, yet")
    params, _, x, y = draw([(16, 8), (16,), (16, 16), (16,), (1, 16), (1,)])
    tw, tb, bw, bb, hw, hb = params
    h = torch.tanh(x @ tw.T + tb)
    b = torch.tanh(h @ bw.T + bb).detach()
    mse((h + b) @ hw.T + hb, y).backward()
    assert bw.grad is None and bb.grad is None and all(p.grad is not None for p in (tw, tb, hw, hb))
    assert "**4** a finite, non-zero gradient, **2** `.grad` None" in status
    assert "`branch.weight`, `branch.bias`" in broken and "`detach` (×1)" in broken
    for p in params:  # without the detach the same branch is reached: the cut is the cause
        p.grad = None
    h = torch.tanh(x @ tw.T + tb)
    mse((h + torch.tanh(h @ bw.T + bb)) @ hw.T + hb, y).backward()
    assert bw.grad is not None and bw.grad.abs().sum() > 0


def test_argmax_cuts_the_path_before_it():
    _, run = lab("argmax")
    broken = sentence(lesson.explain(run), r"read by the forward pass, yet")
    params, _, x, y = draw([(16, 8), (16,), (4, 16), (4,), (4, 1)])
    ew, eb, sw, sb, table = params
    choice = (torch.tanh(x @ ew.T + eb) @ sw.T + sb).argmax(dim=1)
    assert choice.dtype == torch.int64 and not choice.requires_grad
    mse(table[choice], y).backward()
    assert all(p.grad is None for p in (ew, eb, sw, sb)) and table.grad is not None
    assert "`encoder.weight`, `encoder.bias`, `scorer.weight` and 1 more" in broken and "`argmax` (×1)" in broken


def test_unused_layer_stays_none():
    _, run = lab("unused")
    line = sentence(lesson.explain(run), "no operation of the forward pass")
    params, _, x, y = draw([(16, 8), (16,), (16, 16), (16,), (1, 16), (1,)])
    ew, eb, sw, sb, hw, hb = params
    mse(torch.tanh(x @ ew.T + eb) @ hw.T + hb, y).backward()  # skip.* never enter the computation
    assert sw.grad is None and sb.grad is None
    assert line.startswith("`skip.weight`, `skip.bias`:")


def test_frozen_encoder_is_none_by_design():
    _, run = lab("frozen")
    lines = lesson.explain(run)
    line = sentence(lines, "requires_grad=False: autograd")
    params, _, x, y = draw([(16, 8), (16,), (1, 16), (1,)])
    ew, eb, hw, hb = params
    ew.requires_grad_(False), eb.requires_grad_(False)
    mse(torch.tanh(x @ ew.T + eb) @ hw.T + hb, y).backward()
    assert ew.grad is None and eb.grad is None and hw.grad is not None
    assert line.startswith("`encoder.weight`, `encoder.bias` have requires_grad=False")
    assert "2 more are frozen" in sentence(lines, r"^Of \d+ trainable")


def test_in_place_error_is_pytorchs_own_and_backward_stopped_partway():
    _, run = lab("inplace")
    line = sentence(lesson.explain(run), "raised PyTorch's own error")
    quoted = re.search(r"\*(.+)\*", line).group(1)
    params, _, x, y = draw([(16, 8), (16,), (1, 16), (1,)])
    w1, b1, w2, b2 = params
    h = torch.sigmoid(x @ w1.T + b1)
    h[:, 0] = 0
    with pytest.raises(RuntimeError) as raised:
        mse(h @ w2.T + b2, y).backward()
    assert quoted == str(raised.value).strip().splitlines()[0]
    assert w2.grad is not None and b2.grad is not None and w1.grad is None and b1.grad is None
    assert "already written gradients into `fc2.weight`, `fc2.bias`" in line


def test_dead_relus_pass_back_exactly_zero():
    _, run = lab("dead_relu")
    line = sentence(lesson.explain(run), "Dead ReLUs")
    params, _, x, y = draw([(16, 8), (16,), (16, 16), (16,), (1, 16), (1,)])
    w1, b1, w2, b2, w3, b3 = params
    with torch.no_grad():
        b1.fill_(-10.0)
    h1 = torch.relu(x @ w1.T + b1)
    h2 = torch.relu(h1 @ w2.T + b2)
    mse(h2 @ w3.T + b3, y).backward()
    for name, h in (("1", h1), ("3", h2)):
        dead = int((h == 0).all(dim=0).sum())
        assert f"`{name}`: **{dead} of 16** units zero for all 32 samples" in line
    zero = [
        n
        for n, p in zip(["0.weight", "0.bias", "2.weight", "2.bias", "4.weight"], params, strict=False)
        if not p.grad.any()
    ]
    assert len(zero) == 5 and not b3.grad.eq(0).all()
    assert "`0.weight`, `0.bias`, `2.weight` and 2 more got a gradient of **exactly 0**" in line


def test_vanishing_ratio_and_per_layer_factor():
    options, run = lab("vanishing")
    line = sentence(lesson.explain(run), "^Vanishing")
    ratio, factor = re.search(
        r"is \*\*(\S+)\*\* of the last.+about ×(\S+) per step between neighbouring", line
    ).groups()
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    mse(stack_forward(params, x, torch.sigmoid), y).backward()
    first, last = grad_norm(params[0]), grad_norm(params[-2])
    assert number(ratio) == pytest.approx(first / last, rel=0.05)
    assert number(factor) == pytest.approx((first / last) ** (1 / (options.depth - 1)), rel=0.05)
    assert f"over {options.depth - 1} steps ({options.depth} layers)" in line


def test_exploding_names_the_largest_layer_and_the_loss():
    options, run = lab("exploding")
    line = sentence(lesson.explain(run), "^Exploding")
    layer, norm, times, loss = re.search(
        r"largest, `(\d+)`, is \*\*(\S+)\*\*, \*\*(\S+)×\*\* its weight norm\. The loss is (\S+);", line
    ).groups()
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    value = mse(stack_forward(params, x, torch.relu), y)
    value.backward()
    norms = [grad_norm(w, b) for w, b in zip(params[::2], params[1::2], strict=True)]
    top = max(range(len(norms)), key=norms.__getitem__)
    weight = math.sqrt(sum(float(p.detach().norm()) ** 2 for p in params[2 * top : 2 * top + 2]))
    assert int(layer) == 2 * top  # Sequential index: Linear layers sit at 0, 2, 4, ...
    assert number(norm) == pytest.approx(norms[top], rel=0.05)
    assert number(times) == pytest.approx(norms[top] / weight, rel=0.05)
    assert number(loss.rstrip(";")) == pytest.approx(float(value.detach()), rel=0.05)
    assert f"{sum(n > 1e3 for n in norms)} layers with a gradient norm above 1e+03" in line


def test_healthy_has_no_findings_and_a_balanced_ratio():
    options, run = lab("healthy")
    line = sentence(lesson.explain(run), "^No findings")
    ratio = re.search(r"norm is (\S+)× the last", line).group(1)
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    mse(stack_forward(params, x, torch.tanh), y).backward()
    assert all(p.grad is not None and p.grad.any() and torch.isfinite(p.grad).all() for p in params)
    assert number(ratio) == pytest.approx(grad_norm(params[0]) / grad_norm(params[-2]), rel=0.05)


def test_broken_graph_stays_none_at_every_scale():
    options = GradientsOptions.for_scenario("detached")
    run = gradients.scenario_run(options)
    lines = lesson.explain(run, sweep=gradients.scale_sweep(options))
    line = sentence(lines, "None every time")
    for scale in (0.5, 1.0, 2.0):
        params, _, x, y = draw([(16, 8), (16,), (16, 16), (16,), (1, 16), (1,)], scale=scale)
        tw, tb, bw, bb, hw, hb = params
        h = torch.tanh(x @ tw.T + tb)
        mse((h + torch.tanh(h @ bw.T + bb).detach()) @ hw.T + hb, y).backward()
        assert bw.grad is None and bb.grad is None
    assert line.startswith("At init scales 0.5, 1, 2, `branch.bias`, `branch.weight`")


def test_vanishing_norm_moves_with_the_scale():
    options = GradientsOptions.for_scenario("vanishing")
    run = gradients.scenario_run(options)
    line = sentence(lesson.explain(run, sweep=gradients.scale_sweep(options)), "this finite norm moved with the scale")
    values = re.search(r"went \*\*(.+?)\*\*", line).group(1).split(" → ")
    for text, factor in zip(values, (0.5, 1.0, 2.0), strict=True):
        params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale * factor)
        mse(stack_forward(params, x, torch.sigmoid), y).backward()
        assert number(text) == pytest.approx(grad_norm(*params[:2]), rel=0.05)


def test_forgetting_zero_grad_sums_the_batches():
    options, run = lab("no_zero_grad")
    lines = lesson.explain(run)
    growth_line = sentence(lines, "Without `zero_grad`")
    share_line = sentence(lines, "add up to")
    total, growth = re.search(r"is \*\*(\S+)\*\*, \*\*(\S+)×\*\*", growth_line).groups()
    summed, share = re.search(r"add up to (\S+); their sum's norm is (\d+)%", share_line).groups()
    params, w_true, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    generator = torch.Generator().manual_seed(options.seed + 1)
    own = []
    for i in range(options.k):
        if i:
            x = torch.randn(32, 8, generator=generator)
            y = torch.tanh(x @ w_true / math.sqrt(8))
        before = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
        mse(stack_forward(params, x, torch.tanh), y).backward()  # no zero_grad in between
        own.append(
            math.sqrt(sum(float((p.grad - b).double().norm()) ** 2 for p, b in zip(params, before, strict=True)))
        )
    accumulated = grad_norm(*params)
    assert number(total) == pytest.approx(accumulated, rel=0.05)
    assert float(growth) == pytest.approx(accumulated / own[0], abs=0.006)
    assert number(summed) == pytest.approx(sum(own), rel=0.05)
    assert int(share) == round(100 * accumulated / sum(own))
    assert f"after {options.k} batches" in growth_line


def test_clipping_scales_everything_by_one_factor():
    options = GradientsOptions.for_scenario("exploding", max_norm=0.5)
    run = gradients.scenario_run(options)
    line = sentence(lesson.explain(run, clipping=gradients.clip_once(options)), "scaled the total norm")
    before, after, factor, ratio_before, ratio_after = re.search(
        r"from \*\*(\S+)\*\* to \*\*(\S+)\*\*: every gradient multiplied by the same (\S+)\. "
        r"The first/last layer weight gradient norm \(`0` vs `\d+`\) was \*\*(\S+)\*\* before and "
        r"\*\*(\S+)\*\* after",
        line,
    ).groups()
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    mse(stack_forward(params, x, torch.relu), y).backward()
    total = math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in params))
    scale = options.max_norm / (total + 1e-6)  # clip_grad_norm_'s documented rule
    first, last = grad_norm(params[0]), grad_norm(params[-2])  # weights only, as the diagnosis compares layers
    assert number(before) == pytest.approx(total, rel=0.05)
    assert number(after) == pytest.approx(total * scale, rel=0.05)
    assert number(factor) == pytest.approx(scale, rel=0.05)
    assert number(ratio_before) == pytest.approx(first / last, rel=0.05)
    assert number(ratio_after) == pytest.approx((first * scale) / (last * scale), rel=0.05)
    assert ratio_before == ratio_after


def test_clipping_below_max_norm_changes_nothing():
    options = GradientsOptions.for_scenario("vanishing")
    run = gradients.scenario_run(options)
    line = sentence(lesson.explain(run, clipping=gradients.clip_once(options)), "left every gradient")
    total = re.search(r"norm is (\S+), below max_norm = (\S+):", line).group(1)
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    mse(stack_forward(params, x, torch.sigmoid), y).backward()
    value = grad_norm(*params)
    assert value < options.max_norm and number(total.rstrip(",")) == pytest.approx(value, rel=0.05)


def test_clipped_training_stays_finite_where_plain_training_blows_up():
    options = GradientsOptions.for_scenario("exploding")
    run = gradients.scenario_run(options)
    line = sentence(lesson.explain(run, training=gradients.clipped_training(options)), "^Training the exploding case")
    start, blown, step, clipped_end = re.search(
        r"loss went from (\S+) to \*\*(\S+)\*\* at step (\d+), where the run stopped; with clipping at \S+, "
        r"to \*\*(\S+)\*\*",
        line,
    ).groups()

    def train(clip):
        params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
        losses = []
        for _ in range(30):
            for p in params:
                p.grad = None
            loss = mse(stack_forward(params, x, torch.relu), y)
            losses.append(float(loss.detach()))
            if not math.isfinite(losses[-1]):
                break
            loss.backward()
            total = math.sqrt(sum(float(p.grad.norm()) ** 2 for p in params))
            factor = min(1.0, options.max_norm / (total + 1e-6)) if clip else 1.0
            with torch.no_grad():
                for p in params:
                    p -= options.learning_rate * factor * p.grad
        return losses

    plain, clipped = train(False), train(True)
    assert number(start) == pytest.approx(plain[0], rel=0.05)
    assert int(step) == len(plain) - 1 and blown == str(plain[-1]) and not math.isfinite(plain[-1])
    assert len(clipped) == 30 and all(math.isfinite(v) for v in clipped)
    assert number(clipped_end) == pytest.approx(clipped[-1], rel=0.05)


def test_answer_card_evidence_quotes_this_runs_ratio():
    options, run = lab("vanishing")
    card = gradients_card.answer_card(run)
    ratio = re.search(r"First/last layer weight gradient norm: (\S+) \(`0` vs `14`\)", card.evidence).group(1)
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    mse(stack_forward(params, x, torch.sigmoid), y).backward()
    assert number(ratio) == pytest.approx(grad_norm(params[0]) / grad_norm(params[-2]), rel=0.05)
    assert "**16** a finite, non-zero gradient" in card.evidence


# --- Issue 18: every sentence has a witness (settings other than the ones quoted in the findings) ---------------


DEAD_SHAPES = [(16, 8), (16,), (16, 16), (16,), (1, 16), (1,)]


def dead_relu_grads(scale, seed):
    params, _, x, y = draw(DEAD_SHAPES, scale=scale, seed=seed)
    w1, b1, w2, b2, w3, b3 = params
    with torch.no_grad():
        b1.fill_(-10.0)
    pre = x @ w1.T + b1
    mse(torch.relu(torch.relu(pre) @ w2.T + b2) @ w3.T + b3, y).backward()
    return params, (x @ w1.T).detach()


def test_an_exact_zero_that_does_not_move_is_not_called_a_graph_bug():
    options = GradientsOptions.for_scenario("dead_relu", init_scale=0.4, seed=2)
    run, sweep = gradients.scenario_run(options), gradients.scale_sweep(options)
    for factor in (0.5, 1.0, 2.0):  # plain torch: the first layer is reached (a tensor) and gets exactly 0
        params, _ = dead_relu_grads(0.4 * factor, seed=2)
        assert params[0].grad is not None and not params[0].grad.any()
    line = sentence(lesson.explain(run, sweep=sweep), r"exactly 0\*\* at every scale")
    assert "`0.weight`" in line and "a path reaches them" in line
    card = gradients_card.answer_card(run, sweep)
    assert "exact 0 that does not move is a graph bug" not in card.could_prove_wrong
    assert not any("broken graph" in line.lower() for line in lesson.explain(run, sweep=sweep))


def test_clipping_is_not_said_to_leave_the_cause_and_its_ratio_is_measured():
    options = GradientsOptions.for_scenario("exploding", depth=6, init_scale=2.5, seed=4, max_norm=0.1)
    clipping = gradients.clip_once(options)
    line = lesson.clipping_line(clipping)
    params, _, x, y = draw(stack_shapes(6), scale=2.5, seed=4)
    mse(stack_forward(params, x, torch.relu), y).backward()
    ratio = grad_norm(params[0]) / grad_norm(params[-2])
    torch.nn.utils.clip_grad_norm_(params, 0.1)
    assert clipping.imbalance_before == pytest.approx(ratio, rel=1e-4)
    assert clipping.imbalance_after == pytest.approx(grad_norm(params[0]) / grad_norm(params[-2]), rel=1e-4)
    assert "not the balance" in line and "cause" not in line and "whatever made" not in line
    assert "cause" not in lesson.predict_reveal(clipping)


def test_the_dead_relu_code_comment_holds_at_large_scales():
    options = GradientsOptions.for_scenario("dead_relu", init_scale=5.0, seed=1)
    code = lesson.scenario_text(options).code
    _, wx = dead_relu_grads(5.0, seed=1)
    assert float(wx.max()) > 10  # "w·x never gets above it" would be false here
    assert "dead for a sample where w·x < 10" in code and "never" not in code
    assert bool((torch.relu(wx - 10)[wx < 10] == 0).all())


def test_the_exploding_scale_is_stated_against_lecun_and_he():
    options = GradientsOptions.for_scenario("exploding", init_scale=2.5, seed=3)
    text = lesson.scenario_text(options).pathology
    params, *_ = draw(stack_shapes(options.depth), scale=2.5, seed=3)
    w = params[2]  # a 16 x 16 hidden weight: LeCun std 1/4, He std √2/4
    lecun, he = 1 / math.sqrt(16), math.sqrt(2 / 16)
    measured = float(w.detach().std())
    assert f"{2.5:g}× LeCun scale, {2.5 / math.sqrt(2):.2g}× He scale" in text and "3x" not in text
    assert measured / he == pytest.approx(measured / lecun / math.sqrt(2))


def test_the_scenario_title_description_and_code_follow_the_knobs():
    options = GradientsOptions.for_scenario("vanishing", activation="tanh", depth=5, init_scale=0.7)
    text = lesson.scenario_text(options)
    assert "nn.Tanh()" in text.code and "nn.Sigmoid()" not in text.code and "range(5)" in text.code
    assert "tanh" in text.title and "5 Linear layers" in text.title and "sigmoid" not in text.pathology
    assert "N(0, 0.7² / fan_in)" in text.code
    model, *_ = gradients.experiment.build(options)
    assert sum(isinstance(m, nn.Tanh) for m in model) == 4 and sum(isinstance(m, nn.Linear) for m in model) == 5


def test_accumulated_norm_falling_between_batches_is_reported_as_it_ran():
    options = GradientsOptions.for_scenario("no_zero_grad", activation="sigmoid", init_scale=0.5, seed=2, k=6)
    run = gradients.scenario_run(options)
    line = sentence(lesson.explain(run), "Without `zero_grad`")
    params, w_true, x, y = draw(stack_shapes(options.depth), scale=0.5, seed=2)
    generator = torch.Generator().manual_seed(3)
    norms = []
    for i in range(6):
        if i:
            x = torch.randn(32, 8, generator=generator)
            y = torch.tanh(x @ w_true / math.sqrt(8))
        mse(stack_forward(params, x, torch.sigmoid), y).backward()
        norms.append(grad_norm(*params))
    fell = [i + 1 for i in range(1, 6) if norms[i] < norms[i - 1]]
    assert fell and run.accumulation.fell_at == tuple(fell)
    assert f"fell after batch {' and '.join(map(str, fell))}" in line
    assert "keeps growing" not in gradient_figures.accumulation_figure(run.accumulation).layout.title.text


# --- The general statements, each tried on the adversarial zoo -------------------------------------------------

BACKWARD_RUNS = [n for n in ZOO if n not in ("inplace_on_saved", "frozen")]


@falsifies(STATEMENTS["accumulates"])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_backward_adds_into_every_parameters_grad(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=8)
    loss = spec.loss(call(model, batch))
    params = [p for p in model.parameters() if p.requires_grad]
    once = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    for p in params:
        p.grad = torch.ones_like(p)  # something already there is added to, not replaced
    loss.backward()
    for p, g in zip(params, once, strict=True):
        assert torch.equal(p.grad, torch.ones_like(p) + (0 if g is None else g))


@falsifies(STATEMENTS["none_stays_none"], STATEMENTS["broken_graph"])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_a_missing_path_stays_none_at_every_scale(name):
    spec = ZOO[name]
    missing = []
    for scale in (0.1, 1.0, 10.0):
        model, batch = spec.build(seed=5)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        spec.loss(call(model, batch)).backward()
        missing.append({n for n, p in model.named_parameters() if p.requires_grad and p.grad is None})
    assert missing[0] == missing[1] == missing[2]
    if name == "no_grad_inside":  # the parameters behind no_grad are the ones missing
        assert missing[0] == {"first.weight", "first.bias"}


@falsifies(STATEMENTS["broken_graph"])
@pytest.mark.parametrize("name", ZOO)
def test_detach_no_grad_and_integer_outputs_carry_no_grad_fn(name):
    cut = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            named = getattr(func, "__name__", "")
            for t in [out] if isinstance(out, torch.Tensor) else []:
                if not torch.is_grad_enabled() or named == "detach" or not (t.is_floating_point() or t.is_complex()):
                    cut.append(t.grad_fn is None and not t.requires_grad)
            return out

    model, batch = ZOO[name].build()
    with Watch():
        call(model, batch)
    assert all(cut)


@falsifies(STATEMENTS["unused"])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_a_parameter_nothing_reads_stays_none(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=1)
    model.register_parameter("never_read", nn.Parameter(torch.randn(3)))
    spec.loss(call(model, batch)).backward()
    assert model.never_read.grad is None


@falsifies(STATEMENTS["frozen"])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_a_frozen_parameter_gets_no_grad(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=1)
    params = [p for p in model.parameters() if p.requires_grad]
    params[0].requires_grad_(False)
    loss = spec.loss(call(model, batch))
    if loss.requires_grad:
        loss.backward()
    assert params[0].grad is None


@falsifies(STATEMENTS["backward_error"])
@pytest.mark.parametrize("name", [n for n in ZOO if n != "frozen"])
def test_backward_raises_exactly_when_a_saved_tensor_changed_in_place(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=3)
    versions = []

    def pack(tensor):
        versions.append((tensor, tensor._version))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.random.fork_rng():
        spec.loss(call(model, batch))
    changed = any(t._version != v for t, v in versions)
    loss = spec.loss(call(model, batch))  # the same forward, with PyTorch's own check
    if changed:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    else:
        loss.backward()


@falsifies(STATEMENTS["dead_units"])
def test_relu_passes_back_zero_where_its_output_is_zero():
    x = torch.cat([torch.randn(1000), torch.zeros(10)]).requires_grad_()
    out = torch.relu(x)
    out.backward(torch.randn(1010))
    assert not x.grad[out == 0].any()
    y = torch.randn(64, 8)
    w = torch.randn(16, 8, requires_grad=True)
    bias = torch.full((16,), -100.0, requires_grad=True)  # every unit dead for every sample
    torch.relu(y @ w.T + bias).sum().backward()
    assert w.grad is not None and not w.grad.any() and not bias.grad.any()


@falsifies(STATEMENTS["zero_gradient"])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_multiplying_by_zero_gives_zeros_not_none(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=2)
    loss = spec.loss(call(model, batch))
    reached = [g is not None for g in torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)]
    model, batch = spec.build(seed=2)
    (spec.loss(call(model, batch)) * 0).backward()
    for was_reached, p in zip(reached, model.parameters(), strict=True):
        assert (p.grad is not None and not p.grad.any()) if was_reached else p.grad is None


@falsifies(STATEMENTS["vanishing"])
@pytest.mark.parametrize("seed", range(5))
def test_a_sigmoid_layer_with_spectral_norm_below_4_shrinks_the_gradient(seed):
    generator = torch.Generator().manual_seed(seed)
    z = torch.linspace(-20, 20, 4001, requires_grad=True)
    torch.sigmoid(z).sum().backward()
    assert float(z.grad.max()) <= 0.25
    w = torch.randn(16, 16, generator=generator)
    w = w * (3.9 / torch.linalg.matrix_norm(w, ord=2))
    h = torch.randn(32, 16, generator=generator, requires_grad=True)
    upstream = torch.randn(32, 16, generator=generator)
    torch.sigmoid(h @ w.T).backward(upstream)
    assert float(h.grad.norm()) < float(upstream.norm())


@falsifies(STATEMENTS["homogeneous"])
@pytest.mark.parametrize("activation", [torch.relu, lambda t: t])
@pytest.mark.parametrize("depth", [2, 5])
def test_a_bias_free_relu_stack_scales_as_c_to_the_depth(activation, depth):
    params, _, x, y = draw(stack_shapes(depth), scale=1.0, seed=depth)
    scaled = [(p.detach() * (2.0 if p.dim() == 2 else 1.0)).requires_grad_() for p in params]
    out, out_scaled = stack_forward(params, x, activation), stack_forward(scaled, x, activation)
    assert torch.allclose(out_scaled, out * 2.0**depth, rtol=1e-4, atol=1e-5)
    mse(out, y).backward()
    mse(out_scaled, y).backward()
    assert grad_norm(*scaled) > grad_norm(*params)


def test_tanh_is_outside_the_homogeneous_scope_and_the_card_does_not_cite_it():
    """The audit's setting: at depth 12 and scale 5 doubling every tanh weight moves the output far less than
    2^12, so the homogeneity statement is not this run's mechanism."""
    params, _, x, _ = draw(stack_shapes(12), scale=5.0)
    doubled = [p.detach() * (2.0 if p.dim() == 2 else 1.0) for p in params]
    with torch.no_grad():
        growth = float(stack_forward(doubled, x, torch.tanh).norm() / stack_forward(params, x, torch.tanh).norm())
    assert growth < 2.0**3  # nowhere near 2^12
    _, run = lab("exploding", depth=12, init_scale=5.0, activation="tanh")
    mechanism = gradients_card.answer_card(run).mechanism
    assert "exploding" in run.diagnosis.kinds
    assert STATEMENTS["homogeneous"].text not in mechanism and STATEMENTS["critical_gain"].text not in mechanism


def first_layer_gradient(depth, scale, activation, seeds=range(12), width=64):
    """The mean first-layer weight gradient norm of bias-free width-64 stacks, over seeds (the gain is an
    expectation over the weights)."""
    norms = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        shapes = [(width, 8)] + [(width, width)] * (depth - 2) + [(1, width)]
        weights = [(torch.randn(s, generator=generator) * scale / math.sqrt(s[1])).requires_grad_() for s in shapes]
        x, y = torch.randn(256, 8, generator=generator), torch.randn(256, 1, generator=generator)
        h = x
        for i, w in enumerate(weights):
            h = h @ w.T
            if i < len(weights) - 1:
                h = activation(h)
        mse(h, y).backward()
        norms.append(float(weights[0].grad.norm()))
    return sum(norms) / len(norms)


@falsifies(STATEMENTS["critical_gain"])
@pytest.mark.parametrize("activation, gain", [(torch.relu, math.sqrt(2)), (lambda t: t, 1.0)], ids=["relu", "identity"])
def test_gradients_grow_with_depth_above_the_gain_and_shrink_below_it(activation, gain):
    """The audit measured a ReLU stack at scale 1.0 (below √2): first-layer gradients 1.04, 0.675, 0.064, 0.013
    at depths 2, 4, 8, 12. Both sides of the gain, averaged over seeds."""
    below = [first_layer_gradient(depth, 0.7 * gain, activation) for depth in (2, 6, 12)]
    above = [first_layer_gradient(depth, 1.4 * gain, activation) for depth in (2, 6, 12)]
    assert below[0] > below[1] > below[2]
    assert above[0] < above[1] < above[2]


@falsifies(STATEMENTS["exploding"])
@pytest.mark.parametrize("factor", [1.5, 3.0])
def test_a_gradient_multiplied_by_more_than_one_per_layer_grows_geometrically(factor):
    """Orthogonal weights times `factor`, identity activations: each layer multiplies the gradient's norm by
    exactly `factor` on the way back, so k layers down it is factor^k times the top's."""
    generator = torch.Generator().manual_seed(0)
    weights = [torch.linalg.qr(torch.randn(16, 16, generator=generator))[0] * factor for _ in range(6)]
    x = torch.randn(4, 16, generator=generator, requires_grad=True)
    hidden = [x]
    for w in weights:
        hidden.append(hidden[-1] @ w.T)
        hidden[-1].retain_grad()
    top = torch.randn(4, 16, generator=generator)
    hidden[-1].backward(top)
    for k, h in enumerate(reversed(hidden)):
        assert float(h.grad.norm()) == pytest.approx(factor**k * float(top.norm()), rel=1e-4)


def test_the_exploding_card_cites_growth_only_where_the_measured_factor_grows():
    """ReLU at scale 5: the output explodes (homogeneity) while the first/last weight gradient ratio is below 1,
    so the card cites the homogeneous statements, not the layer-to-layer growth."""
    options, run = lab("exploding", depth=12, init_scale=5.0, activation="relu")
    params, _, x, y = draw(stack_shapes(12), scale=5.0)
    mse(stack_forward(params, x, torch.relu), y).backward()
    ratio = grad_norm(params[0]) / grad_norm(params[-2])
    mechanism = gradients_card.answer_card(run).mechanism
    assert ratio < 1 and STATEMENTS["exploding"].text not in mechanism
    assert STATEMENTS["homogeneous"].text in mechanism and "drawn at s = 5, above √2" in mechanism
    _, tanh_run = lab("exploding", depth=12, init_scale=5.0, activation="tanh")
    params, _, x, y = draw(stack_shapes(12), scale=5.0)
    mse(stack_forward(params, x, torch.tanh), y).backward()
    grows = grad_norm(params[0]) / grad_norm(params[-2]) > 1
    assert (STATEMENTS["exploding"].text in gradients_card.answer_card(tanh_run).mechanism) == grows


def test_one_first_last_ratio_on_the_card_and_both_name_their_layers():
    """The audit's setting: the evidence's weight-gradient ratio and the clipping line's are one definition."""
    from explorers.gradients.clipping import clip_once

    options, run = lab("no_zero_grad", depth=3, init_scale=2.0, activation="relu", k=20)
    clipping = clip_once(options)
    card = gradients_card.answer_card(run, None, clipping)
    params, _, x, y = draw(stack_shapes(3), scale=2.0)
    mse(stack_forward(params, x, torch.relu), y).backward()
    weights_only = grad_norm(params[0]) / grad_norm(params[-2])
    quoted = re.findall(
        r"first/last layer weight gradient norm[:]? (?:\(`0` vs `4`\) )?([0-9.e+-]+)", card.evidence, re.I
    )
    assert len(quoted) == 2 and all(number(q) == pytest.approx(weights_only, rel=0.05) for q in quoted), card.evidence
    assert "(`0` vs `4`)" in lesson.clipping_line(clipping)


@falsifies(STATEMENTS["nonfinite"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_input_reaches_every_output_of_its_row(bad):
    linear = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    x[1, 2] = bad
    out = linear(x)
    assert not torch.isfinite(out[1]).any() and torch.isfinite(out[[0, 2]]).all()
    out.sum().backward()
    assert not torch.isfinite(linear.weight.grad).all()


@falsifies(STATEMENTS["clip_one_factor"])
@pytest.mark.parametrize("max_norm", [1e-3, 1e6])
@pytest.mark.parametrize("name", BACKWARD_RUNS)
def test_clip_grad_norm_multiplies_every_gradient_by_one_factor(name, max_norm):
    spec = ZOO[name]
    model, batch = spec.build(seed=9)
    spec.loss(call(model, batch)).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    before = [p.grad.clone() for p in params]
    total = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    factor = min(1.0, max_norm / (total + 1e-6))
    for p, g in zip(params, before, strict=True):
        assert torch.allclose(p.grad, g * factor, rtol=1e-5, atol=1e-12)


# --- Audit of the Gradients lab at non-default settings (/tmp/audit/ag) ---------------------------------------


@pytest.mark.parametrize(
    "scenario, changes",
    [
        ("exploding", {"init_scale": 0.05, "depth": 2}),
        ("vanishing", {"init_scale": 5.0}),
        ("exploding", {"depth": 4, "init_scale": 1.0, "activation": "tanh"}),  # what a link with only the scenario gets
    ],
)
def test_a_stack_scenarios_description_says_what_was_built_and_promises_no_pathology(scenario, changes):
    options = GradientsOptions.for_scenario(scenario, **changes)
    text = lesson.scenario_text(options)
    params, _, x, y = draw(stack_shapes(options.depth), scale=options.init_scale)
    act = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}[options.activation]
    mse(stack_forward(params, x, act), y).backward()
    ratio = grad_norm(params[0]) / grad_norm(params[-2])
    assert 1e-3 < ratio < 1e3 and max(float(p.grad.norm()) for p in params) < 1e3  # plain torch: neither happens
    shown = f"{text.title} {text.pathology}".lower()
    assert "exploding" not in shown and "vanishing" not in shown and "large weights" not in shown
    assert "small weights" not in shown and f"{options.depth} linear layers" in shown


@pytest.mark.parametrize("activation", [nn.Tanh, nn.Identity])
def test_the_vanishing_mechanism_names_sigmoid_only_when_the_model_has_one(activation):
    """A stack without Sigmoid whose weight gradients do vanish: its last Linear's weights are scaled by 1e-4."""
    torch.manual_seed(0)
    layers = [m for i in range(6) for m in (nn.Linear(8, 8), activation())][:-1] + [nn.Linear(8, 1)]
    model, x, y = nn.Sequential(*layers), torch.randn(32, 8), torch.randn(32, 1)
    with torch.no_grad():
        model[-1].weight.mul_(1e-4)
    d = gradients.diagnose(model, x, y, nn.functional.mse_loss)
    run = gradients.experiment.ScenarioRun(GradientsOptions(), d, None, 0, "", None, (activation.__name__,))
    mechanism = gradients_card.answer_card(run).mechanism
    nn.functional.mse_loss(model(x), y).backward()
    linears = [m for m in model if isinstance(m, nn.Linear)]
    ratio = float(linears[0].weight.grad.norm() / linears[-1].weight.grad.norm())
    assert ratio < 1e-3 and "Vanishing" in d.verdict  # plain torch: the first weight gradient is tiny
    assert "sigmoid" not in mechanism.lower() and "ReLU-family" not in gradients_card.answer_card(run).recovery
    steps = len(linears) - 1
    factor = float(re.search(rf"about ×(\S+) per step between neighbouring layers, over {steps} steps", mechanism)[1])
    assert factor == pytest.approx(ratio ** (1 / steps), rel=0.05)
    sigmoid_run = gradients.scenario_run(GradientsOptions.for_scenario("vanishing"))
    assert STATEMENTS["vanishing"].text in gradients_card.answer_card(sigmoid_run).mechanism


@pytest.mark.parametrize("learning_rate", [1.0, 0.01])
def test_clipped_training_says_how_far_the_weights_moved_and_where_the_gradient_ended(learning_rate):
    options = GradientsOptions.for_scenario(
        "exploding", depth=8, init_scale=3.0, activation="relu", learning_rate=learning_rate, max_norm=100.0
    )
    line = lesson.training_line(gradients.clipped_training(options))
    params, _, x, y = draw(stack_shapes(8), scale=3.0)
    initial = torch.cat([p.detach().flatten() for p in params]).double()
    norms = []
    for _ in range(30):
        for p in params:
            p.grad = None
        mse(stack_forward(params, x, torch.relu), y).backward()
        total = math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in params))
        norms.append(total)
        factor = min(1.0, 100.0 / (total + 1e-6))
        with torch.no_grad():
            for p in params:
                p -= learning_rate * factor * p.grad
    moved = float((torch.cat([p.detach().flatten() for p in params]).double() - initial).norm() / initial.norm())
    assert "are still the model's" not in line and "initial weights that made" not in line
    assert f"they moved {moved:.0%} of their initial norm" in line
    first, last = re.search(r"gradient norm went from (\S+) at the first step to (\S+) at the last", line).groups()
    assert float(first) == pytest.approx(norms[0], rel=0.05)
    # 30 steps of an exploding stack amplify float32 rounding (nn.Linear's addmm against x @ w.T + b here)
    assert float(last) == pytest.approx(norms[-1], rel=1.0) and norms[-1] < 1e3 and "still above" not in line


class _DropGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w):
        return h * w

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _CustomFunctionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.w = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return _DropGrad.apply(self.fc(x), self.w)


def test_a_parameter_in_the_graph_whose_backward_returned_none_is_not_called_unreachable():
    torch.manual_seed(0)
    model, x, y = _CustomFunctionModel(), torch.randn(32, 8), torch.randn(32, 1)
    d = gradients.diagnose(model, x, y, nn.functional.mse_loss)
    loss = nn.functional.mse_loss(model(x), y)
    seen, pending, reached = set(), [loss.grad_fn], False
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        reached |= getattr(node, "variable", None) is model.w
        pending.extend(n for n, _ in node.next_functions)
    loss.backward()
    assert reached and model.w.grad is None  # plain torch: a path exists, no gradient came down it
    assert d.finding("broken_graph") is None and d.finding("none_returned").parameters == ("w",)
    text = " ".join([d.verdict, *(f.observation for f in d.findings), *lesson.explain(_as_run(d))])
    assert "no path" not in text and "under no_grad" not in text and d.cuts == ()


def _as_run(diagnosis):
    return gradients.experiment.ScenarioRun(GradientsOptions(), diagnosis, None, 0, "", None)


def test_an_exact_zero_is_blamed_on_dead_relus_only_when_it_comes_from_them():
    torch.manual_seed(0)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.h, self.gate = nn.Linear(8, 16), nn.Linear(16, 1), nn.Parameter(torch.ones(1))
            with torch.no_grad():
                self.a.bias[:12] = -10.0

        def forward(self, x):
            return self.h(torch.relu(self.a(x))) + 0.0 * self.gate

    model = Gated()
    d = gradients.diagnose(model, x, y, nn.functional.mse_loss)
    nn.functional.mse_loss(model(x), y).backward()
    assert not model.gate.grad.any() and model.a.weight.grad.any()  # plain torch: the zero is gate's 0.0 factor
    dead = d.finding("dead_units")
    assert (
        dead is not None and "gate" not in dead.parameters and "gate" not in d.verdict.split("Dead ReLU units")[1][:8]
    )
    assert d.finding("zero_gradient").parameters == ("gate",)
    lines = lesson.explain(_as_run(d))
    assert not any("gate" in line and "ReLU" in line for line in lines)


def test_the_knobs_a_scenario_ignores_are_named_from_its_own_knobs():
    options = GradientsOptions(scenario="detached", depth=2, activation="linear")
    default = GradientsOptions(scenario="detached")
    a, b = gradients.scenario_run(options), gradients.scenario_run(default)
    assert [p.norm for p in a.diagnosis.parameters.values()] == [p.norm for p in b.diagnosis.parameters.values()]
    caption = lesson.knobs_not_in_model("detached")
    assert "depth" in caption and "activation" in caption
    assert lesson.knobs_not_in_model("no_zero_grad") is None


@pytest.mark.parametrize("scenario", ["detached", "unused", "frozen", "argmax"])
def test_the_scale_sweep_marks_none_instead_of_plotting_a_number(scenario):
    options = GradientsOptions.for_scenario(scenario)
    figure = gradient_figures.sweep_figure(gradients.scale_sweep(options))
    for factor in gradients.experiment.SWEEP_FACTORS:
        scale = options.init_scale * factor
        model, x, y = gradients.experiment.build(options, scale=scale)
        nn.functional.mse_loss(model(x), y).backward()  # plain backward on the scenario's model
        layers = {}
        for n, p in model.named_parameters():
            layers.setdefault(n.rpartition(".")[0], []).append(p.grad)
        none = {layer for layer, grads in layers.items() if all(g is None for g in grads)}
        line = next(t for t in figure.data if t.name == f"init scale {scale:g}")
        marked = next(t for t in figure.data if t.name == f"init scale {scale:g}: no usable gradient")
        assert none and all(y is None for name, y in zip(line.x, line.y, strict=True) if name in none)
        assert {name for name, text in zip(marked.x, marked.text, strict=True) if text == "None"} == none


@falsifies(STATEMENTS["chain"])
@pytest.mark.parametrize("activation", [torch.tanh, torch.sigmoid, torch.relu, lambda t: t])
@pytest.mark.parametrize("seed", range(3))
def test_the_gradient_at_an_early_layer_is_the_product_of_the_later_layers_factors(activation, seed):
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(6, 6, generator=generator) for _ in range(4)]
    h0 = torch.randn(6, generator=generator, requires_grad=True)
    upstream = torch.randn(6, generator=generator)
    h, factors = h0, []
    for w in weights:
        z = w @ h
        local = torch.autograd.functional.jacobian(activation, z.detach()) @ w  # d act(w h) / d h
        factors.append(local)
        h = activation(z)
    h.backward(upstream)
    product = upstream
    for local in reversed(factors):
        product = product @ local
    assert torch.allclose(h0.grad, product, rtol=1e-4, atol=1e-6)


@falsifies(STATEMENTS["none_returned"])
@pytest.mark.parametrize("returned", ["none", "zeros", "grad"])
def test_a_none_from_a_backward_function_leaves_a_parameter_in_the_graph_without_grad(returned):
    class Gate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w):
            return h * w

        @staticmethod
        def backward(ctx, grad):
            return grad, {"none": None, "zeros": torch.zeros(()), "grad": grad.sum()}[returned]

    torch.manual_seed(1)
    h, w = torch.randn(5, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    out = Gate.apply(h, w).sum()
    reached = any(getattr(n, "variable", None) is w for n, _ in out.grad_fn.next_functions[0][0].next_functions)
    out.backward()
    assert reached and h.grad is not None
    assert (w.grad is None) == (returned == "none")


@falsifies(STATEMENTS["none_returned"])
@pytest.mark.parametrize("name", [n for n in ZOO if n not in ("inplace_on_saved", "frozen")])
def test_in_the_zoo_a_parameter_the_graph_reaches_gets_a_gradient_unless_a_backward_returns_none(name):
    spec = ZOO[name]
    model, batch = spec.build(seed=5)
    loss = spec.loss(call(model, batch))
    reached, seen, pending = set(), set(), [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, "variable", None) is not None:
            reached.add(id(node.variable))
        pending.extend(n for n, _ in node.next_functions)
    loss.backward()
    for p in model.parameters():
        if id(p) in reached:  # no zoo model's backward returns None for a parameter
            assert p.grad is not None


def test_a_zero_is_said_to_survive_the_identity_rerun_only_when_the_rerun_replaced_the_relu():
    """A functional ReLU in the model's own forward, all units dead: plain torch without the ReLU revives them."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randn(8, 1)

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1)
            with torch.no_grad():
                self.a.bias.fill_(-100.0)

        def forward(self, x):
            return self.b(nn.functional.relu(self.a(x)))

    model = Functional()
    d = gradients.diagnose(model, x, y, nn.functional.mse_loss)
    a_w, a_b, b_w = (p.detach().clone().requires_grad_() for p in (model.a.weight, model.a.bias, model.b.weight))
    nn.functional.mse_loss((x @ a_w.T + a_b) @ b_w.T + model.b.bias.detach(), y).backward()
    revived = {name for name, p in {"a.weight": a_w, "a.bias": a_b, "b.weight": b_w}.items() if p.grad.any()}
    assert revived == {"a.weight", "a.bias", "b.weight"}
    said_to_stay = set(d.finding("zero_gradient").parameters) if d.finding("zero_gradient") else set()
    if d.finding("zero_gradient") and "stays zero" in d.finding("zero_gradient").observation:
        assert not said_to_stay & revived
    assert set(d.finding("dead_units").parameters) == revived
    assert d.relus_replaced == 1


def test_the_per_step_factor_is_the_root_its_words_name_and_the_card_quotes_the_page():
    """scale 0.05, sigmoid, depth 12: the first/last ratio's 11th root, named as 11 steps, the same in both places."""
    options = GradientsOptions(scenario="healthy", init_scale=0.05, activation="sigmoid", depth=12)
    run = gradients.scenario_run(options)
    params, _, x, y = draw(stack_shapes(12), scale=0.05)
    mse(stack_forward(params, x, torch.sigmoid), y).backward()
    ratio = grad_norm(params[0]) / grad_norm(params[-2])
    line = sentence(lesson.explain(run), "^Vanishing")
    mechanism = gradients_card.answer_card(run).mechanism
    quoted = [
        re.search(r"about ×(\S+) per step between neighbouring layers, over 11 steps", t) for t in (line, mechanism)
    ]
    assert all(quoted) and quoted[0].group(1) == quoted[1].group(1)
    assert float(quoted[0].group(1)) == pytest.approx(ratio ** (1 / 11), rel=0.05)


def test_the_loss_chart_plots_only_measured_losses_and_labels_where_they_stopped():
    """init scale 5, depth 12: plain SGD's loss turns non-finite; the chart draws no number for it."""
    options = GradientsOptions.for_scenario("exploding", init_scale=5.0, depth=12)
    training = gradients.clipped_training(options)
    params, _, x, y = draw(stack_shapes(12), scale=5.0)
    first = float(mse(stack_forward(params, x, torch.relu), y).detach())
    assert training.losses_plain[0] == pytest.approx(first, rel=1e-4)
    measured = {v for v in (*training.losses_plain, *training.losses_clipped) if math.isfinite(v)}
    broken = training.diverged_at
    assert broken is not None
    figure = gradient_figures.training_figure(training)
    plotted = [v for trace in figure.data for v in trace.y if v is not None]
    assert set(plotted) <= measured
    labels = [a.text for a in figure.layout.annotations]
    assert any(f"{training.losses_plain[broken]} at step {broken}" in text for text in labels)
    assert any(shape.x0 == broken and shape.yref == "paper" for shape in figure.layout.shapes)


@pytest.mark.parametrize("scenario", ["detached", "unused", "frozen", "argmax", "inplace"])
def test_the_tables_show_no_number_where_grad_is_none(scenario):
    """Audit 3: the ‖grad‖ column showed 0.000000 for a .grad that is None, the same as an exact zero."""
    options = GradientsOptions.for_scenario(scenario)
    run = gradients.scenario_run(options)
    model, x, y = gradients.experiment.build(options)
    with contextlib.suppress(RuntimeError):  # in-place: backward raises, no .grad is written
        nn.functional.mse_loss(model(x), y).backward()  # plain backward on the scenario's model
    grads = dict(model.named_parameters())
    none = {n for n, p in grads.items() if p.grad is None}
    assert none
    table = gradient_figures.status_table(run.diagnosis).set_index("parameter")
    for name, p in grads.items():
        cell = table.loc[name, "‖grad‖"]
        assert pd.isna(cell) if name in none else float(cell) == pytest.approx(float(p.grad.norm()), rel=1e-4)
    layers = gradient_figures.layer_table(run.diagnosis).set_index("layer")
    for layer in {n.rpartition(".")[0] for n in none} - {n.rpartition(".")[0] for n in set(grads) - none}:
        assert pd.isna(layers.loc[layer, "‖grad‖"])


@falsifies(STATEMENTS["backward_error"])
@pytest.mark.parametrize("through_data", [False, True])
def test_a_write_through_data_moves_no_counter_and_backward_uses_the_new_value(through_data):
    """Audit 3: the in-place Statement said every in-place change raises; a write through `.data` does not."""
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(8, 16), nn.Linear(16, 1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    h = torch.sigmoid(fc1(x))  # sigmoid saves its result
    version = h._version
    if not through_data:
        h[:, 0] = 0
        assert h._version != version
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            nn.functional.mse_loss(fc2(h), y).backward()
        return
    assert "`.data` moves no counter" in STATEMENTS["backward_error"].text  # the Statement says what this shows
    h.data[:, 0] = 0
    assert h._version == version
    nn.functional.mse_loss(fc2(h), y).backward()  # no error
    new = h.detach()
    upstream = 2 * (new @ fc2.weight.detach().T + fc2.bias.detach() - y) / y.numel() @ fc2.weight.detach()
    expected = (upstream * new * (1 - new)).T @ x  # sigmoid's backward on the new (written) value
    assert torch.allclose(fc1.weight.grad, expected, atol=1e-6) and not fc1.weight.grad[0].any()


@pytest.mark.parametrize("activation", ["linear", "relu", "sigmoid"])
def test_vanishing_compares_weights_with_weights_and_names_activations_only_when_one_saturates(activation):
    """Audit 3: a linear stack was called vanishing from its bias gradients, and told to switch to ReLU."""
    seed, scale, depth = 7, 0.05, 8
    _, run = lab("vanishing", activation=activation, seed=seed, init_scale=scale, depth=depth)
    params, _, x, y = draw(stack_shapes(depth), scale=scale, seed=seed)
    act = {"linear": lambda t: t, "relu": torch.relu, "sigmoid": torch.sigmoid}[activation]
    mse(stack_forward(params, x, act), y).backward()
    weights = params[::2]
    ratio = grad_norm(weights[0]) / grad_norm(weights[-1])
    flagged = run.diagnosis.finding("vanishing") is not None
    assert flagged == (ratio < 1e-3)
    factor = lesson.step_factor(run.diagnosis)
    assert float(re.search(r"×([\d.e+-]+) per step", factor).group(1)) == pytest.approx(ratio ** (1 / 7), rel=0.05)
    recovery = gradients_card.answer_card(run).recovery
    assert ("ReLU-family" in recovery) == (flagged and activation == "sigmoid")
