"""The precision lab's experiment: one small model trained in fp32, bf16 autocast, fp16 autocast and fp16 with
GradScaler, from the same weights on the same batches, with what each precision did to the numbers.

Every run starts from one seeded copy of the model and reads the same batches. Two knobs: one
scales the inputs by 10^k, which pushes activations past float16's largest value (65504); the other
multiplies the loss by 10^k before backward and divides the learning rate by 10^k, so fp32 takes
the same steps while every gradient shrinks towards float16's smallest (about 6e-8). Per run the experiment keeps:

- the loss at every step, and whether `optimizer.step()` moved the weights;
- at the first step, per layer: inf and nan values in the layer's output (forward hooks), and the
  values of the gradient flowing into the layer's output (full backward hooks) that are zero
  although the fp32 run's are not, which is underflow, witnessed against fp32 on the same batch;
- the dtype of every op's output in one forward of the first batch under the run's autocast (a
  dispatch mode, on a copy before training), so which ops autocast ran in the lower precision and
  which it kept in float32 is read, not listed;
- with GradScaler: its scale before and after every step, and PyTorch's warnings, among them the
  one an `lr_scheduler.step()` gives when the optimizer step before it was skipped.

Autocast on a CPU supports bfloat16 and float16 in torch 2.13 (`torch.autocast("cpu", dtype=...)`),
and `torch.amp.GradScaler("cpu")` scales and skips there as on CUDA.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from explorers import bounds
from explorers.rng import isolated_rng

PRECISIONS = ("fp32", "bf16", "fp16", "fp16 + GradScaler")
INPUT_EXP_RANGE = (-4, 6)
LOSS_EXP_RANGE = (-12, 0)
SCALE_EXP_RANGE = (0, 24)
STEPS_RANGE = (4, 40)
SEED_RANGE = (0, 9_999)
FEATURES, HIDDEN, CLASSES, BATCH = 16, 64, 4, 32
LEARNING_RATE = 0.05
LAYERS = ("fc1", "norm", "fc2", "head")


@dataclass(frozen=True)
class PrecisionOptions:
    input_exp: int = 0  # inputs × 10^input_exp
    loss_exp: int = -5  # the loss × 10^loss_exp before backward (and the learning rate ÷ 10^loss_exp)
    scale_exp: int = 16  # GradScaler's init_scale = 2^scale_exp (PyTorch's default is 2^16)
    steps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        bounds.check_ints(
            self,
            {
                "input_exp": INPUT_EXP_RANGE,
                "loss_exp": LOSS_EXP_RANGE,
                "scale_exp": SCALE_EXP_RANGE,
                "steps": STEPS_RANGE,
                "seed": SEED_RANGE,
            },
        )


@dataclass(frozen=True)
class LayerCounts:
    values: int  # elements in the layer's output
    inf: int  # of them, ±inf
    nan: int
    grad_values: int  # elements of the gradient flowing into the output
    grad_underflow: int  # of them, zero here where fp32's is non-zero yet below this dtype's smallest normal
    grad_inf_or_nan: int
    grad_rounded_to_zero: int = 0  # zero here where fp32's is within this dtype's range: rounding, not range


@dataclass(frozen=True)
class PrecisionRun:
    precision: str
    losses: tuple[float, ...]  # cross-entropy at each step, before the loss_exp factor
    stepped: tuple[bool, ...]  # per step: did optimizer.step() change the weights
    layers: dict[str, LayerCounts]  # at the first step
    op_dtypes: tuple[tuple[str, str], ...]  # the first forward's ops and their output dtypes, in order
    scales: tuple[tuple[float, float], ...] = ()  # GradScaler: (scale before, scale after update) per step
    warnings: tuple[str, ...] = ()
    nonfinite_from: int | None = None  # the first step after which some weight held inf or nan

    @property
    def skipped_steps(self) -> list[int]:
        """The steps GradScaler skipped (1-based): it cut its scale, and the weights did not move. A step whose
        gradients were all zero (underflow) leaves the weights too, but the scaler ran it and kept its scale."""
        return [i for i, ((before, after), moved) in enumerate(zip(self.scales, self.stepped, strict=True), 1)
                if after < before and not moved]  # fmt: skip

    @property
    def updates(self) -> tuple[bool, ...]:
        """Per step while the weights stayed finite, whether it moved them: a step that turned a weight into inf or
        nan changed it, but trained nothing, so it and the steps after it are left out."""
        return self.stepped[: self.nonfinite_from - 1] if self.nonfinite_from else self.stepped


@dataclass(frozen=True)
class PrecisionResult:
    options: PrecisionOptions
    runs: dict[str, PrecisionRun]
    seconds: float
    torch_version: str
    device: str = "cpu"

    def run(self, precision: str) -> PrecisionRun:
        return self.runs[precision]


class _Dtypes(TorchDispatchMode):
    """Each op's name and the dtype of its (first) tensor output."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, tuple | list) and out else out
        if isinstance(first, torch.Tensor) and first.is_floating_point():
            self.ops.append((func.overloadpacket.__name__, str(first.dtype).removeprefix("torch.")))
        return out


