"""Profiling a real training step: verdicts, phase accounting, overhead, traces, isolation, any model and batch."""

import copy
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from explorers import profiler as profiling
from explorers.engine import default_engine
from explorers.profiler import figures, lesson
from explorers.profiler.experiment import ProfileOptions, profile
from explorers.profiler.your_model import StepTiming


@pytest.fixture(autouse=True)
def one_thread():
    """As the lab's workers run: on a busy 2-core machine, two OpenMP threads make tiny layers wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def job(width=64, depth=1, batch=32, delay_s=0.0, batches=8):
    torch.manual_seed(0)
    layers = [nn.Linear(16 if i == 0 else width, width) for i in range(depth)]
    model = nn.Sequential(*layers, nn.Linear(width if depth else 16, 4))

    def collate(samples):
        time.sleep(delay_s)
        return torch.utils.data.default_collate(samples)

    data = torch.utils.data.TensorDataset(torch.randn(batch * batches, 16), torch.randint(0, 4, (batch * batches,)))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, collate_fn=collate)
    return model, loader, torch.optim.SGD(model.parameters(), lr=0.01), nn.functional.cross_entropy


def test_a_slow_loader_is_judged_data_bound(tmp_path):
    result = profiling.profile_training(*job(delay_s=0.015), trace_path=tmp_path / "t.json")
    assert result.verdict == "data-bound"
    assert result.mean_phases()["data"] > 0.5 * result.mean_wall_ms
    assert "data took" in result.evidence


def test_a_large_model_on_tiny_batches_is_judged_compute_bound(tmp_path):
    result = profiling.profile_training(*job(width=1536, depth=3, batch=8), trace_path=tmp_path / "t.json")
    assert result.verdict == "compute-bound"


def test_phases_add_up_to_the_wall_time_within_ten_percent(tmp_path):
    # A step of a few milliseconds, like the lab's: on a sub-millisecond step the loop's own cost is >10%.
    result = profiling.profile_training(*job(width=512, batch=128), warmup=1, active=4, trace_path=tmp_path / "t.json")
    assert len(result.steps) == 3 * 4 and len(result.warmup_steps) == 1
    # The median step, not every step: on a loaded machine one step can lose a preemption to "other".
    covered = [sum(step.phases.values()) / step.wall_ms for step in result.steps]
    assert statistics.median(covered) >= 0.9 and max(covered) <= 1.05
    assert all(step.other_ms >= 0 and step.source == "profiler" for step in result.steps)
    assert result.warmup_steps[0].source == "perf_counter"


def test_the_loader_is_cycled_when_it_runs_out(tmp_path):
    result = profiling.profile_training(*job(batches=2), warmup=2, active=5, trace_path=tmp_path / "t.json")
    assert len(result.steps) == 3 * 5


def test_overhead_ratio_is_reported_and_above_one_on_many_tiny_layers(tmp_path):
    model, loader, optimizer, loss = job(width=8, depth=40, batch=4)
    result = profiling.profile_training(model, loader, optimizer, loss, active=8, trace_path=tmp_path / "t.json")
    assert result.overhead_ratio > 1
    assert len(result.unprofiled_ms) == len(result.naive_ms) == 3 * 8 and len(result.overhead_ratios) == 3


class ProfilerWatch(nn.Module):
    """A layer that notes, on each forward, whether torch's profiler is recording at that moment.

    The log is a class attribute: the deep copy that profile_training trains writes to it too.
    """

    seen: list[bool] = []

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 4)

    def forward(self, x):
        ProfilerWatch.seen.append(torch.autograd._profiler_enabled())
        return self.linear(x)


def test_blocks_with_and_without_the_profiler_alternate_round_by_round(tmp_path):
    watch = ProfilerWatch()
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(4)]
    optimizer = torch.optim.SGD(watch.parameters(), lr=0.01)
    ProfilerWatch.seen.clear()
    result = profiling.profile_training(
        watch, data, optimizer, nn.functional.cross_entropy, warmup=2, active=3, rounds=2, trace_path=tmp_path / "t"
    )
    # Warm-up, then per round: 3 steps without the profiler, its own warm-up step (it prepares, and records
    # nothing yet), 3 recorded steps. A list has no workers, so no steps are needed to settle after a pause.
    one_round = [False] * 3 + [False] + [True] * 3
    assert ProfilerWatch.seen == [False, False, *one_round, *one_round]
    assert len(result.steps) == 6 and result.rounds == 2
    blocks = [(result.naive_ms[i : i + 3], result.unprofiled_ms[i : i + 3]) for i in (0, 3)]
    assert result.overhead_ratios == pytest.approx([sum(with_) / sum(without) for with_, without in blocks])


def test_trace_is_chrome_json_with_the_phase_labels(tmp_path):
    path = tmp_path / "trace.json"
    result = profiling.profile_training(*job(), trace_path=path)
    trace = json.loads(path.read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {f"phase/{p}" for p in profiling.PHASES} <= names
    assert result.trace_path == str(path)
    assert result.top_ops and not any(op.name.startswith("phase/") for op in result.top_ops)


def test_an_error_mid_run_leaves_no_profiler_running_and_the_next_run_works(tmp_path):
    def fail(done, total):
        if done == 2:
            raise KeyboardInterrupt("cancelled")

    with pytest.raises(KeyboardInterrupt):
        profiling.profile_training(*job(), on_step=fail, trace_path=tmp_path / "a.json")
    assert not torch.autograd.profiler._is_profiler_enabled
    assert profiling.profile_training(*job(), trace_path=tmp_path / "b.json").steps


def test_profiles_in_one_process_run_one_at_a_time(tmp_path):
    warmup, active = 1, 4
    profiled_steps = []  # which run reported each step taken inside its profiler window, in order

    def run(name):
        def on_step(done, total):
            if done > warmup:  # past the warm-up: inside the profiler's schedule, which holds the lock
                profiled_steps.append(name)

        profiling.profile_training(
            *job(delay_s=0.005), warmup=warmup, active=active, on_step=on_step, trace_path=tmp_path / f"{name}.json"
        )

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    switches = sum(1 for x, y in zip(profiled_steps, profiled_steps[1:], strict=False) if x != y)
    assert sorted(set(profiled_steps)) == ["a", "b"] and switches == 1  # one whole window, then the other


def steps_of(*phases_per_step, wall=None):
    return [StepTiming(dict(zip(profiling.PHASES, p, strict=True)), wall or sum(p) * 1.05) for p in phases_per_step]


def test_judge_names_the_largest_share_when_it_leads_beyond_the_noise():
    # data, copy, forward, backward, optimizer
    steps = steps_of(*[(1.0, 0.1, 2.0, 3.0, 6.5 + 0.1 * (i % 2)) for i in range(8)], wall=13.0)
    verdict = profiling.judge(steps)
    assert verdict.label == "optimizer-bound" and verdict.contenders == ("optimizer",)
    assert "6.55 ms of a 13.0 ms step" in verdict.evidence and "over 8 steps" in verdict.evidence


def test_judge_says_too_close_to_call_for_2_01_against_2_02_ms_and_names_both():
    # The audit's case: forward + backward 2.02 ms against optimizer 2.01 ms, steps scattering by ±0.3 ms.
    scatter = [0.3, -0.3, 0.2, -0.2, 0.1, -0.1, 0.3, -0.3]
    steps = steps_of(*[(0.4, 0.02, 0.82 + s, 1.2, 2.01 - s / 2) for s in scatter])
    verdict = profiling.judge(steps)
    assert verdict.label == "too close to call"
    assert set(verdict.contenders) == {"compute", "optimizer"}
    assert "forward + backward (2.02 ms per step)" in verdict.evidence and "optimizer (2.01 ms" in verdict.evidence


def run_on_engine(options: ProfileOptions):
    """As the page runs it: in an engine worker, since `profile` sets the process-wide thread count."""
    return default_engine().run(profile, options)


def test_lab_suggestion_for_a_data_bound_run_adds_workers_and_helps():
    slow = ProfileOptions(data_cost_ms=20, active=3, warmup=1)
    result = run_on_engine(slow)
    experiment = lesson.suggestion(slow, result)
    assert result.verdict == "data-bound" and experiment.options.num_workers == 2 and "workers" in experiment.label
    faster = run_on_engine(experiment.options)
    assert faster.mean_phases()["data"] < result.mean_phases()["data"] / 2


def test_profile_again_is_a_new_measurement_of_the_same_settings():
    first, again = run_on_engine(ProfileOptions(active=2, warmup=1)), run_on_engine(ProfileOptions(active=2, warmup=1))
    assert first == again  # the same settings are answered from the engine's cache
    fresh = run_on_engine(ProfileOptions(active=2, warmup=1, repeat=1))
    assert fresh.naive_ms != first.naive_ms and fresh.trace_path != first.trace_path


@pytest.mark.parametrize(
    "bad",
    [
        {"width": 10},
        {"batch_size": 4096},
        {"data_cost_ms": 500},
        {"num_workers": 64},
        {"threads": 0},
        {"optimizer": "lbfgs"},
        {"active": 0},
        {"device": "tpu"},
        {"repeat": -1},
    ],
)
def test_lab_options_are_bounded(bad):
    with pytest.raises(ValueError):
        ProfileOptions(**bad)


# Your own model and data: any reasonable model and batch, and nothing of the caller's changes.


class Blocks(nn.Module):
    """A custom module with dropout, BatchNorm and a buffer of its own that forward updates in place."""

    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.drop, self.fc2 = (
            nn.Linear(16, 32),
            nn.BatchNorm1d(32),
            nn.Dropout(0.5),
            nn.Linear(32, 4),
        )
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.fc2(self.drop(torch.relu(self.norm(self.fc1(x)))))


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head, self.aux = nn.Linear(16, 8), nn.Linear(8, 4), nn.Linear(8, 1)

    def forward(self, x):
        hidden = torch.relu(self.body(x))
        return self.head(hidden), self.aux(hidden)


class DictOut(TwoHeads):
    def forward(self, x):
        logits, aux = super().forward(x)
        return {"logits": logits, "aux": aux}


def frozen_first():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    model[0].requires_grad_(False)
    return model


def batchnorm_in_eval():
    model = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))
    model[1].eval()  # frozen statistics, as in fine-tuning: a batch of one is fine
    return model


cross_entropy = nn.functional.cross_entropy
FAMILY = [
    pytest.param(
        lambda: nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)), cross_entropy, 8, id="sequential"
    ),
    pytest.param(Blocks, cross_entropy, 8, id="custom-dropout-batchnorm-buffer"),
    pytest.param(frozen_first, cross_entropy, 8, id="frozen-layer"),
    pytest.param(
        lambda: nn.Sequential(nn.ReLU(inplace=True), nn.Linear(16, 8), nn.Dropout(0.5, inplace=True), nn.Linear(8, 4)),
        cross_entropy,
        8,
        id="in-place-ops-on-the-input",
    ),
    pytest.param(TwoHeads, lambda out, y: cross_entropy(out[0], y) + out[1].pow(2).mean(), 8, id="tuple-output"),
    pytest.param(DictOut, lambda out, y: cross_entropy(out["logits"], y), 8, id="dict-output"),
    pytest.param(lambda: nn.Sequential(nn.Linear(16, 4), nn.Dropout(0.2)), cross_entropy, 1, id="batch-of-one"),
    pytest.param(batchnorm_in_eval, cross_entropy, 1, id="batchnorm-eval-batch-of-one"),
]


def snapshot(model, optimizer, batches):
    """Everything of the caller's that a profile must leave alone, as independent copies."""
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "modes": [m.training for m in model.modules()],
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "batches": [(x.clone(), y.clone(), x.requires_grad, x.grad) for x, y in batches],
        "rng": torch.get_rng_state(),
    }


