"""The golden set and the recorded pipeline as files, so the check transfers to your own service.

- `golden_csv`: one row per golden request: the raw features by name, the label, and the
  expected output of each stage (model input columns, both logits, churn probability, label);
- `golden_json`: the same, nested per stage;
- `pipeline_json`: the recorded contract (feature order, statistics, dtype, mode, batch, load,
  postprocessing, threshold), the checkpoint's SHA-256, the tolerance and the drift bins.

Replaying the golden inputs through a service and comparing each stage with these numbers is
the whole test; the lab does exactly that.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pandas as pd

from explorers.serving.data import FEATURES
from explorers.serving.drift import PSI_FLAG
from explorers.serving.experiment import TOLERANCE
from explorers.serving.training import Artefact


def golden_frame(artefact: Artefact) -> pd.DataFrame:
    golden = artefact.golden
    rows = []
    for i in range(len(golden)):
        row = {"validation_row": golden.indices[i], **dict(zip(FEATURES, golden.inputs[i], strict=True))}
        row["churned"] = golden.labels[i]
        row["near_threshold"] = golden.near_threshold[i]
        row |= {f"input_{j + 1}": v for j, v in enumerate(golden.preprocess[i])}
        row |= {"logit_0": golden.logits[i][0], "logit_1": golden.logits[i][1]}
        row |= {"churn_probability": golden.scores[i], "prediction": golden.predictions[i]}
        rows.append(row)
    return pd.DataFrame(rows)


def golden_csv(artefact: Artefact) -> str:
    """Floats written with 9 significant digits: enough to read a float32 back exactly."""
    buffer = io.StringIO()
    golden_frame(artefact).to_csv(buffer, index=False, float_format="%.9g")
    return buffer.getvalue()


def golden_json(artefact: Artefact) -> str:
    golden = artefact.golden
    return json.dumps(
        {
            "features": list(FEATURES),
            "requests": [
                {
                    "validation_row": golden.indices[i],
                    "raw": dict(zip(FEATURES, golden.inputs[i], strict=True)),
                    "churned": golden.labels[i],
                    "near_threshold": golden.near_threshold[i],
                    "expected": {
                        "preprocess": list(golden.preprocess[i]),
                        "model": list(golden.logits[i]),
                        "postprocess": {"churn_probability": golden.scores[i], "prediction": golden.predictions[i]},
                    },
                }
                for i in range(len(golden))
            ],
        },
        indent=1,
    )


def pipeline_dict(artefact: Artefact) -> dict:
    return {
        "contract": dataclasses.asdict(artefact.contract),
        "checkpoint": {
            "sha256": artefact.checkpoint_sha256,
            "bytes": len(artefact.checkpoint),
            "load": "torch.load(f, weights_only=True)",
        },
        "golden_set": {"requests": len(artefact.golden), "tolerance": TOLERANCE},
        "validation_accuracy": artefact.validation_accuracy,
        "drift": {
            "statistic": "PSI over training deciles",
            "flag_at": PSI_FLAG,
            "bins": [dataclasses.asdict(b) for b in artefact.feature_bins],
        },
        "seed": artefact.seed,
        "torch": artefact.torch_version,
    }


def pipeline_json(artefact: Artefact) -> str:
    return json.dumps(pipeline_dict(artefact), indent=1)
