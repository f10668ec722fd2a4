"""How every notebook API calls your model and your loss: one convention, in one place.

`autograd.run(yours=autograd.YourModel(...))`, `gradients.diagnose`, `modes.mode_grid`,
`memory.measure`, `memory.estimate` and `profiler.profile_training` all follow it:

- **A batch** is what your model is called on: a tensor is `model(x)`, a tuple or list is
  `model(*batch)`, a dict (a Hugging Face `BatchEncoding` included) is `model(**batch)`.
- **The output** goes to the loss as the model returned it: a tensor, a tuple, a dict or a
  Hugging Face `ModelOutput`.
- **The loss** is `loss_fn(output, target)` when you pass a target, and `loss_fn(output, batch)`
  when you do not, so `lambda out, batch: out.loss` works on a model that computes its own loss
  from `labels` inside the batch. A `loss_fn` that takes one argument is called `loss_fn(output)`.
  Without a `loss_fn`, an output that carries a `loss` (`out.loss`, `out["loss"]`) is used as it is.
- **The target is optional**. An integer target next to a floating-point output of another shape
  (class indices next to logits) with an element-wise default loss is a ValueError that says
  which loss to pass.
- **Errors**: a forward that fails inside your model is one ValueError that names the call made
  (`model(**batch)` with the keys); so is a loss that fails, and a model with no trainable parameter
  where a training step is measured.

Hooks: every API works on a private deep copy of your model. `copy.deepcopy` keeps module hooks
(`register_forward_hook` and the like), so they fire on the copy, and whatever they store
receives the copy's tensors: `warn_module_hooks` says so with a UserWarning. It drops tensor
hooks (`Tensor.register_hook`, `register_post_accumulate_grad_hook`); `copy_model` registers
them again on the copy's parameters, so the copy gets the gradients your own training would get.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable, Mapping

import torch
import torch.utils._pytree as pytree
from torch import nn

_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def call(model: nn.Module, batch: object) -> object:
    """`model(**batch)` for a dict, `model(*batch)` for a tuple or list, else `model(batch)`."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)


def describe_call(batch: object) -> str:
    """The call `call(model, batch)` makes, in words: `model(**batch)` with keys input_ids, labels."""
    if isinstance(batch, Mapping):
        return f"model(**batch) with keys {', '.join(map(str, batch.keys())) or '(none)'}"
    if isinstance(batch, tuple | list):
        return f"model(*batch) with {len(batch)} positional argument{'s' * (len(batch) != 1)}"
    if torch.is_tensor(batch):
        return f"model(x) with x of shape {tuple(batch.shape)}"
    return f"model(batch) with a {type(batch).__name__}"


def forward(model: nn.Module, batch: object) -> object:
    """`call(model, batch)`; whatever the model raises becomes one ValueError naming the call made."""
    try:
        return call(model, batch)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # the user's code: any exception is theirs to read, said once and plainly
        made = describe_call(batch)
        raise ValueError(f"The model's forward failed on {made}: {type(error).__name__}: {error}") from error


def output_loss(output: object) -> torch.Tensor | None:
    """The loss a model computed itself: `output.loss` or `output["loss"]` (a Hugging Face ModelOutput has both)."""
    value = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return value if torch.is_tensor(value) else None


def first_float(output: object) -> torch.Tensor | None:
    """The first floating-point tensor in the output, in the order the model returned them."""
    return next((t for t in tensors_in(output) if t.is_floating_point()), None)


def tensors_in(value: object) -> list[torch.Tensor]:
    """Every tensor in a batch or an output: dicts (ModelOutput included), lists and tuples, at any depth."""
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def takes_one_argument(loss_fn: Callable) -> bool:
    """True for `lambda output: ...`; a loss that accepts two positional arguments gets two."""
    try:
        parameters = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: the usual (output, target)
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return not any(p.kind == p.VAR_POSITIONAL for p in parameters) and len(positional) < 2


def target_mismatch(output: torch.Tensor | None, target: object, loss_name: str = "mse_loss") -> str | None:
    """Why an element-wise loss cannot compare `output` with an integer `target` of another shape, or None."""
    if output is None or not torch.is_tensor(target) or not output.is_floating_point():
        return None
    if target.is_floating_point() or target.is_complex() or tuple(target.shape) == tuple(output.shape):
        return None
    return (
        f"the target holds integers ({str(target.dtype).removeprefix('torch.')}, shape {tuple(target.shape)}) and "
        f"the output is {str(output.dtype).removeprefix('torch.')} of shape {tuple(output.shape)}: {loss_name} "
        "compares them element by element. For class indices pass loss_fn=torch.nn.functional.cross_entropy; "
        "for a model that computes its own loss, loss_fn=lambda output, batch: output.loss"
    )