def same(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def train_one_step(build, loss_fn, batches):
    torch.manual_seed(0)
    model = build()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.1)
    loss_fn(model(batches[0][0].detach().clone()), batches[0][1]).backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize(("build", "loss_fn", "batch_size"), FAMILY)
def test_any_reasonable_model_is_profiled_and_nothing_of_the_callers_changes(build, loss_fn, batch_size, tmp_path):
    # The caller's own tensors, yielded as they are (a list, not a DataLoader): in-place ops would reach them.
    batches = [(torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))) for _ in range(3)]
    model, optimizer = train_one_step(build, loss_fn, batches)  # gradients are set and Adam has state
    before = snapshot(model, optimizer, batches)

    result = profiling.profile_training(
        model, batches, optimizer, loss_fn, warmup=1, active=2, rounds=2, trace_path=tmp_path / "t.json"
    )

    assert same(snapshot(model, optimizer, batches), before)
    assert len(result.steps) == 4 and result.verdict


def test_an_input_that_requires_grad_gets_no_gradient(tmp_path):
    batches = [(torch.randn(8, 16).requires_grad_(), torch.randint(0, 4, (8,)))]
    model, optimizer = train_one_step(lambda: nn.Linear(16, 4), cross_entropy, batches)
    profiling.profile_training(model, batches, optimizer, cross_entropy, trace_path=tmp_path / "t.json")
    assert batches[0][0].grad is None


