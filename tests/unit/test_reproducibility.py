"""The Reproducibility lab's facts, from real runs in fresh processes.

Comparisons go through the shared run engine (as the page's do), so a result computed here is
reused by the other test files of the same pytest process instead of starting processes again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from explorers import engine, errors
from explorers import reproducibility as repro
from explorers.reproducibility import fresh, manifest
from explorers.reproducibility import template as template_module
from explorers.reproducibility.experiment import CompareOptions, ResumeOptions, compare_runs, resume_study
from explorers.reproducibility.job import HEAVY_IMPORTS, SOURCES, JobConfig

ROOT = Path(__file__).resolve().parents[2]
ALL_SEEDED = CompareOptions()
TORCH_ONLY = CompareOptions(seed_numpy=False, seed_python=False, seed_workers=False, deterministic=False)


def measured(fn, options):
    return engine.default_engine().run(fn, options)


# --- Rerun and compare ------------------------------------------------------------------------------------


def test_every_source_seeded_gives_bitwise_equal_runs():
    c = measured(compare_runs, ALL_SEEDED)
    assert c.bitwise_equal and c.first_divergent_step is None and c.max_param_diff == 0.0
    assert c.losses[0] == c.losses[1] and len(c.losses[0]) == ALL_SEEDED.steps
    assert all(step is None for step in c.component_first_difference.values())
    assert c.runs[0].parameters_digest == c.runs[1].parameters_digest
    assert c.runs[0].workers_seen == [0, 1]  # the augmentation really ran in two worker processes
    assert c.deterministic_in_effect


@pytest.mark.parametrize(
    ("changes", "source", "component"),
    [
        ({"seed_torch": False}, "torch", "initial weights"),
        ({"seed_numpy": False, "num_workers": 0}, "numpy", "augmentation"),
        ({"seed_python": False, "num_workers": 0}, "python", "augmentation"),
    ],
)
def test_leaving_out_a_source_the_job_draws_from_makes_runs_differ(changes, source, component):
    c = measured(compare_runs, dataclasses.replace(ALL_SEEDED, **changes))
    assert not c.bitwise_equal and c.max_param_diff > 0
    assert c.first_divergent_step == 0 and c.max_loss_diff > 0
    assert c.component_first_difference[component] == 0
    assert c.runs[0].main_drew[source]  # the process where it was left unseeded did draw from it
    if source != "torch":  # only the augmentation differed: init, order and dropout stayed seeded
        others = {k: v for k, v in c.component_first_difference.items() if k != "augmentation"}
        assert all(step is None for step in others.values())


def test_sources_the_job_does_not_draw_from_change_nothing():
    """Torch seeded, 2 workers: numpy, random, the worker seeding and determinism all left out, still equal."""
    c = measured(compare_runs, TORCH_ONLY)
    assert c.bitwise_equal and c.first_divergent_step is None and c.max_param_diff == 0.0
    assert not c.runs[0].main_drew["numpy"] and not c.runs[0].main_drew["python"]
    assert c.component_first_difference["augmentation"] is None
    assert not c.deterministic_in_effect


def test_a_generator_made_in_init_is_reproducible_but_workers_repeat_each_other():
    options = dataclasses.replace(TORCH_ONLY, augmentation="generator_in_init")
    c = measured(compare_runs, options)
    assert c.bitwise_equal  # seeded in __init__: the runs agree
    run = c.runs[0]
    (worker_a, *first), (worker_b, *second) = (list(zip(*step, strict=True)) for step in run.first_draws)
    assert set(worker_a) == {0} and set(worker_b) == {1}
    assert first == second  # worker 1's first batch drew exactly worker 0's numbers
    assert run.repeated_draws >= run.draws // 2 - 16  # every batch of worker 1 repeats one of worker 0
    single = measured(compare_runs, dataclasses.replace(options, num_workers=0))
    assert single.runs[0].repeated_draws == 0 and single.runs[0].workers_seen == [-1]


def test_each_run_is_a_fresh_process_whose_unseeded_state_comes_from_the_os():
    """Nothing seeded at all: every component differs, so no run inherited another's RNG state."""
    nothing = CompareOptions(
        seed_torch=False, seed_numpy=False, seed_python=False, seed_workers=False, deterministic=False, runs=3
    )
    c = measured(compare_runs, nothing)
    assert all(step == 0 for step in c.component_first_difference.values())
    assert len({run.parameters_digest for run in c.runs}) == 3


