"""A learner's records: ids and resume codes, what a record may hold, the import of hostile files, and the views."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import time

import pytest

from explorers.drills import DRILLS
from explorers.progress import history, learner, records, transfer
from explorers.progress.records import Record

DRILL = sorted(DRILLS)[0]
MARKUP = "<img src=x onerror=alert(1)> [a](http://x) ![i](http://x) :red[r] $x$ **b** `c`"


def raw(kind: str, key: str, data: dict) -> dict:
    return {"kind": kind, "key": key, "at": time.time(), "data": data}


def attempt(drill=DRILL, seed=0, right=False, fix_right=False, found=1, at=None, seconds=None):
    data = {"seed": seed, "lines_found": found, "lines_total": 1, "extra_lines": 0, "fix_right": fix_right}
    data |= {"right": right, "seconds": seconds if right else None}
    return records.parse({"kind": "attempt", "key": drill, "at": at or time.time(), "data": data})


def test_ids_are_random_unguessable_and_a_resume_code_round_trips_in_any_case_and_spacing():
    ids = {learner.new_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(learner.is_id(i) and len(i) == 32 for i in ids)
    one = next(iter(ids))
    code = learner.resume_code(one)
    assert code.count("-") == 7 and learner.parse_code(code) == one
    assert learner.parse_code(" " + code.lower().replace("-", " ") + " ") == one
    for bad in ("", "x" * 1000, code[:-1], code.replace(code[0], "1"), "../../etc/passwd", "'; DROP TABLE x; --"):
        assert learner.parse_code(bad) is None
    assert learner.digest(one) != learner.digest(learner.new_id()) and one not in learner.digest(one)
    with pytest.raises(ValueError):
        learner.digest("not an id")


@pytest.mark.parametrize(
    "raw, named",
    [
        ({"kind": "name", "key": "x", "at": time.time(), "data": {}}, "kind is one of"),
        ({"kind": "visit", "key": "Autograd Lab!", "at": time.time(), "data": {}}, "key is a lab slug"),
        ({"kind": "visit", "key": "autograd", "at": time.time(), "data": {"email": "a@b.c"}}, "data has exactly"),
        ({"kind": "visit", "key": "autograd", "at": 1e12, "data": {}}, "at is a time since 2024"),
        ({"kind": "mock", "key": "ddp", "at": time.time(), "data": {"points": 6}}, "points is an integer from 0 to 5"),
        ({"kind": "mock", "key": "ddp", "at": time.time(), "data": {"points": True}}, "points is an integer"),
        ({"kind": "attempt", "key": "no_such_drill", "at": time.time(), "data": {}}, "Fix-the-loop drills"),
        (raw("prediction", "a.p", {"question": "x" * 301, "right": True}), "1 to 300"),
        (raw("prediction", "a.p", {"question": "a\nb", "right": True}), "printable"),
        ({"kind": "visit", "key": "autograd", "at": float("nan"), "data": {}}, "at is"),
        ({**raw("visit", "autograd", {}), "name": "Ada"}, "exactly: kind, key, at, data"),
    ],
)  # fmt: skip
def test_a_record_holds_only_what_the_app_writes_and_the_refusal_names_the_part(raw, named):
    with pytest.raises(records.Invalid, match=named.replace("(", r"\(").replace("$", r"\$")):
        records.parse(raw)


def export_bytes(listed) -> bytes:
    return json.dumps({"format": transfer.FORMAT, "version": 1, "records": listed}).encode()


def test_an_export_reads_back_as_the_same_records_and_a_second_import_adds_nothing():
    kept = [Record.now("visit", "autograd", {}), attempt(right=True, fix_right=True, seconds=42.0)]
    again = transfer.read(transfer.export(kept).encode())
    assert again == kept
    assert transfer.new_records(kept, again) == [] and transfer.new_records([], again) == kept


@pytest.mark.parametrize(
    "data, said",
    [
        (b"x" * (100 * 2**20), "100.0 MiB; an export is at most 4 MiB"),
        (pickle.dumps({"format": transfer.FORMAT}), "not text"),
        (pickle.dumps("x", protocol=0), "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
        (b'{"format": "something else", "version": 1, "records": []}', "not a PyTorch Explorer progress export"),
        (b'{"format": "pytorch-explorer-progress", "version": 2, "records": []}', "version is not 1"),
        (b'{"format": "pytorch-explorer-progress", "version": 1, "records": {}}', "no list of records"),
        (export_bytes([{"kind": "visit", "key": MARKUP, "at": time.time(), "data": {}}]), "Record 1 is not one"),
        (export_bytes([raw("visit", "a", {"x": [[[[1]]]]})]), "data has exactly"),
        (export_bytes([{"kind": "visit", "key": "a", "at": time.time(), "data": {}}] * 20_001), "at most 20000"),
        (b"\xef\xbb\xbf{}", "not JSON"),
    ],
    ids=["100MB", "pickle", "pickle-ascii", "deep", "wrong-format", "wrong-version", "no-list", "markup-key",
         "extra-field", "too-many", "bom"],
)  # fmt: skip
def test_a_hostile_import_is_refused_with_a_message_and_nothing_is_opened_or_run(data, said):
    with pytest.raises(transfer.Refused, match=said.replace("(", r"\(").replace(".", r"\.")):
        transfer.read(data)


def test_markup_in_a_question_is_kept_as_text_a_record_may_hold():
    """The question is the one free-form field; it is kept as typed and escaped where shown (tests/app)."""
    kept = transfer.read(
        export_bytes(
            [{"kind": "prediction", "key": "autograd.predict", "at": time.time(),
              "data": {"question": MARKUP, "right": False}}]
        )
    )  # fmt: skip
    assert kept[0].data["question"] == MARKUP


def test_a_drill_score_counts_attempts_until_solved_and_keeps_the_first_attempts_lines_and_fix():
    now = time.time()
    h = history.History(
        [
            attempt(found=0, at=now),
            attempt(found=1, fix_right=True, at=now + 1),
            attempt(found=1, right=True, fix_right=True, seconds=30.0, at=now + 2),
            attempt(found=0, at=now + 3),  # after solving: not counted
        ]
    )
    score = h.drill_scores()[(DRILL, 0)]
    assert (score.attempts, score.lines_found, score.fix_right_first, score.solved, score.seconds) == (
        3, 0, False, True, 30.0,
    )  # fmt: skip
    assert "lines 0 of 1 first, wrong fix first, 3 attempts, solved in 30 s" in score.describe()


def test_a_timed_set_runs_until_its_clock_ends_and_its_end_keeps_the_unsolved_for_day_7():
    now = time.time()
    timed = history.new_set(DRILLS, now - 60)
    h = history.History([timed.start_record(), attempt(timed.drills[0], timed.seed, right=True, fix_right=True)])
    assert h.running_set(now) == timed and h.running_set(now + history.SET_MINUTES * 60) is None
    end = h.end_record(timed, now, time_up=False)
    ended = history.History([*h.records, end])
    assert ended.running_set(now) is None and ended.open_sets() == []
    result = ended.set_results()[0]
    assert result.solved == (True, False, False, False, False) and 59 < result.seconds < 62
    assert result.words().startswith("Set ended: 1 of 5 solved in 1:0")
    unsolved = [s for s in ended.drill_scores().values() if not s.attempts]
    assert len(unsolved) == 4 and all("not answered in a timed set" in s.describe() for s in unsolved)
    weakest = ended.weakest()
    assert [w.kind for w in weakest] == ["drill"] * 4 and all(w.share == 0 for w in weakest)


def test_day_7_draws_the_weakest_of_every_kind_and_leaves_out_full_marks():
    now = time.time()
    h = history.History(
        [
            Record.now("mock", "ddp", {"points": 5}),
            Record.now("mock", "modes", {"points": 2}),
            records.parse({"kind": "prediction", "key": "autograd.predict", "at": now,
                           "data": {"question": "Q?", "right": False}}),
            records.parse({"kind": "prediction", "key": "autograd.predict", "at": now + 1,
                           "data": {"question": "Q?", "right": True}}),  # a changed mind: the first counts
            attempt(found=1, fix_right=True, right=False, at=now),
        ]
    )  # fmt: skip
    weakest = h.weakest()
    assert [(w.kind, round(w.share, 2)) for w in weakest] == [("prediction", 0.0), ("mock", 0.4), ("drill", 0.75)]


def test_the_plan_days_are_the_learners_active_days_in_their_time_zone_and_later_days_add_to_day_7():
    zone = dt.timezone(dt.timedelta(hours=-8))
    start = dt.datetime(2026, 3, 1, 23, 30, tzinfo=dt.UTC).timestamp()  # 15:30 on 1 March at UTC-8
    kept = [records.parse({"kind": "visit", "key": f"lab{n}", "at": start + n * 86_400, "data": {}}) for n in range(9)]
    kept.append(records.parse({"kind": "visit", "key": "lab0", "at": start + 3600, "data": {}}))  # 16:30, same day
    kept.sort(key=lambda r: r.at)  # as the store returns them
    plan = history.History(kept).plan_days(zone)
    assert sorted(plan) == list(range(1, 8)) and plan[7].days == 3 and plan[7].labs == ("lab6", "lab7", "lab8")
    assert plan[1].first == dt.date(2026, 3, 1) and plan[1].labs == ("lab0",)
    assert plan[1].words({"lab0": "Autograd"}) == "Sun 1 Mar: opened Autograd"
    assert plan[7].words({}) == "3 days from 7 Mar 2026 to 9 Mar 2026: opened lab6, lab7, lab8"
    utc = history.History(kept).plan_days(dt.UTC)
    assert utc[1].first == dt.date(2026, 3, 1) and utc[2].first == dt.date(2026, 3, 2)
    assert utc[1].labs == ("lab0",) and utc[2].labs == ("lab0", "lab1")  # 00:30 UTC is the next day
