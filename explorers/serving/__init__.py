"""Serving lab: why does a model that trained well fail in production?

A small churn classifier (two Linear → BatchNorm → ReLU → Dropout blocks) is trained on synthetic
customer records. Training records its input-to-output contract (feature order, normalisation
statistics, dtype, mode, batch, checkpoint loading, softmax and threshold) and a golden set of
32 requests with the expected output of each stage; the checkpoint goes through `torch.save` and
comes back with `torch.load(weights_only=True)`. `compare` serves the same model with mismatches
injected and replays the golden set stage by stage:

- `data`: the synthetic records and the live traffic, which `shift` moves;
- `training`: the model, its training and the recorded artefact (trained once per seed, immutable);
- `pipeline`: the contract, the mismatches and the three-stage `Service`;
- `experiment`: `compare_run` (the engine's experiment) and `compare` (the notebook form);
- `drift`: PSI per feature; `actions`: the checklist; `lesson`, `figures`, `export`: sentences, charts, downloads.

What to expect: with no mismatch every stage matches the recorded outputs exactly; each mismatch
is caught where it enters (normalisation and feature order at preprocess; dtype, train mode,
strict=False loading and batch of one at the model; the missing softmax at postprocess), and a
combination reports the earliest. A pure shift leaves the golden replay clean while drift and
live accuracy move: that is how a shift is told apart from a deployment mismatch.

    from explorers import serving
    c = serving.compare(mismatches=("feature_order",), shift=0.0, seed=0)
    c.first_divergent_stage   # "preprocess" | "model" | "postprocess" | None
    c.stages                  # stage -> largest |difference| from the recorded output over the golden set
    c.reports["model"].status # "matches" | "differs here" | "inherited" | "not reached"
    c.examples                # per golden request and stage, the difference, largest first
    c.reference_accuracy, c.serving_accuracy
    c.drift                   # feature -> FeatureDrift(psi, flagged, ...)
    c.drift_flagged           # True when any feature's PSI reaches drift.PSI_FLAG
    serving.checklist(c)      # the next actions, earliest stage first
"""

from explorers import lazy

__getattr__, __dir__ = lazy.exports(
    __name__,
    {
        "checklist": "actions",
        "answer_card": "card",
        "PSI_FLAG": "drift",
        "FeatureDrift": "drift",
        "TOLERANCE": "experiment",
        "Comparison": "experiment",
        "ExampleDiff": "experiment",
        "ServingOptions": "experiment",
        "StageReport": "experiment",
        "compare": "experiment",
        "compare_run": "experiment",
        "explain": "lesson",
        "MISMATCHES": "pipeline",
        "STAGES": "pipeline",
        "Contract": "pipeline",
        "Artefact": "training",
        "trained": "training",
    },
)

__all__ = [
    "MISMATCHES",
    "PSI_FLAG",
    "STAGES",
    "TOLERANCE",
    "Artefact",
    "Comparison",
    "Contract",
    "ExampleDiff",
    "FeatureDrift",
    "ServingOptions",
    "StageReport",
    "answer_card",
    "checklist",
    "compare",
    "compare_run",
    "explain",
    "trained",
]
