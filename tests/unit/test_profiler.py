"""Profiling a real training step: verdicts, phase accounting, overhead, traces, isolation."""

import json
import threading
import time

import pytest
import torch
from torch import nn

from explorers import profiler as profiling
from explorers.engine import default_engine
from explorers.profiler import lesson
from explorers.profiler.experiment import ProfileOptions, profile


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
    assert len(result.steps) == 4 and len(result.warmup_steps) == 1
    for step in result.steps:
        assert sum(step.phases.values()) == pytest.approx(step.wall_ms, rel=0.10)
        assert step.other_ms >= 0 and step.source == "profiler"
    assert result.warmup_steps[0].source == "perf_counter"


def test_the_loader_is_cycled_when_it_runs_out(tmp_path):
    result = profiling.profile_training(*job(batches=2), warmup=2, active=5, trace_path=tmp_path / "t.json")
    assert len(result.steps) == 5


def test_overhead_ratio_is_reported_and_above_one_on_many_tiny_layers(tmp_path):
    model, loader, optimizer, loss = job(width=8, depth=40, batch=4)
    result = profiling.profile_training(model, loader, optimizer, loss, active=8, trace_path=tmp_path / "t.json")
    assert result.overhead_ratio > 1
    assert len(result.unprofiled_ms) == 8


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
            if done > warmup + active:  # past the unprofiled baseline: inside the profiler
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


def test_judge_names_the_largest_share():
    phases = {"data": 1.0, "copy": 0.1, "forward": 2.0, "backward": 3.0, "optimizer": 6.5}
    verdict, evidence = profiling.judge(phases, 13.0)
    assert verdict == "optimizer-bound" and "6.5 ms of a 13.0 ms step" in evidence


def run_on_engine(options: ProfileOptions):
    """As the page runs it: in an engine worker, since `profile` sets the process-wide thread count."""
    return default_engine().run(profile, options)


def test_lab_suggestion_for_a_data_bound_run_adds_workers_and_helps():
    slow = ProfileOptions(data_cost_ms=20, active=3, warmup=1)
    result = run_on_engine(slow)
    label, change = lesson.suggestion(slow, result)
    assert result.verdict == "data-bound" and change.num_workers == 2 and "worker" in label
    faster = run_on_engine(change)
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