def build_model() -> nn.Sequential:
    return nn.Sequential(
        OrderedDict(
            fc1=nn.Linear(FEATURES, HIDDEN),
            act1=nn.GELU(),
            norm=nn.LayerNorm(HIDDEN),
            fc2=nn.Linear(HIDDEN, HIDDEN),
            act2=nn.GELU(),
            head=nn.Linear(HIDDEN, CLASSES),
        )
    )


def make_batches(options: PrecisionOptions) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(options.seed)
    centres = torch.randn(CLASSES, FEATURES, generator=generator) * 2
    batches = []
    for _ in range(options.steps):
        y = torch.randint(0, CLASSES, (BATCH,), generator=generator)
        x = centres[y] + torch.randn(BATCH, FEATURES, generator=generator)
        batches.append((x * 10.0**options.input_exp, y))
    return batches


def _autocast(precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast("cpu", dtype=dtype)


def _first_step_hooks(model: nn.Module, outputs: dict, grads: dict) -> list:
    handles = []
    for name in LAYERS:
        module = model.get_submodule(name)

        def forward(module, args, output, name=name):
            outputs[name] = output.detach().clone()

        def backward(module, grad_input, grad_output, name=name):
            grads[name] = grad_output[0].detach().clone()

        handles += [module.register_forward_hook(forward), module.register_full_backward_hook(backward)]
    return handles


def _train(model: nn.Module, batches, precision: str, options: PrecisionOptions) -> tuple[PrecisionRun, dict]:
    # The loss × 10^k makes every gradient 10^k times smaller, and the learning rate / 10^k makes each fp32 step
    # what it was: a model with tiny gradients that trains as well in fp32, which is where fp16 underflow bites.
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE / 10.0**options.loss_exp)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**options.scale_exp) if "GradScaler" in precision else None
    losses, stepped, scales, nonfinite_from = [], [], [], None
    dtypes, probe = _Dtypes(), copy.deepcopy(model)
    with torch.no_grad(), _autocast(precision), dtypes:
        F.cross_entropy(probe(batches[0][0]), batches[0][1])
    outputs, grads = {}, {}
    handles = _first_step_hooks(model, outputs, grads)
    factor = 10.0**options.loss_exp
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # each distinct warning once: the filters just changed
        # the lab's own backward hooks on a model whose input needs no grad: its warning is not the run's
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for step, (x, y) in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            with _autocast(precision):
                loss = F.cross_entropy(model(x), y)
            before = [p.detach().clone() for p in model.parameters()]
            if scaler is None:
                (loss * factor).backward()
                optimizer.step()
            else:
                scale = scaler.get_scale()
                scaler.scale(loss * factor).backward()
                scaler.step(optimizer)
                scaler.update()
                scales.append((scale, scaler.get_scale()))
            scheduler.step()
            if step == 0:
                for handle in handles:
                    handle.remove()
            losses.append(float(loss.detach()))
            stepped.append(any(not _same_bits(b, p) for b, p in zip(before, model.parameters(), strict=True)))
            if nonfinite_from is None and not all(torch.isfinite(p).all() for p in model.parameters()):
                nonfinite_from = step + 1
    said = tuple(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    run = PrecisionRun(
        precision, tuple(losses), tuple(stepped), {}, tuple(dtypes.ops), tuple(scales), said, nonfinite_from
    )
    first_scale = scales[0][0] if scales else 1.0  # the gradients flowing at step 1 were scaled by it
    return run, {"outputs": outputs, "grads": grads, "scale": first_scale}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit: a nan weight that a step left alone is unchanged (torch.equal calls nan unequal to itself)."""
    return torch.equal(a.detach().contiguous().view(torch.uint8), b.detach().contiguous().view(torch.uint8))


def _counts(first: dict, reference: dict | None) -> dict[str, LayerCounts]:
    """At step 1, per layer. A gradient value that is zero here and non-zero in fp32 is underflow when fp32's
    value (times the scaler's scale, which multiplied this run's) is below the smallest normal of the dtype
    the gradient flowed in; otherwise rounding or cancellation zeroed it, inside the dtype's range."""
    counts = {}
    for name in LAYERS:
        out, flowed = first["outputs"][name].float(), first["grads"].get(name)
        grad = flowed.float() if flowed is not None else torch.zeros(0)
        underflow = rounded = 0
        if reference is not None and name in reference["grads"] and grad.numel():
            ref = reference["grads"][name].float() * first["scale"]
            lost = (grad == 0) & (ref != 0)
            below = ref.abs() < torch.finfo(flowed.dtype).tiny
            underflow, rounded = int((lost & below).sum()), int((lost & ~below).sum())
        counts[name] = LayerCounts(
            out.numel(),
            int(torch.isinf(out).sum()),
            int(torch.isnan(out).sum()),
            grad.numel(),
            underflow,
            int((~torch.isfinite(grad)).sum()),
            rounded,
        )
    return counts


def run(options: PrecisionOptions, report=None) -> PrecisionResult:
    start = time.perf_counter()
    with isolated_rng(options.seed):
        model = build_model()
    batches = make_batches(options)
    runs, firsts = {}, {}
    for done, precision in enumerate(PRECISIONS):
        trained, first = _train(copy.deepcopy(model), batches, precision, options)
        firsts[precision] = first
        runs[precision] = trained
        if report:
            report(done + 1, len(PRECISIONS))
    for precision in PRECISIONS:
        reference = None if precision == "fp32" else firsts["fp32"]
        runs[precision] = _with_counts(runs[precision], _counts(firsts[precision], reference))
    return PrecisionResult(options, runs, time.perf_counter() - start, torch.__version__)


def _with_counts(run: PrecisionRun, counts: dict[str, LayerCounts]) -> PrecisionRun:
    return dataclasses.replace(run, layers=counts)


MEMORY_PARTS = ("parameters", "gradients", "activations", "weight_copies", "batch")


@dataclass(frozen=True)
class MemoryOptions:
    """What the bytes per part depend on: the model and one batch (the Memory lab's tracker measures them)."""

    input_exp: int = 0
    seed: int = 0


def memory_by_precision(options: MemoryOptions, report=None) -> dict[str, dict[str, int]]:
    """Per precision: bytes per part of one steady SGD step, measured by the Memory lab (`memory.measure`),
    and the step's peak. Autocast's low-precision weight copies are their own part, as the Memory lab shows."""
    from explorers import memory  # the Memory lab's tracker: MemTracker's process-global hooks, in a worker

    with isolated_rng(options.seed):
        model = build_model()
    x, y = make_batches(PrecisionOptions(input_exp=options.input_exp, steps=STEPS_RANGE[0], seed=options.seed))[0]
    parts = {}
    for done, precision in enumerate(("fp32", "bf16", "fp16"), 1):
        m = memory.measure(model, x, optimizer="sgd", precision=precision, loss_fn=F.cross_entropy, target=y)
        parts[precision] = {**{part: getattr(m, part) for part in MEMORY_PARTS}, "peak": m.peak}
        if report:
            report(done, 3)
    return parts
