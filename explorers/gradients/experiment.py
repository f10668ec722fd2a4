"""The Gradients lab's experiments: small models, each with one planted pathology, and what it does to gradients.

Every model here is built the same way, so a test (or a reader) can rebuild it by hand:
modules are created inside `isolated_rng(seed)`, then every parameter is redrawn from one
`torch.Generator` seeded with `seed`, in `named_parameters()` order: a tensor of 2+ dims
from N(0, init_scale² / fan_in), a vector as zeros. The batch comes next from the same
generator: w_true ~ N(0, 1) of shape (IN_FEATURES, 1), then x ~ N(0, 1) of shape
(BATCH, IN_FEATURES); the target is y = tanh(x @ w_true / sqrt(IN_FEATURES)). The loss is
`mse_loss(model(x), y)`. Further batches (the zero_grad scenario's) draw only x, from a
generator seeded with seed + 1, with the same w_true.

The experiments are module-level `fn(options, report=None)` for the run engine
(`explorers.engine`); each returns plain picklable data:

- `scenario_run`: `diagnose` on the scenario's model, its autograd graph with the parameters
  that got no gradient marked, and (for the zero_grad scenario) the accumulation, batch by batch;
- `scale_sweep`: the same diagnosis at half and twice the initial scale: a broken graph stays
  None, unstable optimisation moves with the scale;
- `clip_once`: total and per-layer norms before and after `clip_grad_norm_` (the ratios stay);
- `clipped_training`: a short training run of the exploding case with and without clipping
  (`clipping_study` runs both, for a notebook).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchviz
from torch import nn

from explorers import bounds, graphs
from explorers.gradients.your_model import Diagnosis, diagnose
from explorers.rng import isolated_rng

IN_FEATURES = 8
WIDTH = 16
BATCH = 32
EMBEDDING_ROWS = 4  # the argmax scenario's choices
DEAD_BIAS = -10.0  # the dead-ReLU scenario's first-layer bias: a unit is dead for a sample where w·x < 10
MAX_GRAPH_NODES = 140  # past this a drawn graph stops being readable
SWEEP_FACTORS = (0.5, 1.0, 2.0)  # the scale sweep: init_scale times each

DEPTH_RANGE = (2, 12)
INIT_SCALE_RANGE = (0.05, 5.0)
LEARNING_RATE_RANGE = (1e-4, 1.0)
K_RANGE = (1, 20)
MAX_NORM_RANGE = (0.01, 100.0)
SEED_RANGE = (0, 99_999)

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "relu": nn.ReLU,
    "linear": nn.Identity,
}
STACK_KNOBS = ("depth", "init_scale", "activation")


@dataclass(frozen=True)
class Scenario:
    """A model with one planted pathology. Its title, description and code are written from the live options
    by `lesson.scenario_text`, so they follow the knobs."""

    label: str  # the scenario's name in the picker: what was set up, not what the run shows
    knobs: tuple[str, ...]  # the options that change this scenario's model (besides the seed)
    defaults: dict  # option values that show the pathology best


SCENARIOS: dict[str, Scenario] = {
    "healthy": Scenario(
        "Baseline: nothing planted", STACK_KNOBS, {"depth": 4, "init_scale": 1.0, "activation": "tanh"}
    ),
    "detached": Scenario("Detached branch", ("init_scale",), {}),
    "unused": Scenario("Unused parameter", ("init_scale",), {}),
    "frozen": Scenario("Frozen layer", ("init_scale",), {}),
    "inplace": Scenario("In-place op on a saved tensor", ("init_scale",), {}),
    "dead_relu": Scenario("Dead ReLUs", ("init_scale",), {}),
    "vanishing": Scenario(
        "Vanishing: deep stack, small init", STACK_KNOBS, {"depth": 8, "init_scale": 0.5, "activation": "sigmoid"}
    ),
    "exploding": Scenario(
        "Exploding: deep stack, large init", STACK_KNOBS, {"depth": 8, "init_scale": 3.0, "activation": "relu"}
    ),
    "argmax": Scenario("argmax in the path", ("init_scale",), {}),
    "no_zero_grad": Scenario(
        "Forgetting zero_grad", (*STACK_KNOBS, "k"), {"depth": 3, "init_scale": 1.0, "activation": "tanh", "k": 5}
    ),
}


@dataclass(frozen=True)
class GradientsOptions:
    scenario: str = "healthy"
    depth: int = 4
    init_scale: float = 1.0
    activation: str = "tanh"
    learning_rate: float = 0.01
    k: int = 5  # batches accumulated without zero_grad
    max_norm: float = 1.0  # clip_grad_norm_'s max_norm
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        bounds.check_choices(self, {"scenario": SCENARIOS, "activation": ACTIVATIONS})
        bounds.check_ints(self, {"depth": DEPTH_RANGE, "k": K_RANGE, "seed": SEED_RANGE})
        bounds.check_numbers(
            self,
            {"init_scale": INIT_SCALE_RANGE, "learning_rate": LEARNING_RATE_RANGE, "max_norm": MAX_NORM_RANGE},
        )

    @classmethod
    def for_scenario(cls, scenario: str, **changes) -> GradientsOptions:
        """The scenario with its own defaults (depth, scale, activation that show it best), then `changes`."""
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {sorted(SCENARIOS)}, not {scenario!r}")
        return cls(scenario=scenario, **{**SCENARIOS[scenario].defaults, **changes})


def model_options(options: GradientsOptions) -> GradientsOptions:
    """Only what the scenario's model and batch depend on; other knobs back to their defaults (cache keys)."""
    scenario = SCENARIOS[options.scenario]
    kept = {"scenario", "seed", "device", *scenario.knobs}
    defaults = GradientsOptions()
    return dataclasses.replace(
        options, **{f.name: getattr(defaults, f.name) for f in dataclasses.fields(options) if f.name not in kept}
    )


