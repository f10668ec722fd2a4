"""The Fix-the-loop explorer's facts: the catalogue, the fixes as edits, what the bench measures, the scoring."""

from __future__ import annotations

import math

import pytest
import torch

from explorers import drills
from explorers.drills import fixes, harness, lesson
from explorers.drills.catalogue import SHOWN_SIGNATURE
from explorers.drills.experiment import MAX_SOURCE_LINES, DrillOptions, compiled, fixed_source, run_loop

DRILL_NAMES = sorted(drills.DRILLS)


def test_the_catalogue_holds_at_least_fourteen_drills_each_with_four_or_more_options():
    assert len(drills.catalogue()) >= 14
    for drill in drills.DRILLS.values():
        assert len(drill.options) >= 4 and drill.fix in drill.options
        assert len(set(drill.options)) == len(drill.options)


@pytest.mark.parametrize("name", DRILL_NAMES)
def test_every_drill_shows_a_train_function_whose_bug_lines_and_every_fix_point_into_it(name):
    drill = drills.DRILLS[name]
    assert drill.lines[0] == SHOWN_SIGNATURE and len(drill.lines) <= MAX_SOURCE_LINES
    assert drill.bug_lines and all(1 <= n <= len(drill.lines) for n in drill.bug_lines)
    assert name not in drill.source  # the loop's name in loops.py is the answer: never on screen
    for key in drill.options:
        edited = fixed_source(drill, key)
        assert edited != drill.source, key
        compile(edited, key, "exec")  # every offered edit is valid Python


def test_the_shown_source_is_what_runs():
    drill = drills.DRILLS["forgot_zero_grad"]
    assert compiled(drill, None).__code__.co_filename.startswith("<forgot_zero_grad")
    run = run_loop(DrillOptions("forgot_zero_grad", 0))
    assert run.source == drill.source


def test_a_fix_edits_the_line_it_names_and_leaves_the_rest():
    lines = ["for x, y in loader:", "    loss = f(x)", "    loss.backward()", "    optimizer.step()"]
    assert fixes.FIXES["insert_zero_grad"].apply(lines) == [
        "for x, y in loader:",
        "    loss = f(x)",
        "    optimizer.zero_grad()",
        "    loss.backward()",
        "    optimizer.step()",
    ]
    moved = fixes.FIXES["move_zero_grad"].apply(["a", "    loss.backward()", "    optimizer.zero_grad()", "b"])
    assert moved == ["a", "    optimizer.zero_grad()", "    loss.backward()", "b"]
    assert fixes.FIXES["lower_lr"].apply(["opt = SGD(p, lr=10.0)"]) == ["opt = SGD(p, lr=1)"]
    assert fixes.FIXES["shuffle"].apply(["DataLoader(d, shuffle=True)"]) is None  # nothing to edit: not offered


def test_options_validate_the_drill_the_seed_and_the_fix():
    with pytest.raises(ValueError, match="drill"):
        DrillOptions("no_such_drill")
    with pytest.raises(ValueError, match="seed"):
        DrillOptions(seed=-1)
    with pytest.raises(ValueError, match="fix"):
        DrillOptions("forgot_zero_grad", 0, "shuffle")  # a real fix, but not one this drill offers
    assert DrillOptions("forgot_zero_grad", 3).correct == DrillOptions("forgot_zero_grad", 3, "insert_zero_grad")


def test_check_scores_lines_and_fix_and_refuses_what_is_not_an_answer():
    drill = drills.DRILLS["forgot_zero_grad"]
    right = drills.check("forgot_zero_grad", drill.bug_lines, drill.fix)
    assert right.right and right.lines_right and right.fix_right
    extra = drills.check("forgot_zero_grad", [*drill.bug_lines, 1], drill.fix)
    assert not extra.right and extra.extra_lines == (1,)
    wrong = drills.check("forgot_zero_grad", drill.bug_lines, "clip")
    assert wrong.lines_right and not wrong.fix_right
    near = drills.check("train_mode_never_restored", drills.DRILLS["train_mode_never_restored"].accepted_lines, "clip")
    assert not near.extra_lines and not near.found_lines  # next to the bug: neither found nor counted against
    with pytest.raises(ValueError, match="lines 1 to"):
        drills.check("forgot_zero_grad", [99], drill.fix)
    with pytest.raises(ValueError, match="fix"):
        drills.check("forgot_zero_grad", [9], "shuffle")
    with pytest.raises(ValueError, match="drill"):
        drills.check("nope", [1], "clip")


