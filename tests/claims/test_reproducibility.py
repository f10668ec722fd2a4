"""Every kind of sentence the Reproducibility lab shows, checked against torch code written here.

The facts behind the lab's sentences (how DataLoader workers are seeded, which global RNG the
main process draws from, what a Generator made in __init__ does in workers, what the job's first
calls import, what weights_only refuses) are measured by small scripts in fresh interpreters that
use no code of the lab; the lab's numbers (first differing step, largest gaps) are recomputed from
its recorded losses with plain arithmetic.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import pickle
import re
import subprocess
import sys

import pytest
import torch

from explorers import engine, units
from explorers.reproducibility import card, figures, fresh, lesson, manifest
from explorers.reproducibility.experiment import CompareOptions, ResumeOptions, compare_runs, resume_study
from tests.claims.falsify import falsifies

ALL_SEEDED = CompareOptions()
TORCH_ONLY = CompareOptions(seed_numpy=False, seed_python=False, seed_workers=False, deterministic=False)

WORKER_FACTS = r"""
import json, random, sys
import numpy as np, torch

if sys.argv[1] == "seeded":
    torch.manual_seed(0)

class Draws(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.tensor([np.random.rand(), random.random(), torch.rand(()).item()], dtype=torch.float64)

class GeneratorInInit(torch.utils.data.Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(7)
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.tensor(self.rng.random(), dtype=torch.float64)

def states():
    return repr(np.random.get_state()[1][:8].tolist()) + repr(np.random.get_state()[2]) + repr(random.getstate())

def load(dataset, workers):
    context = "fork" if workers else None
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers, multiprocessing_context=context)
    return [batch.tolist() for batch in loader]

before = states()
in_workers = load(Draws(), 2)
untouched = states() == before
in_main = load(Draws(), 0)
print(json.dumps({
    "workers": in_workers,
    "main_state_untouched_with_workers": untouched,
    "main_state_moved_without_workers": states() != before,
    "main": in_main,
    "generator_in_init": load(GeneratorInInit(), 2),
}))
"""


def fresh_python(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def worker_facts():
    return {mode: [fresh_python(WORKER_FACTS, mode) for _ in range(2)] for mode in ("seeded", "unseeded")}


def measured(fn, options):
    return engine.default_engine().run(fn, options)


def number(text: str) -> float:
    return float(text.rstrip("."))


# --- The badge ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ALL_SEEDED,
        dataclasses.replace(ALL_SEEDED, seed_torch=False),
        dataclasses.replace(ALL_SEEDED, seed_numpy=False, num_workers=0),
    ],
)
def test_the_badge_states_the_first_differing_step_and_the_largest_gap(options):
    c = measured(compare_runs, options)
    kind, text = lesson.badge(c)
    losses = c.losses
    differing = [s for s in range(len(losses[0])) if any(run[s] != losses[0][s] for run in losses[1:])]
    if not differing:
        assert kind == "equal" and text.startswith("Bitwise equal") and f"all {len(losses[0])} steps" in text
        return
    step, gap, params = re.search(r"Differs from step (\d+) by up to (\S+) in loss; .* up to (\S+)", text).groups()
    assert int(step) == differing[0]
    largest = max(abs(a - b) for run in losses[1:] for a, b in zip(run, losses[0], strict=True))
    assert number(gap) == pytest.approx(largest, rel=5e-3)
    assert number(params) == pytest.approx(c.max_param_diff, rel=5e-3) and c.max_param_diff > 0


# --- What PyTorch does with workers, checked without the lab -------------------------------------------------------


def test_torch_seeded_alone_makes_worker_numpy_and_random_reproducible(worker_facts):
    seeded, unseeded = worker_facts["seeded"], worker_facts["unseeded"]
    assert seeded[0]["workers"] == seeded[1]["workers"]
    assert unseeded[0]["workers"] != unseeded[1]["workers"]
    line = next(s for s in lesson.explain(measured(compare_runs, TORCH_ONLY)) if s.startswith("Numpy's"))
    assert lesson.STATEMENTS["worker_seeding"].text in line
    assert line.endswith("and the augmentation was identical in every run.")


def test_with_workers_the_main_process_never_draws_from_numpy_or_random(worker_facts):
    facts = worker_facts["unseeded"][0]
    assert facts["main_state_untouched_with_workers"] and facts["main_state_moved_without_workers"]
    workers_lines = lesson.explain(measured(compare_runs, TORCH_ONLY))
    assert any("nothing in the main process drew from it" in s for s in workers_lines)
    main = lesson.explain(measured(compare_runs, dataclasses.replace(ALL_SEEDED, seed_numpy=False, num_workers=0)))
    assert any("the job drew from it in the main process" in s for s in main)
    assert not any("nothing in the main process drew from it" in s for s in main)


def test_a_generator_made_in_init_hands_every_worker_the_same_numbers(worker_facts):
    first_worker, second_worker = worker_facts["unseeded"][0]["generator_in_init"]
    assert first_worker == second_worker
    c = measured(compare_runs, dataclasses.replace(TORCH_ONLY, augmentation="generator_in_init"))
    line = lesson.duplicates_line(c)
    assert "handed out the same noise and scales in the same order" in line
    repeated, draws = (int(n) for n in re.search(r"(\d+) of (\d+) draws", line).groups())
    assert draws == c.steps * 16 and repeated > 0


# --- What the job's first calls cost ----------------------------------------------------------------------------------


FIRST_IMPORTS = r"""
import json, sys
import torch
from tests.zoo import ZOO

NAMES = ("torch._dynamo", "torch._inductor")
loaded = lambda: [n in sys.modules for n in NAMES]
first, then = sys.argv[1], sys.argv[2]
model = ZOO[sys.argv[3]].build()[0] if sys.argv[3] in ZOO else torch.nn.Identity()  # Identity: no parameter
steps = {
    "adam": lambda: torch.optim.Adam(model.parameters()),
    "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1),
    "flag": lambda: torch.use_deterministic_algorithms(True),
    "flag_off": lambda: torch.use_deterministic_algorithms(False),
}
found = {"before": loaded()}
try:
    steps[first]()
    found["error"] = None
except ValueError as error:
    found["error"] = str(error)
found["after_first"] = loaded()
steps[then]()
found["after_then"] = loaded()
print(json.dumps(found))
"""


@falsifies(lesson.STATEMENTS["first_call_imports"])
def test_an_optimizer_or_the_deterministic_flag_whichever_is_first_imports_the_compiler_stack():
    cases = [  # (first, then, zoo specimen)
        ("adam", "flag", "plain_mlp"),
        ("sgd", "flag", "tied_weights"),
        ("flag", "adam", "dict_model"),
        ("flag_off", "sgd", "plain_mlp"),  # calling it with False imports them too
        ("adam", "flag", "frozen"),  # parameters that do not require grad: still an optimizer's param group
        ("sgd", "flag", "add_only"),
        ("adam", "flag", "no parameters"),  # the scope's empty parameter list, which raises first
    ]
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}
    started = [
        subprocess.Popen([sys.executable, "-c", FIRST_IMPORTS, *case], stdout=subprocess.PIPE, text=True, env=env)
        for case in cases
    ]
    results = [json.loads(p.communicate(timeout=300)[0]) for p in started]
    for (first, _, name), found in zip(cases, results, strict=True):
        assert found["before"] == [False, False], name
        if name == "no parameters":
            assert "empty parameter list" in found["error"] and found["after_first"] == [False, False]
            assert found["after_then"] == [True, True]  # the flag imported them instead
            continue
        assert found["error"] is None and found["after_first"] == [True, True], (first, name)
        assert found["after_then"] == [True, True]


def test_the_import_cost_is_the_jobs_set_up_not_the_flags(monkeypatch):
    """Finding 6: the job imports torch._dynamo and torch._inductor with the flag on or off; the lab does not
    charge the import to the flag. Runs started as new interpreters (the template preloads the stack)."""
    monkeypatch.setattr(fresh.template, "AVAILABLE", False)
    for options in (TORCH_ONLY, ALL_SEEDED):
        c = compare_runs(options)
        assert all(run.launch == fresh.INTERPRETER for run in c.runs)
        line = lesson.cost_line(c)
        setup = max(run.timings["seeding"] + run.timings["building"] for run in c.runs)
        assert f"setting up the job (seeds and flags, data, model, Adam) took up to {units.seconds(setup)}" in line
        assert "imported `torch._dynamo` and `torch._inductor`" in line
        assert "turning on deterministic algorithms imported" not in line
        assert lesson.STATEMENTS["first_call_imports"].text in line
    assert "first while building the data, the model and Adam" in lesson.cost_line(compare_runs(TORCH_ONLY))
    assert "first while turning on deterministic algorithms" in lesson.cost_line(compare_runs(ALL_SEEDED))


def test_a_template_fork_finds_the_compiler_stack_loaded_and_the_lab_charges_no_import_to_the_job():
    """Issue 31's speed: the template imports torch's compiler stack once (about 1.1 s a run before); a fork's job
    then imports nothing, and the cost line says no import it did not see."""
    c = measured(compare_runs, ALL_SEEDED)
    assert all(run.launch in (fresh.TEMPLATE_WARM, fresh.TEMPLATE_COLD) for run in c.runs)
    assert all(not any(run.imports.values()) for run in c.runs)
    line = lesson.cost_line(c)
    assert "imported `torch._dynamo`" not in line and lesson.STATEMENTS["first_call_imports"].text not in line
    assert "torch's compiler stack and the job's code imported" in line


def test_the_start_sentence_follows_how_each_run_started():
    """The sentence is built from each run's `launch`, never from the launcher the lab prefers."""
    c = measured(compare_runs, ALL_SEEDED)

    def started(*launches):
        runs = [dataclasses.replace(run, launch=launch) for run, launch in zip(c.runs, launches, strict=True)]
        return lesson.start_line(dataclasses.replace(c, runs=runs))

    assert started(fresh.INTERPRETER, fresh.INTERPRETER).startswith("Each run was a new Python interpreter")
    warm = started(fresh.TEMPLATE_WARM, fresh.TEMPLATE_WARM)
    assert "forked from a template interpreter" in warm and "waited" not in warm
    assert "(the first run waited for the template" in started(fresh.TEMPLATE_COLD, fresh.TEMPLATE_WARM)
    assert "(the first 2 runs waited" in started(fresh.TEMPLATE_COLD, fresh.TEMPLATE_COLD)


def test_the_hash_seed_clause_follows_the_runs_own_hashes():
    """Forks share the template's string-hash seed (the audit found equal `hash("abc")` in forks, different in new
    interpreters): the clause is said when every run hashed the probe alike, and not otherwise."""
    c = measured(compare_runs, ALL_SEEDED)
    probe = "import sys; from explorers.reproducibility.job import HASH_PROBE; print(hash(HASH_PROBE))"
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}
    env.pop("PYTHONHASHSEED", None)
    interpreters = {
        int(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout)
        for _ in range(2)
    }
    assert len(interpreters) == 2  # two new interpreters drew their own seeds
    forked = all(run.launch != fresh.INTERPRETER for run in c.runs)
    assert (len({run.str_hash for run in c.runs}) == 1) == forked
    clause = "string-hash seed was the same in every run"
    assert (clause in lesson.start_line(c)) == forked
    runs = [dataclasses.replace(run, str_hash=value) for run, value in zip(c.runs, interpreters, strict=False)]
    assert clause not in lesson.start_line(dataclasses.replace(c, runs=runs))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_cost_sentence_times_the_first_batch_and_the_steps_apart(workers):
    """Audit: "the N steps themselves" counted the DataLoader's shutdown and the bookkeeping, and the first batch's
    wait was in no figure."""
    c = measured(compare_runs, dataclasses.replace(TORCH_ONLY, num_workers=workers, steps=5))
    line = lesson.cost_line(c)
    waits = max(run.timings["first_batch"] for run in c.runs)
    assert f"waiting for its first batch took up to {units.seconds(waits)}" in line
    for run in c.runs:  # the phases run one after another inside the run, so they fit in its life
        phases = ("seeding", "building", "first_batch", "steps")
        # not plus start_s: the caller reads "ready" when it gets to it, so start_s may overlap the seeding (CI: 0.6 ms)
        assert sum(run.timings[p] for p in phases) <= run.total_s