def training_options(options: GradientsOptions) -> GradientsOptions:
    """The exploding case the clipping run trains: the user's model when it is the exploding scenario."""
    if options.scenario == "exploding":
        return options
    return GradientsOptions.for_scenario(
        "exploding",
        learning_rate=options.learning_rate,
        max_norm=options.max_norm,
        seed=options.seed,
        device=options.device,
    )


# --- The models ---------------------------------------------------------------------------------


class Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(IN_FEATURES, WIDTH)
        self.branch = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.trunk(x))
        b = torch.tanh(self.branch(h)).detach()
        return self.head(h + b)


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(IN_FEATURES, WIDTH)
        self.skip = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.encoder(x)))


class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(IN_FEATURES, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.encoder(x)))


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN_FEATURES, WIDTH)
        self.fc2 = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.fc1(x))
        h[:, 0] = 0
        return self.fc2(h)


class Argmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(IN_FEATURES, WIDTH)
        self.scorer = nn.Linear(WIDTH, EMBEDDING_ROWS)
        self.table = nn.Embedding(EMBEDDING_ROWS, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.scorer(torch.tanh(self.encoder(x))).argmax(dim=1)
        return self.table(choice)


def stack(depth: int, activation: str) -> nn.Sequential:
    """depth Linear layers (IN_FEATURES -> WIDTH ... -> 1) with the activation between them."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(IN_FEATURES if i == 0 else WIDTH, 1 if i == depth - 1 else WIDTH))
        if i < depth - 1:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def _architecture(options: GradientsOptions) -> nn.Module:
    name = options.scenario
    if name in ("healthy", "vanishing", "exploding", "no_zero_grad"):
        return stack(options.depth, options.activation)
    if name == "dead_relu":
        return nn.Sequential(
            nn.Linear(IN_FEATURES, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1)
        )
    return {"detached": Detached, "unused": Unused, "frozen": Frozen, "inplace": InPlace, "argmax": Argmax}[name]()


def initialise(model: nn.Module, scale: float, generator: torch.Generator) -> None:
    """Every parameter redrawn in named_parameters() order: matrices N(0, scale²/fan_in), vectors zero."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=generator) * scale / math.sqrt(fan_in))
            else:
                p.zero_()


def batch(generator: torch.Generator, w_true: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(BATCH, IN_FEATURES, generator=generator)
    return x, torch.tanh(x @ w_true / math.sqrt(IN_FEATURES))


def build(options: GradientsOptions, scale: float | None = None) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The scenario's model and its batch (x, y), seeded; `scale` overrides options.init_scale."""
    model, _, x, y = _build(options, scale)
    return model, x, y


def _build(options: GradientsOptions, scale: float | None = None) -> tuple[nn.Module, torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(options.seed)
    with isolated_rng(options.seed):  # nn.Linear's own initialisation draws from the global RNG
        model = _architecture(options)
    initialise(model, options.init_scale if scale is None else scale, generator)
    if options.scenario == "dead_relu":
        with torch.no_grad():
            model[0].bias.fill_(DEAD_BIAS)
    if options.scenario == "frozen":
        model.encoder.requires_grad_(False)
    w_true = torch.randn(IN_FEATURES, 1, generator=generator)
    x, y = batch(generator, w_true)
    device = torch.device(options.device)
    return model.to(device), w_true, x.to(device), y.to(device)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


# --- Scenario run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accumulation:
    """backward() on k batches without zero_grad, step by step."""

    accumulated_norms: tuple[float, ...]  # ‖.grad‖ over all parameters after batch i (what the bug leaves)
    batch_norms: tuple[float, ...]  # the gradient of batch i alone (what zero_grad would leave)

    @property
    def k(self) -> int:
        return len(self.accumulated_norms)

    @property
    def fell_at(self) -> tuple[int, ...]:
        """The batches (1-based) after which ‖.grad‖ was smaller than after the batch before."""
        norms = self.accumulated_norms
        return tuple(i + 1 for i in range(1, len(norms)) if norms[i] < norms[i - 1])

    @property
    def growth(self) -> tuple[float, ...]:
        """‖.grad‖ after batch i as a multiple of the first batch's gradient."""
        first = self.batch_norms[0]
        return tuple(n / first if first else math.nan for n in self.accumulated_norms)


@dataclass(frozen=True)
class ScenarioRun:
    options: GradientsOptions
    diagnosis: Diagnosis
    graph_source: str | None  # DOT text; parameters without a gradient are drawn apart and marked
    graph_nodes: int
    graph_note: str
    accumulation: Accumulation | None  # the zero_grad scenario only
    activations: tuple[str, ...] = ()  # class names of the model's parameter-free leaf modules (Sigmoid, ReLU, ...)

    @property
    def scenario(self) -> Scenario:
        return SCENARIOS[self.options.scenario]


def scenario_run(options: GradientsOptions, report=None) -> ScenarioRun:
    """`diagnose` on the scenario's model and batch, its graph, and (zero_grad scenario) the accumulation."""
    accumulates = options.scenario == "no_zero_grad"
    total = 2 + (options.k if accumulates else 0)
    model, x, y = build(options)
    diagnosis = diagnose(model, x, y, loss_fn, seed=options.seed)
    if report:
        report(1, total)
    source, nodes, note = _graph(model, x, y, diagnosis)
    if report:
        report(2, total)
    accumulation = None
    if accumulates:
        accumulation = _accumulate(options, lambda done: report(2 + done, total) if report else None)
    activations = sorted(
        {type(m).__name__ for m in model.modules() if not list(m.children()) and not list(m.parameters())}
    )
    return ScenarioRun(options, diagnosis, source, nodes, note, accumulation, tuple(activations))


NO_GRADIENT_COLOUR = "#f4a3a3"
FROZEN_COLOUR = "#d9d9d9"
ZERO_GRADIENT_COLOUR = "#ffd27f"


def _graph(model: nn.Module, x: torch.Tensor, y: torch.Tensor, diagnosis: Diagnosis) -> tuple[str | None, int, str]:
    """torchviz's graph of the loss, with the parameters backward never reaches drawn beside it.

    Built from a forward of its own (no backward), so a scenario whose backward fails is drawn too.
    A parameter with no path to the loss is not in the graph at all: it is added as a separate,
    dashed node so that the picture shows what is missing.
    """
    loss = loss_fn(model(x), y)
    if loss.grad_fn is None:
        return None, 0, "The loss has no grad_fn: there is no graph to draw."
    named = dict(model.named_parameters())
    dot = graphs.with_font(torchviz.make_dot(loss, params={n: p for n, p in named.items() if p.requires_grad}))
    missing = []
    for name, p in named.items():
        status = diagnosis.parameters[name]
        size = "(" + ", ".join(map(str, p.shape)) + ")"
        if not p.requires_grad:
            missing.append((name, f"{name}\n{size}\nfrozen: requires_grad=False", FROZEN_COLOUR))
        elif status.status == "none" and diagnosis.backward_error is None and status.in_graph:
            dot.node(str(id(p)), f"{name}\n{size}\n.grad is None", fillcolor=NO_GRADIENT_COLOUR)
        elif status.status == "none" and diagnosis.backward_error is None:
            missing.append((name, f"{name}\n{size}\n.grad is None", NO_GRADIENT_COLOUR))
        elif status.status == "zero":
            dot.node(str(id(p)), f"{name}\n{size}\n.grad == 0", fillcolor=ZERO_GRADIENT_COLOUR)
    if missing:
        with dot.subgraph(name="cluster_no_gradient") as cluster:
            cluster.attr(label="not reached by backward", style="dashed", fontname=graphs.FONT)
            for name, label, colour in missing:
                cluster.node(str(id(named[name])), label, fillcolor=colour, style="filled,dashed")
    nodes = sum("[label=" in line for line in dot.body)
    if nodes > MAX_GRAPH_NODES:
        return None, nodes, f"The graph has {nodes} nodes, more than the {MAX_GRAPH_NODES} that stay readable."
    notes = ["Blue: parameters backward reaches. Grey: grad_fn nodes."]
    if any(colour == NO_GRADIENT_COLOUR for *_, colour in missing):
        notes.append("Red, dashed: trainable parameters no path reaches (.grad is None).")
    if any(colour == FROZEN_COLOUR for *_, colour in missing):
        notes.append("Grey, dashed: frozen parameters.")
    if diagnosis.finding("none_returned") is not None:
        notes.append("Red: in the graph, but no gradient arrived (.grad is None).")
    if diagnosis.with_status("zero"):
        notes.append("Orange: reached, but the gradient is exactly zero.")
    if diagnosis.backward_error is not None:
        reached = [n for n, p in diagnosis.parameters.items() if p.status != "none"]
        notes.append(
            "Backward raised partway through this graph"
            + (
                f"; of the parameters, just {', '.join(reached)} got a gradient before it did."
                if reached
                else ": no parameter got a gradient."
            )
        )
    return graphs.stable_ids(dot.source), nodes, " ".join(notes)


def _grad_norm(parameters: list[nn.Parameter]) -> float:
    return math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in parameters if p.grad is not None))


def _accumulate(options: GradientsOptions, progress: Callable[[int], None]) -> Accumulation:
    """k different batches from the same source, backward on each, never zeroing; the batches follow the first."""
    model, w_true, x, y = _build(options)
    generator = torch.Generator().manual_seed(options.seed + 1)
    params = [p for p in model.parameters() if p.requires_grad]
    accumulated, own = [], []
    previous = [torch.zeros_like(p) for p in params]
    for i in range(options.k):
        if i > 0:
            x, y = (t.to(x.device) for t in batch(generator, w_true))
        loss_fn(model(x), y).backward()
        accumulated.append(_grad_norm(params))
        own.append(
            math.sqrt(
                sum(float((p.grad - before).double().norm()) ** 2 for p, before in zip(params, previous, strict=True))
            )
        )
        previous = [p.grad.detach().clone() for p in params]
        progress(i + 1)
    return Accumulation(tuple(accumulated), tuple(own))


# --- Scale sweep -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    init_scale: float
    layer_names: tuple[str, ...]
    layer_norms: tuple[float, ...]  # forward order
    none: tuple[str, ...]  # trainable parameters whose .grad is None
    zero: tuple[str, ...]
    backward_error: str | None
    kinds: tuple[str, ...]
    layer_statuses: tuple[str, ...] = ()  # per layer: "none" | "zero" | "finite" | "nonfinite"


@dataclass(frozen=True)
class ScaleSweep:
    points: tuple[SweepPoint, ...]


def scale_sweep(options: GradientsOptions, report=None) -> ScaleSweep:
    """The scenario diagnosed at init_scale x SWEEP_FACTORS: what moves with the scale, and what does not."""
    points = []
    for i, factor in enumerate(SWEEP_FACTORS):
        scale = options.init_scale * factor
        model, x, y = build(options, scale=scale)
        d = diagnose(model, x, y, loss_fn, seed=options.seed)
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        points.append(
            SweepPoint(
                init_scale=scale,
                layer_names=tuple(layer.label for layer in d.layers),
                layer_norms=tuple(layer.grad_norm for layer in d.layers),
                none=tuple(n for n in d.with_status("none") if n in trainable),
                zero=d.with_status("zero"),
                backward_error=d.backward_error,
                kinds=d.kinds,
                layer_statuses=tuple(layer.status for layer in d.layers),
            )
        )
        if report:
            report(i + 1, len(SWEEP_FACTORS))
    return ScaleSweep(tuple(points))
