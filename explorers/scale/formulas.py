"""The usual formulas, beside the measurement, and the measured parts that explain each gap.

- ZeRO's 16 bytes per parameter for mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO:
  Memory Optimizations Toward Training Trillion Parameter Models", section 3.1): 2 for fp16
  weights, 2 for fp16 gradients, 12 for the fp32 master weights and Adam's two moments.
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv:2205.05198, section 4.1): a GPT-3 style block stores s·b·h·(34 + 5·a·s/h) bytes of
  activations in 16-bit, without tensor parallelism; 5·a·s²·b of them are the attention
  scores, softmax and its dropout, which a fused attention kernel does not store.

The measurement's own split comes from two more measured steps of the same model with one
and with two blocks: their difference is what one block saves for backward, and the rest
is what the embeddings, the final norm, the head and the loss save.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import explorers.scale.models as models
from explorers.scale.experiment import PlanOptions, _plan

ADAM_MIXED_BYTES_PER_PARAMETER = 16


@dataclass(frozen=True)
class Formulas:
    parameter_count: int
    trainable_count: int
    adam_16: int  # 16 bytes per parameter, every parameter
    measured_state: int  # parameters + gradients + optimizer state, measured, one GPU
    blocks: int
    heads: int
    korthikanti_block: int  # bytes per block with the attention scores stored
    korthikanti_block_fused: int  # without them (34·s·b·h)
    measured_block: int | None  # saved for backward by one block, measured (autocast's weight copies not included)
    measured_outside: int | None  # saved by everything outside the blocks, measured
    measured_activations: int  # the whole model's, measured
    measured_weight_copies: int  # autocast's weight copies, measured: a part the formula does not count
    logits_fp32: int  # batch x sequence x vocabulary x 4 bytes: one fp32 copy of the logits, computed
    upcasts_logits: bool  # the loss works on that fp32 copy of 16-bit logits (models.upcasts_logits)
    options: PlanOptions  # what was measured: the formulas assume no checkpointing and every block training


def measure_formulas(options: PlanOptions, report: Callable | None = None) -> Formulas:
    """The run engine's entry: the formulas for these settings, and the measured steps that explain their gaps."""
    config = models.config_for(options.model)
    source = models.published(options.model)["source"]
    whole = _plan(config, options, source)
    if report:
        report(1, 3)
    small = []
    for count in (1, 2) if options.trainable != "last" else ():  # with the last N training, blocks differ
        shrunk = models.config_for(options.model)
        shrunk.num_hidden_layers = count
        blocks = min(options.trainable_blocks, count)
        small.append(_plan(shrunk, dataclasses.replace(options, trainable_blocks=blocks), source).activations)
        if report:
            report(1 + count, 3)
    s, b, h, a = options.seq_len, options.batch_size, config.hidden_size, config.num_attention_heads
    measured = whole.measured
    return Formulas(
        parameter_count=whole.parameter_count,
        trainable_count=whole.trainable_count,
        adam_16=ADAM_MIXED_BYTES_PER_PARAMETER * whole.parameter_count,
        measured_state=measured.parameters + measured.gradients + measured.optimizer_state,
        blocks=config.num_hidden_layers,
        heads=a,
        korthikanti_block=s * b * h * 34 + 5 * a * s * s * b,
        korthikanti_block_fused=34 * s * b * h,
        measured_block=small[1] - small[0] if small else None,
        measured_outside=2 * small[0] - small[1] if small else None,
        measured_activations=whole.activations,
        measured_weight_copies=whole.weight_copies,
        logits_fp32=b * s * config.vocab_size * 4,
        upcasts_logits=models.upcasts_logits(config, options.precision),
        options=options,
    )
