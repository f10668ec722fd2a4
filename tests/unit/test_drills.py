"""The Fix-the-loop explorer's facts: the catalogue, the fixes as edits, what the bench measures, the scoring."""

from __future__ import annotations

import math
import re

import pytest
import torch

from explorers import drills
from explorers.drills import figures as charts
from explorers.drills import fixes, harness, lesson
from explorers.drills.catalogue import SHOWN_SIGNATURE, label
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
    near = drills.check(
        "train_mode_never_restored", drills.DRILLS["train_mode_never_restored"].accepted_lines, "lower_lr"
    )
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


# --- A drill never gives its answer away (issue 44: titles, comments, links, the kind of an option) ------------

STOP_WORDS = {"a", "an", "the", "of", "to", "and", "or", "in", "on", "by", "for", "is", "it", "its", "at", "as"}


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]{3,}", text)} - STOP_WORDS


EVERY_LOOP = set.intersection(*(_words(d.source) for d in drills.DRILLS.values()))  # words no loop is told by


def _giveaways(drill) -> set[str]:
    """Words of the drill's bug (its name, what the lab says after the answer) and of its fix, that not every loop
    has anyway."""
    told = (
        drill.name.replace("_", " ")
        + " "
        + drills.FIXES[drill.fix].label
        + " "
        + " ".join(lesson.explanation(drill.name))
    )
    return _words(told) - EVERY_LOOP


@pytest.mark.parametrize("name", DRILL_NAMES)
def test_no_word_of_a_drills_bug_or_fix_is_in_its_title_its_comments_or_its_link(name):
    drill = drills.DRILLS[name]
    comments = " ".join(line.split("#", 1)[1] for line in drill.lines if "#" in line)
    shown = f"{drill.title} {label(name)} {comments} {drill.link_id}"
    assert not _words(shown) & _giveaways(drill), _words(shown) & _giveaways(drill)
    assert not any(word in drill.link_id for word in name.split("_") if len(word) > 2)


def test_titles_fit_the_drop_down_and_every_drill_is_told_apart_by_its_label():
    assert all(len(label(name)) <= 32 for name in drills.DRILLS)
    assert len({label(name) for name in drills.DRILLS}) == len(drills.DRILLS)
    assert len({d.link_id for d in drills.DRILLS.values()}) == len(drills.DRILLS)


@pytest.mark.parametrize("name", DRILL_NAMES)
def test_the_kind_of_an_option_never_singles_out_the_right_fix(name):
    """In two drills the right fix was once the only option that was not a reflex (lr, clipping, Adam)."""
    drill = drills.DRILLS[name]
    assert drill.kind_hides_the_answer()
    kinds = [fixes.FIXES[key].reflex for key in drill.options]
    assert kinds.count(fixes.FIXES[drill.fix].reflex) >= 3 and any(kinds)  # a reflex is always among them


def test_the_right_fixs_position_is_spread_over_the_options_and_moves_with_the_seed():
    positions = [drill.options_shown(0).index(drill.fix) for drill in drills.DRILLS.values()]
    assert len(set(positions)) >= 4  # not always first, not always last
    for drill in drills.DRILLS.values():  # a position remembered from one seed says nothing on the next
        assert sorted(drill.options_shown(1)) == sorted(drill.options)
        assert len({drill.options_shown(seed).index(drill.fix) for seed in range(12)}) >= 3


def test_a_fix_that_raised_before_logging_a_loss_is_drawn_nowhere_and_said_to_have_raised():
    raised = run_loop(DrillOptions("in_place_on_saved", 3))
    assert raised.recording.error and not raised.recording.losses
    figure = charts.loss_figure([("your fix", raised)])
    assert all(not trace.y or all(v is None for v in trace.y) for trace in figure.data)  # no made-up loss of 1.0
    assert "raised before it logged a loss" in figure.layout.annotations[0].text


# --- The audit's sentences (issue 44, findings 7-12 and 26) -------------------------------------------------------


@pytest.mark.parametrize("seed", [99, 2024])  # the audit's seeds: one step's backward produced almost nothing
def test_a_carried_over_gradient_is_read_as_a_median_over_the_steps_not_one_near_zero_step(seed):
    pair = drills.run("forgot_zero_grad", seed)
    found = pair.comparison.finding("grad_carryover")
    assert found and 1.5 < found.measured["ratio"] < 50  # about 9x; one step's ratio reached 2.9e+27 before
    assert "a median" in lesson.symptom(found)


