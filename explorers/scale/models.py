"""Real architectures from their published configs (assets/models/*.json), built with `transformers`' own classes.

The JSON files hold hyperparameters only, copied from each model's `config.json` on the
Hugging Face Hub (the `source` field says where); no weights, nothing is downloaded.
`transformers` is imported inside the functions that build a model, so the server, which
only lists the names, never loads it: models are built in the run engine's workers.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from torch import nn

MODELS_DIR = Path(__file__).resolve().parents[2] / "assets" / "models"
# The notebook keys, smallest first within each family: the order the lab lists them.
KEYS = (
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "bert-base-uncased",
    "bert-large-uncased",
    "qwen2.5-0.5b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b",
    "qwen2.5-7b",
    "llama-3-8b",
)
NAMES = {
    "gpt2": "GPT-2 (124M)",
    "gpt2-medium": "GPT-2 medium (355M)",
    "gpt2-large": "GPT-2 large (774M)",
    "gpt2-xl": "GPT-2 XL (1.5B)",
    "bert-base-uncased": "BERT base (110M)",
    "bert-large-uncased": "BERT large (335M)",
    "qwen2.5-0.5b": "Qwen2.5-0.5B",
    "llama-3.2-1b": "Llama-3.2-1B",
    "llama-3.2-3b": "Llama-3.2-3B",
    "mistral-7b": "Mistral-7B",
    "qwen2.5-7b": "Qwen2.5-7B",
    "llama-3-8b": "Llama-3-8B",
}


@functools.cache
def published(key: str) -> dict:
    """The model's published hyperparameters (and `source`, the address they were copied from)."""
    if key not in KEYS:
        raise ValueError(f"model must be one of {KEYS} or a transformers config object, not {key!r}")
    return json.loads((MODELS_DIR / f"{key}.json").read_text())


def config_for(model: object):
    """A transformers config from a key above, or the config object itself."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(model, PretrainedConfig):
        return model
    if not isinstance(model, str):
        raise ValueError(f"model must be one of {KEYS} or a transformers config object, not {type(model).__name__}")
    values = dict(published(model))
    values.pop("source")
    return AutoConfig.for_model(values.pop("model_type"), **values)


def build(config) -> nn.Module:
    """The library's own model class for `config`: its `architectures` entry, else a causal LM (masked LM for BERT)."""
    import transformers

    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    if cls is None:
        auto = transformers.AutoModelForMaskedLM if config.model_type == "bert" else transformers.AutoModelForCausalLM
        return auto.from_config(config)
    return cls(config)


def position_limit(key: str) -> int:
    """`longest_sequence` from the published hyperparameters alone (the server reads them without transformers)."""
    values = published(key)
    return int(values.get("max_position_embeddings") or values.get("n_positions") or 1 << 20)


def upcasts_logits(config, precision: str) -> bool:
    """Whether the library's loss works on an fp32 copy of 16-bit logits.

    Under bf16 autocast every model's does: autocast runs cross_entropy's log_softmax in fp32
    (torch/amp autocast op lists). In pure bf16, the causal-LM loss still copies the logits
    (transformers/loss/loss_utils.py: ForCausalLMLoss, `logits.float()`); BERT's masked-LM
    head calls CrossEntropyLoss on them as they are (models/bert/modeling_bert.py). In fp32
    the logits are fp32 already. tests/claims/test_scale.py watches a real step for the copy.
    """
    return precision == "bf16-mixed" or (precision == "bf16" and config.model_type != "bert")


def block_count(key: str) -> int:
    """The number of transformer blocks, from the published hyperparameters alone."""
    values = published(key)
    return int(values.get("num_hidden_layers") or values["n_layer"])


def longest_sequence(config) -> int:
    """The longest input the model's position table allows (GPT-2 and BERT learn one row per position)."""
    return int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", 0) or 1 << 20)


def blocks(model: nn.Module) -> nn.ModuleList:
    """The model's stack of transformer blocks: the ModuleList as long as the config's layer count."""
    count = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__} has no list of {count} blocks")


def head(model: nn.Module) -> nn.Module:
    """The output head (tied to the input embedding in GPT-2, BERT and the small Llama/Qwen models)."""
    return model.get_output_embeddings()