def loss_of(loss_fn: Callable, output: object, batch: object, target: object = None) -> torch.Tensor:
    """`loss_fn(output, target)`, `loss_fn(output, batch)` without a target, or `loss_fn(output)`; checked.

    Whatever the loss raises becomes a ValueError naming the call made; a result that is not a
    one-element floating-point tensor is one too.
    """
    if takes_one_argument(loss_fn):
        made, args = "loss_fn(output)", (output,)
    elif target is not None:
        made, args = "loss_fn(output, target)", (output, target)
    else:
        made, args = "loss_fn(output, batch)", (output, batch)
    try:
        loss = loss_fn(*args)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # the user's code: any exception is theirs to read
        hint = target_mismatch(first_float(output), target, getattr(loss_fn, "__name__", "loss_fn"))
        raise ValueError(
            f"{made} failed: {type(error).__name__}: {error}" + (f". Note: {hint}" if hint else "")
        ) from error
    return checked_loss(loss, made)


def checked_loss(loss: object, made: str = "the loss") -> torch.Tensor:
    if not torch.is_tensor(loss):
        raise ValueError(f"{made} must return a scalar tensor; it returned {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(
            f"{made} must return a scalar tensor; it returned one of shape {tuple(loss.shape)}: "
            "reduce it (for example with .mean()) before backward"
        )
    if not loss.is_floating_point():
        raise ValueError(f"{made} must return a floating-point scalar; it returned {loss.dtype}")
    return loss.reshape(())


def check_trainable(model: nn.Module, measured: str) -> None:
    """A ValueError when no parameter requires grad: there is nothing for `measured` to measure."""
    parameters = list(model.parameters())
    if not any(p.requires_grad for p in parameters):
        raise ValueError(
            f"No parameter of the model requires grad (all of them frozen: {len(parameters)} parameter tensors), "
            f"so there is no {measured}. Unfreeze some with p.requires_grad_(True)."
        )


def module_hook_count(model: nn.Module) -> int:
    """Forward, forward-pre, backward and backward-pre hooks registered on the model's modules."""
    return sum(len(getattr(m, name, None) or {}) for m in model.modules() for name in _MODULE_HOOKS)


def warn_module_hooks(model: nn.Module, api: str) -> None:
    """A UserWarning when the model has module hooks: `copy.deepcopy` keeps them, so they fire on the copy."""
    count = module_hook_count(model)
    if count:
        warnings.warn(
            f"{api} runs a private copy of your model, and copy.deepcopy keeps module hooks: {count} module "
            "hook(s) registered on your model will fire on the copy, and whatever they store receives the "
            "copy's tensors. Remove them first (handle.remove()) if that matters.",
            UserWarning,
            stacklevel=3,
        )


def carry_tensor_hooks(original: nn.Module, copied: nn.Module) -> int:
    """Register the original parameters' tensor hooks on the copy's same-named parameters; returns how many.

    `copy.deepcopy` drops them (measured). `register_hook` hooks change the gradient the parameter
    gets, and post-accumulate-grad hooks run on it once accumulated: without them the copy would
    get a gradient your own training does not. They run on the copy's parameter.
    """
    targets = dict(copied.named_parameters())
    carried = 0
    for name, parameter in original.named_parameters():
        twin = targets.get(name)
        if twin is None or twin is parameter:
            continue
        for hook in (parameter._backward_hooks or {}).values():
            twin.register_hook(hook)
            carried += 1
        for hook in (getattr(parameter, "_post_accumulate_grad_hooks", None) or {}).values():
            twin.register_post_accumulate_grad_hook(hook)
            carried += 1
    return carried


def copy_model(model: nn.Module, api: str) -> nn.Module:
    """A deep copy with the tensor hooks carried over; a ValueError naming `api` when it cannot be copied."""
    try:
        copied = copy.deepcopy(model)
    except Exception as error:  # deepcopy raises whatever an attribute's __deepcopy__ or pickling raises
        raise ValueError(f"{api} works on a copy of the model, and copy.deepcopy(model) failed: {error}") from error
    carry_tensor_hooks(model, copied)
    return copied


def fresh_batch(batch: object) -> object:
    """The batch with every tensor replaced by a new leaf holding the same values (requires_grad kept).

    The model may change it in place and backward fill its `.grad` without touching your tensors.
    Dicts, ModelOutput-like mappings and namedtuples keep their type.
    """

    def copy_tensor(t: torch.Tensor) -> torch.Tensor:
        copied = t.detach().clone()
        return copied.requires_grad_(True) if t.requires_grad and copied.is_floating_point() else copied

    if torch.is_tensor(batch):
        return copy_tensor(batch)
    if isinstance(batch, Mapping):
        items = {key: fresh_batch(value) for key, value in batch.items()}
        try:
            return type(batch)(items)
        except Exception:  # a mapping type that cannot be rebuilt from a dict: a plain dict calls the same
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(fresh_batch(item) for item in batch))
    if isinstance(batch, tuple | list):
        return type(batch)(fresh_batch(item) for item in batch)
    return batch