def test_the_notebook_call_leaves_the_callers_process_state_alone():
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    c = repro.compare(steps=3, num_workers=0)
    assert c.bitwise_equal and len(c.losses[0]) == 3
    assert torch.equal(torch.get_rng_state(), before[0])
    assert (np.random.get_state()[1] == before[1]).all() and random.getstate() == before[2]
    assert not torch.are_deterministic_algorithms_enabled()


def test_two_comparisons_at_once_do_not_affect_each_other():
    unseeded = dataclasses.replace(ALL_SEEDED, seed_torch=False, trial=1)
    results = {}

    def run(name, options):
        results[name] = compare_runs(options)

    threads = [
        threading.Thread(target=run, args=("seeded", dataclasses.replace(ALL_SEEDED, trial=1))),
        threading.Thread(target=run, args=("unseeded", unseeded)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    alone = measured(compare_runs, ALL_SEEDED)
    assert results["seeded"].bitwise_equal and results["seeded"].losses == alone.losses
    assert results["seeded"].runs[0].parameters_digest == alone.runs[0].parameters_digest
    assert not results["unseeded"].bitwise_equal


# --- Resume ---------------------------------------------------------------------------------------------------


def test_resume_with_full_state_equals_the_straight_through_run():
    r = repro.resume(total_steps=12, checkpoint_at=5)
    assert r.equal and r.max_param_diff == 0.0 and r.first_divergent_step is None
    assert r.chosen.losses == r.straight_losses[5:]
    assert r.checkpoint_parts == ["model", "optimizer", "rng", "sampler", "step"]


def test_forgetting_the_optimizer_rng_or_sampler_state_diverges():
    r = measured(resume_study, ResumeOptions())
    by_forgotten = {tuple(run.forgotten): run for run in r.resumed}
    assert by_forgotten[()].equal
    no_optimizer = by_forgotten[("optimizer state",)]
    assert not no_optimizer.equal and no_optimizer.max_param_diff > 0
    assert no_optimizer.first_divergent_step == 9  # step 8's loss comes from the restored weights, before any update
    for part in ("RNG state", "sampler"):
        run = by_forgotten[(part,)]
        assert not run.equal and run.first_divergent_step == 8 and run.max_loss_diff > 0


def test_resume_options_are_bounded():
    with pytest.raises(ValueError, match="checkpoint_at"):
        ResumeOptions(total_steps=10, checkpoint_at=10)
    with pytest.raises(ValueError, match="keep_rng_state"):
        ResumeOptions(keep_rng_state="yes")


# --- Manifests --------------------------------------------------------------------------------------------------


def test_the_manifest_round_trips_and_the_comparison_names_the_changed_field():
    seeded = measured(compare_runs, ALL_SEEDED).runs[0].manifest
    assert manifest.parse(manifest.to_json(seeded)) == seeded
    assert manifest.differences(seeded, manifest.parse(manifest.to_json(seeded))) == []
    changed = json.loads(manifest.to_json(seeded))
    changed["seeds"]["numpy"] = False
    assert [d.field for d in manifest.differences(seeded, changed)] == ["seeds.numpy"]
    other = measured(compare_runs, dataclasses.replace(ALL_SEEDED, seed_numpy=False, num_workers=0)).runs[0].manifest
    fields = {d.field for d in manifest.differences(seeded, other)}
    assert {"seeds.numpy", "config.num_workers", "result.final_parameters_digest"} <= fields
    assert not fields & {"versions.torch", "data.split_hash", "code.git_commit"}


def test_the_manifest_records_what_the_run_used():
    m = measured(compare_runs, ALL_SEEDED).runs[0].manifest
    assert m["versions"]["torch"] == torch.__version__ and m["device"]["torch_threads"] == 1
    assert m["determinism"]["use_deterministic_algorithms"] is True
    assert m["seeds"] == {
        "seed": 0,
        "torch": True,
        "numpy": True,
        "python": True,
        "dataloader_generator_and_worker_init_fn": True,
    }
    assert len(m["data"]["split_hash"]) == 16
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert m["code"]["git_commit"] == head.stdout.strip()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b" " * (manifest.MAX_BYTES + 1), "64.0 KiB"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"manifest_version": 1,', "not valid JSON"),
        (b"[1, 2]", "JSON list"),
        (b'{"seeds": {}}', "no `manifest_version`"),
        (b'{"manifest_version": 7}', "not one this lab reads"),
        (b'{"manifest_version": 1, "x": NaN}', "NaN"),
        (b'{"manifest_version": 1, "a": ' + b"[" * 20 + b"]" * 20 + b"}", "levels deep"),
        (b"[" * 30_000 + b"]" * 30_000, "30,000 levels deep"),
        (json.dumps({"manifest_version": 1, "many": list(range(500))}).encode(), "fields"),
    ],
)
def test_a_malformed_or_oversized_manifest_gets_a_clear_error(data, message):
    with pytest.raises(ValueError, match=message):
        manifest.parse(data)