def test_dict_batches_are_keyword_arguments_and_split_batch_says_otherwise(tmp_path):
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [{"image": torch.randn(8, 16), "label": torch.randint(0, 4, (8,))} for _ in range(2)]
    # a dict is model(**batch): nn.Linear takes no `image` keyword, and the error names the call made
    with pytest.raises(ValueError, match=r"model\(\*\*batch\) with keys image, label"):
        profiling.profile_training(model, batches, optimizer, cross_entropy, trace_path=tmp_path / "a.json")
    result = profiling.profile_training(
        model,
        batches,
        optimizer,
        cross_entropy,
        split_batch=lambda batch: (batch["image"], batch["label"]),
        trace_path=tmp_path / "b.json",
    )
    assert result.steps and result.steps[0].phases["forward"] > 0


@dataclasses.dataclass
class Batch:
    features: torch.Tensor
    labels: torch.Tensor
    ids: list


def test_a_custom_batch_class_from_a_dataloader_works_with_split_batch(tmp_path):
    data = torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,)))

    def collate(samples):
        x, y = torch.utils.data.default_collate(samples)
        return Batch(x, y, ids=list(range(len(samples))))

    loader = torch.utils.data.DataLoader(data, batch_size=8, collate_fn=collate)
    model = nn.Linear(16, 4)
    result = profiling.profile_training(
        model,
        loader,
        torch.optim.SGD(model.parameters(), lr=0.1),
        cross_entropy,
        split_batch=lambda batch: (batch.features, batch.labels),
        trace_path=tmp_path / "t.json",
    )
    assert len(result.steps) == 3 * 5


