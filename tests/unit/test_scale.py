"""The Real-scale lab's options, its refusals, and its promise to keep transformers out of the server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from explorers.scale import models
from explorers.scale.experiment import PlanOptions, measure_plan, plan
from tests.unit.test_layout import ROOT


def test_the_server_never_imports_transformers():
    """Pages import these modules; only the run engine's workers build models."""
    code = (
        "import sys\n"
        "import explorers.memory, explorers.scale.card, explorers.scale.figures, explorers.scale.lesson\n"
        "import explorers.scale.search, explorers.scale.remedies, explorers.scale.formulas\n"
        "from explorers.scale import models\n"
        "assert [models.position_limit(k) for k in models.KEYS]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model": "llama-99b"}, "model must be one of"),
        ({"precision": "fp8"}, "precision must be one of"),
        ({"optimizer": "adam"}, "optimizer must be one of"),
        ({"zero_stage": 4}, "zero_stage must be one of"),
        ({"batch_size": 0}, "batch_size must be an integer from 1"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"seq_len": 10**9}, "seq_len must be an integer"),
        ({"world_size": 0}, "world_size must be an integer"),
        ({"checkpointing": "yes"}, "checkpointing must be True or False"),
    ],
)
def test_bad_options_are_refused_with_the_reason(changes, message):
    with pytest.raises(ValueError, match=message):
        PlanOptions(**changes)


def test_a_sequence_past_the_position_table_is_refused_with_its_length():
    with pytest.raises(ValueError, match="holds 512 positions"):
        measure_plan(PlanOptions(model="bert-base-uncased", seq_len=1024))


def test_a_config_object_and_its_key_give_the_same_plan():
    by_key = plan("gpt2", 1, 64, precision="fp32")
    by_config = plan(models.config_for("gpt2"), 1, 64, precision="fp32")
    assert (by_key.peak, by_key.at_peak) == (by_config.peak, by_config.at_peak)
    assert by_config.source == "a transformers config object" and by_key.source.startswith("https://huggingface.co/")


def test_fits_and_headroom_follow_the_peak():
    p = plan("gpt2", 1, 64, precision="fp32")
    assert p.fits(p.peak) and not p.fits(p.peak - 1)
    assert p.headroom(p.peak + 5) == 5


def test_more_trained_blocks_than_the_model_has_is_refused_with_its_count():
    with pytest.raises(ValueError, match="this model has 12 blocks"):
        measure_plan(PlanOptions(model="gpt2", seq_len=64, trainable="last", trainable_blocks=13))


def test_foreach_is_refused_for_an_optimizer_it_does_not_apply_to():
    with pytest.raises(ValueError, match="foreach=True is for AdamW here"):
        PlanOptions(optimizer="sgd", foreach=True)


@pytest.mark.parametrize("batch, smaller, steps", [(8, 4, 2), (6, 3, 2), (9, 3, 3), (7, 1, 7)])
def test_the_accumulation_remedy_keeps_the_global_batch(batch, smaller, steps):
    from explorers.scale.remedies import candidates

    found = dict(candidates(PlanOptions(model="gpt2", batch_size=batch, seq_len=64)))
    accumulated = found[f"micro-batch {smaller} with {steps} accumulation steps"]
    assert accumulated.batch_size * accumulated.micro_batches == batch


def test_sizes_read_apart_from_each_other_and_from_the_budget():
    from explorers.scale.lesson import gib, gib_beside

    assert gib(int(0.14 * 2**30)) != gib(int(0.12 * 2**30))
    assert gib(50 * 2**20) == "50 MiB"
    assert gib_beside(int(79.99 * 2**30), 80) == "79.99 GiB"
    assert gib_beside(int(80.004 * 2**30), 80) == "80.004 GiB"
    assert gib_beside(int(60.04 * 2**30), 80) == "60.0 GiB"


