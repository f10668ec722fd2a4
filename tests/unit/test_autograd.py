"""Facts the Autograd lab shows, checked against real PyTorch runs."""

import pytest
import torch

from explorers.autograd import AutogradOptions, figures, lesson, run
from explorers.autograd import experiment as autograd
from ui import figures as page_figures

PRESETS = list(autograd.PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_two_retained_backward_passes_double_every_leaf_gradient_exactly(preset):
    options = AutogradOptions(preset=preset, input_requires_grad=True)
    once = run(options, ["forward", "backward_retain"]).final_grads
    twice = run(options, ["forward", "backward_retain", "backward_retain"])
    assert set(once) == set(twice.final_grads) and "x" in once
    for name, grad in twice.final_grads.items():
        assert torch.equal(grad, 2 * once[name]), name
    # A leaf whose gradient is exactly zero has no ratio (a Linear bias just before BatchNorm: BN cancels it).
    ratios = [r.grad_vs_one_pass for r in twice.final.tensors if r.grad_vs_one_pass is not None]
    assert ratios and all(ratio == pytest.approx(2.0) for ratio in ratios)


@pytest.mark.parametrize("preset", PRESETS)
def test_second_backward_without_retain_graph_raises_pytorchs_error(preset):
    result = run(AutogradOptions(preset=preset), ["forward", "backward", "backward"])
    first, second = result.steps[1], result.steps[2]
    assert first.error is None
    assert "backward through the graph a second time" in second.error
    # The failed pass added nothing: gradients equal a single pass.
    single = run(AutogradOptions(preset=preset), ["forward", "backward"]).final_grads
    assert all(torch.equal(result.final_grads[n], g) for n, g in single.items())


@pytest.mark.parametrize("preset", PRESETS)
def test_backward_frees_saved_tensors_and_retain_graph_keeps_them(preset):
    freed = run(AutogradOptions(preset=preset), ["forward", "backward"])
    after_forward, after_backward = freed.steps
    assert after_forward.saved_bytes > 0 and after_forward.saved_count > 0
    assert after_backward.saved_bytes == 0
    kept = run(AutogradOptions(preset=preset), ["forward", "backward_retain"])
    assert kept.final.saved_bytes == after_forward.saved_bytes


def test_saved_bytes_match_an_independent_count_with_saved_tensors_hooks():
    options = AutogradOptions(preset="mlp_bn_dropout", depth=3, width=16, batch_size=8)
    measured = run(options, ["forward"]).final.saved_bytes
    with autograd.isolated_rng(options.seed):
        model = autograd.build_model(options).train()
        x = torch.randn(8, autograd.IN_FEATURES)
        target = torch.randn(8, 1)
        # the batch (input and target) is not counted: it exists without the graph
        state = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x, target]}
        storages = {}

        def pack(tensor):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in state:
                storages[storage.data_ptr()] = storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out, _ = model(x)
            torch.nn.functional.mse_loss(out, target)
    assert measured == sum(storages.values())


def test_saved_bytes_grow_with_batch_size():
    small = run(AutogradOptions(preset="mlp", width=32, batch_size=4), ["forward"]).final.saved_bytes
    large = run(AutogradOptions(preset="mlp", width=32, batch_size=16), ["forward"]).final.saved_bytes
    assert large > 3 * small


@pytest.mark.parametrize("preset", PRESETS)
def test_no_grad_forward_builds_no_graph(preset):
    result = run(AutogradOptions(preset=preset), ["forward_no_grad"])
    loss = result.final.row("loss")
    assert loss.grad_fn is None and not loss.requires_grad
    assert result.final.saved_bytes == 0
    assert result.graph_source is None and "no_grad" in result.graph_note
    backward = run(AutogradOptions(preset=preset), ["forward_no_grad", "backward"]).final
    assert "does not require grad" in backward.error


def test_parameters_are_leaves_and_intermediates_are_not():
    result = run(AutogradOptions(preset="mlp", depth=2), ["forward"])
    rows = {r.name: r for r in result.final.tensors}
    assert rows["block1.fc.weight"].is_leaf and rows["block1.fc.weight"].requires_grad
    assert rows["block1.fc.weight"].grad_fn is None
    assert not rows["block1 out"].is_leaf and rows["block1 out"].grad_fn == "TanhBackward0"
    assert rows["block1 out"].grad == "not kept"
    assert rows["x"].is_leaf and not rows["x"].requires_grad


def test_zero_grad_set_to_none_versus_zeros():
    none = run(AutogradOptions(), ["forward", "backward", "zero_grad_none"])
    zeros = run(AutogradOptions(), ["forward", "backward", "zero_grad_zeros"])
    assert all(g is None for g in none.final_grads.values())
    assert all(g is not None and not g.any() for g in zeros.final_grads.values())
    assert {r.grad for r in zeros.final.tensors if r.role == "parameter"} == {"zeros"}


def test_zero_grad_leaves_a_non_parameter_leaf_alone():
    result = run(AutogradOptions(input_requires_grad=True), ["forward", "backward", "zero_grad_none"])
    assert result.final_grads["x"] is not None and result.final_grads["x"].any()


def test_optimizer_step_bumps_versions_and_breaks_a_retained_graph():
    result = run(AutogradOptions(), ["forward", "backward_retain", "sgd_step", "backward_retain"])
    before, after = result.steps[1].row("head.weight"), result.steps[2].row("head.weight")
    assert after.version == before.version + 1
    assert "modified by an inplace operation" in result.final.error