def test_a_loop_that_logs_another_quantity_is_not_compared_with_the_correct_loops_loss_as_a_ratio():
    pair = drills.run("softmax_before_loss", 5)
    kinds = pair.comparison.kinds()
    assert "logged_other" in kinds and "loss_gap" not in kinds and "gradient_gap" in kinds
    found = pair.comparison.finding("logged_other")
    assert found.measured["loss"] == pair.buggy.recording.losses[0]
    assert found.measured["bench_loss"] == pytest.approx(pair.correct.recording.losses[0])  # same output, same loss


@pytest.mark.parametrize(
    ("name", "best", "short"),
    [
        ("loss_tensor_summed", "no_grad_validation", "item_for_logging"),
        ("in_place_on_saved", "cross_entropy_on_logits", "clamp_out_of_place"),
    ],
)
def test_the_right_fix_is_the_senior_one_and_the_one_that_falls_short_is_told_so(name, best, short):
    drill = drills.DRILLS[name]
    assert drill.fix == best and short in drill.decoys
    pair = drills.run(name, 4)
    fixed = run_loop(DrillOptions(name, 4, short)).recording
    verdict = lesson.fix_verdict(short, drills.compare(fixed, pair.correct.recording, pair.buggy.recording))
    assert "not the best fix" in verdict and lesson.STATEMENTS[lesson.SHORT_OF_BEST[short]].text in verdict


def test_a_validation_graph_is_witnessed_by_the_grad_fn_of_each_validation_forward():
    pair = drills.run("loss_tensor_summed", 6)
    found = pair.comparison.finding("validation_graph")
    assert found and found.measured["graphs"] == found.measured["forwards"] > 0
    recording = pair.correct.recording
    assert not any(
        g for g, p in zip(recording.forward_graphs, recording.forward_phases, strict=True) if p == "validation"
    )


def test_a_parameter_outside_the_optimizer_is_said_before_the_gradient_it_left_uncleared():
    kinds = drills.run("optimizer_before_new_head", 3).comparison.kinds()
    assert kinds.index("not_in_optimizer") < kinds.index("grad_carryover")


MISSING = ["forgot_zero_grad", "train_mode_never_restored", "validation_in_train_mode", "sampler_without_set_epoch"]


@pytest.mark.parametrize("name", MISSING)
def test_a_missing_line_is_found_by_any_line_of_the_span_where_it_belongs(name):
    """The newcomer's finding: for a forgotten zero_grad or set_epoch, reasonable picks scored "0 of 1"."""
    drill = drills.DRILLS[name]
    edited = fixed_source(drill, drill.fix).split("\n")
    added = next(i for i, line in enumerate(edited) if line not in drill.lines)  # where the right fix puts it
    assert drill.bug_lines[0] <= added + 1 <= drill.bug_lines[-1] + 1  # the span holds the gap it fills
    for line in drill.bug_lines:
        check = drills.check(name, [line], drill.fix)
        assert check.right and check.lines_found == check.lines_needed == 1
        assert "missing line" in lesson.check_verdict(check, 1)
    assert not drills.check(name, [1], drill.fix).lines_right  # the signature is not where it belongs


def test_a_cosine_is_read_only_where_both_gradients_are_non_zero():
    """The re-audit's finding: with lr 10, a layer's gradient was exactly zero at many steps, scored as cosine 0,
    and loops that zero every step were said to mix an earlier step's gradient in."""
    for fix in ("adam", "halve_batch"):
        pair_correct = run_loop(DrillOptions("learning_rate_too_high", 555).correct).recording
        shown = run_loop(DrillOptions("learning_rate_too_high", 555)).recording
        fixed = run_loop(DrillOptions("learning_rate_too_high", 555, fix)).recording
        assert "grad_mixed" not in drills.compare(fixed, pair_correct, shown).kinds()
        assert all(abs(c - 1) < 1e-6 for step in fixed.steps for c in step.grad_cosines.values())


def test_one_extra_graph_held_is_said_to_step_up_and_hold_not_to_grow():
    """The re-audit's finding: retain_graph keeps one graph more, which read as growth over the forwards."""
    correct = run_loop(DrillOptions("forgot_zero_grad", 77).correct).recording
    shown = run_loop(DrillOptions("forgot_zero_grad", 77)).recording
    kept = run_loop(DrillOptions("forgot_zero_grad", 77, "retain_graph")).recording
    found = drills.compare(kept, correct, shown).finding("memory_growth")
    assert found and "a step up by the second forward" in lesson.symptom(found)
    leak = drills.run("loss_tensor_summed", 77).comparison.finding("memory_growth")
    assert "grew" in lesson.symptom(leak) and "a step up" not in lesson.symptom(leak)
