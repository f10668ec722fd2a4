"""The run manifest: what you need to rerun an experiment and to explain why two runs differ.

A manifest is plain JSON: the code version (git commit and whether the tree had local changes,
when the code is in git), the job's config, the seeds, the deterministic flags in effect, the
torch / numpy / python / platform versions, the device and thread count, a hash of the data and
its train/validation split, and a digest of the result. `differences` names every field in which
two manifests differ; `parse` reads an uploaded one and refuses, with a message that says why,
anything too large, not JSON, too deep, or not a manifest of this lab.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import explorers.reproducibility.recipe as recipe
from explorers import units, uploads

VERSION = 1
MAX_BYTES = 64 * 1024  # a manifest of this lab is about 1.5 KiB
MAX_UPLOAD_MB = uploads.upload_megabytes(MAX_BYTES)  # the page's uploaders refuse larger files (1 MB)
MAX_DEPTH = 6
MAX_FIELDS = 400
SHOWN_CHARS = 80
GIT_TIMEOUT_S = 3.0
ROOT = Path(__file__).resolve().parents[2]


def code_version(root: Path = ROOT) -> dict:
    """The git commit of the code, and whether tracked files had changes; or why there is none."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return {"git_commit": None, "why_none": f"git could not run: {type(error).__name__}"}
    if commit.returncode != 0:
        return {"git_commit": None, "why_none": "the code is not in a git checkout"}
    return {"git_commit": commit.stdout.strip(), "uncommitted_changes": bool(status.stdout.strip())}


def process_facts() -> dict:
    """Versions, device and determinism flags as the process that ran the job saw them."""
    return {
        "versions": {
            "torch": str(torch.__version__),  # a str subclass, which weights_only refuses
            "numpy": np.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "device": {
            "type": "cpu",
            "processor": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "cuda_available": torch.cuda.is_available(),
        },
        "determinism": {
            "use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        },
    }


def build(config: dict, result: dict, code: dict) -> dict:
    """One run's manifest from its config, what its process reported, and the code version."""
    facts = result["facts"]
    return {
        "manifest_version": VERSION,
        "lab": "reproducibility",
        "code": code,
        "config": {
            "steps": config["steps"],
            "batch_size": recipe.BATCH,
            "num_workers": config["num_workers"],
            "augmentation": config["augmentation"],
            "model": f"Linear({recipe.IN_FEATURES}, {recipe.HIDDEN}) ReLU Dropout({recipe.DROPOUT}) "
            f"Linear({recipe.HIDDEN}, {recipe.CLASSES})",
            "optimizer": f"Adam(lr={recipe.LEARNING_RATE})",
        },
        "seeds": {
            "seed": config["seed"],
            "torch": config["seed_torch"],
            "numpy": config["seed_numpy"],
            "python": config["seed_python"],
            "dataloader_generator_and_worker_init_fn": config["seed_workers"],
        },
        "determinism": facts["determinism"],
        "versions": facts["versions"],
        "device": facts["device"],
        "data": {
            "split_hash": result["split_hash"],
            "data_seed": recipe.DATA_SEED,
            "train_size": recipe.TRAIN_SIZE,
            "val_size": recipe.VAL_SIZE,
        },
        "result": {
            "final_parameters_digest": result["parameters_digest"],
            "final_loss": float(result["losses"][-1]),
        },
    }


def to_json(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False)


# --- Reading an uploaded manifest ---------------------------------------------------------------------


def _refuse_constant(name: str):
    raise ValueError(f"it contains {name}, which JSON does not allow")


def parse(data: bytes | str) -> dict:
    """A manifest from JSON text; ValueError with a reason a person can act on for anything else.

    Built for hostile uploads: the size is checked first, the nesting is measured on the raw text
    (without recursion) before `json.loads` sees it, text that is not valid Unicode (a lone
    surrogate) is refused, and a message quotes the file's content only as a short code span.
    """
    try:
        raw = data.encode() if isinstance(data, str) else bytes(data)
    except UnicodeEncodeError:
        raise ValueError(_NOT_UNICODE) from None
    if len(raw) > MAX_BYTES:
        raise ValueError(
            f"The file is {units.format_bytes(len(raw))}; a manifest is at most "
            f"{units.format_bytes(MAX_BYTES)}. Is this a run manifest?"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("The file is not UTF-8 text, so it is not a JSON manifest.") from None
    depth = uploads.json_depth(text)
    if depth > MAX_DEPTH:
        raise ValueError(_too_deep(depth))
    try:
        manifest = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"The file is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
        ) from None
    except RecursionError:
        raise ValueError(f"The JSON is nested too deeply; a manifest is at most {MAX_DEPTH} levels deep.") from None
    except ValueError as error:
        raise ValueError(f"The file is not valid JSON: {error}.") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"A manifest is a JSON object ({{...}}); this file holds a JSON {type(manifest).__name__}.")
    if "manifest_version" not in manifest:
        raise ValueError("The JSON has no `manifest_version` field, so it is not a manifest of this lab.")
    version = manifest["manifest_version"]
    if version != VERSION:
        raise ValueError(
            f"manifest_version {uploads.code(uploads.short_repr(version, 20))} is not one this lab reads ({VERSION})."
        )
    depth, fields, bad_text = _shape(manifest)
    if depth > MAX_DEPTH:
        raise ValueError(_too_deep(depth))
    if fields > MAX_FIELDS:
        raise ValueError(f"The JSON has {fields:,} fields; a manifest has at most {MAX_FIELDS}.")
    if bad_text is not None:
        raise ValueError(f"{_NOT_UNICODE} It holds {uploads.code(bad_text, 40)}.")
    return manifest


_NOT_UNICODE = "The JSON holds text that is not valid Unicode (a lone surrogate), which no manifest holds."


def _too_deep(depth: int) -> str:
    return f"The JSON is {depth:,} levels deep; a manifest is at most {MAX_DEPTH}."


def _shape(value) -> tuple[int, int, str | None]:
    """(nesting depth, number of leaf fields, the first key or string that is not valid Unicode, if any).

    Walked with a stack rather than recursion, so no depth of value can exhaust Python's recursion.
    """
    deepest, fields, bad_text = 0, 0, None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            for key in item:
                if bad_text is None and not _is_unicode(key):
                    bad_text = key
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
        else:
            fields += 1
            if bad_text is None and isinstance(item, str) and not _is_unicode(item):
                bad_text = item
    return deepest, fields, bad_text


def _is_unicode(text: str) -> bool:
    """Whether the text encodes as UTF-8: false for a lone surrogate such as "\\ud800", which JSON can spell."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- Comparing two ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    field: str  # dotted path, e.g. "seeds.numpy"
    left: str  # JSON of the value, shortened; "(absent)" when the field is missing
    right: str


def flatten(manifest: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in manifest.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def differences(left: dict, right: dict) -> list[Difference]:
    """Every field whose value differs, in the left manifest's order, then fields only the right one has."""
    a, b = flatten(left), flatten(right)
    absent = "(absent)"
    found = []
    for field in [*a, *(k for k in b if k not in a)]:
        if field not in b:
            found.append(Difference(field, _shown(a[field]), absent))
        elif field not in a:
            found.append(Difference(field, absent, _shown(b[field])))
        elif json.dumps(a[field]) != json.dumps(b[field]):  # true and 1 are different settings
            found.append(Difference(field, _shown(a[field]), _shown(b[field])))
    return found