def test_graph_names_leaves_and_shows_accumulate_grad_and_saved_tensors():
    result = run(AutogradOptions(preset="scalar", input_requires_grad=True, show_saved=True), ["forward"])
    source = result.graph_source
    for expected in ("AccumulateGrad", "TanhBackward0", 'label="w', 'label="b', 'label="x', "fontname=Courier"):
        assert expected in source
    assert "orange" in source  # saved tensors drawn
    hidden = run(AutogradOptions(preset="scalar", show_saved=False), ["forward"])
    assert "orange" not in hidden.graph_source


def test_graph_after_backward_drops_the_freed_saved_tensors():
    result = run(AutogradOptions(show_saved=True), ["forward", "backward"])
    assert result.graph_source is not None and "orange" not in result.graph_source
    assert "released the" in result.graph_note


def test_graph_over_the_node_cap_is_not_drawn_and_says_why():
    result = run(AutogradOptions(preset="mlp_bn_dropout", depth=6, show_saved=True), ["forward"])
    assert result.graph_nodes > autograd.MAX_GRAPH_NODES
    assert result.graph_source is None and str(result.graph_nodes) in result.graph_note


def test_defaults_draw_a_small_graph():
    result = run(AutogradOptions(), ["forward"])
    assert 0 < result.graph_nodes <= 40


def test_same_seed_same_run_and_the_global_rng_is_untouched():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    options = AutogradOptions(preset="mlp_bn_dropout", seed=7)
    a = run(options, ["forward", "backward"]).final_grads
    b = run(options, ["forward", "backward"]).final_grads
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert torch.equal(torch.rand(3), expected_next)
    c = run(AutogradOptions(preset="mlp_bn_dropout", seed=8), ["forward", "backward"]).final_grads
    assert not all(torch.equal(a[n], c[n]) for n in a)


def test_batchnorm_preset_raises_batch_of_one_to_two_and_says_so():
    result = run(AutogradOptions(preset="mlp_bn_dropout", batch_size=1), ["forward"])
    assert result.final.row("x").shape[0] == 2 and result.notes


@pytest.mark.parametrize(
    "bad",
    [
        {"preset": "lstm"},
        {"depth": 0},
        {"depth": 7},
        {"width": 10**9},
        {"batch_size": -1},
        {"activation": "__import__('os')"},
        {"seed": True},
        {"width": 2.5},
    ],
)
def test_options_reject_out_of_range_values(bad):
    with pytest.raises(ValueError):
        AutogradOptions(**bad)


def test_run_rejects_unknown_actions_and_too_many_steps():
    with pytest.raises(ValueError):
        run(AutogradOptions(), ["forward", "os.system"])
    with pytest.raises(ValueError):
        run(AutogradOptions(), ["forward"] * (autograd.MAX_STEPS + 1))


def test_explanation_quotes_the_live_numbers():
    result = run(AutogradOptions(), ["forward", "backward_retain", "backward_retain"])
    text = " ".join(lesson.explain(result))
    assert figures.format_bytes(result.final.saved_bytes) in text
    assert "2.000×" in text
    freed = " ".join(lesson.explain(run(AutogradOptions(), ["forward", "backward", "backward"])))
    assert "second time" in freed or "second `backward()` failed" in freed


def test_figure_and_table_carry_the_run_numbers():
    result = run(AutogradOptions(), ["forward", "backward", "backward"])
    figure = figures.saved_bytes_figure(result)
    bar = figure.data[0]
    assert list(bar.x) == [s.saved_bytes for s in result.steps] and bar.x[0] > 0 == bar.x[1]  # bytes: under 1 KiB
    assert figure.layout.xaxis.title.text == "B saved for backward"
    assert (
        bar.marker.color[2] != bar.marker.color[0] and bar.text[2] == "✗ PyTorch raised"
    )  # the failed step stands out
    wide = figures.saved_bytes_figure(run(AutogradOptions(width=64, batch_size=64), ["forward"]))
    assert wide.layout.xaxis.title.text == "KiB saved for backward"
    assert wide.data[0].x[0] == pytest.approx(wide.data[0].text and float(wide.data[0].text[0].split()[0]), abs=0.05)
    table = figures.tensor_table(result.final).set_index("tensor")
    assert table.loc["head.weight", "‖grad‖"] == pytest.approx(float(result.final_grads["head.weight"].norm()))


@pytest.mark.parametrize("steps", [["forward"], ["forward", "backward"], ["forward", "backward_retain"] * 4])
def test_saved_bytes_chart_keeps_a_plot_area_and_a_row_per_step(steps):
    """Issue 21: at one or two steps the plot was a hairline and "2. backward() 0 B" was squeezed out."""
    result = run(AutogradOptions(), steps)
    assert _plot_height(figures.saved_bytes_figure(result)) >= 120  # as built, before the page adds its caption
    for present in (False, True):
        caption = page_figures.caption("Saved-for-backward bytes", {"steps": " → ".join(steps)}, "cpu")
        drawn = page_figures.lay_out(figures.saved_bytes_figure(result), caption, present)
        assert _plot_height(drawn) >= 120, (len(steps), present)
        axis, bars = drawn.layout.yaxis, drawn.data[0]
        labels = [label.replace("<br>", "") for label in bars.y]
        assert labels == [f"{i}. {autograd.ACTIONS[action]}" for i, action in enumerate(steps, 1)]
        assert axis.type == "category" and list(axis.categoryarray) == list(bars.y)  # one row per step, in order
        assert len(set(bars.y)) == len(steps)


def _plot_height(figure) -> float:
    """The plot area's height as plotly draws it: the figure's height less the margins (plotly's defaults if unset)."""
    margin = figure.layout.margin
    return figure.layout.height - (100 if margin.t is None else margin.t) - (80 if margin.b is None else margin.b)