# --- Resume --------------------------------------------------------------------------------------------------------


def test_resume_sentences_match_the_recorded_losses():
    r = measured(resume_study, ResumeOptions())
    k = r.options.checkpoint_at
    for run in r.resumed:
        line = lesson.resume_line(r, run)
        reference = r.straight_losses[k:]
        differing = [k + i for i, (a, b) in enumerate(zip(run.losses, reference, strict=True)) if a != b]
        if not differing:
            assert "matched the straight-through run bit for bit" in line
            continue
        assert f"from step {differing[0]} the losses differ" in line
        assert ("still matched" in line) == (run.losses[0] == reference[0])
        gap = max(abs(a - b) for a, b in zip(run.losses, reference, strict=True))
        assert number(re.search(r"differ by up to (\S+);", line).group(1)) == pytest.approx(gap, rel=5e-3)


@falsifies(lesson.STATEMENTS["weights_only"])
def test_weights_only_loading_runs_no_code_from_the_file(tmp_path):
    marker = tmp_path / "the-file-ran-code"

    class Payload:
        def __reduce__(self):
            return (os.makedirs, (str(marker),))

    path = tmp_path / "checkpoint.pt"
    torch.save({"model": {}, "trap": Payload()}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert not marker.exists()
    r = measured(resume_study, ResumeOptions())
    line = lesson.resume_lines(r)[-1]
    assert "torch.load(weights_only=True)" in line and units.format_bytes(r.checkpoint_bytes) in line


# --- Issue 18: every sentence has a witness; general statements tried on their own ---------------------------

WORKER_SEEDS = r"""
import json, random, sys
import numpy as np, torch

class Seeds(torch.utils.data.Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return {"id": info.id, "seed": info.seed, "torch": torch.initial_seed(), "random": random.random(),
                "expected_random": random.Random(info.seed).random() if i < 2 else None, "numpy": np.random.rand()}

generator = torch.Generator().manual_seed(int(sys.argv[1]))
base = torch.empty((), dtype=torch.int64).random_(generator=generator.clone_state()).item()
loader = torch.utils.data.DataLoader(Seeds(), batch_size=None, num_workers=2, generator=generator,
                                     multiprocessing_context="fork")
print(json.dumps({"base": base, "items": [dict(item) for item in loader]}))
"""


@falsifies(lesson.STATEMENTS["worker_seeding"])
def test_workers_seed_random_and_torch_from_base_plus_id_and_numpy_from_the_same():
    runs = [fresh_python(WORKER_SEEDS, seed) for seed in ("5", "5", "6")]
    for run in runs:
        for item in run["items"]:
            assert item["seed"] == item["torch"] == run["base"] + item["id"]  # torch: base seed + worker id
            first = [i for i in run["items"] if i["id"] == item["id"]][0]
            assert first["random"] == random_from(first["seed"])  # random: seeded with the same number
    numpy_of = [[i["numpy"] for i in run["items"]] for run in runs]
    assert numpy_of[0] == numpy_of[1] != numpy_of[2]  # numpy: fixed by the base seed, new with another
    assert len({i["numpy"] for i in runs[0]["items"]}) == len(runs[0]["items"])  # and different per worker


def random_from(seed: int) -> float:
    import random

    return random.Random(seed).random()


@falsifies(lesson.STATEMENTS["unseeded_torch"])
def test_a_fresh_process_without_manual_seed_gets_a_new_torch_seed():
    script = "import json, torch; print(json.dumps([torch.initial_seed(), torch.rand(3).tolist()]))"
    first, second = fresh_python(script), fresh_python(script)
    assert first[0] != second[0] and first[1] != second[1]


def test_the_worker_sentence_dates_numpy_to_1_9_and_random_before_it():
    text = lesson.STATEMENTS["worker_seeding"].text
    assert "since PyTorch 1.9 each worker seeds numpy and `random`" not in text.lower()
    assert text.index("`random`") < text.index("1.9") < text.index("numpy")
    line = next(
        s
        for s in lesson.explain(measured(compare_runs, dataclasses.replace(TORCH_ONLY, num_workers=1)))
        if s.startswith("Numpy's")
    )
    assert "in 1 DataLoader worker process." in line and text in line


def test_the_card_names_what_two_manifests_compare_not_the_digest_they_hold():
    unseeded = measured(compare_runs, dataclasses.replace(ALL_SEEDED, seed_torch=False, runs=2, steps=4))
    left, right = (run.manifest for run in unseeded.runs)
    assert left["result"]["final_parameters_digest"] != right["result"]["final_parameters_digest"]
    fields = {d.field for d in manifest.differences(left, right)}
    assert "result.final_parameters_digest" in fields  # a different digest is itself a manifest difference
    wording = card.answer_card(
        unseeded, measured(resume_study, ResumeOptions(total_steps=4, checkpoint_at=2))
    ).could_prove_wrong
    assert "identical manifests" not in wording and "every field before `result`" in wording


def test_the_prediction_question_follows_the_options_it_runs():
    for workers, runs in ((2, 2), (0, 3), (3, 4)):
        options = dataclasses.replace(TORCH_ONLY, num_workers=workers, runs=runs)
        question = lesson.predict_question(options)
        assert f"are {runs} fresh runs" in question
        assert (f"{workers} DataLoader workers" if workers else "no DataLoader workers") in question


def test_the_card_scopes_what_would_prove_it_wrong_to_fully_seeded_manifests():
    """Finding 5: with torch unseeded, the manifests agree before `result` and the digests differ, as the lab's
    normal run: the card's test must not fire on it."""
    unseeded = measured(compare_runs, dataclasses.replace(ALL_SEEDED, seed_torch=False, runs=2, steps=4))
    left, right = (run.manifest for run in unseeded.runs)
    assert {k: v for k, v in left.items() if k != "result"} == {k: v for k, v in right.items() if k != "result"}
    assert left["result"]["final_parameters_digest"] != right["result"]["final_parameters_digest"]
    assert left["seeds"]["torch"] is False
    wording = card.answer_card(
        unseeded, measured(resume_study, ResumeOptions(total_steps=4, checkpoint_at=2))
    ).could_prove_wrong
    assert "record every source seeded" in wording and "deterministic algorithms on" in wording
    assert "This comparison is not such a test: its manifests record torch unseeded." in wording


def test_the_checkpoint_is_numbered_by_the_steps_it_holds():
    """Finding 7: a checkpoint after k steps holds steps 0 to k - 1; the resumed run's first step is step k."""
    total, k = 4, 3
    r = measured(resume_study, ResumeOptions(total_steps=total, checkpoint_at=k))
    full = next(run for run in r.resumed if not run.forgotten)
    assert len(r.straight_losses) == total and len(full.losses) == total - k  # one step left to run: step 3
    assert full.losses == r.straight_losses[k:]
    line = lesson.resume_line(r, full)
    assert line.startswith(f"Resumed after {k} steps with full state")
    assert "at step" not in line.split(":")[0]
    figure = figures.resume_figure(r)
    assert figure.layout.title.text == f"Straight through vs resumed after {k} steps"
    assert list(figure.data[1].x) == list(range(k, total))
    caption = lesson.resume_caption(total, k)
    assert f"after {k} steps" in caption and f"trains from step {k} to the end" in caption
    assert lesson.CHECKPOINT_LABEL != "Checkpoint after step"
    evidence = card.answer_card(measured(compare_runs, dataclasses.replace(ALL_SEEDED, steps=4)), r).evidence
    assert f"Resumed after {k} steps with full state" in evidence
    assert "step None" not in evidence  # a resumed run whose every loss matched has no first differing step
    for run in r.resumed:
        if run.first_divergent_step is not None and run.first_divergent_step > k:
            assert f"the loss at step {k}, its first, still matched" in lesson.resume_line(r, run)
