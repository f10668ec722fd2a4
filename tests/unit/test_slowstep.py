"""Slow step's catalogue and answers, without running a loop: one planted change per drill, the toolbox offered,
and nothing a learner sees before answering (title, link, option order) naming the bug."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest

from explorers.slowstep import catalogue, lesson
from explorers.slowstep.catalogue import BY_LINK_ID, DRILLS, FIXES, REFLEXES, label
from explorers.slowstep.loops import PHASES, Loop

SEEDS = range(40)


@pytest.mark.parametrize("name", DRILLS)
def test_each_drill_is_the_fast_loop_with_one_part_written_the_slow_way_and_its_fix_undoes_it(name):
    drill = DRILLS[name]
    fast = dataclasses.asdict(Loop())
    slow = dataclasses.asdict(drill.loop)
    assert [k for k in fast if fast[k] != slow[k]] == list(drill.bug)
    # The right fix gives back the fast loop; a costly augmentation is kept, and done on the whole batch at once.
    expected = Loop(augment="heavy, batched") if drill.bug == {"augment": "heavy"} else Loop()
    assert drill.correct == expected
    assert set(drill.planted) <= set(PHASES)


def test_there_are_ten_drills_each_with_its_own_fix_and_the_reflexes_people_reach_for():
    assert len(DRILLS) >= 10 and len({d.fix for d in DRILLS.values()}) == len(DRILLS)
    assert {"workers", "larger_lr", "set_to_none", "cudnn_benchmark", "log_less"} <= set(REFLEXES)


@pytest.mark.parametrize("name", DRILLS)
def test_the_options_hold_the_right_fix_among_others_in_the_toolbox_s_order_whatever_the_seed(name):
    drill = DRILLS[name]
    toolbox = list(FIXES)
    shown = drill.options_shown()
    assert drill.fix in shown and len(shown) >= 4 and len(set(shown)) == len(shown)
    assert list(shown) == sorted(shown, key=toolbox.index)  # the toolbox's order: a position says nothing
    assert set(REFLEXES) <= set(shown)
    alike = [k for k in shown if (k in REFLEXES) == (drill.fix in REFLEXES) and k != drill.fix]
    assert len(alike) >= catalogue.OTHER_FIXES_SHOWN  # the right fix is never the one option of its kind
    # The same options on every seed: comparing two seeds' lists narrows nothing down to the answer.
    assert {drill.options_shown(seed) for seed in SEEDS} == {shown}


def test_titles_and_links_name_no_bug():
    for name, drill in DRILLS.items():
        assert re.fullmatch(r"Slow step \d+", label(name))  # the same words for every drill, and a number
        assert re.fullmatch(r"[0-9a-f]{6}", drill.link_id) and BY_LINK_ID[drill.link_id] is drill


def test_the_loop_description_names_every_part_so_it_points_at_none():
    for part in ("DataLoader", "forward and backward", "AdamW", "EMA", "accuracy", "logs the loss", "checkpoint"):
        assert part in lesson.LOOP_PARTS


def test_a_timed_set_of_slow_steps_counts_first_answers_and_lists_the_unanswered_for_day_7():
    from explorers.progress.history import History, new_set, practice_of
    from explorers.progress.records import Record

    timed = new_set(DRILLS, time.time() - 60)
    assert timed.practice == "slowstep" and all(practice_of(name) == "slowstep" for name in timed.drills)
    first, second, *rest = timed.drills
    records = [
        timed.start_record(),
        Record.now("prediction", DRILLS[first].record_key(timed.seed), {"question": "q", "right": True}),
        Record.now("prediction", DRILLS[second].record_key(timed.seed), {"question": "q", "right": False}),
        Record.now("prediction", DRILLS[second].record_key(timed.seed), {"question": "q", "right": True}),
    ]
    history = History(records)
    assert history.solved(first, timed.seed) and not history.solved(second, timed.seed)  # the first answer counts
    ended = History([*records, history.end_record(timed, time.time(), time_up=False)])
    assert ended.set_results()[0].solved == (True, False, False, False, False)
    weak = [w.item.key for w in ended.weakest(count=10) if w.kind == "prediction"]
    assert {DRILLS[n].record_key(timed.seed) for n in (second, *rest)} == set(weak)
    assert all(label(n) in ended.set_results()[0].words() for n in (second, *rest))


def test_the_paired_median_rule_is_moved_one_rank_by_a_hiccup_not_by_its_size():
    from explorers.profiler.noise import paired_gap, paired_median_gap

    slow = [10.0 + 0.1 * (i % 3) for i in range(24)]
    fast = [9.0 + 0.1 * (i % 2) for i in range(24)]
    gap, noise = paired_median_gap(slow, fast)
    assert 0.8 < gap < 1.2 and noise < 0.3
    hiccup = [*slow[:-1], 200.0]  # one step of 24 hit by the machine
    assert paired_median_gap(hiccup, fast)[1] < 0.3 and abs(paired_median_gap(hiccup, fast)[0] - gap) < 0.2
    assert paired_gap(hiccup, fast)[1] > 10  # the mean's margin is swept away by it
    assert paired_median_gap(slow[:5], fast[:5])[1] == float("inf")  # too few pairs for an interval
