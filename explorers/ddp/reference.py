"""One process trained on the combined batches: what DDP claims to be equivalent to.

For every optimizer step, micro-batch j of the reference is every rank's micro-batch j
concatenated in rank order (the exact indices each rank recorded), its mean-squared-error
loss divided by the number of micro-batches in the step, and one SGD step after them,
from the same starting parameters (rank 0's, which DDP broadcast to every rank).

DDP averages per-rank mean gradients, so the two agree when every rank had a batch of
the same size in the step. Where they did not (a short last batch on some ranks, or a
rank that had already joined), the difference is real and the lesson names the step.
"""

from __future__ import annotations

import torch
from torch.nn.utils import vector_to_parameters

import explorers.ddp.model as lab_model


def step_plan(records: list[dict]) -> dict[int, list[list[int]]]:
    """step -> its micro-batches, each the concatenation (rank order) of the ranks' indices for that micro-step."""
    plan: dict[int, dict[int, list[int]]] = {}
    for record in sorted(records, key=lambda r: r["rank"]):
        for entry in record["micro_steps"]:
            plan.setdefault(entry["step"], {}).setdefault(entry["micro"], []).extend(entry["indices"])
    return {step: [micros[j] for j in sorted(micros)] for step, micros in sorted(plan.items())}


def train_single_process(
    options, records: list[dict], initial: torch.Tensor, ddp_after_steps: dict, ddp_final: torch.Tensor
) -> dict:
    """Train the reference; compare its gradients with the synchronised ones and its parameters with DDP's.

    `ddp_after_steps` are rank 0's parameters after each of its steps; `ddp_final` its parameters at the end
    (after Join's final broadcast, the same on every rank).
    """
    dataset = lab_model.IndexedData(options.dataset_size, options.seed)
    model = lab_model.build_model(options.seed).double()  # float64: the reference's own rounding is negligible
    vector_to_parameters(initial.double(), model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=lab_model.LEARNING_RATE)
    synced = {}
    for record in records:
        for entry in record["steps"]:
            synced.setdefault(entry["step"], torch.tensor(entry["synced_grad"], dtype=torch.float64))
    losses, grad_diffs, param_diffs = [], [], []
    for step, micro_batches in step_plan(records).items():
        step_losses = []
        for indices in micro_batches:
            chosen = torch.tensor(indices)
            loss = lab_model.loss_of(model, dataset.x[chosen].double(), dataset.y[chosen].double())
            (loss / len(micro_batches)).backward()
            step_losses.append(float(loss))
        gradient = lab_model.flat(p.grad for p in model.parameters())
        grad_diffs.append(float((gradient - synced[step]).abs().max()) if step in synced else None)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(sum(step_losses) / len(step_losses))
        if step in ddp_after_steps:
            param_diffs.append(float((lab_model.flat(model.parameters()) - ddp_after_steps[step].double()).abs().max()))
        else:
            param_diffs.append(None)
    return {
        "losses": losses,
        "grad_max_diffs": grad_diffs,
        "param_max_diffs": param_diffs,
        "max_param_diff": float((lab_model.flat(model.parameters()) - ddp_final.double()).abs().max()),
    }