def test_the_bench_reads_none_at_every_step_when_zero_grad_comes_after_backward():
    run = run_loop(DrillOptions("zero_grad_after_backward", 0)).recording
    assert run.steps and all(all(g is None for g in s.grad_norms.values()) for s in run.steps)
    assert all(all(f > 0 for f in s.fresh_norms.values()) for s in run.steps)
    assert not any(run.changed.values())


def test_the_bench_sees_a_replaced_layer_and_what_the_optimizer_holds():
    run = run_loop(DrillOptions("optimizer_before_new_head", 0)).recording
    assert set(run.steps[0].not_in_optimizer) == {"head.weight", "head.bias"}
    assert run.changed == {"body.fc": True, "body.bn": True, "head": False}
    fixed = run_loop(DrillOptions("optimizer_before_new_head", 0, "optimizer_after_head")).recording
    assert not fixed.steps[0].not_in_optimizer and fixed.changed["head"]


def test_the_bench_counts_modes_per_part_of_the_loop_and_not_its_own_forwards():
    correct = run_loop(DrillOptions("validation_in_train_mode", 0, "eval_for_validation")).recording
    for epoch in correct.epochs:  # 15 training batches, 1 validation forward; the bench's 2 measuring forwards not
        assert epoch.training.dropout_calls == epoch.training.dropout_training == 15
        assert epoch.validation.dropout_calls == 1 and epoch.validation.dropout_training == 0
        assert not epoch.validation.running_stats_moved and epoch.training.running_stats_moved
    buggy = run_loop(DrillOptions("validation_in_train_mode", 0)).recording
    assert all(e.validation.dropout_training == 1 and e.validation.running_stats_moved for e in buggy.epochs)


def test_the_bench_measures_accuracy_in_eval_mode_without_moving_anything():
    bench = harness.Bench(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = bench.model()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    bench.epoch(None)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(state, torch.get_rng_state())
    logits = model.eval()(bench.val_x)
    assert bench.recording.epochs[0].val_metric == float((logits.argmax(1) == bench.val_y).double().mean())


def test_the_data_is_stored_class_by_class_and_the_last_batch_of_sixteen_holds_one_sample():
    data = harness.make_data(0)
    assert torch.equal(data["y"], torch.sort(data["y"]).values)
    assert harness.TRAIN_SAMPLES % 16 == 1 and harness.TRAIN_SAMPLES % 8 == 1


def test_an_error_is_recorded_with_the_batches_before_it():
    run = run_loop(DrillOptions("batchnorm_batch_of_one", 0)).recording
    assert run.error.startswith("ValueError: Expected more than 1 value per channel")
    assert run.error_after_batches == 15  # 241 = 15 x 16 + 1


def test_memory_is_read_after_every_forward_and_labelled_by_part():
    run = run_loop(DrillOptions("loss_tensor_summed", 0)).recording
    assert len(run.live_bytes) == len(run.forward_phases) == 4 * (15 + 6)
    assert run.forward_phases[:16] == ["training"] * 15 + ["validation"]
    validation = [
        b
        for b, p, e in zip(run.live_bytes, run.forward_phases, run.forward_epochs, strict=True)
        if p == "validation" and e == 0
    ]
    assert validation == sorted(validation) and validation[-1] > validation[0]  # every batch's graph is kept


@pytest.mark.parametrize("name", DRILL_NAMES)
def test_every_finding_has_a_sentence_with_its_numbers(name):
    pair = drills.run(name, 1)
    for finding in pair.comparison.findings:
        sentence = lesson.symptom(finding)
        assert sentence and "{" not in sentence
    assert all(not math.isnan(v) for v in pair.correct.recording.losses)


def test_a_comparison_of_a_run_with_itself_finds_nothing_and_matches():
    run = run_loop(DrillOptions("softmax_before_loss", 2)).recording
    same = drills.compare(run, run)
    assert same.findings == () and same.identical and same.verdict == "matches"
    assert lesson.symptoms(same) == [lesson.NOT_SHOWN]
