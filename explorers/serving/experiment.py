"""The Serving lab's experiment: a service with chosen mismatches, compared stage by stage with the recorded one.

`compare_run(options)` (the run engine's experiment; `compare(...)` is the notebook form):

1. takes the seed's trained artefact (`training.trained`: trained once per process, never changed);
2. replays the golden set through the serving contract and compares each stage's output with the
   output training recorded; a stage matches when no value differs by more than TOLERANCE (on the
   CPU a faithful service matches to the bit) and no label flips. Each stage is also fed the
   *recorded* input for it ("isolated"), which tells a stage's own fault from one it inherits;
   Each injected mismatch is also replayed alone ("solo"), so a sentence about one mismatch
   quotes what that mismatch does, not what the whole stage does with several at once;
3. serves LIVE_SIZE live requests (moved by `shift`) through the recorded contract and the serving
   one, in forwards of the contract's size, and scores both against the labels; scores the best
   rule any model could learn (`data.bayes_accuracy`) on them and, when the traffic is shifted, a
   model retrained on records drawn at that shift (`training.retrained_accuracy`);
4. measures each feature's drift (PSI) between the live requests and the training data.

A deployment mismatch shows in step 2 whatever the traffic; a pure shift leaves step 2 clean and
shows in steps 3 and 4. That difference is what the lab teaches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from explorers import bounds
from explorers.serving.data import FEATURES, LIVE_SIZE, bayes_accuracy, live_traffic
from explorers.serving.drift import FeatureDrift, feature_drift
from explorers.serving.pipeline import (
    MISMATCHES,
    STAGES,
    Contract,
    Service,
    serving_contract,
    strict_load_error,
)
from explorers.serving.training import EPOCHS, Artefact, retrained_accuracy, trained

TOLERANCE = 1e-5  # another device or kernel may move the last bits; a mismatch moves far more
SHIFT_RANGE = (0.0, 3.0)  # in population standard deviations of the shifted features
SEED_RANGE = (0, 99_999)
DEVICES = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class ServingOptions:
    mismatches: tuple[str, ...] = ()  # kept in MISMATCHES order, each once: one cache entry per set
    shift: float = 0.0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not isinstance(self.mismatches, tuple) or not all(isinstance(m, str) for m in self.mismatches):
            raise ValueError(f"mismatches must be a tuple of names, not {self.mismatches!r}")
        unknown = [m for m in self.mismatches if m not in MISMATCHES]
        if unknown:
            raise ValueError(f"unknown mismatch {unknown[0]!r}; choose from {', '.join(MISMATCHES)}")
        object.__setattr__(self, "mismatches", tuple(m for m in MISMATCHES if m in self.mismatches))
        bounds.check_numbers(self, {"shift": SHIFT_RANGE})
        bounds.check_ints(self, {"seed": SEED_RANGE})
        bounds.check_choices(self, {"device": DEVICES})


@dataclass(frozen=True)
class StageReport:
    stage: str
    largest: float  # largest |serving - recorded| over the golden set; inf where the stage gave no output
    matches: bool
    reached: bool  # False when an earlier stage raised
    error: str | None  # PyTorch's own error, when this stage raised
    flipped: int  # golden labels that changed through the whole serving pipeline (postprocess only)
    columns: tuple[float, ...]  # largest difference per output column (features, logits, or the score)
    isolated: float  # this stage fed the recorded input for it: its own difference
    isolated_matches: bool
    isolated_error: str | None
    isolated_flipped: int = 0  # golden labels that changed with this stage fed the recorded input (postprocess only)

    @property
    def status(self) -> str:
        """'matches' | 'differs here' (its own fault) | 'inherited' (only an earlier stage's) | 'not reached'."""
        if self.matches:
            return "matches"
        if not self.reached:
            return "not reached"
        return "inherited" if self.isolated_matches else "differs here"


@dataclass(frozen=True)
class ExampleDiff:
    position: int  # row of the golden set
    validation_index: int
    label: int
    near_threshold: bool
    reference_prediction: int
    serving_prediction: int | None  # None when serving gave no answer
    differences: dict[str, float] = field(default_factory=dict)  # stage -> largest |difference| (inf: no output)


@dataclass(frozen=True)
class Comparison:
    options: ServingOptions
    first_divergent_stage: str | None  # "preprocess" | "model" | "postprocess" | None
    stages: dict[str, float]  # stage -> largest |difference| over the golden set
    reports: dict[str, StageReport]
    examples: tuple[ExampleDiff, ...]  # largest difference first
    validation_accuracy: float  # recorded at training, on held-out unshifted data
    reference_accuracy: float  # the recorded contract on this live traffic
    serving_accuracy: float  # the serving contract on the same traffic; a request without an answer counts wrong
    answered: int  # live requests the service answered
    changed_answers: int  # live requests whose serving answer differs from the recorded pipeline's (or is missing)
    requests: int
    live_churn_rate: float
    drift: dict[str, FeatureDrift]
    drift_flagged: bool
    recorded: Contract
    serving: Contract
    missing_keys: tuple[str, ...]
    unexpected_keys: tuple[str, ...]
    strict_error: str | None  # what load_state_dict(strict=True) says, when serving loaded with strict=False
    artefact: Artefact
    # Each injected mismatch replayed alone: the report of the stage it enters at.
    solo: dict[str, StageReport] = field(default_factory=dict)
    # The recorded contract (eval mode) run one golden request per forward, against the golden set as one batch.
    one_at_a_time_difference: float = 0.0
    bayes_accuracy: float = math.nan  # the best rule any model can learn, on this live traffic
    unshifted_bayes_accuracy: float = math.nan  # the same rule on the same customers drawn without the shift
    retrained_accuracy: float | None = None  # a model retrained on records drawn at this shift; None at shift 0

    @property
    def mismatches(self) -> tuple[str, ...]:
        return self.options.mismatches

    @property
    def golden_size(self) -> int:
        return len(self.artefact.golden)


def _differences(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """|got - expected| per value, in float64; inf where got has no value (a request that was not answered)."""
    difference = (got.double() - expected.double()).abs()
    return torch.where(torch.isnan(difference), torch.full_like(difference, math.inf), difference)


def _report(
    stage: str,
    difference: torch.Tensor,
    *,
    reached: bool = True,
    error: str | None = None,
    flipped: int = 0,
    isolated: torch.Tensor,
    isolated_error: str | None = None,
    isolated_flipped: int = 0,
) -> StageReport:
    largest = float(difference.max())
    alone = float(isolated.max())
    return StageReport(
        stage=stage,
        largest=largest,
        matches=reached and error is None and largest <= TOLERANCE and flipped == 0,
        reached=reached,
        error=error,
        flipped=flipped,
        columns=tuple(difference.max(dim=0).values.tolist()),
        isolated=alone,
        isolated_matches=isolated_error is None and alone <= TOLERANCE and isolated_flipped == 0,
        isolated_error=isolated_error,
        isolated_flipped=isolated_flipped,
    )


def _replay_golden(artefact: Artefact, service: Service) -> tuple[dict[str, StageReport], dict[str, list], list]:
    """The golden set through the service: each stage's report, each example's difference per stage, predictions."""
    golden = artefact.golden
    n = len(golden)
    recorded_input = torch.tensor(golden.preprocess)
    recorded_logits = torch.tensor(golden.logits)
    recorded_scores = torch.tensor(golden.scores)[:, None]
    recorded_labels = torch.tensor(golden.predictions, dtype=torch.bool)

    model_input = service.preprocess(torch.tensor(golden.inputs))
    pre = _differences(model_input, recorded_input)

    logits, answered, error = service.model_stage(model_input)
    alone_logits, _, alone_error = service.model_stage(recorded_input)
    mod = _differences(logits, recorded_logits)

    alone_scores, alone_labels = service.postprocess(recorded_logits)
    reached = bool(answered.all())
    if reached:
        scores, labels = service.postprocess(logits)
        post = _differences(scores[:, None], recorded_scores)
        flipped = int((labels != recorded_labels).sum())
        predictions = labels.long().tolist()
    else:
        post = torch.full((n, 1), math.inf, dtype=torch.float64)
        flipped, predictions = 0, [None] * n
    reports = {
        "preprocess": _report("preprocess", pre, isolated=pre),
        "model": _report(
            "model", mod, error=error, isolated=_differences(alone_logits, recorded_logits), isolated_error=alone_error
        ),
        "postprocess": _report(
            "postprocess",
            post,
            reached=reached,
            flipped=flipped,
            isolated=_differences(alone_scores[:, None], recorded_scores),
            isolated_flipped=int((alone_labels != recorded_labels).sum()),
        ),
    }
    per_example = {
        stage: diff.max(dim=1).values.tolist()
        for stage, diff in (("preprocess", pre), ("model", mod), ("postprocess", post))
    }
    return reports, per_example, predictions


def _examples(artefact: Artefact, first: str | None, per_example: dict[str, list], predictions: list) -> tuple:
    golden = artefact.golden
    rows = [
        ExampleDiff(
            position=i,
            validation_index=golden.indices[i],
            label=golden.labels[i],
            near_threshold=golden.near_threshold[i],
            reference_prediction=golden.predictions[i],
            serving_prediction=predictions[i],
            differences={stage: per_example[stage][i] for stage in STAGES},
        )
        for i in range(len(golden))
    ]
    if first is None:
        return tuple(rows)
    ordered = STAGES[STAGES.index(first) :]  # the first divergent stage decides, later stages break ties
    return tuple(sorted(rows, key=lambda row: tuple(-row.differences[s] for s in ordered)))


def _serve(service: Service, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(labels, answered) for every live request."""
    logits, answered, _ = service.model_stage(service.preprocess(raw))
    _, labels = service.postprocess(logits)
    return labels.long(), answered


def _solo_reports(artefact: Artefact, options: ServingOptions) -> dict[str, StageReport]:
    """Each mismatch injected alone, replayed on the golden set: its own stage's report."""
    solo = {}
    for name in options.mismatches:
        alone = Service(serving_contract(artefact.contract, (name,)), artefact.checkpoint, options.seed, options.device)
        solo[name] = _replay_golden(artefact, alone)[0][MISMATCHES[name].stage]
    return solo


def _one_at_a_time_difference(artefact: Artefact, options: ServingOptions) -> float:
    """Largest |logit difference| between the golden requests served one per forward and served as one batch."""
    single = dataclasses.replace(artefact.contract, requests_per_forward=1)
    model_input = torch.tensor(artefact.golden.preprocess)
    batched = Service(artefact.contract, artefact.checkpoint, options.seed, options.device)
    alone = Service(single, artefact.checkpoint, options.seed, options.device)
    return float(_differences(alone.model_stage(model_input)[0], batched.model_stage(model_input)[0]).max())


def compare_run(options: ServingOptions, report=None) -> Comparison:
    """The lab's experiment: the serving contract against the recorded one, on the golden set and live traffic."""
    return dataclasses.replace(replay_run(options, report), retrained_accuracy=retrain_run(options))


def retrain_run(options: ServingOptions, report=None) -> float | None:
    """Live accuracy of a model retrained at the traffic's shift; None without a shift.

    Its own run, because it trains (0.5 s here) and the stage chart does not need it: the page
    draws the chart from `replay_run` while this one runs beside it.
    """
    return retrained_accuracy(options.seed, options.shift) if options.shift > 0 else None


def replay_run(options: ServingOptions, report=None) -> Comparison:
    """Everything `compare_run` measures but the retrained model (its `retrained_accuracy` is None)."""
    total = EPOCHS + 3

    def progress(done: int) -> None:
        if report:
            report(done, total)

    artefact = trained(options.seed, lambda done, _: progress(done))
    progress(EPOCHS)
    recorded = artefact.contract
    contract = serving_contract(recorded, options.mismatches)
    service = Service(contract, artefact.checkpoint, options.seed, options.device)
    reports, per_example, predictions = _replay_golden(artefact, service)
    first = next((stage for stage in STAGES if not reports[stage].matches), None)
    progress(EPOCHS + 1)

    raw, labels = live_traffic(options.seed, options.shift)
    reference_labels, _ = _serve(Service(recorded, artefact.checkpoint, options.seed), raw)
    serving_labels, answered = _serve(service, raw)
    progress(EPOCHS + 2)

    drift = {name: feature_drift(artefact.feature_bins[i], raw[:, i]) for i, name in enumerate(FEATURES)}
    progress(total)
    return Comparison(
        options=options,
        first_divergent_stage=first,
        stages={stage: reports[stage].largest for stage in STAGES},
        reports=reports,
        examples=_examples(artefact, first, per_example, predictions),
        validation_accuracy=artefact.validation_accuracy,
        reference_accuracy=float((reference_labels == labels).double().mean()),
        serving_accuracy=float(((serving_labels == labels) & answered).double().mean()),
        answered=int(answered.sum()),
        changed_answers=int(((serving_labels != reference_labels) | ~answered).sum()),
        requests=LIVE_SIZE,
        live_churn_rate=float(labels.double().mean()),
        drift=drift,
        drift_flagged=any(d.flagged for d in drift.values()),
        recorded=recorded,
        serving=contract,
        missing_keys=service.missing_keys,
        unexpected_keys=service.unexpected_keys,
        strict_error=None if contract.strict else strict_load_error(artefact.checkpoint, contract.head),
        artefact=artefact,
        solo=_solo_reports(artefact, options),
        one_at_a_time_difference=_one_at_a_time_difference(artefact, options),
        bayes_accuracy=bayes_accuracy(raw, labels),
        unshifted_bayes_accuracy=bayes_accuracy(*live_traffic(options.seed, 0.0)),
    )


def compare(
    mismatches: Iterable[str] = (), shift: float = 0.0, seed: int = 0, device: str = "cpu", report=None
) -> Comparison:
    """The notebook form: `compare(mismatches=("feature_order",), shift=0.0, seed=0)`.

    The caller's sequence is only read; the artefact it compares against is never changed.
    """
    if isinstance(mismatches, str):
        raise ValueError(f"mismatches must be a sequence of names, not the string {mismatches!r}")
    return compare_run(ServingOptions(tuple(mismatches), shift, seed, device), report)
