"""Every notebook API on real library code (tiny BERT, GPT-2 and Llama from transformers, a small CNN) and the zoo.

References are written here in plain torch: byte counts from numel x element size, activations
from our own saved_tensors_hooks, gradients from a plain backward on a copy, modes checked directly.
"""

import copy

import pytest
import torch
from torch import nn

from explorers import autograd, gradients, memory, modes, profiler
from tests.zoo import ZOO

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB, SEQ, ROWS = 40, 8, 2


def bert():
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=SEQ,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForSequenceClassification(config), "bert.encoder.layer.1.intermediate.dense"


def gpt2():
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=SEQ, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config), "transformer.h.0.mlp.c_fc"


def llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=SEQ, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config), "model.layers.1.mlp.up_proj"


class SmallCNN(nn.Module):
    """Stands in for torchvision: a conv classifier taking pixel_values and labels, returning a dict with a loss."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, pixel_values, labels=None):
        h = torch.relu(self.bn(self.conv1(pixel_values)))
        h = torch.relu(self.conv3(torch.relu(self.conv2(h))))
        logits = self.fc(h.mean((2, 3)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def cnn():
    return SmallCNN(), "conv2"


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "cnn": cnn}


def build(name, seed=0):
    torch.manual_seed(seed)
    model, scaled = MODELS[name]()
    generator = torch.Generator().manual_seed(seed + 1)
    if name == "cnn":
        batch = {"pixel_values": torch.randn(ROWS, 3, 8, 8, generator=generator), "labels": torch.tensor([0, 3])}
    else:
        ids = torch.randint(1, VOCAB, (ROWS, SEQ), generator=generator)
        labels = torch.tensor([0, 2]) if name == "bert" else ids.clone()
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    return model.train(), batch, scaled


def own_loss(output, batch):
    return output["loss"] if isinstance(output, dict) else output.loss


def snapshot(model, batch):
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "training": [m.training for m in model.modules()],
        "hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()]
        + [len(p._backward_hooks or {}) for p in model.parameters()],
        "batch": {k: v.clone() for k, v in batch.items()},
    }


def assert_untouched(model, batch, before):
    after = snapshot(model, batch)
    assert after["state"].keys() == before["state"].keys()
    assert all(torch.equal(v, before["state"][k]) for k, v in after["state"].items())
    assert all(
        (g is None and before["grads"][n] is None) or torch.equal(g, before["grads"][n])
        for n, g in after["grads"].items()
    )
    assert after["requires_grad"] == before["requires_grad"] and after["training"] == before["training"]
    assert after["hooks"] == before["hooks"]
    assert all(torch.equal(v, before["batch"][k]) for k, v in after["batch"].items())


def reference_grads(model, batch):
    twin = copy.deepcopy(model)
    own_loss(twin(**batch), batch).backward()
    return {n: p.grad for n, p in twin.named_parameters()}


def reference_saved_bytes(model, batch):
    """Our own count: storages saved for backward, once each, not parameters, buffers or the batch."""
    twin = copy.deepcopy(model)
    excluded = {t.untyped_storage()._cdata for t in [*twin.parameters(), *twin.buffers(), *batch.values()]}
    found = {}

    def pack(tensor):
        key = tensor.untyped_storage()._cdata
        if key not in excluded:
            found[key] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        own_loss(twin(**batch), batch)
    return sum(found.values())


@pytest.mark.parametrize("name", MODELS)
def test_every_api_on_real_models_matches_plain_torch_and_leaves_the_model_untouched(name, tmp_path):
    model, batch, _ = build(name)
    next(model.parameters()).grad = torch.ones_like(next(model.parameters()))  # a gradient that must survive
    before = snapshot(model, batch)
    expected = reference_grads(model, batch)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]

    run = autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(model, batch, loss_fn=own_loss))
    assert run.final.error is None
    first = next(n for n, _ in model.named_parameters())
    # The caller's first parameter had a .grad of ones; the private copy starts from it as deepcopy keeps it.
    for n, g in expected.items():
        if g is not None and n != first:
            assert torch.allclose(run.final_grads[n], g, rtol=1e-4, atol=1e-6), n

    d = gradients.diagnose(model, batch, None, own_loss)
    for n, g in expected.items():
        status = d.parameters[n].status
        assert (status == "none") == (g is None)
        if g is not None and status == "finite":
            assert d.parameters[n].norm == pytest.approx(float(g.double().norm()), rel=1e-4)
    assert "weight_scale" not in d.kinds and "vanishing" not in d.kinds

    grid = modes.mode_grid(model, batch)
    assert grid[("train", "no_grad")].builds_graph is False
    assert grid[("eval", "enable_grad")].builds_graph is True
    assert grid[("eval", "inference_mode")].is_inference_tensor is True
    assert grid[("train", "inference_mode")].saved_bytes == 0

    m = memory.measure(model, batch, optimizer="adam", loss_fn=own_loss)
    assert m.parameters == nbytes
    assert m.gradients == sum(p.numel() * p.element_size() for p in trainable)
    assert m.optimizer_state == 2 * m.gradients + 4 * len(trainable)  # exp_avg, exp_avg_sq, a float32 step each
    assert m.activations == reference_saved_bytes(model, batch)
    assert m.batch == sum(t.untyped_storage().nbytes() for t in batch.values())

    loader = [batch, batch]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    result = profiler.profile_training(
        model, loader, optimizer, own_loss, warmup=0, active=1, rounds=2, trace_path=tmp_path / "t.json"
    )
    assert len(result.steps) == 2 and result.steps[0].phases["forward"] > 0
    assert optimizer.state == {}  # the caller's optimizer was copied, not stepped
    assert_untouched(model, batch, before)


def test_memory_estimate_on_fake_tensors_counts_the_same_state_as_a_real_step():
    model, batch, _ = build("gpt2")
    real = memory.measure(model, batch, optimizer="adam", loss_fn=own_loss)

    def fake():
        twin, fake_batch, _ = build("gpt2")
        return twin, fake_batch

    estimated = memory.estimate(fake, optimizer="adam", loss_fn=own_loss)
    assert estimated.estimated and (estimated.parameters, estimated.gradients, estimated.optimizer_state) == (
        real.parameters,
        real.gradients,
        real.optimizer_state,
    )
    # Measured here: fake tensors saved 1,024 bytes more than the real step for this GPT-2 (131,652 against 130,628).
    assert estimated.activations == pytest.approx(real.activations, rel=0.01)


@pytest.mark.parametrize("name", MODELS)
def test_diagnose_names_a_layer_whose_weights_were_multiplied_by_1000(name):
    model, batch, scaled = build(name)
    with torch.no_grad():
        for p in dict(model.named_modules())[scaled].parameters():
            if p.dim() >= 2:
                p.mul_(1000)
    d = gradients.diagnose(model, batch, None, own_loss)
    finding = d.finding("weight_scale")
    assert finding is not None and finding.modules == (scaled,)
    assert scaled in d.verdict and "Weight-scale outlier" in d.verdict
    weights = [p for p in dict(model.named_modules())[scaled].parameters() if p.dim() >= 2]
    rms = (sum(float(p.double().pow(2).sum()) for p in weights) / sum(p.numel() for p in weights)) ** 0.5
    assert f"{rms:.1e}" in finding.observation and "flagged above 100" in finding.observation


def test_bert_with_frozen_embeddings_and_first_layer_has_no_vanishing_finding():
    model, batch, _ = build("bert")
    for p in [*model.bert.embeddings.parameters(), *model.bert.encoder.layer[0].parameters()]:
        p.requires_grad_(False)
    d = gradients.diagnose(model, batch, None, own_loss)
    assert "vanishing" not in d.kinds and "exploding" not in d.kinds
    assert d.finding("frozen") is not None


@pytest.mark.parametrize("name", MODELS)
def test_diagnose_reports_the_gradient_a_callers_hook_gives(name):
    model, batch, _ = build(name)
    target_name, target = next((n, p) for n, p in model.named_parameters() if p.dim() >= 2 and n.endswith("weight"))
    handle = target.register_hook(lambda g: g * 0)
    d = gradients.diagnose(model, batch, None, own_loss)
    assert d.parameters[target_name].status == "zero"
    own_loss(model(**batch), batch).backward()  # the caller's own training
    assert not target.grad.any()
    handle.remove()


def test_module_hooks_fire_on_the_copy_and_are_announced():
    model, batch, _ = build("cnn")
    captured = []
    model.fc.register_forward_hook(lambda module, args, output: captured.append(output))
    with pytest.warns(UserWarning, match="1 module hook"):
        gradients.diagnose(model, batch, None, own_loss)
    assert captured  # it fired on the copy, as the warning says


@pytest.mark.parametrize("name", ["bert", "cnn"])
def test_a_forward_that_fails_is_one_value_error_naming_the_call(name, tmp_path):
    model, batch, _ = build(name)
    # transformers' forward takes **kwargs, so BERT gets token ids of the wrong dtype instead of an unknown keyword
    bad = {**batch, "input_ids": batch["input_ids"].float()} if name == "bert" else {**batch, "unexpected": 0}
    keys = r"model\(\*\*batch\) with keys " + ("input_ids" if name == "bert" else ".*unexpected")
    with pytest.raises(ValueError, match=keys):
        autograd.run(actions=["forward"], yours=autograd.YourModel(model, bad, loss_fn=own_loss))
    with pytest.raises(ValueError, match=keys):
        gradients.diagnose(model, bad, None, own_loss)
    with pytest.raises(ValueError, match=keys):
        modes.mode_grid(model, bad)
    with pytest.raises(ValueError, match=keys):
        memory.measure(model, bad, loss_fn=own_loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=keys):
        profiler.profile_training(model, [bad], optimizer, own_loss, warmup=0, active=1, rounds=2)


def test_an_integer_target_with_the_default_loss_says_which_loss_to_pass():
    model, x, target = nn.Linear(4, 3), torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    with pytest.raises(ValueError, match="cross_entropy"):
        autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(model, x, target))
    with pytest.raises(ValueError, match="cross_entropy"):
        gradients.diagnose(model, x, target)
    run = autograd.run(
        actions=["forward", "backward"], yours=autograd.YourModel(model, x, target, nn.functional.cross_entropy)
    )
    assert run.final.error is None


def test_a_fully_frozen_model_is_a_plain_value_error_where_a_step_is_measured():
    model, batch = ZOO["frozen"].build()
    with pytest.raises(ValueError, match="requires grad"):
        gradients.diagnose(model, batch, None, lambda out: out.sum())
    with pytest.raises(ValueError, match="trainable"):
        memory.measure(model, batch)
    with pytest.raises(ValueError, match="all of them frozen"):
        profiler.profile_training(
            model, [batch], torch.optim.SGD([nn.Parameter(torch.zeros(1))]), lambda out: out.sum(), warmup=0,
            active=1, rounds=2,
        )  # fmt: skip


TRAINS = [n for n in ZOO if n not in ("frozen", "inplace_on_saved")]


@pytest.mark.parametrize("name", ZOO)
def test_every_api_on_the_zoo_leaves_the_callers_model_untouched(name, tmp_path):
    spec = ZOO[name]
    model, batch = spec.build(seed=4)
    as_dict = batch if isinstance(batch, dict) else {"x": batch}
    before = snapshot(model, as_dict)

    def loss(output):
        return spec.loss(output)

    autograd.run(actions=["forward", "backward"], yours=autograd.YourModel(model, batch, loss_fn=loss))
    modes.mode_grid(model, batch)
    if name in TRAINS:
        d = gradients.diagnose(model, batch, None, loss)
        assert "weight_scale" not in d.kinds
        m = memory.measure(model, batch, optimizer="sgd", loss_fn=loss)
        assert m.parameters == sum(p.numel() * p.element_size() for p in model.parameters())
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        loader = [batch if not isinstance(batch, tuple) else (batch,)] * 2
        profiler.profile_training(
            model, loader, optimizer, loss, split_batch=lambda b: (b, None), warmup=0, active=1, rounds=2,
            trace_path=tmp_path / "t.json",
        )  # fmt: skip
    assert_untouched(model, as_dict, before)


@pytest.mark.parametrize("name", MODELS)
def test_memory_peaks_on_real_models_equal_memtrackers(name):
    """Each training step's peak, as memory.measure reports it, against PyTorch's own MemTracker on a copy."""
    from torch.distributed._tools.mem_tracker import MemTracker

    model, batch, _ = build(name)
    measured = memory.measure(model, batch, optimizer="adam", loss_fn=own_loss)
    twin = copy.deepcopy(model)
    optimizer = torch.optim.Adam(twin.parameters(), lr=1e-3, foreach=False)
    peaks = []
    for _ in range(2):
        tracker = MemTracker()
        tracker.track_external(twin, optimizer, *batch.values())
        with tracker:
            own_loss(twin(**batch), batch).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peaks.append(max(s["Total"] for s in tracker.get_tracker_snapshot("peak").values()))
    assert [measured.first_step.peak, measured.steady_step.peak] == peaks
