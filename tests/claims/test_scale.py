"""The Real-scale lab's facts, checked with torch and transformers code written here, not with the lab's helpers.

Tiny configs of the real library classes (Llama, GPT-2, BERT; nothing downloaded) are
measured by `plan` and compared with real CPU training steps under PyTorch's own
`MemTracker`, with hand-written closed forms, and with the whole model's fake step.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from explorers import scale
from explorers.scale import lesson, models
from explorers.scale.experiment import PlanOptions, _plan
from explorers.scale.lesson import STATEMENTS
from tests.claims.falsify import falsifies

transformers = pytest.importorskip("transformers")


def tiny(name: str, layers: int = 3):
    if name == "llama":
        return transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=320,
            max_position_embeddings=256,
            tie_word_embeddings=False,
        )
    if name == "gpt2":
        return transformers.GPT2Config(
            n_layer=layers, n_embd=64, n_head=4, vocab_size=320, n_positions=256, bos_token_id=0, eos_token_id=0
        )
    return transformers.BertConfig(
        num_hidden_layers=layers,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=320,
        architectures=["BertForMaskedLM"],
    )


NAMES = ("llama", "gpt2", "bert")


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --- The notebook API's promises (the "done when") -----------------------------------------


def test_gpt2_in_fp32_with_adamw_holds_4_4_and_8_bytes_per_parameter():
    p = scale.plan("gpt2", batch_size=1, seq_len=128, precision="fp32", optimizer="adamw")
    count = 124_439_808  # GPT-2 small's published parameter count (the tied head counted once)
    assert p.parameter_count == count
    assert p.parameters == 4 * count and p.gradients == 4 * count
    # exp_avg and exp_avg_sq: 8 bytes a parameter; AdamW adds one float32 `step` per parameter tensor on CPU
    tensors = 12 * 12 + 2 + 2  # 12 blocks of 12 tensors, two embeddings (wte, wpe), the final norm (weight, bias)
    assert p.optimizer_state == 8 * count + 4 * tensors


@pytest.mark.parametrize("key", models.KEYS)
def test_every_published_config_builds_the_published_parameter_count(key):
    published = {
        "gpt2": 124_439_808,
        "gpt2-medium": 354_823_168,
        "gpt2-large": 774_030_080,
        "gpt2-xl": 1_557_611_200,
        "bert-base-uncased": 109_514_298,  # BertForMaskedLM: the encoder without its pooler, plus the MLM head
        "bert-large-uncased": 335_174_458,
        "qwen2.5-0.5b": 494_032_768,
        "llama-3.2-1b": 1_235_814_400,
        "llama-3.2-3b": 3_212_749_824,
        "mistral-7b": 7_241_732_096,
        "qwen2.5-7b": 7_615_616_512,
        "llama-3-8b": 8_030_261_248,
    }
    with torch.device("meta"):
        model = models.build(models.config_for(key))
    assert sum(p.numel() for p in model.parameters()) == published[key]


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_a_tiny_gpt2_peak_equals_a_real_cpu_training_step_under_memtracker(precision):
    config = tiny("gpt2", layers=3)
    planned = _plan(config, PlanOptions(batch_size=2, seq_len=64, precision=precision), "tiny")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 320, (2, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    peaks = []
    for _ in range(2):
        tracker = MemTracker()
        tracker.track_external(model, optimizer, ids)
        with tracker:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peaks.append(max(s["Total"] for s in tracker.get_tracker_snapshot("peak").values()))
    assert planned.peak == max(peaks)  # the plan is scaled from one- and two-block copies; this step is the whole


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("layers", [3, 6])
@pytest.mark.parametrize(
    "options",
    [
        PlanOptions(batch_size=2, seq_len=64),
        PlanOptions(seq_len=64, precision="fp32", trainable="last", trainable_blocks=2),
        PlanOptions(seq_len=32, precision="bf16", trainable="head", optimizer="sgd_momentum"),
        PlanOptions(seq_len=64, checkpointing=True, world_size=4, zero_stage=3),
    ],
    ids=["all", "last-2", "head-bf16", "checkpointed-zero3"],
)
def test_scaling_from_small_copies_equals_the_whole_models_fake_step(name, layers, options):
    scaled = _plan(tiny(name, layers), options, "tiny")
    whole = _plan(tiny(name, layers), options, "tiny", whole=True)
    assert not whole.scaled and (scaled.scaled or layers == 3)  # three blocks: a last-2 copy is no smaller
    for field in ("parameters", "gradients", "optimizer_state", "activations", "peak", "peak_phase", "phase_peaks"):
        assert getattr(scaled, field) == getattr(whole, field), field
    assert {k: v for k, v in scaled.at_peak.items() if v} == {k: v for k, v in whole.at_peak.items() if v}
    assert (scaled.parameter_count, scaled.trainable_count) == (whole.parameter_count, whole.trainable_count)


@pytest.mark.parametrize("trainable", ["all", "head"])
def test_scaling_place_by_place_finds_the_whole_steps_peak_where_scaling_phases_missed_it(trainable, monkeypatch):
    """GPT-2 small at a short sequence: early in backward the head's gradients are the highest moment in a
    1- or 2-block copy, late in backward twelve blocks' gradients are. Scaling each phase's peak found the
    forward's peak instead (80 MiB low, found by an audit); scaling each place in the step finds the whole's."""
    from explorers.scale import scaling

    config = models.config_for("gpt2")
    options = PlanOptions(model="gpt2", batch_size=2, seq_len=256, precision="fp32", trainable=trainable)
    whole = _plan(config, options, "gpt2", whole=True)
    scaled = _plan(config, options, "gpt2")
    assert scaled.scaled
    assert (scaled.peak, scaled.peak_phase, scaled.at_peak) == (whole.peak, whole.peak_phase, whole.at_peak)

    by_place = scaling.combine_steps  # the same copies, scaled by phase alone: this setting is a real crossing
    monkeypatch.setattr(
        scaling,
        "combine_steps",
        lambda steps, *rest: by_place([dataclasses.replace(s, region_peaks={}) for s in steps], *rest),
    )
    assert _plan(config, options, "gpt2").peak < whole.peak


# --- The lab's general statements --------------------------------------------------------------


@falsifies(STATEMENTS["fixed_parts"])
@pytest.mark.parametrize("name", NAMES)
def test_only_activations_grow_with_the_micro_batch_and_the_sequence(name):
    config = tiny(name)
    base = _plan(config, PlanOptions(batch_size=1, seq_len=32), "tiny")
    for changed in (PlanOptions(batch_size=3, seq_len=32), PlanOptions(batch_size=1, seq_len=96)):
        other = _plan(config, changed, "tiny")
        assert (other.parameters, other.gradients, other.optimizer_state) == (
            base.parameters,
            base.gradients,
            base.optimizer_state,
        )
        assert other.activations > base.activations


@falsifies(STATEMENTS["checkpointing"])
@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_checkpointed_block_keeps_only_its_input_hidden_states(name, precision):
    """Per block (three blocks minus two): batch × sequence × hidden at the residual stream's element size."""
    options = PlanOptions(batch_size=2, seq_len=48, precision=precision, checkpointing=True)
    per_block = (
        _plan(tiny(name, 3), options, "tiny", whole=True).activations
        - _plan(tiny(name, 2), options, "tiny", whole=True).activations
    )
    element = 2 if precision == "bf16" else 4
    assert per_block == 2 * 48 * 64 * element
    plain = dataclasses.replace(options, checkpointing=False)
    assert _plan(tiny(name, 3), plain, "tiny").activations > _plan(tiny(name, 3), options, "tiny").activations