@pytest.mark.parametrize(
    ("model", "loss_fn", "message"),
    [
        pytest.param(nn.Linear(16, 4), lambda out, y: out, "must return a scalar tensor", id="loss-not-a-scalar"),
        pytest.param(nn.Linear(16, 4).requires_grad_(False), cross_entropy, "all of them frozen", id="all-frozen"),
        pytest.param(
            nn.Sequential(nn.Linear(16, 4), nn.BatchNorm1d(4)),
            cross_entropy,
            "more than 1 value",
            id="batchnorm-of-one",
        ),
    ],
)
def test_a_job_that_cannot_train_gets_a_clear_value_error(model, loss_fn, message, tmp_path):
    batches = [(torch.randn(1, 16), torch.randint(0, 4, (1,)))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=message):
        profiling.profile_training(model, batches, optimizer, loss_fn, trace_path=tmp_path / "t.json")
    assert not torch.autograd._profiler_enabled()


@pytest.mark.parametrize(
    "bad",
    [
        {"model": "not a model"},
        {"optimizer": None},
        {"loss_fn": 3},
        {"rounds": 1},
        {"active": 0},
        {"warmup": -1},
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(bad, tmp_path):
    model = nn.Linear(16, 4)
    arguments = {
        "model": model,
        "loader": [(torch.randn(8, 16), torch.randint(0, 4, (8,)))],
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "loss_fn": cross_entropy,
        "trace_path": tmp_path / "t.json",
    }
    with pytest.raises(ValueError, match="must be"):
        profiling.profile_training(**{**arguments, **bad})


def _plotly_category_position(value, categories):
    """Where plotly draws `value` on a category axis: a number, or a string that reads as one, is a position;
    any other string is looked up by name (plotly.js set_convert: r2c for category axes)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float(categories.index(value))


def test_an_outlier_marker_stands_on_its_own_bar_whatever_its_label():
    """Issue 21: the bar labelled "1.4" had its "▲ 375" drawn at position 1.4, between the second and third bars."""
    typical = (1.0, 0.1, 2.0, 3.0, 4.0)  # data, copy, forward, backward, optimizer
    steps = steps_of(*[typical] * 15)
    outlier = 3  # round 1, step 4: labelled "1.4"
    steps[outlier] = steps_of((1.0, 0.1, 2.0, 360.0, 4.0), wall=375.0)[0]
    result = profiling.ProfileResult(
        steps=tuple(steps),
        warmup_steps=tuple(steps_of(typical, typical)),
        top_ops=(),
        naive_ms=(10.0,) * 15,
        unprofiled_ms=(10.0,) * 15,
        steps_per_round=5,
        verdict="backward-bound",
        evidence="",
        contenders=("backward",),
        trace_path="",
        device="cpu",
        synchronized=False,
    )
    figure = figures.phases_figure(result)
    categories = list(figure.data[0].x)
    assert categories[2 + outlier] == "1.4"
    markers = [a for a in figure.layout.annotations if a.text.startswith("▲")]
    assert len(markers) == 1 and "375" in markers[0].text
    assert _plotly_category_position(markers[0].x, categories) == categories.index("1.4")


@pytest.mark.parametrize("warmup", [0, 2])
def test_the_step_axis_labels_the_first_warm_up_step_and_each_rounds_first_step_at_its_bar(warmup):
    """Issue 21: seventeen level labels ("w1 w21.11.21.3…") ran into each other at 1280 px."""
    typical = (1.0, 0.1, 2.0, 3.0, 4.0)
    result = profiling.ProfileResult(
        steps=tuple(steps_of(*[typical] * 15)),
        warmup_steps=tuple(steps_of(*[typical] * warmup)),
        top_ops=(),
        naive_ms=(10.0,) * 15,
        unprofiled_ms=(10.0,) * 15,
        steps_per_round=5,
        verdict="backward-bound",
        evidence="",
        contenders=("backward",),
        trace_path="",
        device="cpu",
        synchronized=False,
    )
    figure = figures.phases_figure(result)
    categories, axis = list(figure.data[0].x), figure.layout.xaxis
    assert list(axis.ticktext) == [categories[at] for at in axis.tickvals]  # each label at its own bar
    assert list(axis.ticktext) == (["w1"] if warmup else []) + ["1.1", "2.1", "3.1"]


def test_the_markers_of_neighbouring_cut_bars_stand_at_different_heights():
    """On a phone two neighbouring bars are about as far apart as an upright marker is wide: the CI's phone test
    found '▲ 73.4' printed over '▲ 36.5'. A run of three alternates: top, lower, top."""
    typical = (1.0, 0.1, 2.0, 3.0, 4.0)
    steps = steps_of(*[typical] * 15)
    for index, backward in ((3, 360.0), (4, 200.0), (5, 300.0), (9, 250.0)):
        steps[index] = steps_of((1.0, 0.1, 2.0, backward, 4.0), wall=backward + 8)[0]
    result = profiling.ProfileResult(
        steps=tuple(steps),
        warmup_steps=(),
        top_ops=(),
        naive_ms=(10.0,) * 15,
        unprofiled_ms=(10.0,) * 15,
        steps_per_round=5,
        verdict="backward-bound",
        evidence="",
        contenders=("backward",),
        trace_path="",
        device="cpu",
        synchronized=False,
    )
    markers = [a for a in figures.phases_figure(result).layout.annotations if a.text.startswith("▲")]
    drops = {marker.x: marker.yshift or 0 for marker in markers}
    assert sorted(drops) == [3, 4, 5, 9]
    assert drops[3] == drops[5] == drops[9] == 0 and drops[4] < -len(markers[1].text) * 6


WARMED_FORKSERVER = """
import multiprocessing
from explorers import forkserver
from explorers.ddp.processes import forkserver_running
from explorers.profiler.experiment import ProfileOptions, profile
if __name__ == "__main__":
    multiprocessing.set_forkserver_preload(forkserver.PRELOAD)  # as the engine's workers do
    profile(ProfileOptions(warmup=0, active=1, num_workers=0))
    print(int(forkserver_running()))
"""


def test_a_run_without_loader_workers_starts_the_forkserver_the_next_run_with_workers_forks_from(tmp_path):
    """Started once the measurement is over: the DataLoader-workers slider's first notch would otherwise wait
    about 1.8 s for its imports (4.6 s a notch against 2.1 s)."""
    script = tmp_path / "warm.py"
    script.write_text(WARMED_FORKSERVER)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "1"