def test_bool_and_number_are_different_settings():
    assert [d.field for d in manifest.differences({"a": {"b": True}}, {"a": {"b": 1}})] == ["a.b"]
    assert [d.left for d in manifest.differences({"x": 1}, {})] == ["1"]


# --- Options and processes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [{"runs": 6}, {"runs": 1}, {"steps": 0}, {"steps": 101}, {"num_workers": 5}, {"seed": -1}],
)
def test_compare_options_are_bounded(changes):
    with pytest.raises(ValueError):
        CompareOptions(**changes)


def test_flags_and_choices_are_validated():
    with pytest.raises(ValueError, match="seed_torch"):
        CompareOptions(seed_torch=1)
    with pytest.raises(ValueError, match="augmentation"):
        JobConfig(augmentation="import os")


def _tagged_processes(tag: str) -> list[int]:
    """Live processes (not zombies) whose environment carries `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"REPRO_TEST_TAG={tag}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _gone(tag: str, within_s: float = 5.0, keep: int | None = None) -> bool:
    """No tagged process left within `within_s`, besides `keep` (this process's template, which serves on)."""
    deadline = time.monotonic() + within_s
    while set(_tagged_processes(tag)) - {keep} and time.monotonic() < deadline:
        time.sleep(0.1)
    return not set(_tagged_processes(tag)) - {keep}


@pytest.fixture
def tag(monkeypatch):
    """A tag in the environment of every process a run starts: a template started afresh carries it to its forks."""
    value = uuid.uuid4().hex
    monkeypatch.setenv("REPRO_TEST_TAG", value)
    fresh.close_template()
    yield value
    fresh.close_template()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("launcher", fresh.LAUNCHERS)
def test_a_run_past_its_time_limit_is_stopped_with_its_processes(tag, launcher):
    template = fresh.start_template() if launcher == "template" else None
    with pytest.raises(fresh.RunFailed, match="longer than its 0.3 s limit"):  # a forked run of 100 steps takes longer
        fresh.run_fresh([{"config": JobConfig(steps=100).as_dict()}], timeout_s=0.3, launcher=launcher)
    assert _gone(tag, keep=template)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("launcher", fresh.LAUNCHERS)
def test_a_caller_that_leaves_stops_every_child_and_its_dataloader_workers(tag, launcher):
    template = fresh.start_template() if launcher == "template" else None
    seen = []

    def leave(steps_done):
        seen.append(len(set(_tagged_processes(tag)) - {template}))
        if steps_done >= 2:  # the children are training, with their DataLoader workers
            raise engine.Cancelled

    with pytest.raises(engine.Cancelled):
        fresh.run_fresh([{"config": JobConfig(steps=100).as_dict()}] * 2, on_progress=leave, launcher=launcher)
    assert max(seen) > 2  # two children and their workers were alive
    assert _gone(tag, keep=template)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_children_and_the_template_end_themselves_when_their_caller_is_killed(tmp_path):
    tag = uuid.uuid4().hex
    # again and again: a forked run of 100 steps takes well under a second, the poll below must find one running
    script = (
        "from explorers.reproducibility import experiment as c\nwhile True: c.compare_runs(c.CompareOptions(steps=100))"
    )
    env = {**os.environ, "REPRO_TEST_TAG": tag, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}  # its leftovers
    caller = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while len(_tagged_processes(tag)) < 4 and time.monotonic() < deadline:  # the template, two runs, a worker
        time.sleep(0.1)
    assert len(_tagged_processes(tag)) >= 4, "the caller never started its runs"
    os.kill(caller.pid, signal.SIGKILL)
    caller.wait()
    assert _gone(tag)


def test_runs_fork_from_one_template_that_stays_pristine():
    """Two comparisons, one template: the second's runs start in milliseconds, find the compiler stack the template
    imported (and import nothing themselves), and, unseeded, draw new numbers (reseeded from the OS): the template
    imported code and never ran the job."""
    unseeded = {"config": JobConfig(**dict.fromkeys(SOURCES, False)).as_dict()}
    first = fresh.run_fresh([unseeded] * 2)
    template = fresh.start_template()
    second = fresh.run_fresh([unseeded] * 2)
    assert fresh.start_template() == template
    assert {outcome.launch for outcome in second} == {fresh.TEMPLATE_WARM}
    digests = [outcome.result["parameters_digest"] for outcome in first + second]
    assert len(set(digests)) == 4
    assert all(
        not outcome.result["imports"]["building"] and not outcome.result["imports"]["seeding"] for outcome in second
    )
    assert set(HEAVY_IMPORTS) == set(template_module.COMPILER_STACK)


def test_runs_that_waited_for_a_template_another_caller_was_starting_count_as_a_cold_start(tag):
    """Audit: a template started from another thread just before made the runs say "starting it took 0.04 s",
    with the wait for its start in no figure."""
    starter = threading.Thread(target=fresh.start_template)
    starter.start()
    time.sleep(0.2)  # the other caller holds the template while it imports torch
    outcomes = fresh.run_fresh([{"config": JobConfig(steps=2).as_dict()}])
    starter.join()
    assert outcomes[0].launch == fresh.TEMPLATE_COLD
    assert fresh.run_fresh([{"config": JobConfig(steps=2).as_dict()}])[0].launch == fresh.TEMPLATE_WARM


def test_a_forked_run_equals_a_new_interpreters_run_bit_for_bit():
    request = {"config": JobConfig(num_workers=2, steps=6).as_dict()}
    (forked,) = fresh.run_fresh([request], launcher="template")
    (interpreted,) = fresh.run_fresh([request], launcher="interpreter")
    assert forked.launch != fresh.INTERPRETER and interpreted.launch == fresh.INTERPRETER
    assert torch.equal(forked.result["losses"], interpreted.result["losses"])
    assert forked.result["parameters_digest"] == interpreted.result["parameters_digest"]


def test_a_fresh_run_fails_with_the_engines_exception_without_importing_the_engine():
    """One RunFailed for pages to catch; the engine, which patches multiprocessing when imported, stays out."""
    script = "import sys; from explorers.reproducibility import fresh; print('explorers.engine' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "False"
    assert fresh.RunFailed is errors.RunFailed and issubclass(engine.RunTimedOut, errors.RunFailed)


def test_a_child_that_fails_says_why():
    with pytest.raises(fresh.RunFailed, match="run 1 ended without a result.*ValueError"):
        fresh.run_fresh([{"config": {**JobConfig().as_dict(), "steps": 10_000}}])