def test_the_foreach_step_is_measured_and_offered_back_as_a_remedy():
    from explorers.scale.remedies import candidates

    loop = plan("gpt2", 1, 64, precision="fp32")
    together = plan("gpt2", 1, 64, precision="fp32", foreach=True)
    assert together.phase_peaks["optimizer step"] > loop.phase_peaks["optimizer step"]
    assert "foreach=True" in together.measured.optimizer_call
    names = [name for name, _ in candidates(together.options)]
    assert "AdamW one parameter at a time (foreach=False)" in names


def test_a_tie_at_the_peak_accepts_either_answer():
    import dataclasses

    from explorers.scale.lesson import predict_answers

    p = plan("gpt2", 1, 64, precision="fp32")
    tied = dataclasses.replace(p, at_peak={"parameters": 5, "gradients": 5, "activations": 1, "temporaries": 9})
    assert predict_answers(tied) == ("parameters", "gradients")


def test_the_formula_lines_name_what_differs_from_the_formulas_assumptions_and_keep_the_logits_line():
    from explorers.scale.formulas import measure_formulas
    from explorers.scale.lesson import formula_lines

    tied_head = " ".join(formula_lines(measure_formulas(PlanOptions(model="gpt2", seq_len=64, trainable="head"))))
    assert "not every block trains" in tied_head and "save nothing" not in tied_head  # tied: frozen blocks do save
    last = " ".join(formula_lines(measure_formulas(PlanOptions(model="gpt2", seq_len=64, trainable="last"))))
    assert "fp32 copy of the 16-bit logits" in last  # bf16 autocast copies them, whatever trains
    fp32 = " ".join(formula_lines(measure_formulas(PlanOptions(model="gpt2", seq_len=64, precision="fp32"))))
    assert "runs in fp32" in fp32 and "fp32 copy" not in fp32


def test_the_card_offers_no_change_that_saves_nothing():
    import dataclasses

    from explorers.scale import card
    from explorers.scale.remedies import Remedies, Remedy

    p = plan("gpt2", 1, 64, precision="fp32")
    useless = Remedies(p, (Remedy("ZeRO-2 over 2 GPUs", p.options, p, 0),))
    evidence = card.answer_card(p, 80, None, useless).evidence
    assert "None of the changes tried lowers the peak" in evidence and "saves the most" not in evidence
    helpful = Remedies(p, (dataclasses.replace(useless.remedies[0], saved=2**30),))
    assert "saves the most (measured): ZeRO-2 over 2 GPUs, 1.0 GiB" in card.answer_card(p, 80, None, helpful).evidence


def test_every_part_of_the_peak_bar_has_a_colour_of_its_own():
    """Real scale's bar once drew "optimizer step temporaries" and "other" in the same grey."""
    from explorers.scale import figures as scale_figures

    measured = plan("gpt2", 1, 64, precision="fp32")
    parts = scale_figures.peak_parts(measured)
    colours = [trace.marker.color for trace in scale_figures.peak_figure(measured, (80,), 80).data]
    assert len(parts) >= 3 and len(colours) == len(set(colours)) == len(parts), parts


def test_the_sequence_search_measures_the_lengths_the_slider_moves_to_and_each_plan_is_measure_plans_own():
    """The page hands these plans to the engine's cache: a notch of the slider was a new fake step (about 1 s)."""
    import dataclasses

    from explorers.scale.search import Question, limits

    options = PlanOptions(model="gpt2", seq_len=512, batch_size=2)
    found = limits(Question(options, 8))
    lengths = {p.options.seq_len for p in found.seq.plans}
    assert {256, 512, 1024} <= lengths
    assert found.seq.measured == len(found.seq.plans) and found.batch.measured == len(found.batch.plans)
    for measured in (*found.seq.plans, *found.batch.plans):
        fresh = measure_plan(measured.options)
        assert dataclasses.replace(measured, seconds=0) == dataclasses.replace(fresh, seconds=0)