@falsifies(STATEMENTS["frozen"])
@pytest.mark.parametrize("name", NAMES)
def test_a_frozen_parameter_gets_no_gradient_and_no_optimizer_state(name):
    config = tiny(name)
    with torch.device("meta"):
        model = models.build(config)
    head = models.head(model)
    trained = {id(p): p for p in head.parameters()}  # tied: the embedding is the same tensor
    p = _plan(config, PlanOptions(seq_len=32, precision="fp32", trainable="head"), "tiny")
    assert p.trainable_count == sum(t.numel() for t in trained.values())
    assert p.gradients == nbytes(trained.values())
    assert p.optimizer_state == 2 * nbytes(trained.values()) + 4 * len(trained)  # AdamW: two moments and a step


@falsifies(STATEMENTS["zero"])
def test_zero_stages_divide_what_they_shard_and_zero3_adds_the_largest_gathered_unit():
    config = tiny("llama", layers=4)
    one = _plan(config, PlanOptions(seq_len=64), "tiny")
    with torch.device("meta"):
        model = models.build(config)
    block = nbytes(models.blocks(model)[0].parameters())
    outside = nbytes(model.parameters()) - 4 * block
    for stage, sharded in ((1, {"optimizer_state"}), (2, {"optimizer_state", "gradients"}), (3, {"parameters"})):
        rank = _plan(config, PlanOptions(seq_len=64, world_size=8, zero_stage=stage), "tiny")
        for field in ("parameters", "gradients", "optimizer_state"):
            expected = -(-getattr(one, field) // 8) if field in sharded or stage == 3 else getattr(one, field)
            assert getattr(rank, field) == expected, (stage, field)
        assert rank.peak < one.peak
    assert rank.gathered_unit == max(block, outside)
    assert rank.gathered_gradients == max(block, outside)  # every parameter trains, fp32 gradients like the weights
    if rank.peak_phase == "backward":
        assert rank.at_peak["unit's full gradients"] == rank.gathered_gradients


# --- Sentences are built from the measured fields ----------------------------------------------


def test_the_verdict_and_the_limits_quote_measured_peaks():
    from explorers.scale.search import largest

    options = PlanOptions(model="gpt2", seq_len=256, precision="fp32")
    budget = 4 * 2**30
    limit = largest(options, "batch_size", budget, 1, 64, 1, (1, 2))
    assert limit.fits.fits(budget) and not limit.next_up.fits(budget)
    assert limit.next_up.options.batch_size == limit.value + 1
    words = lesson.limit_words(limit, 4)
    assert f"{limit.value:,}" in words and lesson.gib_beside(limit.fits.peak, 4) in words
    assert lesson.gib_beside(limit.next_up.peak, 4) in words
    fits, verdict = lesson.verdict(limit.next_up, 4)
    assert not fits and lesson.gib_beside(limit.next_up.peak, 4) in verdict


@falsifies(STATEMENTS["foreach"])
@pytest.mark.parametrize("name", NAMES)
def test_adamws_foreach_step_peaks_higher_than_one_parameter_at_a_time(name):
    """Real CPU steps under MemTracker (foreach kernels run on CPU too); PyTorch picks foreach for CUDA tensors."""
    peaks = {}
    for foreach in (False, True):
        torch.manual_seed(0)
        model = models.build(tiny(name)).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
        ids = torch.randint(0, 320, (2, 32))
        model(input_ids=ids, labels=ids).loss.backward()
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            optimizer.step()
        peaks[foreach] = max(s["Total"] for s in tracker.get_tracker_snapshot("peak").values())
    assert peaks[True] > peaks[False]
    from torch.optim.optimizer import _get_foreach_kernels_supported_devices

    assert "cuda" in _get_foreach_kernels_supported_devices()  # so foreach is the default for CUDA parameters


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16"])
def test_the_loss_copies_the_logits_to_fp32_exactly_where_the_lab_says(name, precision):
    """A float32 tensor of batch × sequence × vocabulary appears in a 16-bit forward with its loss iff
    `models.upcasts_logits` says so (the fp32-logits sentence is shown only then)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    batch, seq = 2, 16
    found = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() == batch * seq * 320:
                    found.append(func)
            return out

    config = tiny(name, layers=1)
    model = models.build(config).train()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, 320, (batch, seq))
    with Watch(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
        model(input_ids=ids, labels=ids)
    assert bool(found) == models.upcasts_logits(config, precision)


# --- Issue 33: one definition of each part; a limit that does not round onto the budget ---------


@pytest.mark.parametrize(
    "options",
    [
        PlanOptions(model="mistral-7b", seq_len=1024, batch_size=2, world_size=4, zero_stage=2),
        PlanOptions(model="llama-3-8b", seq_len=2048, world_size=4, zero_stage=2),
    ],
    ids=["mistral-7b", "llama-3-8b"],
)
def test_activations_hold_no_weight_copies_in_the_metric_the_bar_and_the_prediction(options):
    """Autocast's 16-bit weight copies are their own part: the prediction's four, the metrics and the bar
    all count activations without them, so the parameters win here (on Mistral they did not when the copies
    were added to the activations)."""
    from explorers.scale.experiment import measure_plan

    plan = measure_plan(options)
    copies = plan.at_peak["weight copies"]
    assert copies > 2**30 and plan.weight_copies > 2**30
    assert plan.at_peak["parameters"] > plan.at_peak["activations"]
    assert lesson.predict_answers(plan) == ("parameters",)
    metrics = dict(lesson.metric_parts(plan))
    assert metrics["Activations"] == plan.activations == plan.measured.activations
    assert metrics["Weight copies"] == plan.weight_copies == plan.measured.weight_copies
    if plan.peak_phase == "forward":  # nothing saved is freed before backward: the bar's part is the metric's
        assert plan.at_peak["activations"] == plan.activations


def test_the_formula_comparison_measures_activations_without_the_weight_copies():
    from explorers.scale.formulas import Formulas, measure_formulas

    options = PlanOptions(model="gpt2", seq_len=128, batch_size=2)  # bf16 mixed: autocast copies the weights
    plan = _plan(models.config_for("gpt2"), options, "published")
    f: Formulas = measure_formulas(options)
    assert f.measured_activations == plan.activations == plan.measured.activations
    assert f.measured_weight_copies == plan.weight_copies > 0
    lines = " ".join(lesson.formula_lines(f))
    assert f"Measured for the whole model: {lesson.gib(plan.activations)}." in lines
    assert lesson.gib(plan.weight_copies) in lines and "neither formula counts them" in lines


def test_a_limit_never_reads_as_the_budget_when_it_misses_or_fits_it():
    """bert-large at 512 tokens in fp32 with SGD: 18 samples peak 40.044 GiB, which must not read "40.0 GiB"."""
    import re

    from explorers.scale.search import Question, limits

    options = PlanOptions(model="bert-large-uncased", seq_len=512, batch_size=17, precision="fp32", optimizer="sgd")
    found = limits(Question(options, 40))
    assert found.batch.next_up.peak > 40 * 2**30
    words = lesson.limit_words(found.batch, 40)
    shown = re.search(r"; 18 peaks at ([\d.,]+) (GiB|B)", words)
    assert shown, words
    value = float(shown[1].replace(",", "")) * (2**30 if shown[2] == "GiB" else 1)
    assert value > 40 * 2**30
    for near in (40 * 2**30 + 2**19 - 1, 40 * 2**30 - 2**19 + 1, 40 * 2**30 + 2**22):
        text = lesson.gib_beside(near, 40)
        assert text not in ("40.0 GiB", "40.00 GiB", "40.000 GiB"), near
